"""stale: the proxy answers from earlier responses to the same tool and arguments."""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar, Literal

from mcpfault.faults.base import (
    READS,
    TOOLS_CALL,
    Call,
    Effect,
    FaultBase,
    Injection,
    PlanContext,
    load_object,
    reply_with_id,
)
from mcpfault.faults.settings import bounded


@dataclass(frozen=True, slots=True)
class Stale(FaultBase):
    type_name: ClassVar[str] = "stale"
    MODES: ClassVar[tuple[str, ...]] = ("previous", "oldest")
    event_name: ClassVar[str] = "mcpfault.stale_hit"
    targets: ClassVar[frozenset[str]] = TOOLS_CALL | READS
    effect: ClassVar[Effect] = "outdated"

    # previous: the latest earlier response; oldest: the oldest of the last `history` responses.
    pick: Literal["previous", "oldest"] = "previous"
    history: int = bounded(8, min=1, max=1024)

    def history_depth(self) -> int:
        return self.history

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection | None:
        earlier = ctx.history(call)[-self.history :]
        if not earlier:
            return None  # nothing cached yet: the rule does not fire, the call goes through
        cached = load_object(earlier[-1] if self.pick == "previous" else earlier[0])
        if cached is None:
            return None
        return Injection(self.pick, reply=reply_with_id(cached, call.request_id))
