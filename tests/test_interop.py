"""End-to-end interop: real MCP clients and servers, as separate processes, with mcpfault in between.

The client is always the official Python SDK (``mcp`` 2.x); it starts ``python -m mcpfault proxy``,
which starts the real server. Three servers:

- ``tests/interop_servers/sdk_server.py``: an ``MCPServer`` of the same SDK (both protocol eras);
- ``mcp-server-time`` from PyPI (both eras: its ``serve()`` answers ``initialize`` and ``server/discover``);
- ``@modelcontextprotocol/server-everything`` from npm (TypeScript SDK 1.x: 2025-11-25 only), installed
  with ``npm ci --prefix tests/npm``; its tests skip when ``tests/npm/node_modules`` is missing.

Where a direct connection is the yardstick, the same calls run direct and through the proxy
concurrently and their results are compared. Every test is bounded by ``anyio.fail_after``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters, stdio_client

from mcpfault.proxy.events import read_events
from tests.conftest import PROFILES, write_profile
from tests.sdk_support import LogRecorder, Progress, SamplingModel, everything_tour

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "profiles" / "baseline.toml"
SDK_SERVER = [sys.executable, str(ROOT / "tests" / "interop_servers" / "sdk_server.py")]
TIME_SERVER = [sys.executable, "-m", "mcp_server_time"]
NPM_DIR = ROOT / "tests" / "npm"
EVERYTHING_JS = NPM_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
EVERYTHING = ["node", str(EVERYTHING_JS), "stdio"]

LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
# mode -> (era in the events file, negotiated protocol version, handshake method)
ERAS = {
    "legacy": ("legacy", LEGACY_VERSION, "initialize"),
    "auto": ("modern", MODERN_VERSION, "server/discover"),
}
REQUEST_TIMEOUT = -32001  # the SDK's code for a request whose read timeout elapsed
UPSTREAM_UNAVAILABLE = -32000  # mcpfault's answer when the server exits before answering

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

needs_npm = pytest.mark.skipif(
    not EVERYTHING_JS.exists() or shutil.which("node") is None,
    reason="server-everything is not installed: run 'npm ci --prefix tests/npm' (needs node and npm)",
)


# -- helpers ------------------------------------------------------------------------------------


def proxied(profile: Path, events: Path, server: list[str]) -> StdioServerParameters:
    args = ["-m", "mcpfault", "proxy", "--config", str(profile), "--events", str(events), "--", *server]
    return StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))


def direct(server: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=server[0], args=server[1:], cwd=str(ROOT))


@asynccontextmanager
async def connect(
    params: StdioServerParameters, mode: str, stderr: Path | None = None, **kwargs: Any
) -> AsyncIterator[Client]:
    """A connected SDK client; the child's stderr (the proxy's summary) goes to ``stderr``."""
    with open(stderr or os.devnull, "w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=10, **kwargs) as client:
            yield client


def tool_calls(events: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return [e for e in events if e["method"] == "tools/call" and e["tool"] == tool]


def tools_by_name(listing: types.ListToolsResult) -> dict[str, types.Tool]:
    return {tool.name: tool for tool in listing.tools}


def assert_clean_session(events: list[dict[str, Any]], mode: str, methods: list[str]) -> None:
    """One record per request, in the mode's era, every one a plain relayed response."""
    era, version, handshake = ERAS[mode]
    assert [e["method"] for e in events] == [handshake, *methods]
    assert len({e["request_id"] for e in events}) == len(events)
    for event in events:
        assert (event["era"], event["protocol_version"]) == (era, version), event
        assert event["client_received"] == "response", event
        assert event["upstream_contacted"] is True
        assert event["upstream_request_modified"] is False
        assert event["rule"] is None and event["fault_type"] is None


