"""Judge each task: success, recovered, failed_detected or failed_silent.

- failed_detected: the agent raised (it knows it failed).
- failed_silent: it returned, but the answer is wrong, or the server's state is wrong (a duplicate
  incident, a write that the answer denies).
- recovered: right, and at least one injected fault changed what its client received (affected it).
- success: right, and no fault affected it; ``touched_no_effect`` when faults reached it without effect
  (a delay within the deadline, a stale answer equal to the fresh one, a call the proxy translated).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcpfault.analysis.join import Touch
from mcpfault.analysis.records import Outcome, TaskRecord


@dataclass(frozen=True, slots=True)
class TaskRun:
    """What the harness observed of one task (client clock)."""

    index: int
    workflow: str
    target: str
    tag: str
    started: float
    finished: float
    answer: Any = None
    failure: str | None = None  # set when the agent raised
    detail: str = ""
    attempts: int = 0
    calls: int = 0


@dataclass(frozen=True, slots=True)
class Verdict:
    correct: bool
    duplicates: int = 0
    why: str = ""


def mentions(text: str, tag: str) -> bool:
    """Does ``text`` carry ``tag`` as a whole word? "task-0-3" is not in "(task-0-31)"."""
    return re.search(rf"(?<![\w-]){re.escape(tag)}(?![\w-])", text) is not None


def check_answer(run: TaskRun, expected: Any, state: Mapping[str, Any]) -> Verdict:
    """Is the agent's answer right, and did it leave the server in the right state?"""
    if run.workflow == "open_incident":
        mine = [i for i in state.get("incidents", []) if mentions(str(i.get("summary", "")), run.tag)]
        duplicates = max(0, len(mine) - 1)
        if len(mine) != 1:
            return Verdict(False, duplicates, f"{len(mine)} incidents on the server for this task")
        answered = run.answer.get("incident_id") if isinstance(run.answer, dict) else None
        if answered != mine[0].get("incident_id"):
            return Verdict(False, duplicates, f"answered {answered!r}, the server has {mine[0].get('incident_id')!r}")
        return Verdict(True)
    if run.workflow == "maintenance_roundtrip":
        applied = _maintenance_applied(state, run.tag)
        if run.answer != {"confirmed": applied}:
            return Verdict(False, 0, f"answered {run.answer!r}, the write {'was' if applied else 'was not'} applied")
        return Verdict(True)
    if run.workflow == "config_audit":
        # The audit window is the write: the answer must say what the server did, and the rest what is true.
        wanted = {"window_opened": _maintenance_applied(state, run.tag), **(expected or {})}
        if run.answer != wanted:
            return Verdict(False, 0, f"answered {run.answer!r}, expected {wanted!r}")
        return Verdict(True)
    if run.answer != expected:
        return Verdict(False, 0, f"answered {run.answer!r}, expected {expected!r}")
    return Verdict(True)


def _maintenance_applied(state: Mapping[str, Any], tag: str) -> bool:
    """Whether a set_maintenance whose reason carries ``tag`` reached the server."""
    return any(
        w.get("op") == "set_maintenance" and mentions(str((w.get("arguments") or {}).get("reason", "")), tag)
        for w in state.get("write_log", [])
    )


def judge(
    run: TaskRun,
    expected: Any,
    state: Mapping[str, Any],
    touch: Touch | None,
    *,
    profile: str,
    agent: str,
    session: int,
    attempts: int | None = None,
    retries: int | None = None,
    trace_id: str | None = None,
    duplicates: int | None = None,
) -> TaskRecord:
    """The record of one task.

    ``touch`` says which faults reached it (from the trace join, or the request-id join without traces);
    ``attempts`` and ``retries``, when given, are counted from the task's spans rather than by the harness;
    ``duplicates``, when given, from the server's spans (its writes) rather than its state file.
    """
    verdict = check_answer(run, expected, state)
    touched = touch is not None and bool(touch.fault_types)
    affected = touch is not None and bool(touch.affected_types)
    outcome: Outcome
    if run.failure is not None:
        outcome, detail = "failed_detected", run.detail
    elif not verdict.correct:
        outcome, detail = "failed_silent", verdict.why
    else:
        outcome, detail = ("recovered" if affected else "success"), ""
    recovery_s = None
    if outcome == "recovered" and touch is not None and touch.first_affected_at is not None:
        ended = touch.ended_at if touch.ended_at is not None else run.finished
        recovery_s = round(ended - touch.first_affected_at, 6)
    return TaskRecord(
        profile=profile,
        agent=agent,
        session=session,
        task_index=run.index,
        task=run.workflow,
        outcome=outcome,
        fault_types=tuple(touch.fault_types) if touch else (),
        fault_modes=tuple(touch.fault_modes) if touch else (),
        affected_types=tuple(touch.affected_types) if touch else (),
        touched_no_effect=touched and not affected,
        attempts=run.attempts if attempts is None else attempts,
        retries=max(0, run.attempts - run.calls) if retries is None else retries,
        duplicates=verdict.duplicates if duplicates is None else duplicates,
        recovery_s=recovery_s,
        duration_s=round(run.finished - run.started, 6),
        failure=run.failure,
        detail=detail,
        trace_id=trace_id,
    )
