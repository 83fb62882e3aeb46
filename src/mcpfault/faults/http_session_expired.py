"""session_expired: 404 for a live session id, as a server that lost its sessions answers.

The server never sees the request; a 2025-11-25 client MUST start a new session with
``initialize``. Requests without a session id (the 2026-07-28 era) are not eligible.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import Any, ClassVar

from mcpfault.faults.base import HTTP, REQUESTS, Call, FaultBase, HttpBehaviour, HttpExchangeOps, Injection, PlanContext
from mcpfault.protocol import jsonrpc
from mcpfault.telemetry.names import Received


class _NotFound(HttpBehaviour):
    received: ClassVar[Received | None] = "session_expired"
    reaches_server: ClassVar[bool] = False

    def answer_instead(self, ops: HttpExchangeOps) -> Any:
        return ops.json_error_answer(404, jsonrpc.INVALID_REQUEST, "Session not found")


@dataclass(frozen=True, slots=True)
class SessionExpired(FaultBase):
    type_name: ClassVar[str] = "session_expired"
    MODES: ClassVar[tuple[str, ...]] = ("not_found",)
    event_name: ClassVar[str] = "mcpfault.session_expired"
    targets: ClassVar[frozenset[str]] = REQUESTS
    transports: ClassVar[frozenset[str]] = frozenset({HTTP})

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection | None:
        if not ctx.in_session:
            return None
        return Injection("not_found", http=_NotFound())
