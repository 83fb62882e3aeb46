"""notification: notifications lost, late, twice or out of order, and list changes that did not happen.

On ``notifications/progress``: ``drop``, ``delay`` (``delay_s`` later), ``duplicate`` (sent twice),
``reorder`` (held ``delay_s`` so the ones after it arrive first). On ``notifications/tools/list_changed``
(and the prompts and resources ones) and ``notifications/cancelled``: ``drop``. ``false`` fires on a
request instead and sends the client the list change named by ``announce`` at once, though nothing
changed. A rule's ``methods`` name the notifications (or, for ``false``, the requests) it acts on.
Over HTTP the events of one response stream stay in order: a held notification holds those after it
too, so ``reorder`` acts as ``delay`` there.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar, Literal

from mcpfault.faults.base import (
    CANCELLED,
    LIST_CHANGED,
    NOTIFICATIONS,
    PROGRESS,
    REQUESTS,
    Call,
    Delivery,
    FaultBase,
    Injection,
    PlanContext,
)
from mcpfault.faults.settings import bounded

Mode = Literal["drop", "delay", "duplicate", "reorder", "false"]
# What each mode may act on: the mode's methods, as ``methods_allowed`` reports them.
_TAKES: dict[str, frozenset[str]] = {
    "drop": frozenset({PROGRESS, CANCELLED}) | LIST_CHANGED,
    "delay": frozenset({PROGRESS}),
    "duplicate": frozenset({PROGRESS}),
    "reorder": frozenset({PROGRESS}),
    "false": REQUESTS,
}


@dataclass(frozen=True, slots=True)
class Notification(FaultBase):
    type_name: ClassVar[str] = "notification"
    MODES: ClassVar[tuple[str, ...]] = ("drop", "delay", "duplicate", "reorder", "false")
    event_name: ClassVar[str] = "mcpfault.notification"
    targets: ClassVar[frozenset[str]] = NOTIFICATIONS | REQUESTS

    mode: Mode = "drop"
    # Seconds a delayed or reordered notification is held back.
    delay_s: float = bounded(0.5, min=0.0, max=3600.0)
    # The list change a "false" rule announces.
    announce: Literal[
        "notifications/tools/list_changed", "notifications/resources/list_changed", "notifications/prompts/list_changed"
    ] = "notifications/tools/list_changed"

    def methods_allowed(self) -> frozenset[str]:
        return _TAKES[self.mode]

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        if self.mode == "false":
            return Injection("false", notify=({"jsonrpc": "2.0", "method": self.announce},))
        if self.mode == "drop":
            return Injection("drop", response=lambda _data: Delivery(None))
        if self.mode == "duplicate":
            return Injection("duplicate", response=_twice)
        delay_s = self.delay_s
        return Injection(self.mode, response=lambda data: Delivery(data, delay_s))


def _twice(data: bytes) -> Delivery:
    """The notification, then the same again: two lines (the transport sends each as its own message)."""
    line = data if data.endswith(b"\n") else data + b"\n"
    return Delivery(line + line)
