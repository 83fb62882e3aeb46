"""What the proxy tells the world about each request: an OpenTelemetry span, and Prometheus metrics.

Spans come from ``SpanRecorder`` (telemetry/fastspans.py), not the SDK: the SDK cost ~100 us a request.

Both are ``RequestObserver``s of the core. The span's parent is the context the client put in
``params._meta``; the proxy puts its own span's context there on the way upstream, so the server's
spans nest under it (``--no-propagate`` keeps the bytes as they were).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import orjson
from opentelemetry.trace import SpanKind

from mcpfault.faults.base import Call
from mcpfault.faults.engine import PASS, Decision
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import MODERN_VERSIONS
from mcpfault.proxy.core import Finished, InFlight, PlainAnswer, classify
from mcpfault.proxy.supervisor import ServerObserver
from mcpfault.telemetry import names
from mcpfault.telemetry.fastspans import (
    Built,
    EncodedAttributes,
    Event,
    SharedAttributes,
    SpanHandle,
    SpanRecorder,
    SpanTemplate,
    encode_attributes,
    json_span,
)
from mcpfault.telemetry.metrics import ProxyMetrics
from mcpfault.telemetry.otlp_json import KIND_TO_OTLP
from mcpfault.telemetry.propagation import parse_traceparent
from mcpfault.telemetry.tracing import span_name

# On a SERVER span these codes are the client's mistake, not a failure of the server (the MCP
# conventions, as HTTP's 4xx on server spans): the code is recorded, the span is no error.
_CLIENT_MISTAKES = frozenset({jsonrpc.INVALID_REQUEST, jsonrpc.METHOD_NOT_FOUND, jsonrpc.INVALID_PARAMS})

_SERVER = KIND_TO_OTLP[SpanKind.SERVER]
_CLIENT = KIND_TO_OTLP[SpanKind.CLIENT]
_MAX_ENDINGS = 4096


class PlainEnding(NamedTuple):
    """What the span of a plain request (``answered_plain``) needs once it is answered: no parsed
    request or answer, so nothing of theirs outlives the request while spans wait for the writer."""

    method: str
    target: str | None  # a tools/call's tool, as the span's key has it
    request_id: Any
    received: str
    error_code: int | None
    started: float  # core clock
    finished: float
    added_s: float
    protocol_version: str | None
    generation: int | None


# More for a request's span from another observer (the side-effect probe): attributes and events.
# Called on the span writer's thread, so it may wait a little for what it adds.
Annotation = tuple[dict[str, Any], list[Event]]
Annotate = Callable[[Finished], Annotation | None]


# What the HTTP transport itself can give a client instead of an answer; each is its own error.type
# (as is what an HTTP fault gives: its behaviour's ``received``).
_HTTP_FAILURES = frozenset({"http_error", "upstream_unreachable"})


class _Clock:
    """Turns the core's monotonic seconds into the Unix nanoseconds spans carry."""

    def __init__(self) -> None:
        self.offset_ns = time.time_ns() - int(time.monotonic() * 1e9)

    def unix_ns(self, monotonic_s: float) -> int:
        return int(monotonic_s * 1e9) + self.offset_ns


