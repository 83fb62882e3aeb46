"""What the proxy tells the world about each request: an OpenTelemetry span, and Prometheus metrics.

Spans come from ``SpanRecorder`` (telemetry/fastspans.py), not the SDK: the SDK cost ~100 us a request.

Both are ``RequestObserver``s of the core. The span's parent is the context the client put in
``params._meta``; the proxy puts its own span's context there on the way upstream, so the server's
spans nest under it (``--no-propagate`` keeps the bytes as they were).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.trace import SpanKind

from mcpfault.faults.base import Call
from mcpfault.faults.engine import Decision
from mcpfault.proxy.core import Finished
from mcpfault.telemetry import names
from mcpfault.telemetry.fastspans import Ending, Event, SpanHandle, SpanRecorder, parse_traceparent
from mcpfault.telemetry.metrics import ProxyMetrics
from mcpfault.telemetry.tracing import span_name

# What a fault did, as a span event on the proxy's span.
_FAULT_EVENTS = {
    "timeout": names.EVENT_DROP,
    "latency": names.EVENT_DELAY,
    "malformed": names.EVENT_CORRUPT,
    "stale": names.EVENT_STALE_HIT,
    "schema_drift": names.EVENT_DRIFT,
    "first_byte_latency": names.EVENT_DELAY,
}


# More for a request's span from another observer (the side-effect probe): attributes and events.
# Called on the span writer's thread, so it may wait a little for what it adds.
Annotation = tuple[dict[str, Any], list[Event]]
Annotate = Callable[[Finished], Annotation | None]


# What a client of an HTTP proxy can receive instead of an answer; each is its own error.type.
_HTTP_FAILURES = frozenset({"http_error", "reset", "stream_cut", "session_expired", "upstream_unreachable"})


class _Clock:
    """Turns the core's monotonic seconds into the Unix nanoseconds spans carry."""

    def __init__(self) -> None:
        self._offset_ns = time.time_ns() - int(time.monotonic() * 1e9)

    def unix_ns(self, monotonic_s: float) -> int:
        return int(monotonic_s * 1e9) + self._offset_ns


