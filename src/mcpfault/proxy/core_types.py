"""The core's value types and observer protocols: what a transport and an observer see of it.

``Emit`` is what the core returns for a line; ``InFlight`` and ``Finished`` are a request on its way
and at its end, as observers (spans, metrics) see them; ``Stats`` are the counts the summary prints.
Imported from ``mcpfault.proxy.core`` as before; they live here so that the core's parts share them.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from mcpfault.faults.base import Call, HttpBehaviour, ProcessBehaviour
from mcpfault.faults.engine import Decision
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.jsonrpc import MessageKind
from mcpfault.telemetry.names import Received


class To(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


class Emit(NamedTuple):
    """Bytes for one peer, now or after ``delay_s``. A NamedTuple: one is built per line."""

    to: To
    data: bytes
    delay_s: float = 0.0
    http: HttpBehaviour | None = None  # how a fault acts on the HTTP exchange this belongs to (HTTP transports)
    process: ProcessBehaviour | None = None  # what a fault does to the server process (transports that own it)
    # For an answer held back (``delay_s`` > 0): the client's request id, which the transport hands to
    # ``ProxyCore.answer_delivered`` once the bytes are out, so the event says when the client got them.
    answers: Any = None
    rewritten: bool = False  # a fault replaced the request's body (an HTTP transport re-mirrors its headers)


class InFlight(NamedTuple):
    """A forwarded request awaiting its response. Built per request, so a NamedTuple."""

    body: dict[str, Any]
    decision: Decision
    started: float
    tokens: tuple[Any, ...] = ()  # what each observer keeps for this request (a span, say)
    handled_s: float = 0.0  # the proxy's own time on the request's way in (observed requests only)
    parsed: Call | None = None  # kept when it was built anyway, so it is not built again per use

    @property
    def call(self) -> Call:
        return self.parsed if self.parsed is not None else Call.from_body(self.body)


class Finished(NamedTuple):
    """How one request ended, as observers (spans, metrics) see it."""

    call: Call
    decision: Decision
    started: float  # core clock
    finished: float
    received: Received
    error_code: int | None
    upstream_contacted: bool
    delay_s: float
    protocol_version: str | None
    added_s: float | None  # the proxy's own handling time, both ways; None when it means nothing (exit, cancel)
    generation: int | None = None  # the server's restarts before the request arrived; None: not supervised
    fields: tuple[str, ...] = ()  # the result fields a corruption changed (Delivery.fields)


class RequestObserver(Protocol):
    """Watches each request that the engine saw, from arrival to what the client received."""

    def started(self, call: Call, decision: Decision, started: float, *, from_server: bool = False) -> Any:
        """Return a token kept with the request (or None). ``from_server``: a server-to-client request."""
        ...

    def propagate(self, token: Any, meta: dict[str, Any]) -> bool:
        """Write context into the upstream request's ``params._meta``; True when something was written."""
        ...

    def finished(self, token: Any, outcome: Finished) -> None: ...

    def upstream_exited(self, exit_code: int) -> None: ...


class PlainAnswer(NamedTuple):
    """An answer to a plain request, relayed untouched: what ``Finished`` is built from, later."""

    line: bytes
    body: dict[str, Any]
    arrived: float  # core clock
    now: float
    protocol_version: str | None
    generation: int | None


class DeferringObserver(RequestObserver, Protocol):
    """An observer that can take a request nothing can happen to (no rule cares about its method) as
    raw data, and build its ``Call`` and ``Finished`` later, off the request's path (the span writer).
    It says so with ``defers`` (True); the core then calls these instead of ``started``/``finished``."""

    defers: bool

    def forward_plain(
        self, line: bytes, body: dict[str, Any], started: float, propagate: bool
    ) -> tuple[Any, bytes | None]:
        """As ``started`` for ``Call.from_body(body)`` and no decision: the token, and ``line`` as it goes
        upstream (carrying the span's context when ``propagate``; None: edit it the general way)."""
        ...

    def answered_plain(self, pending: InFlight, answer: PlainAnswer) -> None:
        """As ``finished``, for an answer relayed untouched."""
        ...


@dataclass(slots=True)
class Stats:
    requests: Counter[str] = field(default_factory=Counter)  # by method
    faults: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (rule, type, mode)
    received: Counter[Received] = field(default_factory=Counter)  # what clients got, for faulted requests
    opaque: Counter[str] = field(default_factory=Counter)  # unparsable lines, by direction
    modern_requests: int = 0  # requests carrying the 2026-07-28 _meta envelope; the rest are 2025-11-25
    upstream_exit_code: int | None = None
    unanswered_at_exit: int = 0
    # Why the proxy ended (the client closed stdin, stopped reading, a signal, the server exited): the
    # events file's closing line says it. Set by the transport, first cause only.
    ended_by: str | None = None
    client_write_failed: bool = False  # an answer could not be written to the client (EPIPE, say)


class HeldEvent(NamedTuple):
    """The event of an answer a fault holds back, written when the client gets it (or cancels first)."""

    record: dict[str, Any]
    started: float
    faulted: bool  # counted in Stats.received


def classify(data: bytes | None, request_id: Any, body: dict[str, Any] | None = None) -> tuple[Received, int | None]:
    """What a client received: response, error, tool_error, nothing or malformed (and the error code)."""
    if data is None:
        return "nothing", None
    if body is None:
        message = jsonrpc.parse(data)
        if message.kind is not MessageKind.RESPONSE:
            return "malformed", None
        body = message.body
        assert body is not None
    result = body.get("result")
    if result.__class__ is dict and "error" not in body and body.get("id") == request_id:
        # The usual answer, decided first in fewer steps (this runs for every traced request).
        return ("tool_error" if result.get("isError") is True else "response"), None
    if body.get("id") != request_id or ("result" not in body and "error" not in body):
        return "malformed", None
    error = body.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        return "error", code if isinstance(code, int) else None
    if isinstance(result, dict) and result.get("isError") is True:
        return "tool_error", None
    return "response", None
