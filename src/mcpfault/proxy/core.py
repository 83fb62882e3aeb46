"""The proxy's protocol logic, free of I/O (sans-IO, as h11 is for HTTP).

A transport feeds it lines from each side and performs the ``Emit``s it returns: where the bytes
go and how long to hold them. The core tracks requests in flight, asks the engine what to do,
applies response transformations, learns the protocol era, and writes one event per request.
Lines the engine leaves alone are returned as the very same bytes object.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import orjson
import structlog

from mcpfault.faults.base import (
    SERVER_REQUESTS,
    AtAnswer,
    Call,
    Delivery,
    HttpBehaviour,
    ProcessBehaviour,
    load_object,
)
from mcpfault.faults.engine import PASS, Decision, Engine
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import HANDSHAKE_METHODS, META_PROTOCOL_VERSION, Era, EraTracker
from mcpfault.protocol.jsonrpc import MessageKind
from mcpfault.proxy.events import EventSink, utc_now
from mcpfault.proxy.replies import server_gone_reply
from mcpfault.proxy.tool_listing import WAIT_S as LISTING_WAIT_S
from mcpfault.proxy.tool_listing import ToolListing, is_own_id
from mcpfault.telemetry.names import Received

log = structlog.get_logger("mcpfault.proxy")


# Server-to-client requests waiting for the client's answer, kept for their spans only.
MAX_OBSERVED_SERVER_REQUESTS = 4096
# Client requests held while the proxy's own tools/list is on its way; past that they go on unheld.
MAX_WAITING_FOR_LISTING = 10_000
TOOLS_LIST_CHANGED = "notifications/tools/list_changed"
_PER_REQUEST_META = frozenset({"traceparent", "tracestate", "baggage", "progressToken"})


# Endings after which the proxy's own handling time means nothing: no answer was relayed.
# (What an HTTP fault gives the client in place of the answer is untimed too: see ``_record``.)
# What a client got that was bytes written to it: when that write fails, it got nothing.
_SENT_TO_CLIENT: frozenset[Received] = frozenset(
    {"response", "error", "tool_error", "malformed", "upstream_exited", "server_restarted"}
)
_UNTIMED: frozenset[Received] = frozenset({"upstream_exited", "server_restarted", "cancelled", "upstream_unreachable"})
# Endings a transport reports through ``end()`` the moment it holds the upstream's answer (a status
# it relays, a body it cannot use): the answer arrived then. Any other ``end()`` had no answer to time.
_ENDED_ON_ARRIVAL: frozenset[Received] = frozenset({"http_error", "error"})


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


class ProxyCore:
    def __init__(
        self,
        engine: Engine,
        *,
        events: EventSink | None = None,
        observers: Sequence[RequestObserver] = (),
        propagate: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = utc_now,
        stats: Stats | None = None,
        era: EraTracker | None = None,
        epoch: float | None = None,
    ) -> None:
        self.engine = engine
        # When the proxy started, on ``clock``: time-windowed rules count from here (shared by HTTP cores).
        self.epoch = clock() if epoch is None else epoch
        # Shared when one proxy runs several cores (one per HTTP session or exchange).
        self.era = era if era is not None else EraTracker()
        self.stats = stats if stats is not None else Stats()
        self._events = events
        self._observers = tuple(observers)
        self._propagate = propagate and bool(self._observers)
        # The one observer (spans, no metrics) that takes plain requests as raw data: see DeferringObserver.
        only = self._observers[0] if len(self._observers) == 1 else None
        self._deferring: DeferringObserver | None = only if getattr(only, "defers", False) else None  # type: ignore[assignment]
        self._clock = clock
        self._wall_clock = wall_clock  # each record's ``time``; ``clock`` times its duration
        self._in_flight: dict[tuple[bool, object], InFlight] = {}
        self._reused: dict[tuple[bool, object], deque[InFlight]] = {}
        self._server_requests: dict[tuple[bool, object], InFlight] = {}  # observed only, bounded by the peer
        self._opaque_logged: set[To] = set()
        # Events of answers a fault holds back, written when the client gets them (or cancels first).
        self._held_events: dict[tuple[bool, object], _HeldEvent] = {}
        # Per thread: the events of the lines being handled, written once the transport has written
        # their bytes (``defer_events``), so an answer the client never got is not recorded as received.
        self._deferred = threading.local()
        # The server's restarts so far, when a supervisor restarts it (None: a server that is not).
        self.generation: int | None = None
        # The transport holds an answer a process fault loses, and performs its at_answer (see
        # ProcessBehaviour.answer_lost); without it the answer goes out and the fault acts on its timer.
        self.holds_lost_answers = False
        # The client's handshake, kept to replay to a restarted server (2025-11-25 era).
        self._initialize: dict[str, Any] | None = None
        self._initialized: bytes | None = None
        self._replay_id: str | None = None  # the replayed initialize, whose answer is the proxy's own
        # The keys of a 2026-07-28 input_required result's inputRequests -> their methods, until the retry
        # answers them (bounded: a server may ask and never hear back).
        self._input_methods: dict[str, str] = {}
        # Answers a lane let through whose spans end once the transport has written them (end_passed).
        self._passed: list[tuple[InFlight, PlainAnswer]] = []
        # The proxy's own tools/list, for rules that match on annotations (proxy/tool_listing.py).
        self._listing = ToolListing()
        self._handshake_done = False  # the client sent notifications/initialized (2025-11-25 era)
        # Stdio: the core sends its listing among the lines it relays and holds requests for it. HTTP:
        # the transport sends it before a request (``listing_due``), as a POST of its own.
        self.lists_in_band = True
        self._listing_stale = False  # out of band: the server said its tools changed since the last listing

    @property
    def observers(self) -> tuple[RequestObserver, ...]:
        return self._observers

    # -- client to server ---------------------------------------------------------------------

    def from_client(self, line: bytes) -> list[Emit]:
        if self._input_methods and b'"inputResponses"' in line:
            # A 2026-07-28 retry carrying the client's answers to a server's input requests: the
            # server_to_client rules act on those answers, as on a 2025-11-25 client's responses.
            line, held_s = self._fault_input_responses(line)
            emits = self._from_client(line)
            if held_s:
                return [e._replace(delay_s=e.delay_s + held_s) if e.to is To.SERVER else e for e in emits]
            return emits
        return self._from_client(line)

    @property
    def has_lanes(self) -> bool:
        """Whether ``lane_from_client`` and ``lane_from_server`` can take a line at all (not with
        observers other than one deferring span recorder)."""
        return not self._observers or self._deferring is not None

    def lane_from_client(self, line: bytes) -> bytes | None:
        """The common case in as few steps as it takes: when ``line`` is one request nothing can
        happen to on its way, it is counted and tracked here, and this returns what the transport
        sends the server (the line, or with spans the line carrying their context). None: nothing
        was done, and ``from_client`` decides. A lane of its own because it runs cache-cold after
        every wake-up, where each call and object costs microseconds."""
        if self._input_methods or self.era.era is Era.UNKNOWN:
            return None
        try:
            body = orjson.loads(line)
        except (orjson.JSONDecodeError, RecursionError):  # as jsonrpc.parse
            return None
        if body.__class__ is not dict or body.get("id").__class__ not in jsonrpc.PLAIN_IDS:
            return None
        method = body.get("method")
        if method.__class__ is not str or method in HANDSHAKE_METHODS or self.engine.cares_about(method):
            return None
        self._count_request(method, body.get("params"))
        return self._pass_request(line, body)

    def _pass_request(self, line: bytes, body: dict[str, Any]) -> bytes:
        """Track a request nothing can happen to; what goes to the server."""
        deferring = self._deferring
        if deferring is None:
            self._track(InFlight(body, PASS, self._clock()))
            return line
        # Traced: the span's ids now (they go upstream), the rest on the span writer's thread.
        started = self._clock()
        token, upstream = deferring.forward_plain(line, body, started, self._propagate)
        tokens = (token,)
        if upstream is None:
            upstream = self._with_context_line(line, body, tokens)
        self._track(InFlight(body, PASS, started, tokens, self._clock() - started))
        return upstream

    def _count_request(self, method: str, params: object) -> None:
        stats = self.stats
        stats.requests[method] += 1
        if method == "server/discover" or (
            params.__class__ is dict
            and (meta := params.get("_meta")).__class__ is dict
            and META_PROTOCOL_VERSION in meta
        ):
            stats.modern_requests += 1

    def _from_client(self, line: bytes) -> list[Emit]:
        message = jsonrpc.parse(line)
        if message.kind is not MessageKind.REQUEST:
            if message.kind is MessageKind.OPAQUE:
                self._opaque(To.SERVER, line, message.why_opaque)
            elif message.kind is MessageKind.NOTIFICATION and message.method == "notifications/cancelled":
                self._cancelled(message.params.get("requestId"))
                if self.engine.acts_on(message.method):
                    return self._notification(message.body, line, To.SERVER)
            elif message.kind is MessageKind.NOTIFICATION and message.method == "notifications/initialized":
                self._initialized = line
                self._handshake_done = True
                if self.engine.learns_tools and self.lists_in_band:
                    return [Emit(To.SERVER, line), Emit(To.SERVER, self._listing.start("handshake", self._clock()))]
            elif message.kind is MessageKind.NOTIFICATION and self.engine.acts_on(message.method):
                return self._notification(message.body, line, To.SERVER)
            elif message.kind is MessageKind.RESPONSE and self._server_requests:
                return self._server_request_answered(message.body, line)
            return [Emit(To.SERVER, line)]
        body = message.body
        assert body is not None
        method = body["method"]
        if (
            self.lists_in_band
            and method not in HANDSHAKE_METHODS
            and self.engine.cares_about(method)
            and self._waits_for_listing(body)
        ):
            # A rule may match it on annotations the proxy's own listing is about to tell: it waits.
            if not self._listing.waiting and not self._listing.in_progress:
                self._listing.waiting.append(line)
                return [Emit(To.SERVER, self._listing.start("rules", self._clock()))]
            self._listing.waiting.append(line)
            return []
        self._count_request(method, body.get("params"))
        if method in HANDSHAKE_METHODS or self.era.era is Era.UNKNOWN:
            params = body.get("params")
            self.era.observe_request(method, params if isinstance(params, dict) else {})
            if method == "initialize":
                self._initialize = body
            elif method == "server/discover":
                # The 2026-07-28 era's handshake: the proxy's own listing carries the client's per-request
                # _meta (protocol version, client info), without this request's trace context.
                meta = params.get("_meta") if isinstance(params, dict) else None
                if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
                    self._listing.meta = {k: v for k, v in meta.items() if k not in _PER_REQUEST_META}
                    self._handshake_done = True
        cares = self.engine.cares_about(method)
        if not cares and (not self._observers or self._deferring is not None):
            return [Emit(To.SERVER, self._pass_request(line, body))]  # nothing can happen to it on its way
        call = Call.from_body(body)
        decision = self.engine.decide(call, self._clock() - self.epoch) if cares else PASS
        emits = [Emit(To.CLIENT, jsonrpc.encode(dict(n))) for n in decision.notify]
        for applied in decision.applied:
            self.stats.faults[(applied.rule, applied.type_name, applied.mode)] += 1
        started = self._clock()
        tokens = tuple([o.started(call, decision, started) for o in self._observers])
        if decision.applied:
            # After the observers: the line carries this request's trace and span ids.
            for applied in decision.applied:
                log.debug(
                    "fault injected",
                    rule=applied.rule,
                    fault_type=applied.type_name,
                    mode=applied.mode,
                    method=method,
                    request_id=call.request_id,
                    tool=call.target,
                )
        pending = InFlight(body, decision, started, tokens, parsed=call)
        http = decision.http
        if http is not None and not http.reaches_server:
            self._record(pending, Delivery(None), upstream_contacted=False, received=http.received)
            emits.append(Emit(To.CLIENT, b"", http=http))
            return emits
        process = decision.process
        if process is not None and process.before_request:
            # The server dies (or stops) before it sees the request: it waits here, and is answered
            # as every request in flight is when the server's fate is known.
            self._track(InFlight(body, decision, started, tokens, parsed=call))
            emits.append(Emit(To.SERVER, b"", process=process))
            return emits
        if decision.reply is not None:
            delivery = decision.deliver(jsonrpc.encode(dict(decision.reply)))
            self._record(pending, delivery, upstream_contacted=False)
            if delivery.data is not None:
                emits.append(Emit(To.CLIENT, delivery.data, delivery.delay_s, answers=_held_id(call, delivery)))
            return emits
        upstream_body = decision.upstream_request
        if self._propagate and upstream_body is None:
            upstream = self._with_context_line(line, body, tokens)
        else:
            if self._propagate:
                upstream_body = self._with_context(upstream_body or body, tokens) or upstream_body
            upstream = line if upstream_body is None else jsonrpc.encode(dict(upstream_body))
        emits.append(
            Emit(To.SERVER, upstream, http=http, process=process, rewritten=decision.upstream_request is not None)
        )
        self._track(InFlight(body, decision, started, tokens, self._clock() - started, call))  # _replace is slower
        return emits

    def _waits_for_listing(self, body: Mapping[str, Any]) -> bool:
        """Whether a request must wait for the proxy's own tools/list: one is on its way, or none has
        been made although the handshake is done and rules need one (they were added at run time, or
        the 2026-07-28 era, whose ``server/discover`` has no ``notifications/initialized`` after it)."""
        listing = self._listing
        if listing.in_progress:
            return len(listing.waiting) < MAX_WAITING_FOR_LISTING
        if listing.listed or not self.engine.learns_tools:
            return False
        return self._handshake_done

    def listing_due(self, line: bytes) -> bytes | None:
        """Out of band (HTTP): the first page of a tools/list the transport must send, and whose
        answers it feeds to ``listing_answer``, before it hands ``line`` (the client's next message)
        to ``from_client``. None when no listing is due: rules need none, the handshake is not done,
        or the engine's listing is current."""
        if self.lists_in_band or not self.engine.learns_tools or b'"method"' not in line:
            return None
        if (self.engine.has_tool_listing or self._listing.listed) and not self._listing_stale:
            return None  # current, or this core's last try failed (a server without tools: not asked each time)
        message = jsonrpc.parse(line)
        if message.kind is not MessageKind.REQUEST or message.method in HANDSHAKE_METHODS:
            return None
        meta = message.params.get("_meta") if isinstance(message.params, Mapping) else None
        if isinstance(meta, Mapping) and META_PROTOCOL_VERSION in meta:
            # A 2026-07-28 request: the listing carries the same per-request _meta.
            self._listing.meta = {k: v for k, v in meta.items() if k not in _PER_REQUEST_META}
        elif not self._handshake_done:
            return None
        self._listing_stale = False
        return self._listing.start("list_changed" if self.engine.has_tool_listing else "handshake", self._clock())

    def listing_answer(self, data: bytes | None) -> bytes | None:
        """Out of band: the server's answer to the listing request last sent (None: there was none, or it
        was no JSON-RPC). The next page's request, or None once the listing is over."""
        body = jsonrpc.parse(data).body if data is not None else None
        if body is None or not is_own_id(body.get("id")):
            body = {"id": self._listing.pending_id, "error": {"message": "no answer from the server"}}
        emits = self._listing_answered(body)
        return emits[0].data if emits else None

    def _listing_answered(self, body: Mapping[str, Any]) -> list[Emit]:
        """An answer to the proxy's own tools/list: consumed here, never forwarded. The next page's
        request, or once the listing is complete, the requests that waited for it."""
        listing = self._listing
        follow, ended = listing.answered(body)
        if follow is not None:
            return [Emit(To.SERVER, follow)]
        if ended is None:
            return []
        if ended == "complete":
            self.engine.learn_tools(listing.tools)
        waited = listing.release()
        log.info(
            "learned the server's tools" if ended == "complete" else "could not list the server's tools",
            reason=listing.reason,
            outcome=ended,
            pages=listing.pages,
            tools=len(listing.tools),
            requests_waited=len(waited),
        )
        if self._events is not None:
            record: dict[str, Any] = {
                "event": "tools_listed",
                "reason": listing.reason,
                "outcome": ended,
                "pages": listing.pages,
                "tools": len(listing.tools),
                "requests_waited": len(waited),
            }
            if ended != "complete":
                error = body.get("error")
                record["error"] = error.get("message") if isinstance(error, Mapping) else "no tools in the answer"
            self._write_event(record, self._clock())
        return [emit for line in waited for emit in self.from_client(line)]

    def listing_wait_s(self) -> float | None:
        """Seconds until the requests waiting for the proxy's own tools/list go on without it (0: now);
        None while none wait. The transport then calls ``listing_overdue``."""
        listing = self._listing
        if not listing.in_progress or not listing.waiting:
            return None
        return max(0.0, listing.started + LISTING_WAIT_S - self._clock())

    def listing_overdue(self) -> list[Emit]:
        """A listing not complete within ``LISTING_WAIT_S`` (a server that never answers it) ends as if it
        had failed: recorded so, and the requests that waited go on with what the engine knew."""
        if self.listing_wait_s() != 0.0:
            return []
        message = f"no complete answer within {LISTING_WAIT_S:g} s"
        return self._listing_answered({"id": self._listing.pending_id, "error": {"message": message}})

    def _abandon_listing(self) -> None:
        """The server is gone or restarting: requests that waited for its listing are tracked now, so that
        they are answered as every request in flight is (what they would have been sent to is gone)."""
        for line in self._listing.abandon():
            self.from_client(line)

    def _with_context_line(self, line: bytes, body: dict[str, Any], tokens: tuple[Any, ...]) -> bytes:
        """The client's line with the proxy's trace context in ``params._meta``.

        When only ``traceparent`` changes (the usual case) the line is edited as bytes, which costs a
        fraction of encoding the request again and leaves every other byte as the client wrote it.
        """
        written: dict[str, Any] = {}  # what the observers write, merged over the client's _meta below
        changed = False
        for observer, token in zip(self._observers, tokens, strict=True):
            changed = observer.propagate(token, written) or changed
        if not changed:
            return line
        params = body.get("params")
        traceparent = written.get("traceparent")
        if len(written) == 1 and isinstance(traceparent, str):
            edited = jsonrpc.with_meta_string(line, params, "traceparent", traceparent)
            if edited is not None:
                return edited
        old = params.get("_meta") if isinstance(params, Mapping) else None
        changed_params = dict(params) if isinstance(params, Mapping) else {}
        changed_params["_meta"] = {**old, **written} if isinstance(old, Mapping) else written
        return jsonrpc.encode({**body, "params": changed_params})

    def _with_context(self, body: Mapping[str, Any], tokens: tuple[Any, ...]) -> Mapping[str, Any] | None:
        """The request with the proxy's trace context in ``params._meta``, so the server's spans nest under ours."""
        params = body.get("params")
        params = dict(params) if isinstance(params, Mapping) else {}
        meta = dict(params["_meta"]) if isinstance(params.get("_meta"), Mapping) else {}
        changed = False
        for observer, token in zip(self._observers, tokens, strict=True):
            changed = observer.propagate(token, meta) or changed
        if not changed:
            return None
        params["_meta"] = meta
        return {**body, "params": params}

    def _track(self, pending: InFlight) -> None:
        key = jsonrpc.id_key(pending.body["id"])
        if key in self._in_flight:
            # A client reusing an id while the first is in flight: answers are matched in order.
            self._reused.setdefault(key, deque()).append(pending)
        else:
            self._in_flight[key] = pending

    def _untrack(self, key: tuple[bool, object]) -> InFlight | None:
        pending = self._in_flight.pop(key, None)
        queued = self._reused.get(key)
        if queued:
            self._in_flight[key] = queued.popleft()
            if not queued:
                del self._reused[key]
        return pending

    def _server_request(self, body: dict[str, Any] | None) -> None:
        """A request from the server to the client (sampling, elicitation, roots): observed, and decided
        by the engine, whose ``server_to_client`` rules act on the client's answer when it comes."""
        assert body is not None
        call = Call.from_body(body)
        method = call.method
        acts = self.engine.acts_on(method)
        decision = self.engine.decide(call, self._clock() - self.epoch, with_changes=False) if acts else PASS
        for applied in decision.applied:
            self.stats.faults[(applied.rule, applied.type_name, applied.mode)] += 1
        started = self._clock()
        tokens = tuple(o.started(call, decision, started, from_server=True) for o in self._observers)
        if len(self._server_requests) >= MAX_OBSERVED_SERVER_REQUESTS:
            # A server that never hears back must not grow our memory: the oldest is given up.
            oldest = self._server_requests.pop(next(iter(self._server_requests)))
            self._record(oldest, Delivery(None), upstream_contacted=True, received="nothing", event=False)
        key = jsonrpc.id_key(body["id"])
        reused = self._server_requests.pop(key, None)
        if reused is not None:  # the server reused an id still waiting: the answer goes to the newer one
            self._record(reused, Delivery(None), upstream_contacted=True, received="nothing", event=False)
        self._server_requests[key] = InFlight(body, decision, started, tokens, parsed=call)

    def _server_request_answered(self, body: dict[str, Any] | None, line: bytes) -> list[Emit]:
        """The client's answer to a server request: relayed, or what a fault makes of it (lost, late, an
        error in its place, corrupted); the event says what the server received."""
        assert body is not None
        pending = self._server_requests.pop(jsonrpc.id_key(body["id"]), None)
        if pending is None:
            return [Emit(To.SERVER, line)]
        arrived = self._clock()  # the client's answer is the response here
        decision = pending.decision
        if not decision.applied:
            self._record(pending, Delivery(None), upstream_contacted=True, body=body, event=False, arrived=arrived)
            return [Emit(To.SERVER, line)]
        answer = jsonrpc.encode(dict(decision.reply)) if decision.reply is not None else line
        delivery = decision.deliver(answer)
        # Written now, the delay in it: a held answer's release is keyed by the client's request ids.
        self._record(pending, delivery, upstream_contacted=True, arrived=arrived, hold=False)
        return [] if delivery.data is None else [Emit(To.SERVER, delivery.data, delivery.delay_s)]

    def _notification(self, body: dict[str, Any] | None, line: bytes, to: To) -> list[Emit]:
        """A notification a rule may act on (lose, hold back, send twice); its event says what became of it."""
        assert body is not None
        call = Call.from_body(body)
        decision = self.engine.decide(call, self._clock() - self.epoch, with_changes=False)
        if not decision.applied:
            return [Emit(to, line)]
        delivery = decision.deliver(line)
        first = decision.applied[0]
        self.stats.faults[(first.rule, first.type_name, first.mode)] += 1
        received: Received = "nothing" if delivery.data is None else "notification"
        self.stats.received[received] += 1
        if self._events is not None:
            record: dict[str, Any] = {
                "time": "",
                "request_id": None,
                "method": call.method,
                "tool": None,
                "rule": first.rule,
                "fault_type": first.type_name,
                "fault_mode": first.mode,
                "upstream_contacted": to is To.CLIENT,  # a notification from the server came from it
                "upstream_request_modified": False,
                "client_received": received,
                "duration_s": 0.0,
                "era": self.era.era.value,
                "protocol_version": self.era.protocol_version,
            }
            if delivery.delay_s:
                record["delay_s"] = round(delivery.delay_s, 6)
            self._write_event(record, self._clock())
        if delivery.data is None:
            return []
        # One message per line (a duplicate is two); without the newline when the transport gave none (HTTP).
        framed = line.endswith(b"\n")
        parts = [p if framed else p.rstrip(b"\r\n") for p in delivery.data.splitlines(keepends=True)]
        return [Emit(to, part, delivery.delay_s) for part in parts]

    def _learn_input_requests(self, body: Mapping[str, Any]) -> None:
        result = body.get("result")
        if not isinstance(result, Mapping) or result.get("resultType") != "input_required":
            return
        asked = result.get("inputRequests")
        if not isinstance(asked, Mapping):
            return
        for key, request in asked.items():
            method = request.get("method") if isinstance(request, Mapping) else None
            if isinstance(key, str) and isinstance(method, str):
                if len(self._input_methods) >= MAX_OBSERVED_SERVER_REQUESTS:
                    self._input_methods.pop(next(iter(self._input_methods)))
                self._input_methods[key] = method

    def _fault_input_responses(self, line: bytes) -> tuple[bytes, float]:
        """The retry with what the rules make of each answer in its inputResponses (an answer lost is
        left out; a corrupted one replaced; an error in its place), and how long to hold the retry."""
        body = load_object(line)
        params = body.get("params") if body is not None else None
        responses = params.get("inputResponses") if isinstance(params, dict) else None
        if body is None or not isinstance(params, dict) or not isinstance(responses, dict):
            return line, 0.0
        out, held_s = dict(responses), 0.0
        for key, entry in responses.items():
            method = self._input_methods.pop(key, None) if isinstance(key, str) else None
            if method is None:
                continue
            asked = {"jsonrpc": "2.0", "id": key, "method": method, "params": {}}
            decision = self.engine.decide(Call.from_body(asked), self._clock() - self.epoch, with_changes=False)
            if not decision.applied:
                continue
            answer = {"jsonrpc": "2.0", "id": key, "result": entry}
            delivery = decision.deliver(jsonrpc.encode(dict(decision.reply) if decision.reply is not None else answer))
            held_s = max(held_s, delivery.delay_s)
            delivered = load_object(delivery.data) if delivery.data is not None else None
            if delivery.data is None:
                del out[key]
            elif delivered is None:
                out[key] = delivery.data.decode("utf-8", "replace")  # what arrived was not JSON
            else:
                out[key] = delivered.get("result", delivered.get("error", {}))
            received, error_code = classify(delivery.data, key)
            first = decision.applied[0]
            self.stats.faults[(first.rule, first.type_name, first.mode)] += 1
            self.stats.received[received] += 1
            if self._events is not None:
                record: dict[str, Any] = {
                    "time": "",
                    "request_id": key,
                    "method": method,
                    "tool": None,
                    "rule": first.rule,
                    "fault_type": first.type_name,
                    "fault_mode": first.mode,
                    "upstream_contacted": True,
                    "upstream_request_modified": out.get(key) != entry,
                    "client_received": received,  # what the server got for its input request
                    "duration_s": 0.0,
                    "era": self.era.era.value,
                    "protocol_version": self.era.protocol_version,
                }
                if error_code is not None:
                    record["error_code"] = error_code
                if delivery.delay_s:
                    record["delay_s"] = round(delivery.delay_s, 6)
                self._write_event(record, self._clock())
        if out == responses:
            return line, held_s
        return jsonrpc.encode({**body, "params": {**params, "inputResponses": out}}), held_s

    def _cancelled(self, request_id: Any) -> None:
        """The client gave up on a request: the server need not answer it, so stop waiting for it."""
        if not jsonrpc.valid_id(request_id):
            return
        pending = self._untrack(jsonrpc.id_key(request_id))
        if pending is not None:
            self._record(pending, Delivery(None), upstream_contacted=True, received="cancelled")
        else:
            self._release_held(request_id, cancelled=True)  # cancelled while a fault held its answer back

    # -- server to client ---------------------------------------------------------------------

    def lane_from_server(self, line: bytes) -> bytes | None:
        """When ``line`` answers a request that went through untouched, and nothing watches answers,
        the request is done with here, and this returns the line for the transport to send the
        client. None: nothing was done, and ``from_server`` decides."""
        arrived = self._clock() if self._deferring is not None else None
        if self._events is not None or self._replay_id is not None or b'"input_required"' in line:
            return None
        try:
            body = orjson.loads(line)
        except (orjson.JSONDecodeError, RecursionError):  # as jsonrpc.parse
            return None
        if body.__class__ is not dict or "method" in body or ("result" not in body and "error" not in body):
            return None
        request_id = body.get("id")
        if request_id.__class__ not in jsonrpc.PLAIN_IDS:
            return None
        key = jsonrpc.id_key(request_id)
        pending = self._in_flight.get(key)
        if pending is None or pending.decision is not PASS or key in self._reused or self.engine.wants_responses:
            return None
        del self._in_flight[key]
        self._pass_answer(pending, line, body, arrived, later=True)
        return line

    def _pass_answer(
        self, pending: InFlight, line: bytes, body: dict[str, Any], arrived: float | None, *, later: bool = False
    ) -> None:
        """The end of a request nothing happened to, and nothing watches answers. ``later``: its span
        ends in ``end_passed``, after the transport has written the answer."""
        method = pending.body["method"]
        if method in HANDSHAKE_METHODS:
            self.era.observe_handshake_result(method, body.get("result"))
        deferring = self._deferring
        if deferring is not None:
            answer = PlainAnswer(line, body, arrived or 0.0, self._clock(), self.era.protocol_version, self.generation)
            if later:
                self._passed.append((pending, answer))
            else:
                deferring.answered_plain(pending, answer)

    def end_passed(self) -> None:
        """End the requests whose answers ``lane_from_server`` let through, once the transport has
        written them: the client need not wait for their spans and metrics. Called by the thread that
        called the lane, with or without the core's lock (the observer's ending does not need it)."""
        passed = self._passed
        if passed:
            deferring = self._deferring
            assert deferring is not None
            self._passed = []
            for pending, answer in passed:
                deferring.answered_plain(pending, answer)

    def from_server(self, line: bytes) -> list[Emit]:
        # When this line arrived, kept with the request it answers: the proxy's share ends are timed
        # from it, not from whatever line of whichever request the core saw last.
        arrived = self._clock() if self._observers else None
        message = jsonrpc.parse(line)
        if message.kind is not MessageKind.RESPONSE:
            if message.kind is MessageKind.OPAQUE:
                self._opaque(To.CLIENT, line, message.why_opaque)
            elif message.kind is MessageKind.REQUEST and (self._observers or self.engine.acts_on(message.method)):
                self._server_request(message.body)
            elif message.kind is MessageKind.NOTIFICATION and message.method == TOOLS_LIST_CHANGED:
                emits = (
                    self._notification(message.body, line, To.CLIENT)
                    if self.engine.acts_on(message.method)
                    else [Emit(To.CLIENT, line)]
                )
                if not self.lists_in_band:
                    self._listing_stale = True  # the transport lists again before the next request
                elif self.engine.learns_tools and (self._handshake_done or self._listing.listed):
                    # The server's tools changed: the proxy lists them again, whatever becomes of the notice.
                    emits.append(Emit(To.SERVER, self._listing.start("list_changed", self._clock())))
                return emits
            elif message.kind is MessageKind.NOTIFICATION and self.engine.acts_on(message.method):
                return self._notification(message.body, line, To.CLIENT)
            return [Emit(To.CLIENT, line)]
        body = message.body
        assert body is not None
        if is_own_id(body["id"]):
            return self._listing_answered(body)
        if b'"input_required"' in line and any(self.engine.acts_on(m) for m in SERVER_REQUESTS):
            self._learn_input_requests(body)
        if self._replay_id is not None and body["id"] == self._replay_id:
            # The restarted server's answer to the replayed initialize: the client already has one.
            self._replay_id = None
            return [Emit(To.SERVER, self._initialized)] if self._initialized is not None else []
        pending = self._untrack(jsonrpc.id_key(body["id"]))
        if pending is None:
            return [Emit(To.CLIENT, line)]  # an answer to nothing we forwarded: not ours to judge
        decision = pending.decision
        process = decision.process
        if process is not None and process.answer_lost and self.holds_lost_answers:
            # The server acted; it dies before its answer leaves. The request waits for its fate.
            self._track(pending)
            return [Emit(To.SERVER, b"", process=AtAnswer(process))]
        watch_responses = self.engine.wants_responses  # read per response: a rule added at run time may need them
        if (
            decision is PASS
            and self._events is None
            and not watch_responses
            and (not self._observers or self._deferring is not None)
        ):
            self._pass_answer(pending, line, body, arrived)
            return [Emit(To.CLIENT, line)]
        call = pending.call
        if call.method in HANDSHAKE_METHODS:
            self.era.observe_handshake_result(call.method, body.get("result"))
        if watch_responses:
            self.engine.observe_response(call, line, body)
        if decision.http is not None and decision.http.loses_answer:
            self._record(
                pending, Delivery(None), upstream_contacted=True, received=decision.http.received, arrived=arrived
            )
            return []  # the server acted; the connection drops before its answer leaves
        if not decision.steps:
            if decision.applied or self._events is not None or self._observers:
                self._record(pending, Delivery(line), upstream_contacted=True, body=body, arrived=arrived)
            return [Emit(To.CLIENT, line)]
        delivery = decision.deliver(line)
        self._record(pending, delivery, upstream_contacted=True, arrived=arrived)
        if delivery.data is None:
            return []  # lost on purpose: the client learns nothing, as with a real lost response
        return [Emit(To.CLIENT, delivery.data, delivery.delay_s, answers=_held_id(call, delivery))]

    # -- the end ------------------------------------------------------------------------------

    def upstream_exited(self, exit_code: int, *, stopping: str | None = None) -> list[Emit]:
        """Answer every request the server never answered: no answer will ever come.

        Responses a fault dropped stay lost; the client's EOF follows right after. ``stopping``: the
        signal that ended the proxy (and, passed on, the server), for the answers to say so.
        """
        self.stats.upstream_exit_code = exit_code
        self._abandon_listing()
        for observer in self._observers:
            observer.upstream_exited(exit_code)
        for held in list(self._held_events.values()):  # answers held back go out now, as the transport ends
            self._write_event(held.record, held.started)
        self._held_events.clear()
        for unanswered in self._server_requests.values():
            self._record(unanswered, Delivery(None), upstream_contacted=True, received="upstream_exited", event=False)
        self._server_requests.clear()
        waiting = self._take_waiting()
        emits = []
        for pending in waiting:
            call = pending.call
            reply, received = server_gone_reply(
                call.request_id,
                exit_status=exit_code,
                restarted_as=None,
                before=f"answering {call.method}",
                stopping=stopping,
            )
            contacted = pending.decision.contacts_upstream
            self._record(pending, Delivery(reply), upstream_contacted=contacted, received=received)
            emits.append(Emit(To.CLIENT, reply))
        self.stats.unanswered_at_exit = len(emits)
        return emits

    # -- a supervised server: restarts --------------------------------------------------------------

    def server_restarting(self, exit_status: int, generation: int) -> list[Emit]:
        """The server died and is restarting as ``generation``: answer what it never answered, saying so."""
        if self._replay_id is not None:
            self._replay_id = None  # a replay the dead server never answered: the next one replaces it
        self._abandon_listing()
        waiting = self._take_waiting()
        emits = []
        for pending in waiting:
            call = pending.call
            reply, received = server_gone_reply(
                call.request_id, exit_status=exit_status, restarted_as=generation, before=f"answering {call.method}"
            )
            contacted = pending.decision.contacts_upstream  # false for a request a crash kept from the server
            self._record(pending, Delivery(reply), upstream_contacted=contacted, received=received)
            emits.append(Emit(To.CLIENT, reply))
        return emits

    def replay_handshake(self, generation: int) -> list[bytes]:
        """What to send a restarted server so that the client's 2025-11-25 session simply continues:
        its initialize (under an id of the proxy's own, its answer dropped), then, once answered, its
        ``notifications/initialized``. Nothing for the 2026-07-28 era, which is stateless."""
        if self.era.era is not Era.LEGACY or self._initialize is None:
            return []
        self._replay_id = f"mcpfault-replay-{generation}"
        return [jsonrpc.encode({**self._initialize, "id": self._replay_id})]

    @property
    def replaying(self) -> bool:
        """A replayed initialize is waiting for the restarted server's answer."""
        return self._replay_id is not None

    def _take_waiting(self) -> list[InFlight]:
        waiting = [*self._in_flight.values(), *(p for queue in self._reused.values() for p in queue)]
        self._in_flight.clear()
        self._reused.clear()
        waiting.sort(key=lambda p: p.started)
        return waiting

    def end(
        self,
        request_id: Any,
        received: Received,
        *,
        reply: bytes | None = None,
        error_code: int | None = None,
        upstream_contacted: bool = True,
    ) -> bool:
        """End one request the transport gave up on: the stream was cut, the client left, the upstream
        could not be reached (``reply``: what the client gets instead). False when it was not in flight.

        ``http_error`` and ``error`` are reported as the upstream's answer arrives, so the proxy's share
        is timed from now; after any other ending no answer crossed the proxy and it is not timed.
        """
        if not jsonrpc.valid_id(request_id):
            return False
        pending = self._untrack(jsonrpc.id_key(request_id))
        if pending is None:
            # The answer may be on its way, held back by a fault: a client leaving now never gets it.
            return received == "cancelled" and self._release_held(request_id, cancelled=True)
        arrived = self._clock() if self._observers and received in _ENDED_ON_ARRIVAL else None
        self._record(
            pending,
            Delivery(reply),
            upstream_contacted=upstream_contacted,
            received=received,
            error_code=error_code,
            arrived=arrived,
        )
        return True

    def answer_delivered(self, request_id: Any) -> None:
        """The transport wrote an answer a fault held back (``Emit.answers``): its event is written now,
        with the time the client waited."""
        self._release_held(request_id, cancelled=False)

    def _release_held(self, request_id: Any, *, cancelled: bool) -> bool:
        if not self._held_events or not jsonrpc.valid_id(request_id):
            return False
        held = self._held_events.pop(jsonrpc.id_key(request_id), None)
        if held is None:
            return False
        record = held.record
        if cancelled:
            if held.faulted:
                self.stats.received[record["client_received"]] -= 1
                self.stats.received["cancelled"] += 1
            record["client_received"] = "cancelled"
            record.pop("error_code", None)
        self._write_event(record, held.started)
        return True

    @property
    def in_flight(self) -> int:
        return len(self._in_flight) + sum(len(q) for q in self._reused.values())

    # -- records ------------------------------------------------------------------------------

    def _record(
        self,
        pending: InFlight,
        delivery: Delivery,
        *,
        upstream_contacted: bool,
        body: dict[str, Any] | None = None,
        received: Received | None = None,
        error_code: int | None = None,
        event: bool = True,
        arrived: float | None = None,
        hold: bool = True,
    ) -> None:
        """``arrived``: when the answer that ends the request reached the proxy (core clock); None when
        none did, so the proxy's share of an upstream round trip cannot be timed."""
        decision, call = pending.decision, pending.call
        if received is None and body is not None and delivery.data is None:
            received, error_code = classify(b"", call.request_id, body)  # the client's answer, already parsed
        elif received is None:
            received, error_code = classify(delivery.data, call.request_id, body)
        elif received in ("upstream_exited", "server_restarted"):
            error_code = jsonrpc.UPSTREAM_UNAVAILABLE
        delay_s = delivery.delay_s + decision.added_delay_s
        if decision.applied:
            self.stats.received[received] += 1
        if self._observers:
            now = self._clock()
            if received in _UNTIMED or (decision.http is not None and received == decision.http.received):
                added_s: float | None = None
            elif upstream_contacted:
                added_s = None if arrived is None else pending.handled_s + (now - arrived)
            else:
                added_s = now - pending.started
            outcome = Finished(
                call,
                decision,
                pending.started,
                now,
                received,
                error_code,
                upstream_contacted,
                delay_s,
                self.era.protocol_version,
                added_s,
                self.generation,
                delivery.fields,
            )
            for observer, token in zip(self._observers, pending.tokens, strict=False):
                observer.finished(token, outcome)
        if self._events is None or not event:
            return
        first = decision.applied[0] if decision.applied else None
        record: dict[str, Any] = {
            "time": "",  # set as the record is written
            "request_id": call.request_id,
            "method": call.method,
            "tool": call.target if call.method == "tools/call" else None,
            "rule": first.rule if first else None,
            "fault_type": first.type_name if first else None,
            "fault_mode": first.mode if first else None,
            "upstream_contacted": upstream_contacted,
            "upstream_request_modified": decision.upstream_request is not None,
            "client_received": received,
            "duration_s": 0.0,  # set as the record is written: the time until the client got its answer
            "era": self.era.era.value,
            "protocol_version": self.era.protocol_version,
        }
        if self.generation is not None:
            record["server_generation"] = self.generation
        if len(decision.applied) > 1:
            record["faults"] = [{"rule": a.rule, "type": a.type_name, "mode": a.mode} for a in decision.applied]
        if error_code is not None:
            record["error_code"] = error_code
        if delivery.fields:
            record["fields"] = list(delivery.fields)
        if delay_s:
            record["delay_s"] = round(delay_s, 6)
        if hold and delay_s > 0 and delivery.data is not None and call.request_id is not None:
            # The client gets this answer only after the delay: the event waits for it (or for a cancel).
            key = jsonrpc.id_key(call.request_id)
            earlier = self._held_events.pop(key, None)
            if earlier is not None:  # a client reusing an id meanwhile: the older one is written as it stands
                self._write_event(earlier.record, earlier.started)
            self._held_events[key] = _HeldEvent(record, pending.started, bool(decision.applied))
            return
        # An answer held back under a null id cannot be told apart when it goes out: its event is
        # written now, with the delay the client waits on top.
        self._write_event(record, pending.started, later_s=delay_s if delivery.data is not None else 0.0)

    @property
    def writes_events(self) -> bool:
        """Whether an events sink was given (a transport defers nothing otherwise)."""
        return self._events is not None

    def defer_events(self) -> None:
        """Hold this thread's event records until ``write_deferred_events``: the transport calls it
        before handling lines whose answers it writes after the core's lock is released."""
        if self._events is not None:
            self._deferred.records = []

    def write_deferred_events(self, undelivered: str | None = None) -> None:
        """Write this thread's held records. ``undelivered``: why the write to the client failed; each
        answer that was in it is recorded as ``client_received: nothing`` with that reason."""
        records: list[tuple[dict[str, Any], float, float]] | None = getattr(self._deferred, "records", None)
        self._deferred.records = None
        for record, started, later_s in records or ():
            if undelivered is not None and record.get("client_received") in _SENT_TO_CLIENT:
                self._mark_undelivered(record, undelivered)
            self._write_event(record, started, later_s=later_s)

    def _mark_undelivered(self, record: dict[str, Any], why: str) -> None:
        if record.get("fault_type") is not None:  # counted in Stats.received: the count moves with it
            self.stats.received[record["client_received"]] -= 1
            self.stats.received["nothing"] += 1
        record["client_received"] = "nothing"
        record["undelivered"] = why
        record.pop("error_code", None)

    def answer_undelivered(self, request_id: Any, why: str) -> None:
        """A held-back answer could not be written (the client stopped reading): its event says so."""
        if not self._held_events or not jsonrpc.valid_id(request_id):
            return
        held = self._held_events.pop(jsonrpc.id_key(request_id), None)
        if held is not None:
            self._mark_undelivered(held.record, why)
            self._write_event(held.record, held.started)

    def _write_event(self, record: dict[str, Any], started: float, *, later_s: float = 0.0) -> None:
        assert self._events is not None
        deferred = getattr(self._deferred, "records", None)
        if deferred is not None:
            deferred.append((record, started, later_s))
            return
        record["time"] = self._wall_clock().isoformat(timespec="milliseconds")
        record["duration_s"] = round(self._clock() - started + later_s, 6)
        self._events.write(record)

    def _opaque(self, to: To, line: bytes, why: str) -> None:
        direction = "client->server" if to is To.SERVER else "server->client"
        self.stats.opaque[direction] += 1
        if to not in self._opaque_logged:
            self._opaque_logged.add(to)
            log.warning(
                "relaying a line the fault engine cannot parse; it is never faulted (logged once per direction)",
                direction=direction,
                reason=why,
                size_bytes=len(line),
            )


class _HeldEvent(NamedTuple):
    record: dict[str, Any]
    started: float
    faulted: bool  # counted in Stats.received


def _held_id(call: Call, delivery: Delivery) -> Any:
    """The id a held-back answer's Emit carries (None when it is not held back, or has a null id)."""
    return call.request_id if delivery.delay_s > 0 else None


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
