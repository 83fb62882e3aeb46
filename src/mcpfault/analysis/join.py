"""Join what the client sent (attempts) with what the proxy did (events), by request id.

Both sides number requests the same way within a session: the client's JSON-RPC id is the id the
proxy records. Outcomes are judged from the join through trace context (``traces``); this one is its
cross-check, and the fallback for a session run without traces.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from mcpfault.analysis.effects import AttemptView, affects


@dataclass
class Touch:
    """The faults that reached one task: every one the proxy applied, and those that changed what it received."""

    fault_types: list[str] = field(default_factory=list)
    fault_modes: list[str] = field(default_factory=list)
    first_fault_at: float | None = None  # start of the first faulted attempt (seconds; the clock of ended_at)
    first_fault_request: Any = None  # that attempt's JSON-RPC id
    # The task's end on first_fault_at's clock. None: the judge's own record of the task's end, on the
    # client's monotonic clock, as this join's attempt times are.
    ended_at: float | None = None
    affected_types: list[str] = field(default_factory=list)  # the types that changed an answer (analysis.effects)
    first_affected_at: float | None = None  # start of the first attempt a fault affected (first_fault_at's clock)
    # Whether the agent acted after the first affecting fault (a retry, a re-read, a re-list): what
    # makes a right answer "recovered" rather than a fault absorbed (see ``acted_after``).
    acted_after_affected: bool = False

    def add(self, started: float, request: Any, faults: Iterable[tuple[str, str, bool]]) -> None:
        """One attempt's faults, as (type, mode, whether it affected the answer), in the order applied."""
        if self.first_fault_at is None:
            self.first_fault_at, self.first_fault_request = started, request
        for fault_type, mode, affected in faults:
            if fault_type not in self.fault_types:
                self.fault_types.append(fault_type)
            self.fault_modes.append(f"{fault_type}:{mode}")
            if affected:
                if self.first_affected_at is None:
                    self.first_affected_at = started
                if fault_type not in self.affected_types:
                    self.affected_types.append(fault_type)


class Sent(NamedTuple):
    """One request of a task as the client sent it, for ``acted_after``."""

    started: float
    method: str
    target: str | None  # the tool, resource or prompt it names
    number: int  # which try of the agent's logical call


def acted_after(sent: Iterable[Sent], since: float, *, rereads: bool = False) -> bool:
    """Whether the agent acted after ``since`` (the first affecting fault): a later request that is a
    retry or a re-read (a try beyond the first of a logical call: the policies re-send a read whose
    answer was stale or broken, and a write whose answer was lost) or a re-list (``tools/list``, how
    an agent reconciles with a changed server). Carrying on with the next step of the task, as a
    naive agent does, is no action: whatever the fault changed was absorbed. A request the task's
    own code sends twice (config_audit reads its resource before and after the write) is no action
    either: the first try of each, which the code would have sent without any fault.

    ``rereads``: an agent whose every request is its own choice (the llm agent) also acts by sending a
    request again that it sent before in the task (a new first try, reading the tool again)."""
    seen: set[tuple[str, str | None]] = set()
    for request in sorted(sent, key=lambda s: s.started):
        key = (request.method, request.target)
        if request.started > since and (
            request.number > 1 or request.method == "tools/list" or (rereads and key in seen)
        ):
            return True
        seen.add(key)
    return False


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
    attempts: Iterable[Mapping[str, Any]], faults: Mapping[Any, list[tuple[str, str]]], *, rereads: bool = False
) -> dict[int, Touch]:
    """Task index -> the faults its attempts met, in the order they were sent."""
    touches: dict[int, Touch] = {}
    sent: dict[int, list[Sent]] = {}
    for attempt in sorted(attempts, key=lambda a: a["started"]):
        if attempt.get("task") is not None:
            sent.setdefault(attempt["task"], []).append(
                Sent(
                    float(attempt["started"]),
                    str(attempt.get("method")),
                    attempt.get("tool"),
                    int(attempt.get("attempt", 1)),
                )
            )
        task = attempt.get("task")
        applied = faults.get(attempt["request_id"])
        if task is None or not applied:
            continue
        # Without traces the judge knows only whether the client got a usable answer; a stale answer or
        # a renamed field it cannot tell from a fresh one, so those count as affecting (effects.affects).
        view = AttemptView(tool=attempt.get("tool"), failed=attempt.get("outcome") != "ok")
        effects = [(t, m, affects(t, view, None)) for t, m in applied]
        touches.setdefault(task, Touch()).add(attempt["started"], attempt["request_id"], effects)
    for task, touch in touches.items():
        if touch.first_affected_at is not None:
            touch.acted_after_affected = acted_after(sent.get(task, ()), touch.first_affected_at, rereads=rereads)
    return touches


def probe_duplicates_by_task(
    attempts: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    *,
    state_changes: str,
    write_tools: Collection[str],
) -> tuple[dict[int, int], set[int]]:
    """Task index -> the duplicates the side-effect probe saw (``proxy --probe``'s records), counted as the
    judge counts them: a repeat of a lost write call that changed the server's state again. Also the
    tasks the probe cannot count: one of their lost calls it could not judge (``server_acted: unknown``).

    A server does more than change state (the mock flushes its spans, writes its state file when it
    stops), so a duplicate counts only for a write tool whose side effects include ``state_changes``, the
    file the server records its state changes in (the mock's journal).
    """
    task_of = {a["request_id"]: a.get("task") for a in attempts}
    found: dict[int, int] = {}
    unknown: set[int] = set()
    for event in events:
        if event.get("record") != "side_effects":
            continue
        task = task_of.get(event.get("request_id"))
        if task is None:
            continue
        if event.get("server_acted") == "unknown":
            unknown.add(task)
        changed = any(state_changes in str(e.get("detail", "")) for e in event.get("side_effects") or ())
        if event.get("duplicate_of") is not None and event.get("tool") in write_tools and changed:
            found[task] = found.get(task, 0) + 1
    return found, unknown


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
