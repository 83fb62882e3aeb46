"""``mcpfault report --rejudge RUN_DIR``: judge a finished bench run again with the current judge.

Each session directory of a run keeps what the judge reads: what the harness saw of each task
(``runs.jsonl``, the agent's answers and what it raised), the client's attempts, the proxy's events,
the three processes' spans, the server's final state and journal, a copy of the profile and the
plan's parts the judge needs (``session.json``). The world is rebuilt from its seed. Nothing is run
again: the same evidence, judged by today's rules, so a change to the judge can be measured on a
committed run, and an unchanged judge reproduces the run's outcomes exactly.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mcpfault.analysis import traces
from mcpfault.analysis.judge import TaskRun
from mcpfault.analysis.records import LLM_FIELDS, TaskRecord, read_records
from mcpfault.errors import MCPFaultError, UsageError
from mcpfault.harness.session import SessionPlan
from mcpfault.harness.session_judge import RUNS_FILE, SESSION_FILE, SESSION_PROFILE, judge_session
from mcpfault.mock.world import World
from mcpfault.protocol.jsonlines import read_jsonl

RecordKey = tuple[str, str, str, int, int, int]  # transport, profile, agent, trial, session, task index


def record_key(record: TaskRecord) -> RecordKey:
    return (record.transport, record.profile, record.agent, record.trial, record.session, record.task_index)


@dataclass(frozen=True, slots=True)
class Rejudged:
    records: list[TaskRecord]  # in the run's order, then those the run had not judged
    sessions: int  # session directories judged again
    unjudgeable: list[str]  # sessions that could not be (what is missing), whose old records are kept
    changed: list[tuple[TaskRecord, TaskRecord]]  # (old, new) for each task whose outcome changed


def session_dirs(run_dir: Path) -> list[Path]:
    """Every session directory under ``run_dir/sessions`` (those with a ``session.json``)."""
    return sorted(path.parent for path in (run_dir / "sessions").rglob(SESSION_FILE))


def rejudge_session(directory: Path) -> list[TaskRecord]:
    """The records of one session directory, judged again; MCPFaultError when its evidence is incomplete."""
    try:
        described = json.loads((directory / SESSION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MCPFaultError(f"{directory / SESSION_FILE}: unreadable ({exc})") from None
    runs_path = directory / RUNS_FILE
    if not runs_path.is_file():
        raise MCPFaultError(f"{runs_path} is missing: the session ran with a version that did not keep it")
    runs = [TaskRun(**row) for row in read_jsonl(runs_path) if isinstance(row, dict)]
    attempts = [row for row in read_jsonl(directory / "attempts.jsonl") if isinstance(row, dict)]
    server_command = described.get("server_command")
    plan = SessionPlan(
        profile=directory / SESSION_PROFILE,
        profile_name=str(described["profile_name"]),
        agent=str(described["agent"]),
        tasks=(),
        out_dir=directory,
        world_seed=int(described["world_seed"]),
        session=int(described["session"]),
        trial=int(described.get("trial", 0)),
        transport=str(described.get("transport", "stdio")),
        traces=bool(described.get("traces", True)),
        probe=described.get("probe"),
        server_command=tuple(server_command) if server_command is not None else None,
        server_cassette=Path(described["server_cassette"]) if described.get("server_cassette") else None,
    )
    spans = traces.read_session_spans(directory) if plan.traces else None
    rereads = bool(described.get("rereads", False))
    judged = judge_session(plan, World.generate(plan.world_seed), runs, attempts, spans, rereads=rereads)
    return [dataclasses.replace(r, trial=plan.trial, transport=plan.transport) for r in judged.records]


def rejudge_run(run_dir: Path) -> Rejudged:
    """Every session of a bench run judged again, matched with the run's own records."""
    records_path = run_dir / "records.jsonl"
    if not records_path.is_file():
        raise UsageError(f"{records_path} does not exist; give the --out directory of a bench run")
    try:
        old = list(read_records(records_path))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    directories = session_dirs(run_dir)
    if not directories:
        raise UsageError(
            f"{run_dir / 'sessions'} holds no session directory with {SESSION_FILE}: the run was made by a "
            "version of mcpfault that did not keep what a re-judge needs; run the bench again"
        )
    by_key = {record_key(r): r for r in old}
    new: dict[RecordKey, TaskRecord] = {}
    unjudgeable = []
    for directory in directories:
        try:
            judged = rejudge_session(directory)
        except (MCPFaultError, KeyError, TypeError, ValueError) as exc:
            unjudgeable.append(f"{directory}: {exc}")
            continue
        for record in judged:
            key = record_key(record)
            new[key] = _with_llm_usage(record, by_key.get(key))
    merged = [new.get(record_key(r), r) for r in old]
    merged += [r for key, r in new.items() if key not in by_key]
    changed = [(r, new[record_key(r)]) for r in old if record_key(r) in new and new[record_key(r)].outcome != r.outcome]
    return Rejudged(merged, len(directories) - len(unjudgeable), unjudgeable, changed)


def _with_llm_usage(record: TaskRecord, old: TaskRecord | None) -> TaskRecord:
    """The llm agent's token account comes from the model's answers, not the judge: kept from the run."""
    if old is None or old.model is None:
        return record
    return dataclasses.replace(record, **{name: getattr(old, name) for name in LLM_FIELDS})


def outcome_changes(changed: Iterable[tuple[TaskRecord, TaskRecord]]) -> list[tuple[str, str, str, int]]:
    """(cell, old outcome, new outcome, tasks) for the tasks whose outcome the current judge changed."""
    counts: dict[tuple[str, str, str], int] = {}
    for old, new in changed:
        key = (f"{old.row}/{old.agent}", old.outcome, new.outcome)
        counts[key] = counts.get(key, 0) + 1
    return [(*key, count) for key, count in sorted(counts.items())]


def describe(result: Rejudged, run_dir: Path) -> Sequence[str]:
    """Lines for the console: what was judged again, and what changed."""
    lines = [f"re-judged {result.sessions} session(s) of {run_dir}: {len(result.records)} tasks"]
    lines += [f"  not re-judged (its old records kept): {why}" for why in result.unjudgeable]
    changes = outcome_changes(result.changed)
    if not changes:
        lines.append("  every outcome as the run judged it")
    for cell, before, after, count in changes:
        lines.append(f"  {cell}: {count} task(s) {before} -> {after}")
    return lines
