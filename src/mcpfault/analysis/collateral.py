"""Collateral failures: a later task that failed because an earlier task's process fault left the
server unable to answer (still stopped by a stall, still down after a crash).

The fault reached one task's request, yet the server stays stopped for the stall's ``duration_s``
(its fault module's ``holds_server_s``) or down until the supervisor reports it back, and the tasks
sent meanwhile time out with no fault of their own. Without this they count as failures no fault
explains, and the process table shows a part of the damage (naive under stall: 4 of 8 failures).

Every time comes from the proxy's events file, one clock: a request event is written when the request
ends, so it began ``duration_s`` before its ``time``. Pure functions over data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mcpfault.telemetry import names


@dataclass(frozen=True, slots=True)
class Outage:
    """A window in which the server could answer no one, and the task whose fault opened it."""

    start: float  # Unix seconds, the proxy's clock
    end: float
    task: int
    fault_type: str
    rule: str

    def describe(self) -> str:
        return f"{self.fault_type} (rule {self.rule!r}) in task {self.task}"


def _time(event: Mapping[str, Any]) -> float | None:
    try:
        return datetime.fromisoformat(str(event["time"])).timestamp()
    except (KeyError, ValueError):
        return None


def _span(event: Mapping[str, Any]) -> tuple[float, float] | None:
    """When a request was at the proxy: from its arrival to its event."""
    ended = _time(event)
    duration = event.get("duration_s")
    if ended is None or not isinstance(duration, int | float):
        return None
    return ended - float(duration), ended


def outages(
    events: Sequence[Mapping[str, Any]],
    server_events: Sequence[Mapping[str, Any]],
    task_of_request: Mapping[Any, int],
    holds_s: Mapping[str, float],
) -> list[Outage]:
    """Every window a process fault kept the server from answering: a rule in ``holds_s`` (rule name ->
    seconds) from the request it fired on, and a crash from the server's exit to its being back."""
    found = []
    for event in events:
        rule, fault_type = event.get("rule"), event.get("fault_type")
        task = task_of_request.get(event.get("request_id"))
        span = _span(event)
        if rule is None or fault_type is None or task is None or span is None:
            continue
        start = span[0]
        hold = holds_s.get(str(rule), 0.0)
        if hold > 0:
            found.append(Outage(start, start + hold, task, str(fault_type), str(rule)))
        back = _back_after(server_events, start, str(fault_type))
        if back is not None:
            found.append(Outage(start, back, task, str(fault_type), str(rule)))
    return found


def _back_after(server_events: Sequence[Mapping[str, Any]], start: float, cause: str) -> float | None:
    """When the server was back after the first death from ``cause`` after ``start`` (None: no such death)."""
    died = None
    for event in server_events:
        at = _time(event)
        if at is None or at < start - 0.001:  # the events' times have millisecond resolution
            continue
        if died is None and event.get("event") == names.SERVER_EXITED and event.get("cause") == cause:
            died = at
        elif died is not None and event.get("event") == names.SERVER_BACK:
            return at
    return None


def collateral(
    windows: Iterable[Outage],
    events: Sequence[Mapping[str, Any]],
    task_of_request: Mapping[Any, int],
    failed_tasks: Iterable[int],
) -> dict[int, Outage]:
    """Failed task -> the earlier task's outage it met: one of its requests was at the proxy while the
    server could not answer. The first such outage wins."""
    failed = set(failed_tasks)
    spans: dict[int, list[tuple[float, float]]] = {}
    for event in events:
        task = task_of_request.get(event.get("request_id"))
        span = _span(event)
        if task in failed and span is not None:
            spans.setdefault(task, []).append(span)
    found: dict[int, Outage] = {}
    for window in sorted(windows, key=lambda w: w.start):
        for task, requests in spans.items():
            if task <= window.task or task in found:
                continue
            if any(start < window.end and end > window.start for start, end in requests):
                found[task] = window
    return found
