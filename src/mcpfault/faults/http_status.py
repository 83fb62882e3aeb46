"""http_status: an HTTP error status in place of an answer (a gateway's 503, a rate limiter's 429).

The server never sees the request. The body is the status's reason phrase as plain text, as most
gateways and load balancers send it; ``retry_after_s`` adds the ``Retry-After`` header.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import Any, ClassVar

from mcpfault.faults.base import HTTP, REQUESTS, Call, FaultBase, HttpBehaviour, HttpExchangeOps, Injection, PlanContext
from mcpfault.faults.settings import bounded
from mcpfault.telemetry.names import Received


@dataclass(frozen=True, slots=True)
class _StatusInstead(HttpBehaviour):
    received: ClassVar[Received | None] = "http_error"
    reaches_server: ClassVar[bool] = False

    status: int
    headers: tuple[tuple[str, str], ...]

    def answer_instead(self, ops: HttpExchangeOps) -> Any:
        return ops.status_answer(self.status, self.headers)


@dataclass(frozen=True, slots=True)
class HttpStatus(FaultBase):
    type_name: ClassVar[str] = "http_status"
    MODES: ClassVar[tuple[str, ...]] = ("status",)
    event_name: ClassVar[str] = "mcpfault.http_status"
    targets: ClassVar[frozenset[str]] = REQUESTS
    transports: ClassVar[frozenset[str]] = frozenset({HTTP})

    status: int = bounded(503, min=400, max=599)
    # Seconds for the Retry-After header; absent when not set.
    retry_after_s: int | None = bounded(None, min=0, max=86400)

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        headers = (("Retry-After", str(self.retry_after_s)),) if self.retry_after_s is not None else ()
        return Injection("status", http=_StatusInstead(self.status, headers))
