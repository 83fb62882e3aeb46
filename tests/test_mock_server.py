"""The mock MCP server end to end: a real subprocess, driven by the SDK client in both protocol eras."""

from __future__ import annotations

import inspect
import json
import pathlib
import select
import signal
import subprocess
import sys
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from mcpfault.mock import World

pytestmark = pytest.mark.slow

SEED = 7
TIMEOUT = 30.0
READS = {"get_site", "list_sites", "list_devices", "get_device_status", "get_interface_metrics"}
WRITES = {"set_maintenance", "open_incident"}
ERAS = [("legacy", "2025-11-25"), ("auto", "2026-07-28")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _server_args(state: pathlib.Path) -> list[str]:
    return ["-m", "mcpfault.mock", "--seed", str(SEED), "--state", str(state)]


def _structured(result: CallToolResult) -> dict[str, Any]:
    """The structured answer, after checking the text content carries the same JSON."""
    assert result.is_error is False, result.content
    assert result.structured_content is not None
    assert len(result.content) == 1
    text = result.content[0]
    assert isinstance(text, TextContent)
    assert json.loads(text.text) == result.structured_content
    structured: dict[str, Any] = result.structured_content
    assert isinstance(structured["as_of"], int)
    return structured


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_tools_over_stdio(mode: str, version: str, tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state.json"
    world = World.generate(SEED)  # the ground truth the server should agree with
    params = StdioServerParameters(command=sys.executable, args=_server_args(state))
    with anyio.fail_after(TIMEOUT):
        async with Client(params, mode=mode) as client:
            assert client.protocol_version == version

            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == READS | WRITES
            for name, tool in tools.items():
                assert tool.input_schema["type"] == "object"
                assert tool.output_schema is not None
                assert "as_of" in tool.output_schema["properties"]
                assert tool.output_schema.get("additionalProperties") is False
                hints = tool.annotations
                assert hints is not None
                assert hints.destructive_hint is False
                assert hints.open_world_hint is False
                assert hints.read_only_hint is (name in READS)
                assert hints.idempotent_hint is (name != "open_incident")
            assert tools["open_incident"].input_schema["required"] == ["device_id", "summary", "severity"]
            severity = tools["open_incident"].input_schema["properties"]["severity"]
            assert severity["enum"] == ["critical", "high", "medium", "low"]

            sites = _structured(await client.call_tool("list_sites", {}))
            assert [s["site_id"] for s in sites["sites"]] == world.site_ids()
            assert sites == world.list_sites()
            site_id = world.site_ids()[0]
            assert _structured(await client.call_tool("get_site", {"site_id": site_id})) == world.get_site(site_id)
            devices = _structured(await client.call_tool("list_devices", {"site_id": site_id}))
            assert devices == world.list_devices(site_id)
            device_id = devices["devices"][0]["device_id"]
            status = _structured(await client.call_tool("get_device_status", {"device_id": device_id}))
            assert status == world.get_device_status(device_id)
            metrics = _structured(await client.call_tool("get_interface_metrics", {"device_id": device_id}))
            assert metrics == world.get_interface_metrics(device_id)

            start = sites["as_of"]
            maint = _structured(
                await client.call_tool("set_maintenance", {"device_id": device_id, "enabled": True, "reason": "swap"})
            )
            assert maint == {
                "as_of": start + 1,
                "device_id": device_id,
                "enabled": True,
                "reason": "swap",
                "changed": True,
            }
            repeat = _structured(
                await client.call_tool("set_maintenance", {"device_id": device_id, "enabled": True, "reason": "swap"})
            )
            assert repeat["changed"] is False and repeat["as_of"] == start + 1

            args = {"device_id": device_id, "summary": "uplink errors", "severity": "high"}
            first = _structured(await client.call_tool("open_incident", args))
            second = _structured(await client.call_tool("open_incident", args))
            assert first["created"] and second["created"]
            assert first["incident_id"] != second["incident_id"]
            keyed = {**args, "idempotency_key": "retry-1"}
            third = _structured(await client.call_tool("open_incident", keyed))
            again = _structured(await client.call_tool("open_incident", keyed))
            assert again == {**third, "created": False}
            assert again["as_of"] == start + 4

            after = _structured(await client.call_tool("get_device_status", {"device_id": device_id}))
            assert after["maintenance"] == {"enabled": True, "reason": "swap"}
            new_ids = [first["incident_id"], second["incident_id"], third["incident_id"]]
            assert after["open_incident_ids"][-3:] == new_ids

    # The client closed stdin; the server wrote its state on the way out.
    recorded = json.loads(state.read_text())
    assert recorded["revision"] == start + 4
    assert recorded["writes"] == 6
    assert recorded["state_changes"] == 4
    assert [i["incident_id"] for i in recorded["incidents"]][-3:] == new_ids
    assert recorded["incidents"][-1]["idempotency_key"] == "retry-1"
    assert recorded["maintenance"][device_id]["enabled"] is True
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left no temp file behind


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_unknown_ids_are_tool_errors(mode: str, version: str, tmp_path: pathlib.Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=_server_args(tmp_path / "state.json"))
    with anyio.fail_after(TIMEOUT):
        async with Client(params, mode=mode) as client:
            assert client.protocol_version == version
            for tool, args, id_ in [
                ("get_device_status", {"device_id": "atlantis9-core01"}, "atlantis9-core01"),
                ("get_interface_metrics", {"device_id": "x"}, "x"),
                ("open_incident", {"device_id": "x", "summary": "s", "severity": "low"}, "x"),
                ("list_devices", {"site_id": "atlantis9"}, "atlantis9"),
                ("get_site", {"site_id": "atlantis9"}, "atlantis9"),
            ]:
                result = await client.call_tool(tool, args)
                assert result.is_error is True
                assert result.structured_content is None
                text = result.content[0]
                assert isinstance(text, TextContent)
                assert repr(id_) in text.text
                assert "list_sites" in text.text or "list_devices" in text.text
            bad = await client.call_tool("open_incident", {"device_id": "x", "summary": "s", "severity": "meh"})
            assert bad.is_error is True


class _RawServer:
    """The server as a bare subprocess speaking newline-delimited JSON-RPC (2025-11-25)."""

    def __init__(self, state: pathlib.Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *_server_args(state)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT)
        assert ready, f"no answer to {method} within {TIMEOUT}s"
        response: dict[str, Any] = json.loads(self.proc.stdout.readline())
        assert response["id"] == self._next_id
        return response

    def initialize(self) -> None:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}
        assert self.request("initialize", params)["result"]["protocolVersion"] == "2025-11-25"
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments})

    def wait(self) -> int:
        try:
            return self.proc.wait(TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()


def test_wire_shape_of_a_tool_result(tmp_path: pathlib.Path) -> None:
    server = _RawServer(tmp_path / "state.json")
    try:
        server.initialize()
        device_id = World.generate(SEED).device_ids()[0]
        response = server.call("get_device_status", {"device_id": device_id})
        result = response["result"]
        assert set(result) >= {"content", "structuredContent", "isError"}
        assert result["isError"] is False
        # The object itself, not {"result": {...}}.
        assert result["structuredContent"]["device_id"] == device_id
        assert result["content"][0]["type"] == "text"
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    finally:
        assert server.proc.stdin is not None
        server.proc.stdin.close()
        assert server.wait() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_writes_state(sig: signal.Signals, tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state.json"
    server = _RawServer(state)
    try:
        server.initialize()
        device_id = World.generate(SEED).device_ids()[0]
        opened = server.call("open_incident", {"device_id": device_id, "summary": "s", "severity": "low"})
        incident_id = opened["result"]["structuredContent"]["incident_id"]
        assert not state.exists()
        # stdin stays open: only the signal can end the server.
        server.proc.send_signal(sig)
    finally:
        rc = server.wait()
    assert rc == 0
    recorded = json.loads(state.read_text())
    assert recorded["incidents"][-1]["incident_id"] == incident_id
    assert recorded["writes"] == 1


def test_eof_writes_state_and_exits_zero(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "nested" / "state.json"
    server = _RawServer(state)
    server.initialize()
    device_id = World.generate(SEED).device_ids()[0]
    server.call("set_maintenance", {"device_id": device_id, "enabled": True, "reason": "r"})
    assert server.proc.stdin is not None
    server.proc.stdin.close()
    assert server.wait() == 0
    recorded = json.loads(state.read_text())
    assert recorded["maintenance"][device_id] == {"enabled": True, "reason": "r", "since_revision": 2}


def test_help_does_not_need_a_server() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcpfault.mock", "--help"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    assert "--seed" in done.stdout and "--state" in done.stdout


def test_package_serve_keeps_the_cli_signature() -> None:
    import mcpfault.mock
    import mcpfault.mock.server

    expected = inspect.signature(mcpfault.mock.server.serve)
    assert inspect.signature(mcpfault.mock.serve) == expected
    assert list(expected.parameters) == ["seed", "state_path"]


def test_world_imports_without_the_sdk() -> None:
    code = "import sys, mcpfault.mock; mcpfault.mock.World.generate(1); assert 'mcp' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT)
