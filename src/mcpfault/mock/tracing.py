"""Tracing for the mock server: a SERVER span per request, and the recorder that writes them.

Traced (`serve(spans_path=...)`, `otlp_endpoint=...` or the `OTEL_EXPORTER_OTLP_*ENDPOINT` variables),
each request is a SERVER span per the MCP conventions, child of the `traceparent` in its `params._meta`,
and each accepted write adds a `mcpfault.state_change` event (op, revision, changed, incident id): a write
whose response a fault lost still shows that the server acted. The judge counts duplicate writes from
these events. The spans are recorded with the proxy's span recorder (`telemetry.fastspans`): the same
OTLP JSON lines as the SDK's exporter writes, without importing the OpenTelemetry SDK, which cost each
start ~75 ms of CPU (the bench starts a mock server per session).
"""

from __future__ import annotations

import pathlib
import time
from typing import TYPE_CHECKING, Any, Final

from mcpfault.telemetry import names as span_names

if TYPE_CHECKING:
    from mcpfault.mock.session import Session
    from mcpfault.mock.world import World
    from mcpfault.telemetry.fastspans import SpanRecorder
    from mcpfault.telemetry.span_json import Event

_SERVER: Final = 2  # OTLP's SPAN_KIND_SERVER


class RequestSpans:
    """A SERVER span around each request a `Session` answers; built only when tracing."""

    def __init__(self, recorder: SpanRecorder) -> None:
        self._recorder = recorder

    def handle(self, session: Session, request: dict[str, Any]) -> dict[str, Any]:
        names = span_names
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
        meta = meta if isinstance(meta, dict) else {}
        # None: the client's own context is unsampled, and so is this request (parent-based sampling).
        span = self._recorder.start(
            names.span_name(method, tool),
            _SERVER,
            meta.get("traceparent"),
            attributes,
            time.time_ns(),
            tracestate=meta.get("tracestate"),
        )
        writes = session.world.writes
        events: list[Event] = []
        ending: dict[str, Any] = {}
        error: tuple[str] | None = None
        try:
            response = session.handle(request)
            if session.world.writes > writes:
                events = _state_changes(session.world, writes, response)
            error = _outcome(ending, response)
        finally:
            if span is not None:
                self._recorder.end(span, ending, events, error, time.time_ns())
        return response


def _state_changes(world: World, before: int, response: dict[str, Any]) -> list[Event]:
    """A `mcpfault.state_change` event per write the request made."""
    ours = span_names  # short, for the table below
    result = response.get("result")
    content = result.get("structuredContent") if isinstance(result, dict) else None
    content = content if isinstance(content, dict) else {}
    events: list[Event] = []
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
        events.append((ours.EVENT_STATE_CHANGE, time.time_ns(), details))
    return events


def _outcome(attributes: dict[str, Any], response: dict[str, Any]) -> tuple[str] | None:
    """The span's error status (its description) for an error answer, with `error.type` added to `attributes`."""
    names = span_names
    error = response.get("error")
    if isinstance(error, dict):
        code = str(error.get("code"))
        attributes[names.ERROR_TYPE] = code
        attributes[names.RPC_RESPONSE_STATUS_CODE] = code
        return (str(error.get("message", "")),)
    result = response.get("result")
    if isinstance(result, dict) and result.get("isError") is True:
        attributes[names.ERROR_TYPE] = names.ERROR_TYPE_TOOL_ERROR
        content = result.get("content") or [{}]
        text = content[0].get("text", "") if isinstance(content[0], dict) else ""
        return (str(text),)
    return None


def span_recorder(spans_path: pathlib.Path | None, otlp_endpoint: str | None, version: str) -> SpanRecorder | None:
    """A recorder when anything asks for spans (arguments or the OTLP variables), else None without importing one.

    Raises `ValueError` for an `OTEL_*` value that cannot be honoured, `OSError` when the spans file
    cannot be opened.
    """
    from mcpfault.telemetry import otel_env

    if not otel_env.tracing_wanted(spans_path, otlp_endpoint):
        return None
    settings = otel_env.read(otlp_endpoint)
    if spans_path is None and settings.export is None:
        return None
    from mcpfault.telemetry.fastspans import SpanRecorder

    return SpanRecorder(
        span_names.MOCK_SERVICE,
        spans_file=spans_path,
        settings=settings,
        scope_name=span_names.MOCK_SCOPE,
        scope_version=version,
    )