class TelemetryObserver(ServerObserver):
    """A span per request (when there is a recorder) and the request metrics (when there is a registry);
    the supervised server's restarts, crashes and downtime (metrics)."""

    def __init__(
        self,
        recorder: SpanRecorder | None,
        metrics: ProxyMetrics | None,
        *,
        transport: str = names.NETWORK_TRANSPORT_PIPE,
        attributes: Mapping[str, Any] | None = None,
        propagate: bool = True,
        session_id: str | None = None,
        annotate: Annotate | None = None,
        client_spans: bool = False,
    ) -> None:
        self._recorder = recorder
        # The leg to the upstream as a CLIENT span (client -> proxy SERVER -> proxy CLIENT -> server, as
        # Envoy's traces read), whose id the upstream request carries as its parent.
        self._client_spans = client_spans
        # With spans, plain requests are taken as raw data, built into spans (and observed by the
        # histograms) on the writer thread (proxy.core.DeferringObserver): most of tracing's cost is
        # off the request's path. A span the full queue drops loses its histogram observation too.
        self.defers = recorder is not None
        self._annotate = annotate  # more for each span from another observer (the side-effect probe)
        self._propagates = propagate  # False for OTEL_PROPAGATORS=none
        # An HTTP session's id, for the spans of 2025-11-25 traffic only: the conventions forbid
        # mcp.session.id on 2026-07-28 traffic, which has no sessions.
        self._session_id = session_id
        self._metrics = metrics
        self._transport = transport
        # Fixed for every span of this observer: the upstream's address, an HTTP session's id.
        self._attributes = dict(attributes) if attributes else None
        self._clock = _Clock()
        # The attributes every span of a direction starts with: built once, shared, never mutated.
        fixed = self._attributes or {}
        self._from_client = SharedAttributes(
            {names.NETWORK_TRANSPORT: transport, names.DIRECTION: names.DIRECTION_CLIENT_TO_SERVER, **fixed}
        )
        self._from_server = SharedAttributes(
            {names.NETWORK_TRANSPORT: transport, names.DIRECTION: names.DIRECTION_SERVER_TO_CLIENT, **fixed}
        )
        # The endings' attributes, encoded, by what they depend on: most requests end alike, and only
        # the request id differs. Used on the span writer's thread only; bounded.
        self._endings: dict[tuple[Any, ...], tuple[EncodedAttributes, tuple[str] | None, str]] = {}
        # The whole JSON of spans that end alike, by their ending and what of the start shows in it.
        self._templates: dict[tuple[Any, ...], SpanTemplate] = {}
        # The same templates, by what a plain request's ending and its root-or-child start say: one
        # lookup for most spans (``_plain_ending``).
        self._plain_templates: dict[tuple[Any, ...], SpanTemplate] = {}
        self._client_endings: dict[tuple[Any, ...], tuple[EncodedAttributes, tuple[str] | None, str]] = {}
        self._upstream = SharedAttributes({names.NETWORK_TRANSPORT: transport, **fixed})  # the CLIENT spans' start

    def started(
        self, call: Call, decision: Decision, started: float, *, from_server: bool = False
    ) -> SpanHandle | None:
        if self._metrics is not None:
            self._metrics.request_started()
        if self._recorder is None:
            return None
        # Only what the span's identity needs is done here; its attributes are built on the span
        # writer's thread when it ends (``_ending``), off the request's path.
        meta = call.params.get("_meta")
        traceparent = tracestate = None
        if isinstance(meta, dict):
            traceparent, tracestate = meta.get("traceparent"), meta.get("tracestate")
        return self._recorder.start(
            "",  # named by _ending, on the span writer's thread
            _SERVER,
            traceparent,
            self._from_server if from_server else self._from_client,
            self._clock.unix_ns(started),
            tracestate=tracestate,
        )

    def forward_plain(
        self, line: bytes, body: dict[str, Any], started: float, propagate: bool
    ) -> tuple[SpanHandle | None, bytes | None]:
        """``started`` for a request no rule cares about, and its line on the way upstream (with this
        span's ``traceparent`` when ``propagate``), in one step; None for the line leaves the edit to
        the core's general one (``ProxyCore._with_context_line``)."""
        recorder = self._recorder
        assert recorder is not None
        if self._metrics is not None:
            self._metrics.request_started()
        params = body.get("params")
        meta = params.get("_meta") if params.__class__ is dict else None
        if meta.__class__ is not dict or ("traceparent" not in meta and "tracestate" not in meta):
            span = recorder.start_root("", _SERVER, self._from_client, self._clock.unix_ns(started))
        else:
            traceparent, tracestate = meta.get("traceparent"), meta.get("tracestate")
            started_ns = self._clock.unix_ns(started)
            maybe = recorder.start("", _SERVER, traceparent, self._from_client, started_ns, tracestate=tracestate)
            if maybe is None:
                return None, line  # an unsampled client context: the request crosses as it came
            span = maybe
        if not propagate or not self._propagates:
            return span, line
        if self._client_spans:
            return span, None
        traceparent = f"00-{span.trace_id}-{span.span_id}-{span.flags}"  # its traceparent(), inlined
        return span, jsonrpc.with_plain_meta_string(line, params, "traceparent", traceparent)

    def answered_plain(self, pending: InFlight, answer: PlainAnswer) -> None:
        span = pending.tokens[0]
        metrics = self._metrics
        if span.__class__ is SpanHandle and span.recording:
            recorder = self._recorder
            assert recorder is not None
            if self._annotate is None and span.tracestate is None:
                # Only what the span's ending needs waits for the writer, not the parsed request and
                # answer: holding hundreds of requests' dicts cost as much as the whole span path
                # (measured: +14 us of added p50, and a sixth of the pipelined rate).
                ending = self._plain_ending_of(pending, answer)
                recorder.end_later(span, self._plain_ending, ending)
                if span.client_span_id is not None:
                    recorder.end_later(self._leg(span, pending.started), self._plain_client_ending, ending)
            else:
                recorder.end_later(span, self._full_plain_ending, (pending, answer))
                if span.client_span_id is not None:
                    leg = self._leg(span, pending.started)
                    recorder.end_later(leg, self._full_plain_client_ending, (pending, answer))
            if metrics is not None:
                metrics.request_finished()  # the histograms are observed as the span is built
        elif metrics is not None:
            self._count(self._plain_finished(pending, answer), span)

    @staticmethod
    def _plain_ending_of(pending: InFlight, answer: PlainAnswer) -> PlainEnding:
        body = pending.body
        method = body["method"]
        request_id = body.get("id")
        target = None
        if method == "tools/call":  # the key's target, as _ending takes it from Call.target
            params = body.get("params")
            name = params.get("name") if params.__class__ is dict else None
            target = name if name.__class__ is str else None
        received, error_code = classify(answer.line, request_id, answer.body)
        return PlainEnding(
            method,
            target,
            request_id,
            received,
            error_code,
            pending.started,
            answer.now,
            pending.handled_s + (answer.now - answer.arrived),
            answer.protocol_version,
            answer.generation,
        )

    @staticmethod
    def _plain_finished(pending: InFlight, answer: PlainAnswer) -> Finished:
        """The ``Finished`` the core builds for a request answered untouched (``ProxyCore._record``)."""
        call = pending.call
        received, error_code = classify(answer.line, call.request_id, answer.body)
        added_s = pending.handled_s + (answer.now - answer.arrived)
        return Finished(
            call,
            pending.decision,
            pending.started,
            answer.now,
            received,
            error_code,
            True,
            0.0,
            answer.protocol_version,
            added_s,
            answer.generation,
        )

    @staticmethod
    def _finished_of(ending: PlainEnding) -> Finished:
        """The ``Finished`` of a plain request, from what its ending kept: the same as ``_plain_finished``
        for every field an ending reads (a Call with only the method, id and target)."""
        params = {"name": ending.target} if ending.target is not None else {}
        call = Call.from_body({"jsonrpc": "2.0", "id": ending.request_id, "method": ending.method, "params": params})
        return Finished(
            call,
            PASS,
            ending.started,
            ending.finished,
            ending.received,
            ending.error_code,
            True,
            0.0,
            ending.protocol_version,
            ending.added_s,
            ending.generation,
        )

    def _plain_ending(self, handle: SpanHandle, ending: PlainEnding) -> Built:
        if self._metrics is not None:  # as _count does for a request no fault touched
            duration_s = ending.finished - ending.started
            self._metrics.observe_request(ending.method, None, duration_s, ending.added_s, handle.trace_id)
        plain_key = (  # not the request id: that is in a slot
            ending.method,
            ending.target,
            ending.received,
            ending.error_code,
            ending.protocol_version,
            ending.generation,
            handle.parent_span_id is None,
            handle.flags,
        )
        template = self._plain_templates.get(plain_key)
        if template is not None:  # most spans: straight to their template
            return template.fill(self._slot_values(handle, ending.request_id, ending.started, ending.finished, 0.0))
        # The first of its kind: built the general way, which makes the template this lookup finds next time.
        outcome = self._finished_of(ending)
        built = self._ending(handle, outcome)
        root = handle.parent_span_id is None
        template = self._templates.get((self._ending_key(outcome), root, handle.flags, handle.kind, False))
        if template is not None:
            if len(self._plain_templates) >= _MAX_ENDINGS:
                self._plain_templates.clear()
            self._plain_templates[plain_key] = template
        return built

    def _plain_client_ending(self, handle: SpanHandle, ending: PlainEnding) -> Built:
        return self._client_ending(handle, self._finished_of(ending))

    def _full_plain_ending(self, handle: SpanHandle, raw: tuple[InFlight, PlainAnswer]) -> Built:
        """A plain request's ending when more than its template is needed (annotations, a tracestate)."""
        pending, answer = raw
        if self._metrics is not None:
            duration_s = answer.now - pending.started
            added_s = pending.handled_s + (answer.now - answer.arrived)
            self._metrics.observe_request(pending.body["method"], None, duration_s, added_s, handle.trace_id)
        return self._ending(handle, self._plain_finished(pending, answer))

    def _full_plain_client_ending(self, handle: SpanHandle, raw: tuple[InFlight, PlainAnswer]) -> Built:
        return self._client_ending(handle, self._plain_finished(*raw))

    def propagate(self, token: Any, meta: dict[str, Any]) -> bool:
        # Only traceparent changes: the client's tracestate and baggage pass through as they were.
        if not isinstance(token, SpanHandle) or not self._propagates:
            return False
        if self._client_spans and token.recording:
            assert self._recorder is not None
            client_span_id = token.client_span_id = self._recorder.new_span_id()
            meta["traceparent"] = f"00-{token.trace_id}-{client_span_id}-{token.flags}"
        else:
            meta["traceparent"] = token.traceparent()
        return True

    def finished(self, token: Any, outcome: Finished) -> None:
        span = token if isinstance(token, SpanHandle) else None
        if self._metrics is not None:
            self._count(outcome, span)
        if span is not None:
            recorder = self._recorder
            assert recorder is not None
            recorder.end_later(span, self._ending, outcome)
            if span.client_span_id is not None:  # its context went upstream: the leg is a CLIENT span
                recorder.end_later(self._leg(span, outcome.started), self._client_ending, outcome)

    def _leg(self, span: SpanHandle, started: float) -> SpanHandle:
        """The CLIENT span of ``span``'s leg upstream."""
        assert span.client_span_id is not None
        return SpanHandle(
            span.trace_id,
            span.client_span_id,
            span.span_id,
            span.flags,
            span.tracestate,
            "",
            _CLIENT,
            self._upstream,
            self._clock.unix_ns(started),
        )

    def upstream_exited(self, exit_code: int) -> None:
        if self._metrics is not None:
            self._metrics.upstream_exited()

    def server_crashed(self, cause: str, exit_status: int) -> None:
        if self._metrics is not None:
            self._metrics.server_crashed(cause)

    def server_restarted(self, generation: int) -> None:
        if self._metrics is not None:
            self._metrics.server_restarted()

    def server_back(self, downtime_s: float) -> None:
        if self._metrics is not None:
            self._metrics.server_downtime(downtime_s)

    def _count(self, outcome: Finished, span: SpanHandle | None) -> None:
        assert self._metrics is not None
        self._metrics.request_finished()
        # An exemplar points at a trace someone recorded: ours, else the client's (when sampled).
        if span is not None:
            trace_id: str | None = span.trace_id if span.recording else None
        else:
            meta = outcome.call.params.get("_meta")
            parent = parse_traceparent(meta.get("traceparent")) if isinstance(meta, dict) else None
            trace_id = parent.trace_id if parent is not None and parent.sampled else None
        first = outcome.decision.applied[0].type_name if outcome.decision.applied else None
        duration_s = outcome.finished - outcome.started + outcome.delay_s
        self._metrics.observe_request(outcome.call.method, first, duration_s, outcome.added_s, trace_id)
        for applied in outcome.decision.applied:
            self._metrics.fault_injected(applied.type_name, applied.mode, trace_id)

    @staticmethod
    def _ending_key(outcome: Finished) -> tuple[Any, ...]:
        """What the shared part of a span's ending depends on (``_shared_ending``); its second item is
        the target the span is named by (a tools/call's tool)."""
        call = outcome.call
        first = outcome.decision.applied[0] if outcome.decision.applied else None
        return (
            call.method,
            call.target if call.method == "tools/call" else None,
            (first.type_name, first.mode, first.rule) if first is not None else None,
            outcome.upstream_contacted,
            outcome.received,
            outcome.protocol_version,
            outcome.error_code,
            outcome.generation,
        )

    def _ending(self, handle: SpanHandle, outcome: Finished) -> Built:
        """The span's attributes, events and status, or its JSON; runs on the span writer's thread."""
        call = outcome.call
        key = self._ending_key(outcome)
        cached = self._endings.get(key)
        if cached is None:
            if len(self._endings) >= _MAX_ENDINGS:
                self._endings.clear()
            cached = self._endings[key] = self._shared_ending(outcome, key[1])
        extra = self._annotate(outcome) if self._annotate is not None else None
        decision = outcome.decision
        if extra is None and not decision.applied and not decision.changes and handle.tracestate is None:
            return self._templated(
                handle, key, cached, call.request_id, outcome.started, outcome.finished, outcome.delay_s
            )
        shared, error, name = cached
        request_id = {"key": names.JSONRPC_REQUEST_ID, "value": {"stringValue": str(call.request_id)}}
        attributes = EncodedAttributes([*shared, request_id])
        events: list[tuple[str, int, dict[str, Any]]] = []
        if outcome.upstream_contacted:
            events.append((names.EVENT_UPSTREAM_SENT, self._clock.unix_ns(outcome.started), {}))
            events.append((names.EVENT_UPSTREAM_RECEIVED, self._clock.unix_ns(outcome.finished), {}))
        # Every fault applied leaves its own event (the fault type names it), so none of a combination is lost.
        for applied in outcome.decision.applied:
            details: dict[str, Any] = {
                names.FAULT_TYPE: applied.type_name,
                names.FAULT_MODE: applied.mode,
                names.FAULT_RULE: applied.rule,
            }
            if outcome.delay_s:
                details["mcpfault.delay_s"] = outcome.delay_s
            events.append((applied.event, self._clock.unix_ns(outcome.finished), details))
        for change in outcome.decision.changes:
            note: dict[str, Any] = {names.CONTROL_ACTION: change.action, names.CONTROL_VERSION: change.version}
            if change.rule is not None:
                note[names.FAULT_RULE] = change.rule
            events.append((names.EVENT_CONTROL, self._clock.unix_ns(outcome.started), note))
        if extra is not None:
            if extra[0]:
                attributes = EncodedAttributes([*attributes, *encode_attributes(extra[0])])
            events.extend(extra[1])
        # The client gets the answer after any injected delay: that is when the request ends for it.
        return attributes, events, error, self._clock.unix_ns(outcome.finished + outcome.delay_s), name

    def _client_ending(self, handle: SpanHandle, outcome: Finished) -> Built:
        """The CLIENT span of the leg upstream: from sending the request to the answer (or the end)."""
        call = outcome.call
        target = call.target if call.method == "tools/call" else None
        key = (call.method, target, outcome.received, outcome.error_code, outcome.protocol_version)
        cached = self._client_endings.get(key)
        if cached is None:
            if len(self._client_endings) >= _MAX_ENDINGS:
                self._client_endings.clear()
            attributes = _request_attributes(call.method, target)
            if outcome.protocol_version:
                attributes[names.MCP_PROTOCOL_VERSION] = outcome.protocol_version
            if outcome.error_code is not None:
                attributes[names.RPC_RESPONSE_STATUS_CODE] = str(outcome.error_code)
            error: tuple[str] | None = None
            error_type = _client_error_type(outcome)
            if error_type is not None:
                attributes[names.ERROR_TYPE] = error_type
                error = (outcome.received,)
            cached = self._client_endings[key] = (
                encode_attributes(attributes),
                error,
                span_name(call.method, target),
            )
        shared, error, name = cached
        request_id = {"key": names.JSONRPC_REQUEST_ID, "value": {"stringValue": str(call.request_id)}}
        return EncodedAttributes([*shared, request_id]), [], error, self._clock.unix_ns(outcome.finished), name

    def _templated(  # noqa: PLR0917 - the writer's hot path, positionally
        self,
        handle: SpanHandle,
        key: tuple[Any, ...],
        cached: tuple[EncodedAttributes, tuple[str] | None, str],
        request_id: Any,
        started: float,
        finished: float,
        delay_s: float,
    ) -> bytes:
        """The span's JSON from a template: what the slow path gives a request without faults, control
        changes, annotations or tracestate (most requests), for the cost of a join. ``key`` is
        ``_ending``'s (its fourth item: whether the upstream was contacted)."""
        from_server = handle.attributes is self._from_server  # the start attributes: one of two
        template_key = (key, handle.parent_span_id is None, handle.flags, handle.kind, from_server)
        template = self._templates.get(template_key)
        if template is None:
            if len(self._templates) >= _MAX_ENDINGS:
                self._templates.clear()
            template = self._templates[template_key] = self._template(handle, key[3], cached)
        return template.fill(self._slot_values(handle, request_id, started, finished, delay_s))

    def _slot_values(
        self, handle: SpanHandle, request_id: Any, started: float, finished: float, delay_s: float
    ) -> tuple[str, ...]:
        """What fills a template's slots (``_template``'s numbering), each as JSON text."""
        offset_ns = self._clock.offset_ns
        finished_ns = int(finished * 1e9) + offset_ns
        return (
            f'"{handle.trace_id}"',
            f'"{handle.span_id}"',
            f'"{handle.parent_span_id}"',
            f'"{handle.start_ns}"',
            f'"{int((finished + delay_s) * 1e9) + offset_ns if delay_s else finished_ns}"',
            f'"{request_id}"' if request_id.__class__ is int else orjson.dumps(str(request_id)).decode(),
            f'"{int(started * 1e9) + offset_ns}"',
            f'"{finished_ns}"',
        )

    @staticmethod
    def _template(
        handle: SpanHandle, upstream_contacted: bool, cached: tuple[EncodedAttributes, tuple[str] | None, str]
    ) -> SpanTemplate:
        """The slow path's JSON, its varying values as slots (the order ``_templated`` fills them in)."""
        shared, error, name = cached
        slot = SpanTemplate.slot
        example = SpanHandle(
            slot(0),
            slot(1),
            slot(2) if handle.parent_span_id is not None else None,
            handle.flags,
            None,
            name,
            handle.kind,
            handle.attributes,
            slot(3),  # type: ignore[arg-type]  # a slot where the start's nanoseconds go
        )
        request_id = {"key": names.JSONRPC_REQUEST_ID, "value": {"stringValue": slot(5)}}
        events: list[Any] = []
        if upstream_contacted:
            events = [(names.EVENT_UPSTREAM_SENT, slot(6), {}), (names.EVENT_UPSTREAM_RECEIVED, slot(7), {})]
        return SpanTemplate(json_span(example, EncodedAttributes([*shared, request_id]), events, error, slot(4)))  # type: ignore[arg-type]

    def _shared_ending(self, outcome: Finished, target: str | None) -> tuple[EncodedAttributes, tuple[str] | None, str]:
        """What every request ending like ``outcome`` has in common: attributes but the request id,
        the status, the name."""
        call = outcome.call
        attributes = _request_attributes(call.method, target)
        if outcome.decision.applied:
            first = outcome.decision.applied[0]
            attributes[names.FAULT_TYPE] = first.type_name
            attributes[names.FAULT_MODE] = first.mode
            attributes[names.FAULT_RULE] = first.rule
        attributes[names.UPSTREAM_CONTACTED] = outcome.upstream_contacted
        attributes[names.CLIENT_RECEIVED] = outcome.received
        if outcome.protocol_version:
            attributes[names.MCP_PROTOCOL_VERSION] = outcome.protocol_version
        if outcome.generation is not None:
            attributes[names.SERVER_GENERATION] = outcome.generation
        if self._session_id is not None and outcome.protocol_version not in MODERN_VERSIONS:
            attributes[names.MCP_SESSION_ID] = self._session_id
        error: tuple[str] | None = None
        if outcome.error_code is not None:
            attributes[names.RPC_RESPONSE_STATUS_CODE] = str(outcome.error_code)
        error_type = _error_type(outcome)
        if error_type is not None:
            attributes[names.ERROR_TYPE] = error_type
            error = (outcome.received,)
        return encode_attributes(attributes), error, span_name(call.method, target)


