"""http_status: an HTTP error status in place of an answer (a gateway's 503, a rate limiter's 429).

The server never sees the request. The body is the status's reason phrase as plain text, as most
gateways and load balancers send it; ``retry_after_s`` adds the ``Retry-After`` header.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar

from mcpfault.faults.base import HTTP, Call, FaultBase, HttpAction, HttpFailure, Injection, PlanContext
from mcpfault.faults.settings import bounded


@dataclass(frozen=True, slots=True)
class HttpStatus(FaultBase):
    type_name: ClassVar[str] = "http_status"
    MODES: ClassVar[tuple[str, ...]] = ("status",)
    transports: ClassVar[frozenset[str]] = frozenset({HTTP})

    status: int = bounded(503, min=400, max=599)
    # Seconds for the Retry-After header; absent when not set.
    retry_after_s: int | None = bounded(None, min=0, max=86400)

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        headers = (("Retry-After", str(self.retry_after_s)),) if self.retry_after_s is not None else ()
        action = HttpAction(HttpFailure.STATUS, status=self.status, headers=headers, upstream=False)
        return Injection("status", http=action)