class TelemetryObserver:
    """A span per request (when there is a recorder) and the request metrics (when there is a registry)."""

    def __init__(
        self,
        recorder: SpanRecorder | None,
        metrics: ProxyMetrics | None,
        *,
        transport: str = names.NETWORK_TRANSPORT_PIPE,
        attributes: Mapping[str, Any] | None = None,
        annotate: Annotate | None = None,
    ) -> None:
        self._recorder = recorder
        self._annotate = annotate
        self._metrics = metrics
        self._transport = transport
        # Fixed for every span of this observer: the upstream's address, an HTTP session's id.
        self._attributes = dict(attributes) if attributes else None
        self._clock = _Clock()
        # The attributes every span of a direction starts with: built once, shared, never mutated.
        fixed = self._attributes or {}
        self._from_client = {
            names.NETWORK_TRANSPORT: transport,
            names.DIRECTION: names.DIRECTION_CLIENT_TO_SERVER,
            **fixed,
        }
        self._from_server = {
            names.NETWORK_TRANSPORT: transport,
            names.DIRECTION: names.DIRECTION_SERVER_TO_CLIENT,
            **fixed,
        }

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
            span_name(call.method, call.target if call.method == "tools/call" else None),
            SpanKind.SERVER,
            traceparent,
            self._from_server if from_server else self._from_client,
            self._clock.unix_ns(started),
            tracestate=tracestate,
        )

    def propagate(self, token: Any, meta: dict[str, Any]) -> bool:
        # meta is the client's _meta copied: its tracestate and baggage pass through as they were.
        if not isinstance(token, SpanHandle):
            return False
        meta["traceparent"] = token.traceparent()
        if token.tracestate:
            meta["tracestate"] = token.tracestate
        return True

    def finished(self, token: Any, outcome: Finished) -> None:
        span = token if isinstance(token, SpanHandle) else None
        if self._metrics is not None:
            self._count(outcome, span)
        if span is not None:
            self._recorder.end_later(span, self._ending, outcome)  # type: ignore[union-attr]

    def upstream_exited(self, exit_code: int) -> None:
        if self._metrics is not None:
            self._metrics.upstream_exited()

    def _count(self, outcome: Finished, span: SpanHandle | None) -> None:
        assert self._metrics is not None
        self._metrics.request_finished()
        if span is not None:
            trace_id: str | None = span.trace_id
        else:  # no recorder here: the exemplar points at the client's trace, when it sent one
            meta = outcome.call.params.get("_meta")
            parent = parse_traceparent(meta.get("traceparent")) if isinstance(meta, dict) else None
            trace_id = parent.trace_id if parent is not None else None
        first = outcome.decision.applied[0].type_name if outcome.decision.applied else None
        duration_s = outcome.finished - outcome.started + outcome.delay_s
        self._metrics.observe_request(outcome.call.method, first, duration_s, outcome.added_s, trace_id)
        for applied in outcome.decision.applied:
            self._metrics.fault_injected(applied.type_name, applied.mode, trace_id)

    def _ending(self, outcome: Finished) -> Ending:
        """The span's attributes, events and status; runs on the span writer's thread."""
        call = outcome.call
        attributes: dict[str, Any] = {
            names.MCP_METHOD_NAME: call.method,
            names.JSONRPC_REQUEST_ID: str(call.request_id),
        }
        if call.method == "tools/call" and call.target is not None:
            attributes[names.GEN_AI_TOOL_NAME] = call.target
            attributes[names.GEN_AI_OPERATION_NAME] = names.GEN_AI_OPERATION_EXECUTE_TOOL
        if outcome.decision.applied:
            first = outcome.decision.applied[0]
            attributes[names.FAULT_TYPE] = first.type_name
            attributes[names.FAULT_MODE] = first.mode
            attributes[names.FAULT_RULE] = first.rule
        attributes[names.UPSTREAM_CONTACTED] = outcome.upstream_contacted
        attributes[names.CLIENT_RECEIVED] = outcome.received
        if outcome.protocol_version:
            attributes[names.MCP_PROTOCOL_VERSION] = outcome.protocol_version
        events: list[tuple[str, int, dict[str, Any]]] = []
        if outcome.upstream_contacted:
            events.append((names.EVENT_UPSTREAM_SENT, self._clock.unix_ns(outcome.started), {}))
            events.append((names.EVENT_UPSTREAM_RECEIVED, self._clock.unix_ns(outcome.finished), {}))
        for applied in outcome.decision.applied:
            event = _FAULT_EVENTS.get(applied.type_name)
            if event is not None:
                details: dict[str, Any] = {names.FAULT_MODE: applied.mode, names.FAULT_RULE: applied.rule}
                if outcome.delay_s:
                    details["mcpfault.delay_s"] = outcome.delay_s
                events.append((event, self._clock.unix_ns(outcome.finished), details))
        if self._annotate is not None:
            extra = self._annotate(outcome)
            if extra is not None:
                attributes.update(extra[0])
                events.extend(extra[1])
        error: tuple[str] | None = None
        error_type = _error_type(outcome)
        if error_type is not None:
            attributes[names.ERROR_TYPE] = error_type
            if outcome.error_code is not None:
                attributes[names.RPC_RESPONSE_STATUS_CODE] = str(outcome.error_code)
            error = (outcome.received,)
        # The client gets the answer after any injected delay: that is when the request ends for it.
        return attributes, events, error, self._clock.unix_ns(outcome.finished + outcome.delay_s)


def _error_type(outcome: Finished) -> str | None:
    if outcome.received in ("error", "upstream_exited"):
        return str(outcome.error_code) if outcome.error_code is not None else names.OTHER
    if outcome.received == "tool_error":
        return names.ERROR_TYPE_TOOL_ERROR
    if outcome.received in ("nothing", "malformed"):
        return names.OTHER
    if outcome.received in _HTTP_FAILURES:
        return outcome.received
    return None


def fault_label_sets(types: Iterable[Any]) -> tuple[list[str], list[str]]:
    """Allowed Prometheus label values: the catalog's fault types and every mode they report."""
    kinds = list(types)
    return [k.type_name for k in kinds], sorted({m for k in kinds for m in k.MODES})
