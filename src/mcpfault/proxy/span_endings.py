"""How a request's span ends: its attributes, events, status and name, or its whole JSON from a
template. Built on the span writer's thread (``SpanRecorder.end_later``), off the request's path;
``TelemetryObserver`` (proxy/observe.py) starts the spans and hands their endings here.

Most requests end alike (only ids and times differ), so each kind of ending is built once and kept:
its encoded attributes, and the whole span's JSON as a template with slots for what varies.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson
from opentelemetry.trace import SpanKind

from mcpfault.faults.base import Call
from mcpfault.faults.engine import PASS
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import MODERN_VERSIONS
from mcpfault.proxy.core import Finished, InFlight, PlainAnswer, classify
from mcpfault.telemetry import names
from mcpfault.telemetry.fastspans import Built, Root, SpanHandle, root_handle
from mcpfault.telemetry.metrics import ProxyMetrics
from mcpfault.telemetry.names import Received
from mcpfault.telemetry.otlp_json import KIND_TO_OTLP
from mcpfault.telemetry.span_json import (
    EncodedAttributes,
    Event,
    Filled,
    SharedAttributes,
    SpanTemplate,
    encode_attributes,
    json_span,
    json_string_content,
)
from mcpfault.telemetry.tracing import span_name

# On a SERVER span these codes are the client's mistake, not a failure of the server (the MCP
# conventions, as HTTP's 4xx on server spans): the code is recorded, the span is no error.
_CLIENT_MISTAKES = frozenset({jsonrpc.INVALID_REQUEST, jsonrpc.METHOD_NOT_FOUND, jsonrpc.INVALID_PARAMS})

_MAX_ENDINGS = 4096
_SERVER = KIND_TO_OTLP[SpanKind.SERVER]
# Most spans end as a Filled: built with tuple.__new__, not the NamedTuple's Python __new__ (~0.3 us each).
_new_tuple = tuple.__new__


class PlainEnding(NamedTuple):
    """What the span of a plain request (``TelemetryObserver.answered_plain``) needs once it is answered: no parsed
    request or answer, so nothing of theirs outlives the request while spans wait for the writer."""

    method: str
    target: str | None  # a tools/call's tool, as the span's key has it
    request_id: Any
    received: Received
    error_code: int | None
    started: float  # core clock
    finished: float
    added_s: float
    protocol_version: str | None
    generation: int | None
    # The span's root as it was drawn (``SpanRecorder.roots``), when it has no handle yet: its
    # handle, if it needs one, is made on the span writer's thread (``SpanEndings.plain_root``).
    root: Root | None = None


# A PlainEnding's fields in a plain tuple: what a root's span waits for the writer with. The garbage
# collector stops tracking a plain tuple of plain values (never a NamedTuple's), so the spans queued
# between two batches are not moved into its older generations, whose collections grow with them.
EndingFields = tuple[
    str, str | None, Any, Received, int | None, float, float, float, str | None, int | None, Root | None
]


# More for a request's span from another observer (the side-effect probe): attributes and events.
# Called on the span writer's thread, so it may wait a little for what it adds.
Annotation = tuple[dict[str, Any], list[Event]]
Annotate = Callable[[Finished], Annotation | None]


# What the HTTP transport itself can give a client instead of an answer; each is its own error.type
# (as is what an HTTP fault gives: its behaviour's ``received``).
_HTTP_FAILURES = frozenset({"http_error", "upstream_unreachable"})


class Clock:
    """Turns the core's monotonic seconds into the Unix nanoseconds spans carry."""

    def __init__(self) -> None:
        self.offset_ns = time.time_ns() - int(time.monotonic() * 1e9)

    def unix_ns(self, monotonic_s: float) -> int:
        return int(monotonic_s * 1e9) + self.offset_ns


def plain_finished(pending: InFlight, answer: PlainAnswer) -> Finished:
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


