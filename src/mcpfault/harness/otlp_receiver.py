"""A loopback OTLP/HTTP trace receiver: an external agent's own spans into the session's span files.

An external agent gets ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing here. Whatever its OpenTelemetry SDK
exports to ``/v1/traces`` (protobuf, the SDK's default, or OTLP JSON; gzip or not) is written as one
OTLP JSON line per request to ``agent-spans.jsonl`` in the session directory, the encoding of every
span file of a run (``telemetry.otlp_json``: hex ids, integer enums). With ``TRACEPARENT`` as their
parent, the agent's spans join the task's trace, and ``mcpfault traces show`` finds them with the rest.

Only traces are kept; metrics and logs are acknowledged and dropped, so an agent that exports all
three signals is not met with errors.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
from pathlib import Path
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from mcpfault.proxy.http.server import HttpServer, Request, Response
from mcpfault.telemetry.otlp_lines import SpanLinesFile

MAX_EXPORT_BYTES: Final = 16 * 1024 * 1024
_PROTOBUF: Final = "application/x-protobuf"
_ID_FIELDS: Final = ("traceId", "spanId", "parentSpanId")


class OtlpReceiver:
    """Listens on 127.0.0.1 (a port the OS picks); ``endpoint`` is what goes in OTEL_EXPORTER_OTLP_ENDPOINT."""

    def __init__(self, spans_path: Path) -> None:
        self.spans_path = spans_path
        self.exports = 0  # trace export requests taken
        self.endpoint = ""
        self._file: SpanLinesFile | None = None
        self._server = HttpServer(self._handle, max_body_bytes=MAX_EXPORT_BYTES)

    async def start(self) -> str:
        port = await self._server.listen("127.0.0.1", 0)
        self.endpoint = f"http://127.0.0.1:{port}"
        return self.endpoint

    async def close(self) -> None:
        await self._server.close()
        if self._file is not None:
            self._file.shutdown()

    async def _handle(self, request: Request) -> Response:
        if request.method != "POST":
            return Response(status=405, headers={"Allow": "POST"}, text="POST OTLP exports here\n")
        if request.path in ("/v1/metrics", "/v1/logs"):
            return Response(status=200, content_type=_PROTOBUF)  # not kept: see the module's docstring
        if request.path != "/v1/traces":
            return Response(status=404, text=f"{request.path}: this receiver takes traces at /v1/traces\n")
        body = await request.read()
        if request.headers.get("Content-Encoding", "").lower() == "gzip":
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError) as exc:
                return Response(status=400, text=f"the gzip body does not decompress ({exc})\n")
        content_type = request.headers.get("Content-Type", _PROTOBUF).split(";")[0].strip().lower()
        try:
            document = _json_export(body) if content_type == "application/json" else _protobuf_export(body)
        except (DecodeError, ValueError) as exc:
            return Response(status=400, text=f"not an OTLP trace export ({content_type}): {exc}\n")
        if document.get("resourceSpans"):
            if self._file is None:
                self._file = SpanLinesFile(self.spans_path)
            self._file.write_line(json.dumps(document, separators=(",", ":")).encode() + b"\n")
            self.exports += 1
        if content_type == "application/json":
            return Response(status=200, body=b"{}", content_type="application/json")
        return Response(status=200, body=ExportTraceServiceResponse().SerializeToString(), content_type=_PROTOBUF)


def _protobuf_export(body: bytes) -> dict[str, Any]:
    """A protobuf export as OTLP JSON: the protobuf JSON mapping, with OTLP's hex ids and integer enums."""
    request = ExportTraceServiceRequest.FromString(body)
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return document


def _hex_ids(item: dict[str, Any]) -> None:
    for name in _ID_FIELDS:
        value = item.get(name)
        if isinstance(value, str) and value:
            try:
                item[name] = base64.b64decode(value, validate=True).hex()
            except (binascii.Error, ValueError):
                raise ValueError(f"{name} {value!r} is not base64") from None


def _json_export(body: bytes) -> dict[str, Any]:
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError("the body is not a JSON object")
    return document
