"""What every fault shares: the request the engine sees, what a fault may do, and the contract.

A fault is a frozen settings dataclass with a ``plan`` method (Toxiproxy's toxics, in Python).
The engine does everything generic (matching tools, ``after``, ``limit``, the probability roll);
a fault only says what happens to one request once its rule has fired. Faults are pure: they see
data and a seeded RNG, never a clock, a file or a socket.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from random import Random
from typing import Any, ClassVar, Protocol, runtime_checkable

from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import META_PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class Call:
    """A client-to-server request as the engine sees it."""

    method: str
    request_id: Any
    params: Mapping[str, Any]
    body: Mapping[str, Any]

    @property
    def target(self) -> str | None:
        """The name a rule's glob matches: the tool of a tools/call."""
        name = self.params.get("name")
        return name if isinstance(name, str) else None

    @property
    def modern(self) -> bool:
        """Sent in the 2026-07-28 era (per-request ``_meta`` protocol version)."""
        meta = self.params.get("_meta")
        return isinstance(meta, Mapping) and META_PROTOCOL_VERSION in meta

    @property
    def arguments(self) -> Mapping[str, Any]:
        args = self.params.get("arguments")
        return args if isinstance(args, Mapping) else {}

    @staticmethod
    def from_body(body: Mapping[str, Any]) -> Call:
        params = body.get("params")
        return Call(
            method=body["method"],
            request_id=body.get("id"),
            params=params if isinstance(params, Mapping) else {},
            body=body,
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    """What reaches the client for one response: ``data`` (None when lost) after ``delay_s``."""

    data: bytes | None
    delay_s: float = 0.0


# A step turns the bytes of a response into what is delivered instead. Steps chain.
ResponseStep = Callable[[bytes], Delivery]

STDIO = "stdio"
HTTP = "http"
EVERY_TRANSPORT = frozenset({STDIO, HTTP})


class HttpFailure(enum.Enum):
    """A failure of the HTTP exchange itself, below JSON-RPC."""

    STATUS = "status"  # an HTTP error status instead of an answer; the server never sees the request
    SESSION_EXPIRED = "session_expired"  # 404 for the session id, as a server that forgot it answers
    RESET = "reset"  # the connection closes with no response at all
    STREAM_CUT = "stream_cut"  # the SSE stream closes before the response event
    FIRST_BYTE = "first_byte"  # nothing at all (headers included) reaches the client for a while


@dataclass(frozen=True, slots=True)
class HttpAction:
    """What an HTTP transport does to one exchange; the JSON-RPC core only records it."""

    failure: HttpFailure
    status: int = 0
    headers: tuple[tuple[str, str], ...] = ()
    upstream: bool = True  # whether the server gets the request (and acts on it) first
    after_events: int = 0  # stream_cut: events relayed before the cut
    delay_s: float = 0.0  # first_byte: how long the client waits for anything

    @property
    def received(self) -> str:
        """What the client got, in the vocabulary of events and spans."""
        return "http_error" if self.failure is HttpFailure.STATUS else self.failure.value


@dataclass(frozen=True, slots=True)
class Injection:
    """What a fault does to one request.

    - ``reply``: answer the client directly; the server is never contacted.
    - ``upstream_request``: forward this body instead of the client's bytes.
    - ``response``: transform the server's response (or the reply) on its way back.
    - ``notify``: notifications sent to the client right away.
    - ``http``: a failure of the HTTP exchange (HTTP transports only: see ``Fault.transports``).
    """

    mode: str
    reply: Mapping[str, Any] | None = None
    upstream_request: Mapping[str, Any] | None = None
    response: ResponseStep | None = None
    notify: tuple[Mapping[str, Any], ...] = ()
    http: HttpAction | None = None


@dataclass(frozen=True, slots=True)
class PlanContext:
    """Read-only facts the engine lends a fault while it plans."""

    rule_name: str
    matches_tool: Callable[[str], bool]
    history: Callable[[Call], tuple[bytes, ...]] = field(default=lambda _call: ())
    activating: bool = False  # a persistent fault is firing for the first time
    in_session: bool = False  # the request belongs to a session (an HTTP Mcp-Session-Id)
    # The server's own description of a tool (its tools/list entry), once a tools/list answer has been seen.
    tool: Callable[[str], Mapping[str, Any] | None] = field(default=lambda _name: None)
    seed: int = 0  # the profile's seed, for choices that must stay the same on every call (drift's auto names)


@runtime_checkable
class Fault(Protocol):
    """One fault type: a frozen dataclass of settings plus ``plan``.

    ``type_name`` is the name profiles use; ``MODES`` are the modes it reports; ``targets`` are the
    methods on which a rule of this type can fire, ``transports`` the transports that can carry it out
    (a rule whose fault needs HTTP never fires behind the stdio proxy). A ``persistent`` fault stays in force after it
    first fires and is planned for every later matching request, including those in ``follows``.
    """

    type_name: ClassVar[str]
    MODES: ClassVar[tuple[str, ...]]
    targets: ClassVar[frozenset[str]]
    transports: ClassVar[frozenset[str]]
    persistent: ClassVar[bool]
    follows: ClassVar[frozenset[str]]
    needs_history: ClassVar[bool]  # the engine keeps earlier responses for ctx.history
    needs_tools: ClassVar[bool]  # the engine learns tools/list answers for ctx.tool

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection | None:
        """What happens to ``call``; None when the fault cannot apply to it (the rule does not fire)."""
        ...

    def handshake(self, call: Call) -> ResponseStep | None:
        """A change to the handshake answer (initialize, server/discover), whether or not fired."""
        ...


TOOLS_CALL = frozenset({"tools/call"})


class FaultBase:
    """Defaults for the optional parts of the contract."""

    targets: ClassVar[frozenset[str]] = TOOLS_CALL
    transports: ClassVar[frozenset[str]] = EVERY_TRANSPORT
    persistent: ClassVar[bool] = False
    follows: ClassVar[frozenset[str]] = frozenset()
    needs_history: ClassVar[bool] = False
    needs_tools: ClassVar[bool] = False

    def handshake(self, call: Call) -> ResponseStep | None:
        return None


def reply_with_id(message: Mapping[str, Any], request_id: Any) -> dict[str, Any]:
    return {**message, "id": request_id}


def load_object(data: bytes) -> dict[str, Any] | None:
    """Parse a response for a fault that rewrites it; None when it is not a JSON object."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def encode(message: Mapping[str, Any]) -> bytes:
    return jsonrpc.encode(dict(message))
