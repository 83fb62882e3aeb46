"""Join what the client sent (attempts) with what the proxy did (events), by request id.

Both sides number requests the same way within a session: the client's JSON-RPC id is the id the
proxy records. (The telemetry issue adds a join through trace context; this one stays as a cross-check.)
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
    first_fault_at: float | None = None  # client clock, start of the first faulted attempt


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
        for fault_type, mode in applied:
            if fault_type not in touch.fault_types:
                touch.fault_types.append(fault_type)
            touch.fault_modes.append(f"{fault_type}:{mode}")
    return touches
