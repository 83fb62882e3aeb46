"""Judge each task: success, recovered, failed_detected or failed_silent (``unjudged`` without ground truth).

Outcomes come from the world (the server's final state and the ground truth), not from the agent's
mood: what the agent said about its task counts only where the world agrees.

- failed_silent: the task left the server wrong, or the agent's answer is wrong. The server is wrong
  when the task left a duplicate (a write applied twice) or a write the agent said failed (it raised,
  or answered that it was not applied, and the server has it). Such a task is silent **even when the
  agent raised**: the raise told its caller "nothing happened", the server says otherwise, and a caller
  that trusts the raise retries and duplicates again or reports a change as not made. We chose this
  over a fifth class (``failed_detected_with_damage``) because the README's definition already counts
  state damage as silent, and a fifth headline column would split the one number the bench exists to
  show (failures nobody noticed) into two that a reader has to add up. The record's ``failure`` and
  ``detail`` still say what the agent raised, so nothing is lost.
- failed_detected: the agent knows it failed and the server holds no damage from it: it raised, or
  a write task answered that its write was not applied and indeed it was not (``goal_not_achieved``).
- recovered: right, a fault affected it, and the agent acted after that fault (a retry, a re-list):
  the right answer is the agent's doing.
- success: right, and no fault affected it, or one did and the agent took no action after it (the
  fault's change was absorbed, ``absorbed``); ``touched_no_effect`` when faults reached it without
  effect (a delay within the deadline, a stale answer equal to the fresh one, a call the proxy translated).

Against a server cassette (run/bench --server-cassette) there is no world to compare with, so
``judge_claim`` takes the agent's word where it is safe to: a task the agent reports failed (or that
crashed, timed out or answered out of schema) is failed_detected, with the same failure classes; a task
it claims done is ``unjudged``, never success (nobody checked the answer) and never failed_silent
(nobody can say it is wrong).

Write tasks are judged on whether their goal was achieved: ``maintenance_roundtrip`` and
``config_audit`` succeed only when the maintenance write reached the server and the answer says so;
``open_incident`` only when exactly one incident exists and the answer names it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcpfault.analysis.join import Touch
from mcpfault.analysis.records import Outcome, TaskRecord
from mcpfault.faults.catalog import CATALOG


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
    verify_reads: int = 0  # reads the agent's verification added (policies: the verify mechanism)


# The judge's failure classes (the record's ``failure`` when the agent raised none, or when the world
# outranks what it raised).
WRONG_ANSWER = "wrong_answer"  # it returned an answer the ground truth contradicts
# (a fault type may name its own class for that, when it affected the task: faults/lie.py's believed_lie)
DUPLICATE_WRITE = "duplicate_write"  # its write was applied more than once
WRITE_DENIED = "write_denied"  # its write was applied, but it raised or answered that it was not
GOAL_NOT_ACHIEVED = "goal_not_achieved"  # its write never reached the server (it said so, or raised)
WRITE_WORKFLOWS = frozenset({"open_incident", "maintenance_roundtrip", "config_audit"})


@dataclass(frozen=True, slots=True)
class Verdict:
    correct: bool
    duplicates: int = 0
    why: str = ""
    # The server is wrong after the task (a duplicate, a write the agent denied): never failed_detected.
    damage: str | None = None  # the failure class of that damage
    # For a write task: whether its write reached the server (None: a read task).
    applied: bool | None = None


def mentions(text: str, tag: str) -> bool:
    """Does ``text`` carry ``tag`` as a whole word? "task-0-3" is not in "(task-0-31)"."""
    return re.search(rf"(?<![\w-]){re.escape(tag)}(?![\w-])", text) is not None


def check_answer(run: TaskRun, expected: Any, state: Mapping[str, Any]) -> Verdict:
    """Is the agent's answer right, and did it leave the server in the right state?

    A write task is judged on its goal: the write reached the server exactly once, and the answer says
    so. An agent that raised is judged on the state alone (its answer is None).
    """
    raised = run.failure is not None
    if run.workflow == "open_incident":
        mine = [i for i in state.get("incidents", []) if mentions(str(i.get("summary", "")), run.tag)]
        duplicates = max(0, len(mine) - 1)
        if duplicates:
            why = f"{len(mine)} incidents on the server for this task"
            return Verdict(False, duplicates, why, damage=DUPLICATE_WRITE, applied=True)
        if not mine:
            return Verdict(False, 0, "no incident on the server for this task", applied=False)
        if raised:
            why = f"raised, but the server has incident {mine[0].get('incident_id')!r}"
            return Verdict(False, 0, why, damage=WRITE_DENIED, applied=True)
        answered = run.answer.get("incident_id") if isinstance(run.answer, dict) else None
        if answered != mine[0].get("incident_id"):
            why = f"answered {answered!r}, the server has {mine[0].get('incident_id')!r}"
            return Verdict(False, duplicates, why, damage=WRITE_DENIED if answered is None else None, applied=True)
        return Verdict(True, applied=True)
    if run.workflow in ("maintenance_roundtrip", "config_audit"):
        applied = _maintenance_applied(state, run.tag)
        if raised:
            why = "raised, but its maintenance write was applied"
            return (
                Verdict(False, 0, why, damage=WRITE_DENIED, applied=True) if applied else Verdict(False, applied=False)
            )
        if run.workflow == "maintenance_roundtrip":
            wanted: Any = {"confirmed": True}
            said_applied = run.answer.get("confirmed") if isinstance(run.answer, dict) else None
        else:
            # The audit window is the write: the answer must say what the server did, and the rest what is true.
            wanted = {"window_opened": True, **(expected or {})}
            said_applied = run.answer.get("window_opened") if isinstance(run.answer, dict) else None
        if not applied:
            # The goal was not achieved, whatever the answer says; "confirmed: false" is no success.
            why = f"answered {run.answer!r}, and the maintenance write never reached the server"
            return Verdict(False, 0, why, applied=False)
        if run.answer != wanted:
            why = f"answered {run.answer!r}, expected {wanted!r} (the write was applied)"
            return Verdict(False, 0, why, damage=WRITE_DENIED if said_applied is False else None, applied=True)
        return Verdict(True, applied=True)
    if raised:
        return Verdict(False)
    if run.answer != expected:
        return Verdict(False, 0, f"answered {run.answer!r}, expected {expected!r}")
    return Verdict(True)


def _admits_not_applied(run: TaskRun) -> bool:
    """A write task's answer that says its write was not applied (an honest report of failure)."""
    if not isinstance(run.answer, dict):
        return False
    key = {"maintenance_roundtrip": "confirmed", "config_audit": "window_opened"}.get(run.workflow)
    return key is not None and run.answer.get(key) is False


