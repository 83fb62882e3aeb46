"""A real OTLP/HTTP traces receiver for the telemetry tests: a local HTTP server that decodes every POST
as an ``ExportTraceServiceRequest`` (opentelemetry-proto; protobuf, or OTLP JSON with hex ids, gzip or
not, as the request's headers say) and answers as scripted."""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode

from mcpfault.faults.latency import Latency
from mcpfault.telemetry import names
from mcpfault.telemetry.tracing import span_name
from tests.http_support import serve_in_thread, server_url

Answer = tuple[int, dict[str, str], bytes]
"""What the receiver answers a request with: (status, headers, body)."""


def accepted(status: int = 200) -> Answer:
    """An empty protobuf answer with ``status``."""
    return (status, {"Content-Type": "application/x-protobuf"}, b"")


class OtlpReceiver:
    """A minimal OTLP/HTTP traces receiver on 127.0.0.1 (``base_url``); close it with ``close()``.

    It records every request as (path, lower-cased headers, decoded message) and answers the n-th
    request with ``script[n - 1]``, the last answer repeating; with no script, every answer is
    ``accepted(status)``.
    """

    def __init__(self, status: int = 200, *, script: Sequence[Answer] = ()) -> None:
        self.requests: list[tuple[str, dict[str, str], ExportTraceServiceRequest]] = []
        answers = list(script) or [accepted(status)]
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.headers.get("Content-Type") == "application/json":
                    from mcpfault.telemetry.export import otlp_json_to_protobuf

                    message = otlp_json_to_protobuf(json.loads(body))
                else:
                    message = ExportTraceServiceRequest()
                    message.ParseFromString(body)
                with lock:
                    receiver.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, message))
                    code, headers, answer = answers[min(len(receiver.requests), len(answers)) - 1]
                self.send_response(code)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._stack = contextlib.ExitStack()
        self.server = self._stack.enter_context(serve_in_thread(Handler))
        self.port = int(self.server.server_address[1])
        self.base_url = server_url(self.server)

    def spans(self) -> list[Any]:
        """Every span received, in order of arrival."""
        return [
            span
            for _, _, req in self.requests
            for rs in req.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]

    def service_names(self) -> set[str]:
        """The ``service.name`` of every resource the received spans came from."""
        return {
            kv.value.string_value
            for _, _, req in self.requests
            for rs in req.resource_spans
            for kv in rs.resource.attributes
            if kv.key == "service.name"
        }

    def close(self) -> None:
        self._stack.close()


SECRET = "s3cr3t-t0ken-do-not-leak"  # a credential no log, span or file may ever contain


def emit_request_spans(provider: TracerProvider) -> tuple[str, str, str]:
    """A CLIENT attempt with a SERVER child, the way the agent and the proxy nest. Returns hex ids."""
    tracer = provider.get_tracer("mcpfault.test")
    name = span_name("tools/call", "get_device_status")
    attributes: dict[str, Any] = {
        names.MCP_METHOD_NAME: "tools/call",
        names.GEN_AI_TOOL_NAME: "get_device_status",
        names.GEN_AI_OPERATION_NAME: names.GEN_AI_OPERATION_EXECUTE_TOOL,
        names.JSONRPC_REQUEST_ID: "7",
        names.NETWORK_TRANSPORT: names.NETWORK_TRANSPORT_PIPE,
        names.SERVER_PORT: 8080,
        names.UPSTREAM_CONTACTED: True,
        names.FAULT_RULE: 2,
        "mcpfault.test.ratio": 0.25,
        "mcpfault.test.list": ["a", "b"],
    }
    with (
        tracer.start_as_current_span(name, kind=SpanKind.CLIENT) as parent,
        tracer.start_as_current_span(name, kind=SpanKind.SERVER, attributes=attributes) as child,
    ):
        child.add_event(names.EVENT_UPSTREAM_SENT, {"bytes": 120})
        child.add_event(Latency.event_name, {"delay_s": 0.5})
        child.set_attribute(names.ERROR_TYPE, "-32603")
        child.set_status(Status(StatusCode.ERROR, "internal error"))
    return (
        format(parent.get_span_context().trace_id, "032x"),
        format(parent.get_span_context().span_id, "016x"),
        format(child.get_span_context().span_id, "016x"),
    )
