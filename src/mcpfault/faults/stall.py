"""stall: the server is stopped (SIGSTOP) for ``duration_s``, then continued (SIGCONT).

Everything in flight, and everything sent meanwhile, waits: a hung server, or one a host under
pressure paused. The triggering request is forwarded after the stop, so it waits too.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar

from mcpfault.faults.base import Call, Effect, FaultBase, Injection, PlanContext, ProcessBehaviour, ServerProcessOps
from mcpfault.faults.settings import bounded


@dataclass(frozen=True, slots=True)
class _StallStop(ProcessBehaviour):
    duration_s: float

    def perform(self, server: ServerProcessOps) -> None:
        server.stall(self.duration_s)


@dataclass(frozen=True, slots=True)
class Stall(FaultBase):
    type_name: ClassVar[str] = "stall"
    MODES: ClassVar[tuple[str, ...]] = ("stop",)
    event_name: ClassVar[str] = "mcpfault.stall"
    effect: ClassVar[Effect] = "failure"
    needs_process: ClassVar[bool] = True

    duration_s: float = bounded(5.0, min=0.0, max=3600.0)

    def holds_server_s(self) -> float:
        return self.duration_s

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        return Injection("stop", process=_StallStop(self.duration_s))
