"""cpu_starve: for ``duration_s`` the server gets only ``share`` of the CPU.

The way a cgroup CPU quota throttles a process, without a cgroup: in every ``period_s`` the server
runs for ``share * period_s`` and is stopped (SIGSTOP) for the rest, then continued (SIGCONT). No
busy loop of ours competes with it; a CPU-bound tool takes about 1/``share`` times as long.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar

from mcpfault.faults.base import Call, Effect, FaultBase, Injection, PlanContext, ProcessBehaviour, ServerProcessOps
from mcpfault.faults.settings import bounded


@dataclass(frozen=True, slots=True)
class _DutyCycle(ProcessBehaviour):
    share: float
    period_s: float
    duration_s: float

    def perform(self, server: ServerProcessOps) -> None:
        server.starve(self.share, self.period_s, self.duration_s)


@dataclass(frozen=True, slots=True)
class CpuStarve(FaultBase):
    type_name: ClassVar[str] = "cpu_starve"
    MODES: ClassVar[tuple[str, ...]] = ("throttle",)
    event_name: ClassVar[str] = "mcpfault.cpu_starve"
    effect: ClassVar[Effect] = "failure"
    needs_process: ClassVar[bool] = True

    duration_s: float = bounded(10.0, min=0.0, max=3600.0)
    # The fraction of each period the server may run: in (0, 1].
    share: float = 0.2
    period_s: float = bounded(0.1, min=0.01, max=10.0)

    def __post_init__(self) -> None:
        if not 0.0 < self.share <= 1.0:
            raise ValueError(f"{self.share} is outside (0, 1]; give the fraction of the CPU the server keeps", "share")

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        return Injection("throttle", process=_DutyCycle(self.share, self.period_s, self.duration_s))