def _maintenance_applied(state: Mapping[str, Any], tag: str) -> bool:
    """Whether a set_maintenance whose reason carries ``tag`` reached the server."""
    return any(
        w.get("op") == "set_maintenance" and mentions(str((w.get("arguments") or {}).get("reason", "")), tag)
        for w in state.get("write_log", [])
    )


def classify(run: TaskRun, verdict: Verdict, touch: Touch | None) -> tuple[Outcome, str | None, str, bool]:
    """(outcome, failure class, detail, absorbed) of one task, from its verdict and the faults that reached it."""
    if verdict.damage is not None:
        detail = verdict.why if run.failure is None else f"{verdict.why} ({run.failure}: {run.detail})"
        return "failed_silent", verdict.damage, detail, False
    if run.failure is not None:
        return "failed_detected", run.failure, run.detail, False
    if not verdict.correct:
        if verdict.applied is False and _admits_not_applied(run):
            return "failed_detected", GOAL_NOT_ACHIEVED, verdict.why, False
        if verdict.applied is None:
            return "failed_silent", _wrong_answer_class(touch), verdict.why, False
        return "failed_silent", GOAL_NOT_ACHIEVED, verdict.why, False
    affected = touch is not None and bool(touch.affected_types)
    if affected and touch is not None and touch.acted_after_affected:
        return "recovered", None, "", False
    return "success", None, "", affected


