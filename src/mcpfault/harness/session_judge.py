"""A session judged: every task against the world and the server's final state, which faults reached it
from its trace (the request-id join with the proxy's events as the cross-check), and failures an earlier
task's process fault caused. What ``mcpfault report --rejudge`` needs to do it again is written beside.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcpfault.analysis import traces
from mcpfault.analysis.collateral import collateral, outages
from mcpfault.analysis.effects import TaskReads
from mcpfault.analysis.join import faults_by_request, probe_duplicates_by_task, touches_by_task
from mcpfault.analysis.journal import duplicates_by_task, read_journal, spans_may_be_lost
from mcpfault.analysis.judge import TaskRun, check_answer, judge, judge_claim
from mcpfault.analysis.records import TaskRecord
from mcpfault.errors import MCPFaultError
from mcpfault.harness.agents.tasks import FIELDS_READ, TaskSpec, expected_answer
from mcpfault.mock.world import FIELDS_CHANGED_BY, World
from mcpfault.protocol.jsonlines import dumps_line
from mcpfault.proxy.events import read_events, read_server_events

if TYPE_CHECKING:
    from mcpfault.harness.session import SessionPlan

SERVER_JOURNAL = "server-journal.jsonl"  # the mock's state changes, in the session directory it works in
STATE_FILE = "server-state.json"  # the mock's final state, which the judge reads


@dataclass(frozen=True, slots=True)
class Judged:
    records: list[TaskRecord]
    # Where the request-id join contradicts the trace join, or the server's spans its state file (empty
    # without traces).
    mismatches: list[str]


@dataclass(frozen=True, slots=True)
class SessionEvents:
    """A session's events file, read once: the judge, the collateral, the latencies and the server's
    account each used to read it again."""

    requests: list[dict[str, Any]]  # read_events
    server: list[dict[str, Any]]  # read_server_events

    @classmethod
    def read(cls, path: Path) -> SessionEvents:
        return cls(read_events(path), read_server_events(path))


def judge_session(
    plan: SessionPlan,
    world: World,
    runs: Sequence[TaskRun],
    attempts: Sequence[dict[str, Any]],
    spans: traces.SessionSpans | None = None,
    *,
    rereads: bool | None = None,
    events: SessionEvents | None = None,
) -> Judged:
    """Judge every task; which faults reached it comes from ``spans`` when given, else from the proxy's events
    (``events``: the session's events file already read; by default it is read here)."""
    if events is None:
        events = SessionEvents.read(plan.out_dir / "events.jsonl")
    if plan.server_cassette is not None:
        return _judge_claims(
            plan, runs, attempts, spans, events, rereads=plan.llm is not None if rereads is None else rereads
        )
    requests = events.requests
    # The bundled mock's write journal survives SIGKILL: the first source of the writes, spans the second.
    journal = read_journal(plan.out_dir / SERVER_JOURNAL) if plan.server_command is None else None
    state = _final_state(plan, journal)
    # The llm agent's every request is its own choice: sending one again is a re-read (analysis.join.acted_after).
    rereads = plan.llm is not None if rereads is None else rereads
    by_request = touches_by_task(attempts, faults_by_request(requests), rereads=rereads)
    tasks = traces.task_traces(spans) if spans is not None else {}
    touches = by_request
    if spans is not None:
        changed_by = FIELDS_CHANGED_BY if plan.server_command is None else {}  # only the bundled mock's are known
        reads = {r.index: TaskReads(FIELDS_READ.get(r.workflow, {}), changed_by) for r in runs}
        touches = traces.touches(tasks, reads, traces.Revisions.of(spans.server), rereads=rereads)
    records = []
    mismatches = traces.compare_touches(touches, by_request) if spans is not None else []
    journaled = duplicates_by_task(journal, [(r.index, r.workflow, r.tag) for r in runs]) if journal else None
    lossy_spans = spans_may_be_lost(events.server)
    probed, unjudged = (
        probe_duplicates_by_task(attempts, requests, state_changes=SERVER_JOURNAL, write_tools=_mock_write_tools())
        if plan.probe is not None and plan.server_command is None  # the bundled mock, which journals
        else (None, set())
    )
    for run in runs:
        task = tasks.get(run.index)
        expected = expected_answer(world, TaskSpec(run.index, run.workflow, run.target, run.tag))
        spans_duplicates = task.duplicates if task is not None else None
        record = judge(
            run,
            expected,
            state,
            touches.get(run.index),
            profile=plan.profile_name,
            agent=plan.agent,
            session=plan.session,
            attempts=len(task.tool_calls) if task is not None else None,
            retries=task.retries if task is not None else None,
            trace_id=task.span.trace_id if task is not None else None,
            # Duplicates come from the server's write journal, which survives SIGKILL; without one, from
            # its spans (two incident-creating writes under one task). The state file is the cross-check.
            duplicates=journaled.get(run.index, 0) if journaled is not None else spans_duplicates,
        )
        from_state = check_answer(run, expected, state).duplicates
        if record.duplicates != from_state and (journaled is not None or task is not None):
            source = "journal" if journaled is not None else "spans"
            mismatches.append(
                f"task {run.index}: {record.duplicates} duplicate(s) in the server's {source}, "
                f"{from_state} in its state"
            )
        # Spans lost with a server killed uncleanly may show fewer writes than the journal, never more.
        spans_short = lossy_spans and spans_duplicates is not None and spans_duplicates < record.duplicates
        if journaled is not None and spans_duplicates not in (None, record.duplicates) and not spans_short:
            mismatches.append(
                f"task {run.index}: {spans_duplicates} duplicate(s) in the server's spans, "
                f"{record.duplicates} in its journal"
            )
        if probed is not None and run.index not in unjudged and probed.get(run.index, 0) != record.duplicates:
            mismatches.append(
                f"task {run.index}: {record.duplicates} duplicate(s) judged, "
                f"{probed.get(run.index, 0)} duplicate side effect(s) seen by the probe"
            )
        records.append(record)
    return Judged(_attribute_collateral(plan, records, events, attempts), mismatches)


def no_ground_truth(cassette: Path) -> str:
    """What a record judged against a server cassette says about itself."""
    return f"server cassette {cassette.name}: no ground truth, judged detected vs unjudged from the agent's claim"


def _judge_claims(
    plan: SessionPlan,
    runs: Sequence[TaskRun],
    attempts: Sequence[dict[str, Any]],
    spans: traces.SessionSpans | None,
    events: SessionEvents,
    *,
    rereads: bool,
) -> Judged:
    """A session against a server cassette: the faults that reached each task as usual, its outcome from the
    agent's claim alone (a recorded server keeps no state and knows no right answer)."""
    assert plan.server_cassette is not None
    by_request = touches_by_task(attempts, faults_by_request(events.requests), rereads=rereads)
    tasks = traces.task_traces(spans) if spans is not None else {}
    touches, mismatches = by_request, []
    if spans is not None:
        # No server spans (the replay writes none) and no fields known to be read: the trace join sees
        # the faults on each task's own requests, which the request-id join cross-checks.
        reads = {r.index: TaskReads({}, {}) for r in runs}
        touches = traces.touches(tasks, reads, traces.Revisions.of(spans.server), rereads=rereads)
        mismatches = traces.compare_touches(touches, by_request)
    why = no_ground_truth(plan.server_cassette)
    records = []
    for run in runs:
        task = tasks.get(run.index)
        records.append(
            judge_claim(
                run,
                touches.get(run.index),
                profile=plan.profile_name,
                agent=plan.agent,
                session=plan.session,
                why_no_truth=why,
                attempts=len(task.tool_calls) if task is not None else None,
                retries=task.retries if task is not None else None,
                trace_id=task.span.trace_id if task is not None else None,
            )
        )
    return Judged(_attribute_collateral(plan, records, events, attempts), mismatches)


def _attribute_collateral(
    plan: SessionPlan,
    records: Sequence[TaskRecord],
    events: SessionEvents,
    attempts: Sequence[dict[str, Any]],
) -> list[TaskRecord]:
    """A failed task no fault of its own explains, whose requests met the server still held by an earlier
    task's stall or crash: the record names that fault (analysis.collateral)."""
    from mcpfault.faults import profile

    holds = {rule.name: rule.fault.holds_server_s() for rule in profile.load(plan.profile).rules}
    task_of_request = {a["request_id"]: a["task"] for a in attempts if a.get("task") is not None}
    windows = outages(events.requests, events.server, task_of_request, holds)
    unexplained = [
        r.task_index for r in records if r.outcome in ("failed_detected", "failed_silent") and not r.affected_types
    ]
    if not windows or not unexplained:
        return list(records)
    caused = collateral(windows, events.requests, task_of_request, unexplained)
    judged = []
    for record in records:
        window = caused.get(record.task_index)
        judged.append(
            record
            if window is None
            else dataclasses.replace(
                record,
                fault_types=tuple(dict.fromkeys([*record.fault_types, window.fault_type])),
                affected_types=tuple(dict.fromkeys([*record.affected_types, window.fault_type])),
                caused_by=window.describe(),
                detail=f"{record.detail} (the server was still held by the {window.describe()})",
            )
        )
    return judged


def _final_state(plan: SessionPlan, journal: Sequence[dict[str, Any]] | None) -> Any:
    """The server's final state: its state file, or, when the last server died before writing it (a
    SIGKILL with no restart), the bundled mock's world with its journal replayed, as a restart would."""
    state_path = plan.out_dir / STATE_FILE
    try:
        return json.loads(state_path.read_text())
    except (OSError, ValueError) as exc:
        problem: Exception = exc
    if journal is not None:
        from mcpfault.mock.journal import Journal, JournalError
        from mcpfault.mock.session import Session

        world = World.generate(plan.world_seed)
        try:
            Session(world, None, Journal(plan.out_dir / SERVER_JOURNAL, plan.world_seed)).replay()
        except JournalError as exc:
            problem = exc
        else:
            return world.final_state()
    raise MCPFaultError(
        f"{state_path}: the mock server's final state is missing or unreadable ({problem}), and no journal "
        "rebuilds it; without it the session's writes cannot be judged; see proxy.log beside it"
    ) from None


RUNS_FILE = "runs.jsonl"  # what the harness saw of each task (harness/rejudge.py reads it back)
SESSION_FILE = "session.json"  # the plan's parts the judge needs
SESSION_PROFILE = "profile.toml"  # a copy of the profile the session ran, for drift renames


def write_session_inputs(plan: SessionPlan, runs: Sequence[TaskRun]) -> None:
    """Beside the spans, attempts, events and the server's state: the rest of what ``judge_session``
    reads, so that ``mcpfault report --rejudge`` can judge the session again with the current judge."""
    write_jsonl(plan.out_dir / RUNS_FILE, [dataclasses.asdict(run) for run in runs])
    with contextlib.suppress(OSError):
        (plan.out_dir / SESSION_PROFILE).write_bytes(plan.profile.read_bytes())
    described = {
        "profile_name": plan.profile_name,
        "agent": plan.agent,
        "session": plan.session,
        "trial": plan.trial,
        "transport": plan.transport,
        "world_seed": plan.world_seed,
        "traces": plan.traces,
        "rereads": plan.llm is not None,  # the llm agent: a request sent again counts as an action
        "probe": plan.probe,
        "server_command": list(plan.server_command) if plan.server_command is not None else None,
        "server_cassette": str(plan.server_cassette) if plan.server_cassette is not None else None,
    }
    (plan.out_dir / SESSION_FILE).write_text(json.dumps(described, indent=1) + "\n", encoding="utf-8")


def _mock_write_tools() -> frozenset[str]:
    from mcpfault.mock.tools import TOOLS

    return frozenset(name for name, tool in TOOLS.items() if not tool.annotations.get("readOnlyHint", False))


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(dumps_line(row, default=str) + "\n")
