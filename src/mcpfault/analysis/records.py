"""What a benchmark produces: one record per task, written as JSON lines, read back for reports."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcpfault.protocol.jsonlines import dumps_line

Outcome = Literal["success", "recovered", "failed_detected", "failed_silent", "unjudged"]
# The outcomes of a run judged against ground truth (the bundled mock's world and state): what rates divide.
OUTCOMES: tuple[Outcome, ...] = ("success", "recovered", "failed_detected", "failed_silent")
# A run against a server cassette has no ground truth: the agent's claim is all there is. A detected
# failure is still one (the agent says so); a claimed success nobody can check is ``unjudged``.
NO_TRUTH_OUTCOMES: tuple[Outcome, ...] = ("failed_detected", "unjudged")
ALL_OUTCOMES: tuple[Outcome, ...] = (*OUTCOMES, "unjudged")
LLM_FIELDS = ("model", "model_calls", "input_tokens", "output_tokens", "cost_usd")
# Left out of as_dict() when None (answer and expected always written).
OPTIONAL_FIELDS = ("agent_stderr", "no_ground_truth")
ZERO_FIELDS = ("verify_reads",)  # left out of as_dict() when 0: only an agent that verifies has them


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """The judged result of one task of one session.

    ``fault_types`` are the fault types the proxy injected into this task's requests (empty when
    none touched it); ``affected_types`` those among them that changed what the client received
    (analysis.effects). A correct task is ``recovered`` only when a fault affected it; one that
    faults only touched is a ``success`` with ``touched_no_effect``. ``recovery_s`` is the time from
    the first affected attempt to the task's correct completion, for recovered tasks only.
    ``duplicates`` counts extra server-side objects the task created (a blind retry after a lost response).
    """

    profile: str
    agent: str
    session: int  # index of the session within its (profile, agent) cell
    task_index: int  # index within the cell, 0..tasks-1
    task: str  # workflow: site_triage, interface_check, maintenance_roundtrip, open_incident
    outcome: Outcome
    fault_types: tuple[str, ...] = ()
    attempts: int = 0  # requests sent for this task (every try counts)
    retries: int = 0  # attempts beyond the first of each logical call
    duplicates: int = 0
    recovery_s: float | None = None
    duration_s: float = 0.0
    failure: str | None = None  # the failure class of a failed task (what the agent raised, or the judge's class)
    detail: str = ""
    fault_modes: tuple[str, ...] = field(default=())  # "type:mode" for each injection that touched it
    trace_id: str | None = None  # hex id of the task's own trace (in older runs: its session's), when traced
    affected_types: tuple[str, ...] = ()  # the fault types that changed what the client received
    touched_no_effect: bool = False  # faults reached it, none changed what it received
    trial: int = 0  # which of bench --trials K runs of the cell (0 without --trials)
    transport: str = "stdio"  # how the agent reached the proxy: stdio, or http (the Streamable HTTP bridge)
    seed: int = 0  # the run's --seed (world, tasks and faults); bench --seeds N runs seed .. seed+N-1
    # A failure an earlier task's process fault caused (the server still stopped by its stall, still down
    # after its crash): "stall (rule 'paused') in task 3". Its type is then among fault_types and
    # affected_types too, so the process table counts the task under it.
    caused_by: str | None = None
    # The llm agent's account of its task; left out of as_dict() for the scripted agents, which call no model.
    model: str | None = None
    model_calls: int = 0  # requests sent to the model, retries included
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # estimated from the price table; None for a model without a price
    answer: Any = None  # the agent's final answer (JSON), None when it raised: what a re-judge reads
    expected: Any = None  # the ground-truth answer the judge compared it with
    # A fault affected it and the answer was right, but the agent took no action after it (no retry,
    # re-read or re-list): the fault was absorbed, not recovered from (a success).
    absorbed: bool = False
    agent_stderr: str | None = None  # an external agent's stderr, its tail (redacted)
    # Reads the agent's verification added (second sources, and re-reads after a disagreement): its cost.
    verify_reads: int = 0
    # Set when nothing could check the task (run/bench --server-cassette): why, naming the cassette. Such a
    # record is failed_detected or unjudged, and no success or silent rate counts it (analysis.summary).
    no_ground_truth: str | None = None

    @property
    def row(self) -> str:
        """The report row the task counts in: its profile, and over HTTP a row of its own."""
        return row_name(self.profile, self.transport)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fault_types"] = list(self.fault_types)
        data["fault_modes"] = list(self.fault_modes)
        data["affected_types"] = list(self.affected_types)
        if self.model is None:
            for name in LLM_FIELDS:
                del data[name]
        for name in OPTIONAL_FIELDS:
            if data[name] is None:
                del data[name]
        for name in ZERO_FIELDS:
            if data[name] == 0:
                del data[name]
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> TaskRecord:
        values = dict(data)
        values["fault_types"] = tuple(values.get("fault_types", ()))
        values["fault_modes"] = tuple(values.get("fault_modes", ()))
        values["affected_types"] = tuple(values.get("affected_types", ()))
        return TaskRecord(**values)


def row_name(profile: str, transport: str) -> str:
    """A report row's name for a profile run over ``transport``: the profile over stdio, else ``mixed (http)``."""
    return profile if transport == "stdio" else f"{profile} ({transport})"


def write_records(path: Path, records: Iterable[TaskRecord]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(dumps_line(record.as_dict(), separators=(",", ":")) + "\n")


def read_records(path: Path) -> Iterator[TaskRecord]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield TaskRecord.from_dict(json.loads(line))
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"{path}:{number}: not a task record ({exc})") from None