async def side_by_side(
    scenario: Callable[[Client, dict[str, Any]], Awaitable[dict[str, Any]]],
    direct_params: StdioServerParameters,
    proxy_params: StdioServerParameters,
    mode: str,
    stderr: Path | None = None,
    setup: Callable[[dict[str, Any]], dict[str, Any]] = lambda state: {},
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``scenario`` on a direct connection and through the proxy at the same time.

    Each connection gets its own ``state`` dict; ``setup(state)`` returns that connection's extra
    ``Client`` arguments (callbacks that record into ``state``).
    """
    results: dict[str, dict[str, Any]] = {}

    async def run(key: str, params: StdioServerParameters, errlog: Path | None) -> None:
        state: dict[str, Any] = {}
        async with connect(params, mode, errlog, **setup(state)) as client:
            results[key] = {"protocol_version": client.protocol_version, **await scenario(client, state)}

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "direct", direct_params, None)
        tg.start_soon(run, "proxy", proxy_params, stderr)
    return results["direct"], results["proxy"]


# -- 1. an SDK server through the baseline profile ------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sdk_server_baseline_is_transparent(tmp_path: Path, mode: str) -> None:
    events_path, stderr_path = tmp_path / "events.jsonl", tmp_path / "proxy.stderr"

    async def scenario(client: Client, state: dict[str, Any]) -> dict[str, Any]:
        listing = await client.list_tools()
        echo = await client.call_tool("echo", {"text": "héllo \u2028 wörld 😀"})
        add = await client.call_tool("add", {"a": 20, "b": 22})
        status = await client.call_tool("get_status", {"device": "core-sw-1"})
        tickets = [(await client.call_tool("next_ticket", {"queue": "ops"})).structured_content for _ in range(2)]
        progress = Progress()
        countdown = await client.call_tool("countdown", {"steps": 3}, progress_callback=progress)
        answered_after = time.monotonic() - progress.started
        # Concurrent calls: every answer must reach the request it belongs to.
        sums: dict[int, Any] = {}

        async def add_one(i: int) -> None:
            sums[i] = (await client.call_tool("add", {"a": i, "b": 1000})).structured_content

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(add_one, i)
        return {
            "tools": [tool.model_dump() for tool in listing.tools],
            "results": [r.model_dump() for r in (echo, add, status, countdown)],
            "tickets": tickets,
            "progress": [(p, t) for p, t, _ in progress.updates],
            "first_progress_s": progress.updates[0].elapsed,
            "answered_after_s": answered_after,
            "sums": sums,
        }

    with anyio.fail_after(30):
        via_direct, via_proxy = await side_by_side(
            scenario, direct(SDK_SERVER), proxied(BASELINE, events_path, SDK_SERVER), mode, stderr_path
        )

    era, version, _ = ERAS[mode]
    assert via_proxy["protocol_version"] == via_direct["protocol_version"] == version
    assert via_proxy["tools"] == via_direct["tools"]
    assert {t["name"] for t in via_proxy["tools"]} >= {"echo", "add", "get_status", "next_ticket", "countdown"}
    assert via_proxy["results"] == via_direct["results"]
    echo, add, status, countdown = via_proxy["results"]
    assert echo["structured_content"] == {"result": "héllo \u2028 wörld 😀"}
    assert add["structured_content"] == {"result": 42}
    assert status["structured_content"] == {"device": "core-sw-1", "status": "up", "utilization_pct": 63}
    assert countdown["structured_content"] == {"result": "done after 3 steps"}
    assert via_proxy["tickets"] == via_direct["tickets"] == [{"result": 1}, {"result": 2}]
    assert via_proxy["sums"] == via_direct["sums"] == {i: {"result": i + 1000} for i in range(20)}
    # Progress notifications cross the proxy as they happen, not buffered until the answer.
    assert via_proxy["progress"] == via_direct["progress"] == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]
    assert via_proxy["answered_after_s"] - via_proxy["first_progress_s"] > 0.2

    calls = ["echo", "add", "get_status", "next_ticket", "next_ticket", "countdown"] + ["add"] * 20
    events = read_events(events_path)
    assert_clean_session(events, mode, ["tools/list"] + ["tools/call"] * len(calls))
    assert sorted(e["tool"] for e in events if e["tool"]) == sorted(calls)
    assert f"era {era}, protocol {version}" in stderr_path.read_text(encoding="utf-8")


# -- 2. faults as the SDK client sees them -----------------------------------------------------------

ERROR_AND_TIMEOUT = """
name = "interop-errors"
seed = 11

[[faults]]
name = "internal-error"
type = "error"
tools = ["add"]
mode = "protocol"
code = -32603
message = "Internal error (injected)"
probability = 1.0

[[faults]]
name = "lost-response"
type = "timeout"
tools = ["next_ticket"]
mode = "drop"
probability = 1.0
"""


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_protocol_error_and_dropped_response(tmp_path: Path, mode: str) -> None:
    events_path, stderr_path = tmp_path / "events.jsonl", tmp_path / "proxy.stderr"
    params = proxied(write_profile(tmp_path, ERROR_AND_TIMEOUT), events_path, SDK_SERVER)
    with anyio.fail_after(30):
        async with connect(params, mode, stderr_path) as client:
            assert client.protocol_version == ERAS[mode][1]
            with pytest.raises(MCPError) as raised:
                await client.call_tool("add", {"a": 1, "b": 2})
            assert (raised.value.code, raised.value.message) == (-32603, "Internal error (injected)")

            started = time.monotonic()
            with pytest.raises(MCPError) as raised:
                await client.call_tool("next_ticket", {"queue": "ops"}, read_timeout_seconds=1.0)
            assert raised.value.code == REQUEST_TIMEOUT
            assert time.monotonic() - started > 0.9  # the client's own timeout, not an early answer

            # The session survives both faults: an untouched tool still answers.
            echo = await client.call_tool("echo", {"text": "still here"})
            assert echo.structured_content == {"result": "still here"}

    events = read_events(events_path)
    (add,) = tool_calls(events, "add")
    assert add["fault_type"] == "error" and add["fault_mode"] == "protocol"
    assert add["upstream_contacted"] is False
    assert (add["client_received"], add["error_code"]) == ("error", -32603)
    # One record for the dropped request: the proxy does not answer it again when the server exits
    # after the client left (an earlier version did, writing a second "upstream_exited" line).
    (dropped,) = tool_calls(events, "next_ticket")
    assert (dropped["fault_type"], dropped["fault_mode"]) == ("timeout", "drop")
    assert dropped["client_received"] == "nothing"
    assert dropped["upstream_contacted"] is True
    assert len({e["request_id"] for e in events}) == len(events)
    assert "0 request(s) answered with an 'upstream exited' error" in stderr_path.read_text(encoding="utf-8")
    (echo_event,) = tool_calls(events, "echo")
    assert echo_event["client_received"] == "response" and echo_event["rule"] is None
    assert all(e["era"] == ERAS[mode][0] for e in events)


TOOL_ERROR = """
name = "interop-tool-error"
seed = 12

[[faults]]
name = "backend-unavailable"
type = "error"
tools = ["get_status"]
mode = "tool"
message = "Backend unavailable: inventory service returned 503"
"""


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # auto: the injected result carries resultType
async def test_tool_error_fault(tmp_path: Path, mode: str) -> None:
    events_path = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, TOOL_ERROR), events_path, SDK_SERVER)
    with anyio.fail_after(30):
        async with connect(params, mode) as client:
            result = await client.call_tool("get_status", {"device": "core-sw-1"})
            assert result.is_error is True
            assert [c.text for c in result.content if isinstance(c, types.TextContent)] == [
                "Backend unavailable: inventory service returned 503"
            ]
            # Other tools are not matched by the rule.
            assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}

    (event,) = tool_calls(read_events(events_path), "get_status")
    assert (event["fault_type"], event["fault_mode"], event["client_received"]) == ("error", "tool", "tool_error")
    assert event["upstream_contacted"] is False


SCHEMA_DRIFT = """
name = "interop-drift"
seed = 13

[[faults]]
name = "renamed-echo-arg"
type = "schema_drift"
tools = ["echo"]
after = 1
rename_args = { text = "message" }
notify = true

[[faults]]
name = "renamed-status-fields"
type = "schema_drift"
tools = ["get_status"]
after = 1
rename_fields = { status = "state", utilization_pct = "util_pct" }
"""


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_schema_drift(tmp_path: Path, mode: str) -> None:
    events_path = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, SCHEMA_DRIFT), events_path, SDK_SERVER)
    list_changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            list_changed.set()

    with anyio.fail_after(30):
        async with connect(params, mode, message_handler=on_message) as client:
            # notify = true: the proxy advertises tools.listChanged in the handshake answer.
            assert client.server_capabilities.tools is not None
            assert client.server_capabilities.tools.list_changed is True
            before = tools_by_name(await client.list_tools())
            assert list(before["echo"].input_schema["properties"]) == ["text"]

            # Input drift: the first call is before the redeploy, the second uses the old name.
            assert (await client.call_tool("echo", {"text": "one"})).structured_content == {"result": "one"}
            # Answered as the SDK's own server answers a missing argument (a tool error), not with a hint.
            rejected_call = await client.call_tool("echo", {"text": "two"})
            assert rejected_call.is_error is True
            ours = rejected_call.content[0].text  # type: ignore[union-attr]
            real = (await client.call_tool("add", {"a": 1})).content[0].text  # type: ignore[union-attr]
            assert ours.startswith("Error executing tool echo: 1 validation error for echoArguments\nmessage\n")
            assert real.startswith("Error executing tool add: 1 validation error for addArguments\nb\n")
            shape = re.compile(r"\n  Field required \[type=missing, input_value=\{.*\}, input_type=dict\]\n")
            assert shape.search(ours) and shape.search(real), (ours, real)
            assert "message" not in ours.split("\n", 1)[0] and "is now" not in ours
            await list_changed.wait()
            # The new name works: the proxy translates it back for the (unchanged) server.
            assert (await client.call_tool("echo", {"message": "three"})).structured_content == {"result": "three"}

            # Output drift: the SDK validates structured content against the schema it listed
            # before the redeploy, so the first drifted answer is rejected on the client side.
            first = await client.call_tool("get_status", {"device": "sw1"})
            assert first.structured_content == {"device": "sw1", "status": "up", "utilization_pct": 21}
            with pytest.raises(RuntimeError, match="Invalid structured content returned by tool get_status"):
                await client.call_tool("get_status", {"device": "sw1"})

            after = tools_by_name(await client.list_tools(cache_mode="refresh"))
            assert list(after["echo"].input_schema["properties"]) == ["message"]
            assert after["echo"].input_schema["required"] == ["message"]
            assert after["get_status"].output_schema is not None
            assert list(after["get_status"].output_schema["properties"]) == ["device", "state", "util_pct"]
            assert after["add"].model_dump() == before["add"].model_dump()  # untouched tools stay as they were

            # With the drifted schema listed, the renamed fields validate and arrive.
            drifted = await client.call_tool("get_status", {"device": "sw1"})
            assert drifted.structured_content == {"device": "sw1", "state": "up", "util_pct": 21}
            assert isinstance(drifted.content[0], types.TextContent)
            assert json.loads(drifted.content[0].text) == {"device": "sw1", "state": "up", "util_pct": 21}

    events = read_events(events_path)
    plain, rejected, translated = tool_calls(events, "echo")
    assert plain["rule"] is None
    assert (rejected["rule"], rejected["fault_mode"]) == ("renamed-echo-arg", "rename_args")
    assert rejected["upstream_contacted"] is False
    assert rejected["client_received"] == "tool_error"
    assert translated["upstream_contacted"] is True and translated["upstream_request_modified"] is True
    assert translated["client_received"] == "response"
    statuses = tool_calls(events, "get_status")
    assert [e["fault_mode"] for e in statuses] == [None, "rename_fields", "rename_fields"]
    assert all(e["era"] == ERAS[mode][0] for e in events)


STALE = """
name = "interop-stale"
seed = 14

[[faults]]
name = "stale-tickets"
type = "stale"
tools = ["next_ticket"]
after = 1
probability = 1.0
"""


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stale_answer(tmp_path: Path, mode: str) -> None:
    events_path = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, STALE), events_path, SDK_SERVER)
    with anyio.fail_after(30):
        async with connect(params, mode) as client:
            first = await client.call_tool("next_ticket", {"queue": "ops"})
            second = await client.call_tool("next_ticket", {"queue": "ops"})
            # Other arguments have no cached answer: the server is asked, and its counter moved
            # only once, which shows the stale answer never reached it.
            other = await client.call_tool("next_ticket", {"queue": "noc"})

    assert first.structured_content == {"result": 1}
    assert second.model_dump(exclude={"meta"}) == first.model_dump(exclude={"meta"})
    assert other.structured_content == {"result": 2}
    events = tool_calls(read_events(events_path), "next_ticket")
    assert [e["fault_type"] for e in events] == [None, "stale", None]
    assert [e["upstream_contacted"] for e in events] == [True, False, True]
    assert [e["client_received"] for e in events] == ["response"] * 3


MALFORMED = """
name = "interop-malformed"
seed = 17

[[faults]]
name = "cut-line"
type = "malformed"
tools = ["echo"]
modes = ["truncate"]

[[faults]]
name = "wrong-type"
type = "malformed"
tools = ["get_status"]
modes = ["wrong_type"]
"""


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_malformed_responses(tmp_path: Path, mode: str) -> None:
    events_path = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, MALFORMED), events_path, SDK_SERVER)
    with anyio.fail_after(30):
        async with connect(params, mode) as client:
            # A cut line is not JSON: the SDK cannot match it to the request, which times out.
            with pytest.raises(MCPError) as raised:
                await client.call_tool("echo", {"text": "x" * 200}, read_timeout_seconds=0.5)
            assert raised.value.code == REQUEST_TIMEOUT
            # A leaf of another JSON type: the SDK's output-schema validation catches it.
            with pytest.raises(RuntimeError, match="Invalid structured content returned by tool get_status"):
                await client.call_tool("get_status", {"device": "sw1"})
            # The framing survived both: the next answer is intact.
            assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}

    events = read_events(events_path)
    (cut,) = tool_calls(events, "echo")
    assert (cut["fault_mode"], cut["client_received"], cut["upstream_contacted"]) == ("truncate", "malformed", True)
    (typed,) = tool_calls(events, "get_status")
    assert (typed["fault_type"], typed["fault_mode"]) == ("malformed", "wrong_type")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_server_exit_mid_request_answers_the_client(tmp_path: Path, mode: str) -> None:
    events_path = tmp_path / "events.jsonl"
    with anyio.fail_after(30):
        async with connect(proxied(BASELINE, events_path, SDK_SERVER), mode) as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("crash", {"code": 3})
            assert raised.value.code == UPSTREAM_UNAVAILABLE  # answered by the proxy, not the client's timeout
            assert "exited with code 3" in raised.value.message
            assert raised.value.data == {"mcpfault": {"reason": "upstream_exited", "exit_code": 3}}

    (event,) = tool_calls(read_events(events_path), "crash")
    assert (event["client_received"], event["error_code"]) == ("upstream_exited", UPSTREAM_UNAVAILABLE)


async def test_cancelled_request_is_not_reported_as_upstream_exit(tmp_path: Path) -> None:
    events_path, stderr_path = tmp_path / "events.jsonl", tmp_path / "proxy.stderr"
    with anyio.fail_after(30):
        async with connect(proxied(BASELINE, events_path, SDK_SERVER), "legacy", stderr_path) as client:
            # On its read timeout the SDK abandons the call and sends notifications/cancelled for it.
            with pytest.raises(MCPError) as raised:
                await client.call_tool("countdown", {"steps": 25}, read_timeout_seconds=0.5)
            assert raised.value.code == REQUEST_TIMEOUT
            assert (await client.call_tool("echo", {"text": "after"})).structured_content == {"result": "after"}

    summary = stderr_path.read_text(encoding="utf-8")
    assert "upstream exited with status 0" in summary
    (cancelled,) = tool_calls(read_events(events_path), "countdown")
    assert cancelled["client_received"] == "cancelled"
    assert "0 request(s) answered with an 'upstream exited' error" in summary


# -- 3. a PyPI server: mcp-server-time -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # the server speaks both eras
async def test_time_server_baseline(tmp_path: Path, mode: str) -> None:
    events_path = tmp_path / "events.jsonl"

    async def scenario(client: Client, state: dict[str, Any]) -> dict[str, Any]:
        listing = await client.list_tools()
        tokyo = await client.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
        bad = await client.call_tool("get_current_time", {"timezone": "Not/AZone"})
        return {"tools": [t.model_dump() for t in listing.tools], "tokyo": tokyo, "bad": bad}

    with anyio.fail_after(30):
        via_direct, via_proxy = await side_by_side(
            scenario, direct(TIME_SERVER), proxied(BASELINE, events_path, TIME_SERVER), mode
        )

    assert via_proxy["protocol_version"] == via_direct["protocol_version"] == ERAS[mode][1]
    assert via_proxy["tools"] == via_direct["tools"]
    schema = {t["name"]: t for t in via_proxy["tools"]}["get_current_time"]["input_schema"]
    assert schema["required"] == ["timezone"]
    got, want = via_proxy["tokyo"], via_direct["tokyo"]
    assert got.is_error is False
    assert (
        set(got.structured_content) == set(want.structured_content) == {"timezone", "datetime", "day_of_week", "is_dst"}
    )
    assert got.structured_content["timezone"] == want.structured_content["timezone"] == "Asia/Tokyo"
    assert got.structured_content["is_dst"] == want.structured_content["is_dst"] is False
    proxy_time = datetime.fromisoformat(got.structured_content["datetime"])
    direct_time = datetime.fromisoformat(want.structured_content["datetime"])
    assert proxy_time.utcoffset() == direct_time.utcoffset() is not None
    assert abs((proxy_time - direct_time).total_seconds()) < 60
    assert json.loads(got.content[0].text) == got.structured_content
    # A tool execution error of the server crosses untouched.
    assert via_proxy["bad"].is_error is True
    assert via_proxy["bad"].model_dump(exclude={"meta"}) == via_direct["bad"].model_dump(exclude={"meta"})

    events = read_events(events_path)
    era, version, handshake = ERAS[mode]
    assert [e["method"] for e in events] == [handshake, "tools/list", "tools/call", "tools/call"]
    assert [e["client_received"] for e in events] == ["response", "response", "response", "tool_error"]
    assert {(e["era"], e["protocol_version"]) for e in events} == {(era, version)}


TIME_ERRORS = """
name = "interop-time-errors"
seed = 15

[[faults]]
name = "flaky-clock"
type = "error"
tools = ["get_current_time"]
mode = "protocol"
code = -32603
message = "Internal error"
after = 1
"""


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_time_server_error_fault(tmp_path: Path, mode: str) -> None:
    events_path = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, TIME_ERRORS), events_path, TIME_SERVER)
    with anyio.fail_after(30):
        async with connect(params, mode) as client:
            first = await client.call_tool("get_current_time", {"timezone": "Etc/UTC"})
            assert first.structured_content is not None and first.structured_content["timezone"] == "Etc/UTC"
            with pytest.raises(MCPError) as raised:
                await client.call_tool("get_current_time", {"timezone": "Etc/UTC"})
            assert (raised.value.code, raised.value.message) == (-32603, "Internal error")
            converted = await client.call_tool(
                "convert_time", {"source_timezone": "Etc/UTC", "time": "12:00", "target_timezone": "Asia/Kolkata"}
            )
            assert converted.is_error is False
            assert converted.structured_content is not None
            assert converted.structured_content["time_difference"] == "+5.5h"

    events = read_events(events_path)
    clock = tool_calls(events, "get_current_time")
    assert [e["upstream_contacted"] for e in clock] == [True, False]
    assert [e["client_received"] for e in clock] == ["response", "error"]
    assert clock[1]["rule"] == "flaky-clock" and clock[1]["error_code"] == -32603
    assert tool_calls(events, "convert_time")[0]["rule"] is None


# -- 4. an npm server: @modelcontextprotocol/server-everything ---------------------------------------


@needs_npm
# server-everything runs on the TypeScript SDK 1.x, which speaks 2025-11-25 only: in "auto" mode the
# client's server/discover probe is refused (-32601) and it falls back to initialize, through the proxy.
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_everything_server_baseline(tmp_path: Path, mode: str) -> None:
    events_path = tmp_path / "events.jsonl"

    def setup(state: dict[str, Any]) -> dict[str, Any]:
        state["model"] = model = SamplingModel()
        state["logs"] = logs = LogRecorder()
        return {"sampling_callback": model, "logging_callback": logs}

    async def scenario(client: Client, state: dict[str, Any]) -> dict[str, Any]:
        model: SamplingModel = state["model"]
        logs: LogRecorder = state["logs"]
        # Simulated logging: one log notification at once, then every 5 s until toggled off again.
        tour = await everything_tour(client, "hello through the proxy", logs, log_timeout=5)
        return {
            "tools": [t.model_dump() for t in tour.tools],
            "results": [r.model_dump() for r in (tour.echo, tour.long_op, tour.sampled, tour.structured)],
            "progress": [(p, t) for p, t, _ in tour.progress.updates],
            "stream_gap_s": tour.answered_after - tour.progress.updates[0].elapsed,
            "logs": len(logs.messages),
            "sampling_requests": len(model.requests),
            "sampling_prompt": model.prompts[0],
        }

    with anyio.fail_after(30):
        via_direct, via_proxy = await side_by_side(
            scenario,
            direct(EVERYTHING),
            proxied(BASELINE, events_path, EVERYTHING),
            mode,
            setup=setup,
        )

    assert via_proxy["protocol_version"] == via_direct["protocol_version"] == LEGACY_VERSION
    assert via_proxy["tools"] == via_direct["tools"]
    names = {t["name"] for t in via_proxy["tools"]}
    assert {"echo", "trigger-long-running-operation", "trigger-sampling-request"} <= names
    assert via_proxy["results"] == via_direct["results"]
    echo, long_op, sampled, structured = via_proxy["results"]
    assert echo["content"][0]["text"] == "Echo: hello through the proxy"
    assert long_op["content"][0]["text"].startswith("Long running operation completed")
    assert structured["structured_content"]["conditions"]
    # Progress notifications streamed through the proxy while the call was running.
    assert via_proxy["progress"] == [(1.0, 4.0), (2.0, 4.0), (3.0, 4.0), (4.0, 4.0)]
    assert via_proxy["stream_gap_s"] > 0.4
    # The server's sampling/createMessage request crossed to the client, and the answer back.
    assert via_proxy["sampling_requests"] == 1
    assert "ping" in via_proxy["sampling_prompt"].text
    assert "sampled-answer-42" in sampled["content"][0]["text"]
    assert via_proxy["logs"] >= 1

    events = read_events(events_path)
    calls = ["echo", "trigger-long-running-operation", "trigger-sampling-request"]
    calls += ["toggle-simulated-logging", "toggle-simulated-logging", "get-structured-content"]
    # Only client requests are recorded: the server's own request (sampling) is relayed, not an event.
    if mode == "legacy":
        assert_clean_session(events, mode, ["tools/list"] + ["tools/call"] * len(calls))
    else:
        probe, *rest = events
        assert (probe["method"], probe["client_received"], probe["error_code"]) == ("server/discover", "error", -32601)
        assert [e["method"] for e in rest] == ["initialize", "tools/list"] + ["tools/call"] * len(calls)
        assert {(e["era"], e["protocol_version"], e["client_received"]) for e in rest} == {
            ("legacy", LEGACY_VERSION, "response")
        }
    assert [e["tool"] for e in events if e["tool"]] == calls


EVERYTHING_ERRORS = """
name = "interop-everything-errors"
seed = 16

[[faults]]
name = "echo-down"
type = "error"
tools = ["echo"]
mode = "protocol"
code = -32603
message = "Internal error"

[[faults]]
name = "sum-backend-down"
type = "error"
tools = ["get-sum"]
mode = "tool"
message = "Backend unavailable: upstream returned 503"
"""


@needs_npm
async def test_everything_server_error_faults(tmp_path: Path) -> None:
    events_path = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, EVERYTHING_ERRORS), events_path, EVERYTHING)
    with anyio.fail_after(30):
        async with connect(params, "legacy") as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("echo", {"message": "hello"})
            assert (raised.value.code, raised.value.message) == (-32603, "Internal error")
            summed = await client.call_tool("get-sum", {"a": 2, "b": 3})
            assert summed.is_error is True
            assert summed.content[0].model_dump()["text"] == "Backend unavailable: upstream returned 503"
            # A tool no rule matches still reaches the server.
            progress = Progress()
            long_op = await client.call_tool(
                "trigger-long-running-operation", {"duration": 0.2, "steps": 2}, progress_callback=progress
            )
            assert long_op.is_error is False
            assert progress.values() == [1.0, 2.0]

    events = read_events(events_path)
    echo, summed_event, long_event = (e for e in events if e["method"] == "tools/call")
    assert (echo["rule"], echo["client_received"], echo["upstream_contacted"]) == ("echo-down", "error", False)
    assert (summed_event["rule"], summed_event["client_received"]) == ("sum-backend-down", "tool_error")
    assert summed_event["upstream_contacted"] is False
    assert (long_event["rule"], long_event["client_received"]) == (None, "response")


# -- the generic profiles on a server that is not ours ---------------------------------------------------


async def test_generic_drift_renames_what_tools_list_says_on_the_time_server(tmp_path: Path) -> None:
    events_path = tmp_path / "events.jsonl"
    params = proxied(PROFILES / "drift_any.toml", events_path, TIME_SERVER)
    utc = {"timezone": "Etc/UTC"}
    with anyio.fail_after(40):
        async with connect(params, "legacy") as client:
            before = tools_by_name(await client.list_tools())
            for _ in range(3):  # before the redeploy (after = 3)
                assert (await client.call_tool("get_current_time", utc)).is_error is False
            rejected = await client.call_tool("get_current_time", utc)
            assert rejected.is_error is True
            text = rejected.content[0].text  # type: ignore[union-attr]
            assert text.startswith("Error executing tool get_current_time: 1 validation error")
            after = tools_by_name(await client.list_tools(cache_mode="refresh"))
            (new_arg,) = after["get_current_time"].input_schema["properties"]
            assert new_arg != "timezone" and after["get_current_time"].input_schema["required"] == [new_arg]
            assert f"\n{new_arg}\n  Field required" in text
            renamed = await client.call_tool("get_current_time", {new_arg: "Etc/UTC"})
            assert renamed.is_error is False and renamed.structured_content is not None
            fields = set(renamed.structured_content)
            assert fields == set(after["get_current_time"].output_schema["properties"])  # type: ignore[index]
            assert fields.isdisjoint(before["get_current_time"].output_schema["properties"])  # type: ignore[index]
    again = tmp_path / "again.jsonl"
    async with connect(proxied(PROFILES / "drift_any.toml", again, TIME_SERVER), "legacy") as client:
        listed = tools_by_name(await client.list_tools())
        for _ in range(4):
            await client.call_tool("get_current_time", utc)
        relisted = tools_by_name(await client.list_tools(cache_mode="refresh"))
    assert relisted["get_current_time"].input_schema == after["get_current_time"].input_schema  # same seed, same names
    assert listed["get_current_time"].input_schema == before["get_current_time"].input_schema


async def test_generic_stale_reads_hit_read_only_tools_of_the_time_server(tmp_path: Path) -> None:
    events_path = tmp_path / "events.jsonl"
    params = proxied(PROFILES / "stale_reads.toml", events_path, TIME_SERVER)
    with anyio.fail_after(40):
        async with connect(params, "legacy") as client:
            await client.list_tools()  # the annotations (readOnlyHint) come from here
            for _ in range(12):
                await client.call_tool("get_current_time", {"timezone": "Etc/UTC"})
    calls = tool_calls(read_events(events_path), "get_current_time")
    stale = [e for e in calls if e["fault_type"] == "stale"]
    assert stale and all(e["upstream_contacted"] is False for e in stale)
    assert calls[0]["fault_type"] is None  # nothing cached yet on the first call
