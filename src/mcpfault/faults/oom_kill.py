"""oom_kill: SIGKILL, as the kernel's OOM killer leaves a process (exit status 137).

With ``rss_mb`` the server is killed once its resident memory exceeds it (sampled every 100 ms
from /proc); without, at the triggering call.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar

from mcpfault.faults.base import Call, FaultBase, Injection, PlanContext, ProcessBehaviour, ServerProcessOps
from mcpfault.faults.settings import bounded


@dataclass(frozen=True, slots=True)
class _KillNow(ProcessBehaviour):
    def perform(self, server: ServerProcessOps) -> None:
        server.crash("SIGKILL", cause=OomKill.type_name)


@dataclass(frozen=True, slots=True)
class _KillAbove(ProcessBehaviour):
    rss_mb: float

    def perform(self, server: ServerProcessOps) -> None:
        server.kill_above_rss(self.rss_mb, cause=OomKill.type_name)


@dataclass(frozen=True, slots=True)
class OomKill(FaultBase):
    type_name: ClassVar[str] = "oom_kill"
    MODES: ClassVar[tuple[str, ...]] = ("at_call", "rss_limit")
    event_name: ClassVar[str] = "mcpfault.oom_kill"
    needs_process: ClassVar[bool] = True

    # Resident memory in MiB above which the server is killed; unset: killed at the triggering call.
    rss_mb: float | None = bounded(None, min=1.0, max=1_048_576.0)

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        if self.rss_mb is None:
            return Injection("at_call", process=_KillNow())
        return Injection("rss_limit", process=_KillAbove(self.rss_mb))
