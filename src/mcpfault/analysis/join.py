"""Join what the client sent (attempts) with what the proxy did (events), by request id.

Both sides number requests the same way within a session: the client's JSON-RPC id is the id the
proxy records. Outcomes are judged from the join through trace context (``traces``); this one is its
cross-check, and the fallback for a session run without traces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Touch:
    """The faults that reached one task."""

    fault_types: list[str] = field(default_factory=list)
    fault_modes: list[str] = field(default_factory=list)
    first_fault_at: float | None = None  # start of the first faulted attempt (seconds; the clock of ended_at)
    first_fault_request: Any = None  # that attempt's JSON-RPC id
    # The task's end on first_fault_at's clock. None: the judge's own record of the task's end, on the
    # client's monotonic clock, as this join's attempt times are.
    ended_at: float | None = None


def faults_by_request(events: Iterable[Mapping[str, Any]]) -> dict[Any, list[tuple[str, str]]]:
    """Request id -> (fault type, mode) of every fault the proxy applied to it."""
    found: dict[Any, list[tuple[str, str]]] = {}
    for event in events:
        applied = event.get("faults") or (
            [{"type": event["fault_type"], "mode": event.get("fault_mode")}] if event.get("fault_type") else []
        )
        for fault in applied:
            found.setdefault(event.get("request_id"), []).append((str(fault["type"]), str(fault["mode"])))
    return found


def touches_by_task(
    attempts: Iterable[Mapping[str, Any]], faults: Mapping[Any, list[tuple[str, str]]]
) -> dict[int, Touch]:
    """Task index -> the faults its attempts met, in the order they were sent."""
    touches: dict[int, Touch] = {}
    for attempt in sorted(attempts, key=lambda a: a["started"]):
        task = attempt.get("task")
        applied = faults.get(attempt["request_id"])
        if task is None or not applied:
            continue
        touch = touches.setdefault(task, Touch())
        if touch.first_fault_at is None:
            touch.first_fault_at = attempt["started"]
            touch.first_fault_request = attempt["request_id"]
        for fault_type, mode in applied:
            if fault_type not in touch.fault_types:
                touch.fault_types.append(fault_type)
            touch.fault_modes.append(f"{fault_type}:{mode}")
    return touches


def latency_pairs(
    attempts: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]]
) -> list[tuple[float, float]]:
    """(client-seen seconds, upstream seconds as the proxy timed it) for calls no fault touched.

    The difference is what the proxy (and the two extra pipe hops) adds to a call.
    """
    clean = {
        e.get("request_id"): float(e["duration_s"])
        for e in events
        if not e.get("fault_type") and e.get("client_received") == "response" and "duration_s" in e
    }
    return [
        (float(a["duration_s"]), clean[a["request_id"]])
        for a in attempts
        if a.get("outcome") == "ok" and a.get("request_id") in clean
    ]
