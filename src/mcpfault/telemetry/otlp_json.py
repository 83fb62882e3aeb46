"""SDK spans as OTLP JSON: the one encoding behind the span files and the fast span recorder.

The protobuf JSON mapping of ``ExportTraceServiceRequest`` with OTLP's two amendments: trace and
span ids are hex (not base64) and enums are integers. Jaeger's ``/api/v3`` answers in the same
shape, so one reader (``span_files.read_spans``) serves both.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind

from mcpfault.protocol.jsonlines import dumps_line

# The encoding of values and flags is SDK-free, for the fast span recorder; re-exported here.
from mcpfault.telemetry.otlp_lines import FLAG_HAS_IS_REMOTE, FLAG_IS_REMOTE, encode_value, span_flags

__all__ = [
    "FLAG_HAS_IS_REMOTE",
    "FLAG_IS_REMOTE",
    "KIND_FROM_OTLP",
    "KIND_TO_OTLP",
    "encode_otlp_json",
    "encode_value",
    "otlp_json_request",
    "span_flags",
]

_log = logging.getLogger(__name__)

# OTLP's span kind enum is the API's shifted by one (0 is SPAN_KIND_UNSPECIFIED there).
KIND_FROM_OTLP: Final[Mapping[int, SpanKind]] = {
    0: SpanKind.INTERNAL,
    1: SpanKind.INTERNAL,
    2: SpanKind.SERVER,
    3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER,
    5: SpanKind.CONSUMER,
}
KIND_TO_OTLP: Final[Mapping[SpanKind, int]] = {kind: number for number, kind in KIND_FROM_OTLP.items() if number}


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    """One ``ExportTraceServiceRequest`` as a single line of OTLP JSON, newline included.

    Built directly from the SDK spans rather than through ``encode_spans`` + ``MessageToDict``:
    that path costs ~95 us per span here, this one ~10, and the exporter thread holds the GIL
    the proxy's hot path needs while it encodes. The output is the same JSON object (the test
    suite compares it with the reference path), hex ids aside.
    """
    return dumps_line(otlp_json_request(spans), separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def otlp_json_request(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The OTLP JSON object for ``spans``, grouped by resource then scope as ``encode_spans`` does."""
    groups: dict[Resource, dict[InstrumentationScope | None, list[dict[str, Any]]]] = {}
    for span in spans:
        scopes = groups.setdefault(span.resource, {})
        scopes.setdefault(span.instrumentation_scope or None, []).append(_json_span(span))
    resource_spans: list[dict[str, Any]] = []
    for resource, scopes in groups.items():
        scope_spans: list[dict[str, Any]] = []
        for scope, encoded in scopes.items():
            entry: dict[str, Any] = {"scope": _json_scope(scope), "spans": encoded}
            if scope is not None and scope.schema_url:
                entry["schemaUrl"] = scope.schema_url
            scope_spans.append(entry)
        resource_entry: dict[str, Any] = {"resource": _with_attributes({}, resource.attributes)}
        resource_entry["scopeSpans"] = scope_spans
        if resource.schema_url:
            resource_entry["schemaUrl"] = resource.schema_url
        resource_spans.append(resource_entry)
    return {"resourceSpans": resource_spans} if resource_spans else {}


def _json_span(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None  # an SDK span always has one
    out: dict[str, Any] = {"traceId": f"{context.trace_id:032x}", "spanId": f"{context.span_id:016x}"}
    if context.trace_state:
        out["traceState"] = ",".join(f"{k}={v}" for k, v in context.trace_state.items())
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.name:
        out["name"] = span.name
    out["kind"] = KIND_TO_OTLP[span.kind]
    if span.start_time:
        out["startTimeUnixNano"] = str(span.start_time)
    if span.end_time:
        out["endTimeUnixNano"] = str(span.end_time)
    _with_attributes(out, span.attributes, span.dropped_attributes)
    if span.events:
        out["events"] = [_json_event(event) for event in span.events]
    if span.dropped_events:
        out["droppedEventsCount"] = span.dropped_events
    if span.links:
        out["links"] = [
            _with_attributes(
                {"traceId": f"{link.context.trace_id:032x}", "spanId": f"{link.context.span_id:016x}"},
                link.attributes,
                link.dropped_attributes,
            )
            | {"flags": _context_flags(link.context)}
            for link in span.links
        ]
    if span.dropped_links:
        out["droppedLinksCount"] = span.dropped_links
    status: dict[str, Any] = {}
    if span.status.description:
        status["message"] = span.status.description
    if span.status.status_code.value:
        status["code"] = span.status.status_code.value
    out["status"] = status
    out["flags"] = _context_flags(span.parent)
    return out


def _json_event(event: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"timeUnixNano": str(event.timestamp)}
    if event.name:
        out["name"] = event.name
    return _with_attributes(out, event.attributes, event.dropped_attributes)


def _context_flags(parent: SpanContext | None) -> int:
    return span_flags(parent is not None and parent.is_remote)


def _json_scope(scope: InstrumentationScope | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if scope is not None:
        if scope.name:
            out["name"] = scope.name
        if scope.version:
            out["version"] = scope.version
        _with_attributes(out, scope.attributes)
    return out


def _with_attributes(out: dict[str, Any], attributes: Mapping[str, Any] | None, dropped: int = 0) -> dict[str, Any]:
    if attributes:
        encoded = []
        for key, value in attributes.items():
            try:
                encoded.append({"key": key, "value": encode_value(value)})
            except (TypeError, ValueError) as exc:  # as encode_spans does: lose the attribute, not the span
                _log.warning("span attribute %r not encoded: %s", key, exc)
        if encoded:
            out["attributes"] = encoded
    if dropped:
        out["droppedAttributesCount"] = dropped
    return out
