"""timeout: the server acts, but its response is lost, or arrives after the client gave up."""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar, Literal

from mcpfault.faults.base import (
    READS,
    SERVER_REQUESTS,
    TOOLS_CALL,
    Call,
    Delivery,
    Effect,
    FaultBase,
    Injection,
    PlanContext,
)
from mcpfault.faults.settings import bounded


@dataclass(frozen=True, slots=True)
class Timeout(FaultBase):
    type_name: ClassVar[str] = "timeout"
    MODES: ClassVar[tuple[str, ...]] = ("drop", "late")
    event_name: ClassVar[str] = "mcpfault.drop"
    targets: ClassVar[frozenset[str]] = TOOLS_CALL | READS | SERVER_REQUESTS
    effect: ClassVar[Effect] = "failure"

    mode: Literal["drop", "late"] = "drop"
    # Seconds before the orphaned reply is delivered (mode "late" only).
    delay_s: float = bounded(30.0, min=0.0, max=3600.0)

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        if self.mode == "drop":
            return Injection("drop", response=_drop)
        delay_s = self.delay_s
        return Injection("late", response=lambda data: Delivery(data, delay_s))


def _drop(_data: bytes) -> Delivery:
    return Delivery(None)