def _request_attributes(method: str, target: str | None) -> dict[str, Any]:
    """What names the request on both of its spans (SERVER and the leg's CLIENT)."""
    attributes: dict[str, Any] = {names.MCP_METHOD_NAME: method}
    if target is not None:
        attributes[names.GEN_AI_TOOL_NAME] = target
        attributes[names.GEN_AI_OPERATION_NAME] = names.GEN_AI_OPERATION_EXECUTE_TOOL
    return attributes


def _error_type(outcome: Finished) -> str | None:
    """The SERVER span's ``error.type``; None when the request did not fail as the conventions see it."""
    if outcome.received == "error" and outcome.error_code in _CLIENT_MISTAKES:
        return None
    if outcome.received in ("error", "upstream_exited", "server_restarted"):
        return str(outcome.error_code) if outcome.error_code is not None else names.OTHER
    if outcome.received == "tool_error":
        return names.ERROR_TYPE_TOOL_ERROR
    if outcome.received in ("nothing", "malformed"):
        return names.OTHER
    http = outcome.decision.http
    if outcome.received in _HTTP_FAILURES or (http is not None and outcome.received == http.received):
        return outcome.received
    return None


def _client_error_type(outcome: Finished) -> str | None:
    """The CLIENT span's ``error.type``: on the sending side every JSON-RPC error is one."""
    if outcome.received == "error":
        return str(outcome.error_code) if outcome.error_code is not None else names.OTHER
    return _error_type(outcome)


def fault_label_sets(types: Iterable[Any]) -> tuple[list[str], list[str]]:
    """Allowed Prometheus label values: the catalog's fault types and every mode they report."""
    kinds = list(types)
    return [k.type_name for k in kinds], sorted({m for k in kinds for m in k.MODES})
