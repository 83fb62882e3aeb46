"""latency: the server answers correctly, but the answer reaches the client late."""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar

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
class Latency(FaultBase):
    type_name: ClassVar[str] = "latency"
    MODES: ClassVar[tuple[str, ...]] = ("delay",)
    event_name: ClassVar[str] = "mcpfault.delay"
    targets: ClassVar[frozenset[str]] = TOOLS_CALL | READS | SERVER_REQUESTS
    effect: ClassVar[Effect] = "failure"

    # Seconds added to the response, plus a uniform draw from [0, jitter_s].
    delay_s: float = bounded(0.25, min=0.0, max=3600.0)
    jitter_s: float = bounded(0.0, min=0.0, max=3600.0)

    def draws(self) -> bool:
        return self.jitter_s > 0

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        # Drawn when the rule fires, so the delay depends only on the request sequence.
        delay_s = self.delay_s + rng.uniform(0.0, self.jitter_s)
        return Injection("delay", response=lambda data: Delivery(data, delay_s))
