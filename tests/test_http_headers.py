"""The headers that mirror a 2026-07-28 request's body over HTTP (Mcp-Method, Mcp-Name, Mcp-Param-*):
a fault that rewrites the body keeps them consistent; ``header_mismatch`` breaks them on purpose, and
the SDK's server (mcp 2.x) answers -32020."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError

from mcpfault.faults import profile
from mcpfault.faults.catalog import CATALOG
from mcpfault.protocol import headers as mirrored
from tests.conftest import write_profile
from tests.http_support import ACCEPT, MODERN, http_proxy, jsonrpc, modern_meta, sdk_server, sse_messages

pytestmark = pytest.mark.slow


def test_consistent_headers_follow_a_rewritten_body() -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "b", "arguments": {"x": 1}}}
    given = [("Mcp-Method", "tools/call"), ("Mcp-Name", "a"), ("Mcp-Param-X", "1"), ("Mcp-Param-Gone", "v")]
    given.append(("Accept", ACCEPT))
    assert mirrored.consistent(given, body) == [
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "b"),
        ("Mcp-Param-X", "1"),
        ("Accept", ACCEPT),
    ]
    read = {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "netops://devices/é/config"}}
    (name,) = [v for k, v in mirrored.consistent([("Mcp-Name", "x")], read) if k == "Mcp-Name"]
    assert name.startswith("=?base64?") and mirrored.decode_value(name) == "netops://devices/é/config"
    assert mirrored.consistent([("Mcp-Param-A", "1")], read) == []  # no argument carries it any more
    assert mirrored.decode_value("=?base64?not base64!?=") is None


def test_header_mismatch_is_one_module_and_takes_every_request_over_http() -> None:
    fault_type = CATALOG.get("header_mismatch")
    assert fault_type is not None and fault_type.transports == {"http"}
    assert {"tools/call", "resources/read", "prompts/get"} <= fault_type.targets
    rule = profile.loads('[[faults]]\ntype = "header_mismatch"\nheader = "name"\nmethods = ["resources/read"]').rules[0]
    assert rule.methods == {"resources/read"}


MISMATCH = """
name = "mismatch"

[[faults]]
name = "wrong-header"
type = "header_mismatch"
header = "{header}"
tools = ["echo"]
"""


@pytest.mark.anyio
# A protocol-version header of the other era routes the request there before any check: the SDK's server
# then wants the 2025-11-25 session the request never had (-32600, "Missing session ID").
@pytest.mark.parametrize(
    ("header", "code"),
    [("method", mirrored.HEADER_MISMATCH), ("name", mirrored.HEADER_MISMATCH), ("protocol_version", -32600)],
)
async def test_a_2026_server_refuses_a_request_whose_headers_disagree(tmp_path: Path, header: str, code: int) -> None:
    profile_path = write_profile(tmp_path, MISMATCH.replace("{header}", header))
    with sdk_server(tmp_path) as server, http_proxy(profile_path, server.url, tmp_path) as proxy:
        with anyio.fail_after(30):
            async with Client(proxy.url, mode="auto", read_timeout_seconds=10) as client:
                assert client.protocol_version == MODERN
                with pytest.raises(MCPError) as caught:
                    await client.call_tool("echo", {"text": "hi"})
                assert caught.value.error.code == code
                assert (await client.call_tool("add", {"a": 1, "b": 2})).structured_content == {"result": 3}
        events = [e for e in proxy.events() if e["rule"] == "wrong-header"]
        # The SDK's client answers -32020 by listing the tools again and retrying once: refused again.
        assert {(e["fault_mode"], e["upstream_contacted"]) for e in events} == {(header, True)}
        # A 400 whose JSON-RPC error has a null id is relayed as the HTTP error it is.
        received = {(e["client_received"], e.get("error_code")) for e in events}
        assert received == ({("error", code)} if code == mirrored.HEADER_MISMATCH else {("http_error", None)})


@pytest.mark.anyio
async def test_a_2025_server_session_reads_only_the_body(tmp_path: Path) -> None:
    profile_path = write_profile(tmp_path, MISMATCH.replace("{header}", "method"))
    with sdk_server(tmp_path) as server, http_proxy(profile_path, server.url, tmp_path) as proxy:
        with anyio.fail_after(30):
            async with Client(proxy.url, mode="legacy", read_timeout_seconds=10) as client:
                answered = await client.call_tool("echo", {"text": "hi"})
                assert answered.content[0].text == "hi"  # type: ignore[union-attr]


DRIFT = """
name = "drift-region"

[[faults]]
name = "renamed-region"
type = "schema_drift"
tools = ["forecast"]
rename_args = { region = "area" }
"""


def _post(http: httpx2.Client, url: str, body: dict[str, Any], extra: dict[str, str]) -> list[dict[str, Any]]:
    headers = {"Accept": ACCEPT, "Content-Type": "application/json", "MCP-Protocol-Version": MODERN, **extra}
    answer = http.post(url, json=body, headers=headers)
    if answer.headers.get("content-type", "").startswith("application/json"):
        return [answer.json()]
    return sse_messages(answer.text)


def test_a_rewritten_body_is_forwarded_with_headers_that_agree(tmp_path: Path) -> None:
    """The client sends the old (pre-drift) optional argument with its Mcp-Param header; the drifted
    server ignores the old name, so the proxy drops it from the body, and the header with it."""
    profile_path = write_profile(tmp_path, DRIFT)
    with (
        sdk_server(tmp_path) as server,
        http_proxy(profile_path, server.url, tmp_path) as proxy,
        httpx2.Client(timeout=10) as http,
    ):
        listing = jsonrpc(1, "tools/list", {"_meta": modern_meta()})
        _post(http, proxy.url, listing, {"Mcp-Method": "tools/list"})  # the proxy learns the schemas
        arguments = {"city": "Oslo", "region": "eu"}
        call = jsonrpc(2, "tools/call", {"name": "forecast", "arguments": arguments, "_meta": modern_meta()})
        mirrored_headers = {"Mcp-Method": "tools/call", "Mcp-Name": "forecast", "Mcp-Param-Region": "eu"}
        (answer,) = _post(http, proxy.url, call, mirrored_headers)
        assert "error" not in answer, answer
        assert answer["result"]["content"][0]["text"] == "sunny in Oslo (global)"  # the old name was ignored
        (listed,) = _post(http, proxy.url, listing, {"Mcp-Method": "tools/list"})
        forecast = next(t for t in listed["result"]["tools"] if t["name"] == "forecast")
        assert "area" in forecast["inputSchema"]["properties"]  # the drift, in force since the first call
        renamed = {"city": "Oslo", "area": "eu"}
        call = jsonrpc(3, "tools/call", {"name": "forecast", "arguments": renamed, "_meta": modern_meta()})
        (answer,) = _post(http, proxy.url, call, mirrored_headers)
        assert answer["result"]["content"][0]["text"] == "sunny in Oslo (eu)"  # translated back; header agrees
        direct = jsonrpc(4, "tools/call", {"name": "forecast", "arguments": {"city": "Oslo"}, "_meta": modern_meta()})
        (refused,) = _post(http, server.url, direct, mirrored_headers)
        assert refused["error"]["code"] == mirrored.HEADER_MISMATCH  # what the proxy's rewrite would have met
