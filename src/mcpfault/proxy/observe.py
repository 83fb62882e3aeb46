"""What the proxy tells the world about each request: an OpenTelemetry span, and Prometheus metrics.

Both are ``RequestObserver``s of the core. The span's parent is the context the client put in
``params._meta``; the proxy puts its own span's context there on the way upstream, so the server's
spans nest under it (``--no-propagate`` keeps the bytes as they were).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from opentelemetry.trace import (
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    format_trace_id,
    get_current_span,
    set_span_in_context,
)

from mcpfault.faults.base import Call
from mcpfault.faults.engine import Decision
from mcpfault.proxy.core import Finished
from mcpfault.telemetry import names
from mcpfault.telemetry.metrics import ProxyMetrics
from mcpfault.telemetry.tracing import extract_context, inject_context, span_name

# What a fault did, as a span event on the proxy's span.
_FAULT_EVENTS = {
    "timeout": names.EVENT_DROP,
    "latency": names.EVENT_DELAY,
    "malformed": names.EVENT_CORRUPT,
    "stale": names.EVENT_STALE_HIT,
    "schema_drift": names.EVENT_DRIFT,
}


class _Clock:
    """Turns the core's monotonic seconds into the Unix nanoseconds spans carry."""

    def __init__(self) -> None:
        self._offset_ns = time.time_ns() - int(time.monotonic() * 1e9)

    def unix_ns(self, monotonic_s: float) -> int:
        return int(monotonic_s * 1e9) + self._offset_ns


class TelemetryObserver:
    """A span per request (when there is a tracer) and the request metrics (when there is a registry)."""

    def __init__(
        self,
        tracer: Tracer | None,
        metrics: ProxyMetrics | None,
        *,
        transport: str = names.NETWORK_TRANSPORT_PIPE,
    ) -> None:
        self._tracer = tracer
        self._metrics = metrics
        self._transport = transport
        self._clock = _Clock()

    def started(self, call: Call, decision: Decision, started: float, *, from_server: bool = False) -> Span | None:
        if self._metrics is not None:
            self._metrics.request_started()
        if self._tracer is None:
            return None
        meta = call.params.get("_meta")
        attributes: dict[str, Any] = {
            names.MCP_METHOD_NAME: call.method,
            names.JSONRPC_REQUEST_ID: str(call.request_id),
            names.NETWORK_TRANSPORT: self._transport,
            names.DIRECTION: names.DIRECTION_SERVER_TO_CLIENT if from_server else names.DIRECTION_CLIENT_TO_SERVER,
        }
        tool = call.target if call.method == "tools/call" else None
        if tool is not None:
            attributes[names.GEN_AI_TOOL_NAME] = tool
            attributes[names.GEN_AI_OPERATION_NAME] = names.GEN_AI_OPERATION_EXECUTE_TOOL
        if decision.applied:
            first = decision.applied[0]
            attributes[names.FAULT_TYPE] = first.type_name
            attributes[names.FAULT_MODE] = first.mode
            attributes[names.FAULT_RULE] = first.rule
        return self._tracer.start_span(
            span_name(call.method, tool),
            context=extract_context(meta if isinstance(meta, dict) else None),
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=self._clock.unix_ns(started),
        )

    def propagate(self, token: Any, meta: dict[str, Any]) -> bool:
        if not isinstance(token, Span):
            return False
        inject_context(meta, set_span_in_context(token))
        return True

    def finished(self, token: Any, outcome: Finished) -> None:
        span = token if isinstance(token, Span) else None
        if self._metrics is not None:
            self._count(outcome, span)
        if span is not None:
            self._end(span, outcome)

    def upstream_exited(self, exit_code: int) -> None:
        if self._metrics is not None:
            self._metrics.upstream_exited()

    def _count(self, outcome: Finished, span: Span | None) -> None:
        assert self._metrics is not None
        self._metrics.request_finished()
        if span is not None:
            context = span.get_span_context()
        else:  # no tracer here: the exemplar points at the client's trace, when it sent one
            meta = outcome.call.params.get("_meta")
            context = get_current_span(extract_context(meta if isinstance(meta, dict) else None)).get_span_context()
        trace_id = format_trace_id(context.trace_id) if context.is_valid else None
        first = outcome.decision.applied[0].type_name if outcome.decision.applied else None
        duration_s = outcome.finished - outcome.started + outcome.delay_s
        self._metrics.observe_request(outcome.call.method, first, duration_s, outcome.added_s, trace_id)
        for applied in outcome.decision.applied:
            self._metrics.fault_injected(applied.type_name, applied.mode, trace_id)

    def _end(self, span: Span, outcome: Finished) -> None:
        span.set_attribute(names.UPSTREAM_CONTACTED, outcome.upstream_contacted)
        span.set_attribute(names.CLIENT_RECEIVED, outcome.received)
        if outcome.protocol_version:
            span.set_attribute(names.MCP_PROTOCOL_VERSION, outcome.protocol_version)
        if outcome.upstream_contacted:
            span.add_event(names.EVENT_UPSTREAM_SENT, timestamp=self._clock.unix_ns(outcome.started))
            span.add_event(names.EVENT_UPSTREAM_RECEIVED, timestamp=self._clock.unix_ns(outcome.finished))
        for applied in outcome.decision.applied:
            event = _FAULT_EVENTS.get(applied.type_name)
            if event is not None:
                details: dict[str, Any] = {names.FAULT_MODE: applied.mode, names.FAULT_RULE: applied.rule}
                if outcome.delay_s:
                    details["mcpfault.delay_s"] = outcome.delay_s
                span.add_event(event, details, timestamp=self._clock.unix_ns(outcome.finished))
        error_type = _error_type(outcome)
        if error_type is not None:
            span.set_attribute(names.ERROR_TYPE, error_type)
            if outcome.error_code is not None:
                span.set_attribute(names.RPC_RESPONSE_STATUS_CODE, str(outcome.error_code))
            span.set_status(Status(StatusCode.ERROR, outcome.received))
        # The client gets the answer after any injected delay: that is when the request ends for it.
        span.end(end_time=self._clock.unix_ns(outcome.finished + outcome.delay_s))


def _error_type(outcome: Finished) -> str | None:
    if outcome.received in ("error", "upstream_exited"):
        return str(outcome.error_code) if outcome.error_code is not None else names.OTHER
    if outcome.received == "tool_error":
        return names.ERROR_TYPE_TOOL_ERROR
    if outcome.received in ("nothing", "malformed"):
        return names.OTHER
    return None


def fault_label_sets(types: Iterable[Any]) -> tuple[list[str], list[str]]:
    """Allowed Prometheus label values: the catalog's fault types and every mode they report."""
    kinds = list(types)
    return [k.type_name for k in kinds], sorted({m for k in kinds for m in k.MODES})
