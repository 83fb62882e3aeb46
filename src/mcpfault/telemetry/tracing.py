"""Tracer set-up, the OTLP JSON-lines span files, and W3C trace context in ``params._meta``.

Spans go to two places, either or both: a local file (the embedded default, no services needed;
the analysis layer joins traces from these files) and an OTLP/HTTP endpoint (a collector, Jaeger).
Both get the same OTLP data model, so whatever reads one can read the other.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.sdk.environment_variables import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
)
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_log = logging.getLogger(__name__)

_TRACES_PATH = "v1/traces"
_USERINFO = re.compile(r"//[^/@]*@")  # credentials in a URL, kept out of error messages

# OTLP's span kind enum is the API's shifted by one (0 is SPAN_KIND_UNSPECIFIED there).
_KIND_FROM_OTLP: dict[int, SpanKind] = {
    0: SpanKind.INTERNAL,
    1: SpanKind.INTERNAL,
    2: SpanKind.SERVER,
    3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER,
    5: SpanKind.CONSUMER,
}
_KIND_NAMES: dict[str, int] = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS_NAMES: dict[str, int] = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


# --- span names -------------------------------------------------------------------------------


def span_name(method: str, target: str | None) -> str:
    """``{mcp.method.name} {target}`` per the MCP conventions, or the bare method without a target.

    ``target`` is the tool name of a tools/call or the prompt name of a prompts/get.
    """
    return f"{method} {target}" if target else method


# --- tracer provider --------------------------------------------------------------------------


def configure_tracing(
    service_name: str,
    *,
    spans_file: Path | None = None,
    otlp_endpoint: str | None = None,
    resource_attributes: Mapping[str, str] | None = None,
) -> TracerProvider | None:
    """A TracerProvider exporting to ``spans_file`` and/or OTLP/HTTP, or None when there is nowhere to export.

    Precedence, highest first: the explicit arguments, then the ``OTEL_*`` environment, then
    ``service_name``. ``service_name`` is the program's own default, so ``OTEL_SERVICE_NAME`` (or
    ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``) renames the service as operators expect, while a
    ``service.name`` in ``resource_attributes`` wins over both. ``otlp_endpoint`` wins over
    ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``. Headers come only from ``OTEL_EXPORTER_OTLP_[TRACES_]HEADERS``,
    read by the exporter itself: they are credentials and never reach the resource, a span or a log.

    Does not install the provider globally: the caller owns it and must ``shutdown()`` it to flush.
    """
    endpoint = _traces_endpoint(otlp_endpoint) if otlp_endpoint else None
    env_endpoint = bool(
        os.environ.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or os.environ.get(OTEL_EXPORTER_OTLP_ENDPOINT)
    )
    if spans_file is None and endpoint is None and not env_endpoint:
        return None

    provider = TracerProvider(resource=_resource(service_name, resource_attributes))
    if spans_file is not None:
        provider.add_span_processor(BatchSpanProcessor(OtlpJsonLinesExporter(spans_file)))
    if endpoint is not None or env_endpoint:
        # Imported here: the exporter pulls in requests and the protobuf modules (~70 ms), which a
        # proxy writing only span files should not pay at start-up.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # endpoint=None lets the exporter resolve the environment itself, signal path included.
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


def _resource(service_name: str, explicit: Mapping[str, str] | None) -> Resource:
    attributes: dict[str, str] = {}
    # Resource.create merges our attributes over the environment's, so service_name would always
    # win; pass it only when the environment names no service.
    if not OTELResourceDetector().detect().attributes.get(SERVICE_NAME):
        attributes[SERVICE_NAME] = service_name
    if explicit:
        attributes.update(explicit)
    return Resource.create(attributes)


def _traces_endpoint(endpoint: str) -> str:
    """The full traces URL for an endpoint given as a base (``http://host:4318``) or in full.

    The exporter takes its ``endpoint`` argument verbatim, but people pass the collector's base URL
    as they would in ``OTEL_EXPORTER_OTLP_ENDPOINT``; append the signal path as the spec does there.
    """
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"OTLP endpoint {_USERINFO.sub('//***@', endpoint)!r} is not an http(s) URL with a host; "
            "give the collector's OTLP/HTTP address, for example http://127.0.0.1:4318"
        )
    path = parts.path.rstrip("/")
    if not path.endswith("/" + _TRACES_PATH):
        path = f"{path}/{_TRACES_PATH}"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


# --- OTLP JSON lines --------------------------------------------------------------------------


class OtlpJsonLinesExporter(SpanExporter):
    """Each export batch as one line of OTLP JSON, the way the collector's file exporter writes it.

    That is the protobuf JSON mapping of ``ExportTraceServiceRequest`` with OTLP's two amendments:
    trace and span ids are hex (not base64) and enums are integers. Jaeger's ``/api/v3`` answers in
    the same shape, so one reader serves both.

    The file is opened for append, unbuffered, and each line goes out in one ``write`` call: with
    O_APPEND that keeps lines from several processes of one run whole rather than interleaved, and a
    crash loses at most the batch in flight, leaving at worst a torn last line that ``read_spans`` skips.
    """

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = self._path.open("ab", buffering=0)
        # A previous writer that died mid-line left a torn line; end it so our first line stays whole.
        if self._path.stat().st_size > 0 and not _ends_with_newline(self._path):
            self._write_all(b"\n")

    @property
    def path(self) -> Path:
        return self._path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = encode_otlp_json(spans)
        except Exception:  # a bad attribute must not kill the exporter thread
            _log.exception("could not encode %d spans as OTLP JSON", len(spans))
            return SpanExportResult.FAILURE
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            try:
                self._write_all(line)
            except OSError:
                _log.exception("could not write spans to %s", self._path)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _write_all(self, data: bytes) -> None:
        assert self._file is not None
        view = memoryview(data)
        while view:  # a raw write may be short (a full disk, a signal); never leave half a line unsaid
            written = self._file.write(view)
            if not written:
                raise OSError(f"could not write to {self._path}")
            view = view[written:]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # unbuffered: every line is in the file once export returns

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    """One ``ExportTraceServiceRequest`` as a single line of OTLP JSON, newline included.

    Built directly from the SDK spans rather than through ``encode_spans`` + ``MessageToDict``:
    that path costs ~95 us per span here, this one ~10, and the exporter thread holds the GIL
    the proxy's hot path needs while it encodes. The output is the same JSON object (the test
    suite compares it with the reference path), hex ids aside.
    """
    return json.dumps(otlp_json_request(spans), separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


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


# OTLP span flags: bit 8 says whether bit 9 (parent is remote) is known.
_FLAG_HAS_IS_REMOTE = 0x100
_FLAG_IS_REMOTE = 0x200
_KIND_TO_OTLP: dict[SpanKind, int] = {kind: number for number, kind in _KIND_FROM_OTLP.items() if number}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


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
    out["kind"] = _KIND_TO_OTLP[span.kind]
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
            | {"flags": _span_flags(link.context)}
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
    out["flags"] = _span_flags(span.parent)
    return out


def _json_event(event: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"timeUnixNano": str(event.timestamp)}
    if event.name:
        out["name"] = event.name
    return _with_attributes(out, event.attributes, event.dropped_attributes)


def _span_flags(parent: SpanContext | None) -> int:
    return _FLAG_HAS_IS_REMOTE | (_FLAG_IS_REMOTE if parent is not None and parent.is_remote else 0)


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
                encoded.append({"key": key, "value": _json_value(value)})
            except (TypeError, ValueError) as exc:  # as encode_spans does: lose the attribute, not the span
                _log.warning("span attribute %r not encoded: %s", key, exc)
        if encoded:
            out["attributes"] = encoded
    if dropped:
        out["droppedAttributesCount"] = dropped
    return out


def _json_value(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"{value} does not fit in int64")
        return {"intValue": str(value)}
    if isinstance(value, float):
        # JSON has no NaN or infinities; the protobuf mapping spells them as strings.
        return {"doubleValue": value if math.isfinite(value) else _NON_FINITE[str(value)]}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, Sequence):
        values = [_json_value(v) for v in value]
        return {"arrayValue": {"values": values} if values else {}}
    if isinstance(value, Mapping):
        items = [{"key": str(k), "value": _json_value(v)} for k, v in value.items()]
        return {"kvlistValue": {"values": items} if items else {}}
    raise TypeError(f"unsupported attribute type {type(value).__name__}")


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


AttributeValue = str | bool | int | float | bytes | tuple[Any, ...] | dict[str, Any] | None


class SpanEvent(NamedTuple):
    name: str
    attributes: dict[str, AttributeValue]


@dataclass(frozen=True, slots=True)
class SpanView:
    """One span as read back from an OTLP JSON file: what the analysis layer joins on."""

    trace_id: str  # 32 lowercase hex digits
    span_id: str  # 16 lowercase hex digits
    parent_span_id: str | None
    name: str
    kind: SpanKind
    start_unix_nano: int
    end_unix_nano: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    status_code: StatusCode = StatusCode.UNSET
    status_message: str = ""
    service_name: str | None = None  # the resource's service.name: which process emitted it

    @property
    def duration_s(self) -> float:
        return (self.end_unix_nano - self.start_unix_nano) / 1e9


def read_spans(path: Path) -> list[SpanView]:
    """Every span in an OTLP JSON-lines file, in file order.

    Lenient by design, since the file may still be written to or its writer may have crashed: a
    torn last line is skipped silently, and any other line that is not an OTLP JSON request is
    skipped with a warning naming the file and line, so one bad batch never hides the others.
    Ids may be hex (OTLP JSON) or base64 (plain protobuf JSON); enums may be integers or names.
    """
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: empty, or a line its writer never finished
    spans: list[SpanView] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            spans.extend(_parse_request(json.loads(line)))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            _log.warning("%s:%d: skipped a line that is not an OTLP JSON trace request (%s)", path, number, exc)
    if torn.strip():
        try:
            spans.extend(_parse_request(json.loads(torn)))
        except (ValueError, TypeError, KeyError, AttributeError):
            pass  # a writer caught mid-line: the rest of the batch never reached the file
    return spans


def _parse_request(message: Any) -> Iterator[SpanView]:
    if not isinstance(message, dict) or not isinstance(message.get("resourceSpans"), list):
        raise ValueError("no resourceSpans list")
    for resource_spans in message["resourceSpans"]:
        resource = _attributes(resource_spans.get("resource", {}).get("attributes", ()))
        service = resource.get(SERVICE_NAME)
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                yield _parse_span(span, service if isinstance(service, str) else None)


def _parse_span(span: dict[str, Any], service: str | None) -> SpanView:
    status = span.get("status") or {}
    return SpanView(
        trace_id=_hex_id(span["traceId"], 16),
        span_id=_hex_id(span["spanId"], 8),
        parent_span_id=_hex_id(span["parentSpanId"], 8) if span.get("parentSpanId") else None,
        name=str(span.get("name", "")),
        kind=_KIND_FROM_OTLP.get(_enum(span.get("kind", 0), _KIND_NAMES), SpanKind.INTERNAL),
        start_unix_nano=int(span.get("startTimeUnixNano", 0)),
        end_unix_nano=int(span.get("endTimeUnixNano", 0)),
        attributes=_attributes(span.get("attributes", ())),
        events=tuple(
            SpanEvent(str(event.get("name", "")), _attributes(event.get("attributes", ())))
            for event in span.get("events", ())
        ),
        status_code=StatusCode(_enum(status.get("code", 0), _STATUS_NAMES)),
        status_message=str(status.get("message", "")),
        service_name=service,
    )


def _hex_id(value: str, size: int) -> str:
    if len(value) == size * 2:
        int(value, 16)  # raises ValueError if it is not hex
        return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"id {value!r} is neither hex nor base64") from exc
    if len(raw) != size:
        raise ValueError(f"id {value!r} is {len(raw)} bytes, expected {size}")
    return raw.hex()


def _enum(value: int | str, names: Mapping[str, int]) -> int:
    return value if isinstance(value, int) else names[value]


def _attributes(items: Any) -> dict[str, AttributeValue]:
    return {str(item["key"]): _any_value(item.get("value", {})) for item in items}


def _any_value(value: Mapping[str, Any]) -> AttributeValue:
    # OTLP's AnyValue: exactly one field set; int64 arrives as a JSON string per the protobuf mapping.
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return tuple(_any_value(v) for v in value["arrayValue"].get("values", ()))
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values", ()))
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    return None


# --- W3C trace context in params._meta ----------------------------------------------------------


class _MetaGetter(Getter[Mapping[str, Any]]):
    # A peer writes _meta; anything but a string value is treated as absent, never an exception.
    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [k for k in carrier if isinstance(k, str)]


class _MetaSetter(Setter[dict[str, Any]]):
    def set(self, carrier: dict[str, Any], key: str, value: str) -> None:
        carrier[key] = value


_PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
_GETTER = _MetaGetter()
_SETTER = _MetaSetter()


def extract_context(meta: Mapping[str, Any] | None) -> Context:
    """The trace context a peer sent in ``params._meta`` (``traceparent``, ``tracestate``, ``baggage``).

    Starts from an empty context rather than the current one, so a request without a valid
    ``traceparent`` starts a new trace instead of inheriting whatever the caller had open. Never
    raises: malformed or mistyped values give an empty context.
    """
    if not isinstance(meta, Mapping):
        return Context()
    try:
        return _PROPAGATOR.extract(meta, context=Context(), getter=_GETTER)
    except Exception:  # a peer's bytes must never crash the proxy
        return Context()


def inject_context(meta: dict[str, Any], context: Context | None = None) -> dict[str, Any]:
    """Write ``context``'s (default: the current) trace context into ``meta`` in place; returns ``meta``.

    With no valid span in the context nothing is written, so a peer's own ``traceparent`` survives.
    """
    _PROPAGATOR.inject(meta, context=context, setter=_SETTER)
    return meta
