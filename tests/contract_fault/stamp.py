"""stamp: a fault that exists only in the contract test, as a newcomer would add one.

It is this one module plus one catalog line (``register`` below, done by whoever loads it): the
proxy, its events, spans, metrics and summary, and the analysis must then know it with no other change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from random import Random
from typing import ClassVar

from mcpfault.faults.base import Call, Delivery, Effect, FaultBase, Injection, PlanContext, encode, load_object
from mcpfault.faults.catalog import CATALOG

FIELD = "stamped_by"


@dataclass(frozen=True, slots=True)
class Stamp(FaultBase):
    type_name: ClassVar[str] = "stamp"
    MODES: ClassVar[tuple[str, ...]] = ("stamp",)
    event_name: ClassVar[str] = "mcpfault.stamp"
    effect: ClassVar[Effect] = "changed_fields"

    value: str = "mcpfault"

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        return Injection("stamp", response=self._stamp)

    def _stamp(self, data: bytes) -> Delivery:
        body = load_object(data)
        result = body.get("result") if body is not None else None
        if body is None or not isinstance(result, dict) or not isinstance(result.get("structuredContent"), dict):
            return Delivery(data)
        result["structuredContent"][FIELD] = self.value
        result["content"] = [{"type": "text", "text": json.dumps(result["structuredContent"])}]
        return Delivery(encode(body), fields=(FIELD,))


def register() -> None:
    CATALOG.register(Stamp)
