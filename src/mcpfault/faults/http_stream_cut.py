"""stream_cut: the response's SSE stream closes after ``after_events`` events, before the answer.

The server acts; what it sent before its answer (progress, log messages) gets through up to the
cut. A JSON answer is sent as an event stream so that it can be cut. What happens next is the
server's and the client's business, as with a real cut: a 2025-11-25 server that numbers its events
lets the client resume with GET and ``Last-Event-ID`` (the answer arrives there); without event ids,
or in the 2026-07-28 era, the answer is lost and the client must re-issue the request.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar

from mcpfault.faults.base import HTTP, REQUESTS, Call, FaultBase, HttpBehaviour, Injection, PlanContext
from mcpfault.faults.settings import bounded
from mcpfault.telemetry.names import Received


@dataclass(frozen=True, slots=True)
class _Cut(HttpBehaviour):
    received: ClassVar[Received | None] = "stream_cut"

    after_events: int

    @property
    def cut_after_events(self) -> int | None:
        return self.after_events


@dataclass(frozen=True, slots=True)
class HttpStreamCut(FaultBase):
    type_name: ClassVar[str] = "stream_cut"
    MODES: ClassVar[tuple[str, ...]] = ("cut",)
    event_name: ClassVar[str] = "mcpfault.stream_cut"
    targets: ClassVar[frozenset[str]] = REQUESTS
    transports: ClassVar[frozenset[str]] = frozenset({HTTP})

    after_events: int = bounded(0, min=0, max=1_000_000)

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        return Injection("cut", http=_Cut(self.after_events))
