"""Tracing for the mock server: a SERVER span per request, and the provider that exports them.

Traced (`serve(spans_path=...)`, `otlp_endpoint=...` or the `OTEL_EXPORTER_OTLP_*ENDPOINT` variables),
each request is a SERVER span per the MCP conventions, child of the `traceparent` in its `params._meta`,
and each accepted write adds a `mcpfault.state_change` event (op, revision, changed, incident id): a write
whose response a fault lost still shows that the server acted. OpenTelemetry is imported only then.
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING, Any

from mcpfault.telemetry import names as span_names

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from mcpfault.mock.session import Session
    from mcpfault.mock.world import World


class RequestSpans:
    """A SERVER span around each request a `Session` answers; built only when tracing, with its imports."""

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        from mcpfault.telemetry import names
        from mcpfault.telemetry.tracing import extract_context, span_name

        self._tracer = tracer
        self._kind = SpanKind.SERVER
        self._status, self._error = Status, StatusCode.ERROR
        self._extract, self._span_name = extract_context, span_name
        self._names = names

    def handle(self, session: Session, request: dict[str, Any]) -> dict[str, Any]:
        names = self._names
        method = request["method"]
        params = request.get("params")
        params = params if isinstance(params, dict) else {}
        tool = params.get("name") if method == "tools/call" else None
        tool = tool if isinstance(tool, str) else None
        attributes: dict[str, Any] = {
            names.MCP_METHOD_NAME: method,
            names.NETWORK_TRANSPORT: names.NETWORK_TRANSPORT_PIPE,
        }
        if request["id"] is not None:  # refused below, and the conventions have no value for a null id
            attributes[names.JSONRPC_REQUEST_ID] = str(request["id"])
        if tool is not None:
            attributes[names.GEN_AI_TOOL_NAME] = tool
            attributes[names.GEN_AI_OPERATION_NAME] = names.GEN_AI_OPERATION_EXECUTE_TOOL
        meta = params.get("_meta")
        span = self._tracer.start_span(
            self._span_name(method, tool),
            context=self._extract(meta if isinstance(meta, dict) else None),
            kind=self._kind,
            attributes=attributes,
        )
        writes = session.world.writes
        try:
            response = session.handle(request)
            if session.world.writes > writes:
                self._state_changes(span, session.world, writes, response)
            self._outcome(span, response)
        finally:
            span.end()
        return response

    def _state_changes(self, span: Span, world: World, before: int, response: dict[str, Any]) -> None:
        ours = span_names  # short, for the table below
        result = response.get("result")
        content = result.get("structuredContent") if isinstance(result, dict) else None
        content = content if isinstance(content, dict) else {}
        for write in world.write_log()[before:]:
            details: dict[str, Any] = {
                ours.STATE_OP: write.op,
                ours.STATE_REVISION: write.revision,
                ours.STATE_CHANGED: write.changed,
                ours.STATE_DEVICE_ID: str(write.arguments.get("device_id")),
            }
            if write.op == "open_incident" and isinstance(content.get("incident_id"), str):
                details[ours.STATE_INCIDENT_ID] = content["incident_id"]
            elif write.op == "set_maintenance" and isinstance(content.get("enabled"), bool):
                details[ours.STATE_MAINTENANCE_ENABLED] = content["enabled"]
            span.add_event(ours.EVENT_STATE_CHANGE, details)

    def _outcome(self, span: Span, response: dict[str, Any]) -> None:
        names = self._names
        error = response.get("error")
        if isinstance(error, dict):
            code = str(error.get("code"))
            span.set_attribute(names.ERROR_TYPE, code)
            span.set_attribute(names.RPC_RESPONSE_STATUS_CODE, code)
            span.set_status(self._status(self._error, str(error.get("message", ""))))
            return
        result = response.get("result")
        if isinstance(result, dict) and result.get("isError") is True:
            span.set_attribute(names.ERROR_TYPE, names.ERROR_TYPE_TOOL_ERROR)
            content = result.get("content") or [{}]
            text = content[0].get("text", "") if isinstance(content[0], dict) else ""
            span.set_status(self._status(self._error, str(text)))


def tracer_provider(spans_path: pathlib.Path | None, otlp_endpoint: str | None) -> TracerProvider | None:
    """A provider when anything asks for spans (arguments or the OTLP variables), else None without importing any."""
    from mcpfault.telemetry import otel_env

    if not otel_env.tracing_wanted(spans_path, otlp_endpoint):
        return None
    from mcpfault.telemetry.tracing import configure_tracing

    return configure_tracing(span_names.MOCK_SERVICE, spans_file=spans_path, otlp_endpoint=otlp_endpoint)