def _wrong_answer_class(touch: Touch | None) -> str:
    """``wrong_answer``, or the class a fault type that affected the task declares for it (a lie: ``believed_lie``)."""
    for fault_type in touch.affected_types if touch is not None else ():
        known = CATALOG.get(fault_type)
        declared = getattr(known, "wrong_answer", None)
        if isinstance(declared, str):
            return declared
    return WRONG_ANSWER


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
    outcome, failure, detail, absorbed = classify(run, verdict, touch)
    recovery_s = None
    if outcome == "recovered" and touch is not None and touch.first_affected_at is not None:
        ended = touch.ended_at if touch.ended_at is not None else run.finished
        recovery_s = round(ended - touch.first_affected_at, 6)
    return _task_record(
        run,
        touch,
        outcome,
        profile=profile,
        agent=agent,
        session=session,
        attempts=attempts,
        retries=retries,
        trace_id=trace_id,
        failure=failure,
        detail=detail,
        duplicates=verdict.duplicates if duplicates is None else duplicates,
        recovery_s=recovery_s,
        expected=_expected_of(run, expected, state),
        absorbed=absorbed,
        verify_reads=run.verify_reads,
    )


def _task_record(
    run: TaskRun,
    touch: Touch | None,
    outcome: Outcome,
    *,
    profile: str,
    agent: str,
    session: int,
    attempts: int | None,
    retries: int | None,
    trace_id: str | None,
    failure: str | None,
    detail: str,
    duplicates: int = 0,
    recovery_s: float | None = None,
    expected: Any = None,
    absorbed: bool = False,
    verify_reads: int = 0,
    no_ground_truth: str | None = None,
) -> TaskRecord:
    """One task's record, whichever judge gave its outcome: the ground-truth judge or the claim judge."""
    touched = touch is not None and bool(touch.fault_types)
    affected = touch is not None and bool(touch.affected_types)
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
        duration_s=round(run.finished - run.started, 6),
        failure=failure,
        detail=detail,
        trace_id=trace_id,
        answer=run.answer,
        duplicates=duplicates,
        recovery_s=recovery_s,
        expected=expected,
        absorbed=absorbed,
        verify_reads=verify_reads,
        no_ground_truth=no_ground_truth,
    )


def _expected_of(run: TaskRun, expected: Any, state: Mapping[str, Any]) -> Any:
    """The ground truth a record carries: for a write task, what a right answer says (its state is on
    the server, which a re-judge reads again): for open_incident the id of the task's one incident."""
    if run.workflow == "open_incident":
        mine = [i for i in state.get("incidents", []) if mentions(str(i.get("summary", "")), run.tag)]
        return {"incident_id": mine[0].get("incident_id")} if len(mine) == 1 else None
    if run.workflow == "maintenance_roundtrip":
        return {"confirmed": True}
    if run.workflow == "config_audit":
        return {"window_opened": True, **(expected or {})}
    return expected


def judge_claim(
    run: TaskRun,
    touch: Touch | None,
    *,
    profile: str,
    agent: str,
    session: int,
    why_no_truth: str,
    attempts: int | None = None,
    retries: int | None = None,
    trace_id: str | None = None,
) -> TaskRecord:
    """The record of a task no ground truth can check: failed_detected when the agent raised, else unjudged.

    ``why_no_truth`` goes into the record (``no_ground_truth``), so that a reader of records.jsonl sees why
    a claimed success is not a success.
    """
    outcome: Outcome = "failed_detected" if run.failure is not None else "unjudged"
    return _task_record(
        run,
        touch,
        outcome,
        profile=profile,
        agent=agent,
        session=session,
        attempts=attempts,
        retries=retries,
        trace_id=trace_id,
        failure=run.failure,
        detail=run.detail if run.failure is not None else "claimed done; no ground truth to check the answer",
        no_ground_truth=why_no_truth,
    )
