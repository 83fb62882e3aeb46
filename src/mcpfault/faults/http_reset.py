"""reset: the TCP connection closes with no HTTP response at all.

``before`` the server never sees the request; ``after`` it acts on it, then the connection drops
before the answer leaves (a write whose outcome the client cannot know).
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar, Literal

from mcpfault.faults.base import HTTP, Call, FaultBase, HttpAction, HttpFailure, Injection, PlanContext


@dataclass(frozen=True, slots=True)
class Reset(FaultBase):
    type_name: ClassVar[str] = "reset"
    MODES: ClassVar[tuple[str, ...]] = ("before", "after")
    transports: ClassVar[frozenset[str]] = frozenset({HTTP})

    mode: Literal["before", "after"] = "before"

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        return Injection(self.mode, http=HttpAction(HttpFailure.RESET, upstream=self.mode == "after"))
