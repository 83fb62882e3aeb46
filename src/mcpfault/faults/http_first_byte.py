"""first_byte_latency: the client waits before the first byte of the response, headers included.

Unlike ``latency``, which holds the answer, this holds everything: a streamed response's progress
notifications wait too, as behind a slow gateway or a cold start.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar

from mcpfault.faults.base import HTTP, REQUESTS, Call, Effect, FaultBase, HttpBehaviour, Injection, PlanContext
from mcpfault.faults.settings import bounded


@dataclass(frozen=True, slots=True)
class _HoldFirstByte(HttpBehaviour):
    delay_s: float

    @property
    def first_byte_delay_s(self) -> float:
        return self.delay_s


@dataclass(frozen=True, slots=True)
class FirstByteLatency(FaultBase):
    type_name: ClassVar[str] = "first_byte_latency"
    MODES: ClassVar[tuple[str, ...]] = ("delay",)
    event_name: ClassVar[str] = "mcpfault.first_byte_delay"
    targets: ClassVar[frozenset[str]] = REQUESTS
    effect: ClassVar[Effect] = "failure"
    transports: ClassVar[frozenset[str]] = frozenset({HTTP})

    delay_s: float = bounded(1.0, min=0.0, max=3600.0)
    jitter_s: float = bounded(0.0, min=0.0, max=3600.0)

    def draws(self) -> bool:
        return self.jitter_s > 0

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        return Injection("delay", http=_HoldFirstByte(self.delay_s + rng.uniform(0.0, self.jitter_s)))
