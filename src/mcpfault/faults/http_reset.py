"""reset: the TCP connection closes with no HTTP response at all.

``before`` the server never sees the request; ``after`` it acts on it, then the connection drops
before the answer leaves (a write whose outcome the client cannot know).
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import Any, ClassVar, Literal

from mcpfault.faults.base import HTTP, REQUESTS, Call, FaultBase, HttpBehaviour, HttpExchangeOps, Injection, PlanContext
from mcpfault.telemetry.names import Received


class _ResetBefore(HttpBehaviour):
    received: ClassVar[Received | None] = "reset"
    reaches_server: ClassVar[bool] = False

    def answer_instead(self, ops: HttpExchangeOps) -> Any:
        return ops.reset()


class _ResetAfter(HttpBehaviour):
    received: ClassVar[Received | None] = "reset"
    loses_answer: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Reset(FaultBase):
    type_name: ClassVar[str] = "reset"
    MODES: ClassVar[tuple[str, ...]] = ("before", "after")
    event_name: ClassVar[str] = "mcpfault.reset"
    targets: ClassVar[frozenset[str]] = REQUESTS
    transports: ClassVar[frozenset[str]] = frozenset({HTTP})

    mode: Literal["before", "after"] = "before"

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        return Injection(self.mode, http=_ResetBefore() if self.mode == "before" else _ResetAfter())
