"""crash: the server process is killed with ``signal``, as a host, an operator or a bug kills it.

``before``: the triggering request never reaches the server. ``after``: the server gets it and is
killed ``after_s`` later, or as soon as it answers, whichever comes first; its answer is lost either
way, so it may have acted (a write whose outcome the client cannot know). Over stdio the answer is
held back and the kill comes at once, so a server quicker than ``after_s`` has always acted; over HTTP
the answer goes out when it comes before the kill.
What the client then sees is the supervisor's business (the profile's ``[server]`` table): with
``restart = "never"`` a real server death, with restarts an error naming the new generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar, Literal

from mcpfault.faults.base import (
    EVERY_TRANSPORT,
    Call,
    FaultBase,
    Injection,
    PlanContext,
    ProcessBehaviour,
    ServerProcessOps,
)
from mcpfault.faults.settings import bounded

Signal = Literal["SIGKILL", "SIGTERM", "SIGINT", "SIGSEGV", "SIGABRT"]


@dataclass(frozen=True, slots=True)
class _KillBefore(ProcessBehaviour):
    before_request: ClassVar[bool] = True

    signal_name: str

    def perform(self, server: ServerProcessOps) -> None:
        server.crash(self.signal_name, cause=Crash.type_name)


@dataclass(frozen=True, slots=True)
class _KillAfter(ProcessBehaviour):
    answer_lost: ClassVar[bool] = True

    signal_name: str
    after_s: float

    def perform(self, server: ServerProcessOps) -> None:
        server.crash(self.signal_name, delay_s=self.after_s, cause=Crash.type_name)

    def at_answer(self, server: ServerProcessOps) -> None:
        server.crash(self.signal_name, cause=Crash.type_name)


@dataclass(frozen=True, slots=True)
class Crash(FaultBase):
    type_name: ClassVar[str] = "crash"
    MODES: ClassVar[tuple[str, ...]] = ("before", "after")
    event_name: ClassVar[str] = "mcpfault.crash"
    transports: ClassVar[frozenset[str]] = EVERY_TRANSPORT
    needs_process: ClassVar[bool] = True

    signal: Signal = "SIGKILL"
    when: Literal["before", "after"] = "before"
    # Seconds between forwarding the request and the kill, at the latest (when = "after" only).
    after_s: float = bounded(0.05, min=0.0, max=3600.0)

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        if self.when == "before":
            return Injection("before", process=_KillBefore(self.signal))
        return Injection("after", process=_KillAfter(self.signal, self.after_s))