class SpanEndings:
    """The endings of one observer's spans, and the caches that make most of them a join; used on the
    span writer's thread only. Observes the request histograms as a plain request's span is built."""

    def __init__(
        self,
        clock: Clock,
        metrics: ProxyMetrics | None,
        from_server: SharedAttributes,
        *,
        from_client: SharedAttributes | None = None,
        session_id: str | None = None,
        annotate: Annotate | None = None,
    ) -> None:
        self._clock = clock
        self._metrics = metrics
        self._from_server = from_server  # the start attributes of spans of the server's requests
        # and of the client's: a root drawn ahead gets them on this thread (plain_root)
        self._from_client = from_client if from_client is not None else SharedAttributes()
        # An HTTP session's id, for the spans of 2025-11-25 traffic only: the conventions forbid
        # mcp.session.id on 2026-07-28 traffic, which has no sessions.
        self._session_id = session_id
        self._annotate = annotate  # more for each span from another observer (the side-effect probe)
        # The endings' attributes, encoded, by what they depend on: most requests end alike, and only
        # the request id differs. Bounded.
        self._endings: dict[tuple[Any, ...], tuple[EncodedAttributes, tuple[str] | None, str]] = {}
        # The whole JSON of spans that end alike, by their ending and what of the start shows in it.
        self._templates: dict[tuple[Any, ...], SpanTemplate] = {}
        # The same templates, by what a plain request's ending and its root-or-child start say: one
        # lookup for most spans (``plain``).
        self._plain_templates: dict[tuple[Any, ...], SpanTemplate] = {}
        self._client_endings: dict[tuple[Any, ...], tuple[EncodedAttributes, tuple[str] | None, str]] = {}

    @staticmethod
    def _finished_of(ending: PlainEnding) -> Finished:
        """The ``Finished`` of a plain request, from what its ending kept: the same as ``plain_finished``
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

    def plain(self, handle: SpanHandle, ending: PlainEnding) -> Built:
        if self._metrics is not None:  # as _count does for a request no fault touched
            duration_s = ending.finished - ending.started
            self._metrics.observe_request(ending.method, None, duration_s, ending.added_s, handle.trace_id)
        return self._plain_span(handle, ending)

    def _plain_span(self, handle: SpanHandle, ending: PlainEnding) -> Built:
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
            return _new_tuple(
                Filled, (template, self._slot_values(handle, ending.request_id, ending.started, ending.finished, 0.0))
            )
        # The first of its kind: built the general way, which makes the template this lookup finds next time.
        outcome = self._finished_of(ending)
        built = self.ending(handle, outcome)
        root = handle.parent_span_id is None
        template = self._templates.get((self._ending_key(outcome), root, handle.flags, handle.kind, False))
        if template is not None:
            if len(self._plain_templates) >= _MAX_ENDINGS:
                self._plain_templates.clear()
            self._plain_templates[plain_key] = template
        return built

    def plain_root(self, fields: EndingFields) -> bytes | Filled:
        """``plain`` for a span whose root was taken as it was drawn (the observer's ``forward_plain``),
        from its ending's fields (``EndingFields``, the root last): mostly a template and its slots,
        no handle made; the first of its kind is built the general way, with the root's handle."""
        method, target, request_id, received, error_code, started, finished, added_s, version, generation, root = fields
        assert root is not None
        if self._metrics is not None:  # as plain does
            self._metrics.observe_request(method, None, finished - started, added_s, root[0])
        offset_ns = self._clock.offset_ns
        started_ns = int(started * 1e9) + offset_ns
        template = self._plain_templates.get(
            (method, target, received, error_code, version, generation, True, root[3])  # True: a root
        )
        if template is not None:  # _slot_values, for a root's handle
            finished_ns = int(finished * 1e9) + offset_ns
            request_id = request_id if request_id.__class__ is int else json_string_content(str(request_id))
            values = (root[0], root[1], None, started_ns, finished_ns, request_id, started_ns, finished_ns)
            return _new_tuple(Filled, (template, values))
        handle = root_handle(root, "", _SERVER, self._from_client, started_ns)
        built = self._plain_span(handle, _new_tuple(PlainEnding, fields))
        if isinstance(built, bytes | Filled):
            return built
        # An Ending, which a plain request's span is not (its ending has a template): encoded all the same.
        attributes, events, error, end_ns, name = built
        if name is not None:
            handle.name = name
        return orjson.dumps(json_span(handle, attributes, events, error, end_ns))

    def plain_client(self, handle: SpanHandle, ending: PlainEnding) -> Built:
        return self.client_ending(handle, self._finished_of(ending))

    def full_plain(self, handle: SpanHandle, raw: tuple[InFlight, PlainAnswer]) -> Built:
        """A plain request's ending when more than its template is needed (annotations, a tracestate)."""
        pending, answer = raw
        if self._metrics is not None:
            duration_s = answer.now - pending.started
            added_s = pending.handled_s + (answer.now - answer.arrived)
            self._metrics.observe_request(pending.body["method"], None, duration_s, added_s, handle.trace_id)
        return self.ending(handle, plain_finished(pending, answer))

    def full_plain_client(self, handle: SpanHandle, raw: tuple[InFlight, PlainAnswer]) -> Built:
        return self.client_ending(handle, plain_finished(*raw))

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

    def ending(self, handle: SpanHandle, outcome: Finished) -> Built:
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
            if outcome.fields:
                details[names.FAULT_FIELDS] = list(outcome.fields)
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

    def client_ending(self, handle: SpanHandle, outcome: Finished) -> Built:
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
    ) -> Filled:
        """The span's JSON from a template: what the slow path gives a request without faults, control
        changes, annotations or tracestate (most requests), for the cost of a join. ``key`` is
        ``ending``'s (its fourth item: whether the upstream was contacted)."""
        from_server = handle.attributes is self._from_server  # the start attributes: one of two
        template_key = (key, handle.parent_span_id is None, handle.flags, handle.kind, from_server)
        template = self._templates.get(template_key)
        if template is None:
            if len(self._templates) >= _MAX_ENDINGS:
                self._templates.clear()
            template = self._templates[template_key] = self._template(handle, key[3], cached)
        return _new_tuple(Filled, (template, self._slot_values(handle, request_id, started, finished, delay_s)))

    def _slot_values(
        self, handle: SpanHandle, request_id: Any, started: float, finished: float, delay_s: float
    ) -> tuple[Any, ...]:
        """What fills a template's slots (``_template``'s numbering), as ``SpanTemplate.fill`` takes
        them: ids as strings (hex), times as Unix ns, an int request id as it is, any other as the
        content of a JSON string (``json_string_content``)."""
        offset_ns = self._clock.offset_ns
        finished_ns = int(finished * 1e9) + offset_ns
        return (
            handle.trace_id,
            handle.span_id,
            handle.parent_span_id,
            handle.start_ns,
            int((finished + delay_s) * 1e9) + offset_ns if delay_s else finished_ns,
            request_id if request_id.__class__ is int else json_string_content(str(request_id)),
            int(started * 1e9) + offset_ns,
            finished_ns,
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
