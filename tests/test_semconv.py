"""The proxy's spans follow the MCP semantic conventions as semantic-conventions-genai gives them now:
SERVER-span error classification, no mcp.session.id on 2026-07-28 traffic, network.protocol.*."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcpfault.faults.base import Call
from mcpfault.faults.engine import PASS
from mcpfault.proxy.core import Finished
from mcpfault.proxy.span_endings import Clock, SpanEndings
from mcpfault.telemetry import names
from mcpfault.telemetry.fastspans import SpanHandle
from mcpfault.telemetry.names import Received
from mcpfault.telemetry.span_json import Filled, SharedAttributes
from mcpfault.telemetry.tracing import read_spans
from tests.conftest import write_profile
from tests.http_support import LEGACY, MODERN, http_proxy, sdk_server


def ending(
    received: Received, error_code: int | None = None, *, version: str = LEGACY, session: str | None = None
) -> Any:
    # An annotation takes the slow path, whose attributes the templates copy (test_fastspans checks that).
    endings = SpanEndings(Clock(), None, SharedAttributes({}), session_id=session, annotate=lambda outcome: ({}, []))
    call = Call.from_body({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}})
    outcome = Finished(call, PASS, 1.0, 2.0, received, error_code, True, 0.0, version, 0.0)
    handle = SpanHandle("1" * 32, "2" * 16, None, "01", None, "", 2, {}, 0)
    ending = endings.ending(handle, outcome)
    assert not isinstance(ending, bytes | Filled)
    encoded, _events, error, _end, _name = ending
    assert isinstance(encoded, list)  # OTLP JSON entries, encoded once per kind of ending
    attributes = {entry["key"]: next(iter(entry["value"].values())) for entry in encoded}
    return attributes, error


@pytest.mark.parametrize("code", [-32600, -32601, -32602])
def test_the_clients_mistakes_are_no_error_on_a_server_span(code: int) -> None:
    attributes, error = ending("error", code)
    assert error is None and names.ERROR_TYPE not in attributes
    assert attributes[names.RPC_RESPONSE_STATUS_CODE] == str(code)  # the code is still recorded


@pytest.mark.parametrize("code", [-32603, -32000, -32050, -32099])
def test_internal_and_server_errors_are_errors(code: int) -> None:
    attributes, error = ending("error", code)
    assert error == ("error",)
    assert attributes[names.ERROR_TYPE] == str(code) and attributes[names.RPC_RESPONSE_STATUS_CODE] == str(code)


def test_a_tool_error_and_a_lost_answer_are_errors() -> None:
    assert ending("tool_error")[0][names.ERROR_TYPE] == names.ERROR_TYPE_TOOL_ERROR
    assert ending("nothing")[0][names.ERROR_TYPE] == names.OTHER
    assert ending("response")[1] is None


def test_no_session_id_on_2026_07_28_traffic() -> None:
    assert ending("response", session="s-1")[0][names.MCP_SESSION_ID] == "s-1"
    assert names.MCP_SESSION_ID not in ending("response", version=MODERN, session="s-1")[0]


def test_http_spans_name_the_network_protocol_and_modern_ones_no_session(tmp_path: Path) -> None:
    spans_file = tmp_path / "proxy-spans.jsonl"
    with (
        sdk_server(tmp_path) as server,
        http_proxy(write_profile(tmp_path, ""), server.url, tmp_path, "--spans", str(spans_file)) as proxy,
    ):

        async def scenario() -> None:
            async with Client(proxy.url, mode="auto", read_timeout_seconds=10) as client:
                await client.call_tool("echo", {"text": "modern"})

        anyio.run(scenario)
    spans = read_spans(spans_file)
    calls = [s for s in spans if s.attributes.get(names.MCP_METHOD_NAME) == "tools/call"]
    assert calls and all(s.attributes.get(names.MCP_PROTOCOL_VERSION) == MODERN for s in calls)
    for span in spans:
        assert span.attributes[names.NETWORK_PROTOCOL_NAME] == "http"
        assert span.attributes[names.NETWORK_PROTOCOL_VERSION] == "1.1"
        assert names.MCP_SESSION_ID not in span.attributes
