"""The core's full path: every line the lanes leave, in each direction, and the proxy's own tool listing.

A request is decided by the engine, watched by the observers and sent on (or answered, held, lost, as
its decision says); its answer is matched to it, transformed and recorded. Requests that a rule may
match on tool annotations wait for the proxy's own tools/list (``proxy/tool_listing.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from mcpfault.faults.base import SERVER_REQUESTS, AtAnswer, Call, Delivery
from mcpfault.faults.engine import PASS
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import HANDSHAKE_METHODS, META_PROTOCOL_VERSION, Era
from mcpfault.protocol.jsonrpc import Message, MessageKind
from mcpfault.proxy.core_context import with_context, with_context_line
from mcpfault.proxy.core_lanes import CoreLanes
from mcpfault.proxy.core_records import held_id
from mcpfault.proxy.core_types import Emit, InFlight, To
from mcpfault.proxy.tool_listing import WAIT_S as LISTING_WAIT_S
from mcpfault.proxy.tool_listing import is_own_id

log = structlog.get_logger("mcpfault.proxy")

# Client requests held while the proxy's own tools/list is on its way; past that they go on unheld.
MAX_WAITING_FOR_LISTING = 10_000
TOOLS_LIST_CHANGED = "notifications/tools/list_changed"
_PER_REQUEST_META = frozenset({"traceparent", "tracestate", "baggage", "progressToken"})


class CoreFlow(CoreLanes):
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

    def _from_client(self, line: bytes) -> list[Emit]:
        message = jsonrpc.parse(line)
        if message.kind is not MessageKind.REQUEST:
            return self._client_message(message, line)
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
            self._learn_handshake(method, body)
        if self._untouched_request(method):
            return [Emit(To.SERVER, self._pass_request(line, body))]  # nothing can happen to it on its way
        return self._decided_request(line, body, method)

    def _client_message(self, message: Message, line: bytes) -> list[Emit]:
        """A line from the client that is no request: a notification, an answer to the server's request,
        or one the engine cannot parse."""
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

    def _learn_handshake(self, method: str, body: dict[str, Any]) -> None:
        """The era and what the proxy replays and lists with, from the client's handshake (or its first request)."""
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

    def _decided_request(self, line: bytes, body: dict[str, Any], method: str) -> list[Emit]:
        """A request the engine decides, or an observer watches: what its decision makes of it."""
        call = Call.from_body(body)
        decision = self.engine.decide(call, self._clock() - self.epoch) if self.engine.cares_about(method) else PASS
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
                emits.append(Emit(To.CLIENT, delivery.data, delivery.delay_s, answers=held_id(call, delivery)))
            return emits
        upstream_body = decision.upstream_request
        if self._propagate and upstream_body is None:
            upstream = with_context_line(self._observers, line, body, tokens)
        else:
            if self._propagate:
                upstream_body = with_context(self._observers, upstream_body or body, tokens) or upstream_body
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

    def from_server(self, line: bytes) -> list[Emit]:
        # When this line arrived, kept with the request it answers: the proxy's share ends are timed
        # from it, not from whatever line of whichever request the core saw last.
        arrived = self._clock() if self._observers else None
        message = jsonrpc.parse(line)
        if message.kind is not MessageKind.RESPONSE:
            return self._server_message(message, line)
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
        if self._untouched_answer(pending):
            self._pass_answer(pending, line, body, arrived)
            return [Emit(To.CLIENT, line)]
        watch_responses = self.engine.wants_responses  # read per response: a rule added at run time may need them
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
        return [Emit(To.CLIENT, delivery.data, delivery.delay_s, answers=held_id(call, delivery))]

    def _server_message(self, message: Message, line: bytes) -> list[Emit]:
        """A line from the server that is no answer: its own request, a notification, or one the engine
        cannot parse."""
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
