"""OTLP JSON-lines span files: the exporter that writes them and the reader the analysis joins on.

One line per export batch, each an OTLP JSON ``ExportTraceServiceRequest`` (see ``otlp_json``), the
way the collector's file exporter writes them. Several processes of one run may append to one file.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import logging
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

from opentelemetry.sdk.resources import SERVICE_NAME
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from mcpfault.telemetry.otlp_json import KIND_FROM_OTLP, encode_otlp_json
from mcpfault.telemetry.otlp_lines import SpanLinesFile

_log = logging.getLogger(__name__)

# A bench compresses each session's span files once the session is judged (most of a run directory's
# bytes are spans); every reader takes a file as written or compressed.
COMPRESSED_SUFFIX: Final = ".gz"
SPAN_FILE_GLOBS: Final = ("*spans.jsonl", "*spans.jsonl.gz")


def span_file_bytes(path: Path) -> bytes:
    """The JSON lines of a span file, as written or compressed: ``path`` itself, or ``path.gz`` when
    only that exists. A compressed file cut short (a writer killed) gives what it holds."""
    if not path.exists() and not path.name.endswith(COMPRESSED_SUFFIX):
        compressed = path.with_name(path.name + COMPRESSED_SUFFIX)
        if compressed.exists():
            path = compressed
    data = path.read_bytes()
    if not path.name.endswith(COMPRESSED_SUFFIX):
        return data
    inflate = zlib.decompressobj(wbits=31)  # gzip framing; unlike gzip.decompress, keeps a cut file's start
    try:
        return inflate.decompress(data)
    except zlib.error as exc:
        _log.warning("%s: not a gzip file (%s); read as it is", path, exc)
        return data


def find_span_files(run_dir: Path) -> list[Path]:
    """Every span file under ``run_dir`` (recursively), as written or compressed, sorted."""
    found = {path for pattern in SPAN_FILE_GLOBS for path in Path(run_dir).rglob(pattern) if path.is_file()}
    return sorted(found)


def compress_span_files(directory: Path, names: Sequence[str]) -> None:
    """Replace each of ``names`` in ``directory`` by its gzip (``NAME.gz``); nothing is lost. Written
    beside it first and renamed, so a reader sees one whole file or the other."""
    for name in names:
        plain = directory / name
        if not plain.is_file():
            continue
        target = directory / (name + COMPRESSED_SUFFIX)
        partial = directory / (name + COMPRESSED_SUFFIX + ".partial")
        partial.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=6, mtime=0))
        os.replace(partial, target)
        plain.unlink()


_KIND_NAMES: Final = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS_NAMES: Final = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


# --- writing ------------------------------------------------------------------------------------


class OtlpJsonLinesExporter(SpanLinesFile, SpanExporter):
    """The SDK's exporter onto a span file (``otlp_lines.SpanLinesFile``): each export batch as one line
    of OTLP JSON, the way the collector's file exporter writes it."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = encode_otlp_json(spans)
        except Exception:  # a bad attribute must not kill the exporter thread
            _log.exception("could not encode %d spans as OTLP JSON", len(spans))
            return SpanExportResult.FAILURE
        try:
            written = self.write_line(line)
        except OSError:
            _log.exception("could not write spans to %s", self.path)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS if written else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # unbuffered: every line is in the file once export returns


# --- reading ------------------------------------------------------------------------------------


AttributeValue = str | bool | int | float | bytes | tuple[Any, ...] | dict[str, Any] | None


class SpanEvent(NamedTuple):
    name: str
    attributes: dict[str, AttributeValue]


class SpanLink(NamedTuple):
    """A span link: the (trace, span) it points at, and what the link says of it."""

    trace_id: str
    span_id: str
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
    links: tuple[SpanLink, ...] = ()  # spans of other traces this one points at (a task's session)

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
    data = span_file_bytes(Path(path))
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
        kind=KIND_FROM_OTLP.get(_enum(span.get("kind", 0), _KIND_NAMES), SpanKind.INTERNAL),
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
        links=tuple(
            SpanLink(_hex_id(link["traceId"], 16), _hex_id(link["spanId"], 8), _attributes(link.get("attributes", ())))
            for link in span.get("links", ())
        ),
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
