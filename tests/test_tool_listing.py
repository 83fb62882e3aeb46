"""The proxy lists the server's tools itself, so annotation rules (``read_only``) match for any client.

Real proxy processes in front of a raw stdio server whose listing comes in pages (tests/servers/
listing_server.py) and in front of the bundled mock, driven by a client that never calls tools/list.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from mcpfault.protocol.jsonlines import read_jsonl
from mcpfault.proxy.events import read_events
from mcpfault.proxy.tool_listing import ID_PREFIX
from tests.conftest import ROOT, write_profile
from tests.http_support import ACCEPT, http_proxy, jsonrpc, modern_call, sse_messages

pytestmark = pytest.mark.anyio

LISTING_SERVER = Path(__file__).resolve().parent / "servers" / "listing_server.py"
# Every call to a tool that may write fails; reads go through.
WRITES_FAIL = """
name = "writes-fail"
seed = 1

[[faults]]
name = "no-writes"
type = "error"
mode = "protocol"
code = -32603
message = "Internal error"
read_only = false
probability = 1.0
"""


class RawClient:
    """A client that speaks JSON lines to the proxy and keeps every line it gets back."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.stdout = BufferedByteReceiveStream(process.stdout)
        self.received: list[dict[str, Any]] = []
        self.next_id = 0

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        await self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        while True:
            line = json.loads(await self.stdout.receive_until(b"\n", 1 << 20))
            self.received.append(line)
            if line.get("id") == self.next_id:
                return line

    async def handshake(self) -> None:
        await self.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call(self, tool: str) -> dict[str, Any]:
        return await self.request("tools/call", {"name": tool, "arguments": {}})


async def run_proxy(tmp_path: Path, server: list[str], profile: str, scenario: Any) -> list[dict[str, Any]]:
    """Run ``scenario(client)`` through a real stdio proxy; the proxy's records (events.jsonl, start lines too)."""
    events = tmp_path / "events.jsonl"
    config = write_profile(tmp_path, profile)
    command = [
        sys.executable,
        "-m",
        "mcpfault",
        "proxy",
        "--config",
        str(config),
        "--events",
        str(events),
        "--",
        *server,
    ]
    with anyio.fail_after(60):
        async with await anyio.open_process(command, cwd=ROOT, stderr=(tmp_path / "proxy.log").open("wb")) as process:
            client = RawClient(process)
            await scenario(client)
            assert process.stdin is not None
            await process.stdin.aclose()
            await process.wait()
    return read_jsonl(events, strict=True)


async def test_read_only_rules_match_for_a_client_that_never_lists(tmp_path: Path) -> None:
    record = tmp_path / "server-received.jsonl"
    answers: dict[str, Any] = {}

    async def scenario(client: RawClient) -> None:
        await client.handshake()
        answers["write"] = await client.call("write")  # the client never asked for tools/list
        answers["read"] = await client.call("read")
        answers["flip"] = await client.call("flip")  # a write: fails, and the server does not act
        answers["write again"] = await client.call("write")
        client_lines = list(client.received)
        answers["lines"] = client_lines

    records = await run_proxy(
        tmp_path, [sys.executable, str(LISTING_SERVER), "--record", str(record)], WRITES_FAIL, scenario
    )
    assert answers["write"]["error"]["code"] == -32603
    assert answers["read"]["result"]["content"][0]["text"] == "read"
    assert answers["flip"]["error"]["code"] == -32603
    # The proxy's own requests and their answers never reach the client.
    assert all(not str(line.get("id", "")).startswith(ID_PREFIX) for line in answers["lines"])
    # It read all three pages, on its own ids, right after the client's notifications/initialized.
    sent = read_jsonl(record, strict=True)
    methods = [(m.get("method"), m.get("id")) for m in sent]
    assert methods[:5] == [
        ("initialize", 1),
        ("notifications/initialized", None),
        ("tools/list", f"{ID_PREFIX}1"),
        ("tools/list", f"{ID_PREFIX}2"),
        ("tools/list", f"{ID_PREFIX}3"),
    ]
    assert [m.get("params", {}).get("cursor") for m in sent[2:5]] == [None, "1", "2"]
    listed = [r for r in records if r.get("event") == "tools_listed"]
    assert listed[0] | {"time": None, "duration_s": None} == {
        "event": "tools_listed",
        "reason": "handshake",
        "outcome": "complete",
        "pages": 3,
        "tools": 3,
        "requests_waited": listed[0]["requests_waited"],
        "time": None,
        "duration_s": None,
    }
    faulted = [r for r in read_events(tmp_path / "events.jsonl") if r.get("fault_type") == "error"]
    assert [r["tool"] for r in faulted] == ["write", "flip", "write"]


async def test_the_proxy_lists_again_on_list_changed(tmp_path: Path) -> None:
    """After the server says its tools changed, a read tool turned writer meets the write rule."""
    answers: dict[str, Any] = {}
    flips = WRITES_FAIL.replace("read_only = false", 'read_only = false\ntools = ["read", "write"]')

    async def scenario(client: RawClient) -> None:
        await client.handshake()
        answers["before"] = await client.call("read")
        # flip is not among the rule's tools: it goes through, and the server says its tools changed.
        answers["flip"] = await client.call("flip")
        answers["after"] = await client.call("read")
        answers["lines"] = list(client.received)

    records = await run_proxy(tmp_path, [sys.executable, str(LISTING_SERVER)], flips, scenario)
    assert answers["before"]["result"]["content"][0]["text"] == "read"
    assert answers["flip"]["result"]["content"][0]["text"] == "read"
    assert answers["after"]["error"]["code"] == -32603  # "read" now says it may write
    assert any(line.get("method") == "notifications/tools/list_changed" for line in answers["lines"])
    assert all(not str(line.get("id", "")).startswith(ID_PREFIX) for line in answers["lines"])
    reasons = [r["reason"] for r in records if r.get("event") == "tools_listed"]
    assert reasons == ["handshake", "list_changed"]


def _answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST, JSON or SSE."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [m for m in sse_messages(response.text) if "id" in m][-1]
    return dict(response.json())


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_read_only_rules_match_over_http_for_a_client_that_never_lists(tmp_path: Path, era: str) -> None:
    """The HTTP listener in front of a stdio server: the proxy's listing is a POST of its own."""
    record = tmp_path / "server-received.jsonl"
    profile = write_profile(tmp_path, WRITES_FAIL)
    server = ["--", sys.executable, str(LISTING_SERVER), "--record", str(record)]
    with http_proxy(profile, "", tmp_path, *server) as proxy:
        async with httpx.AsyncClient(timeout=20) as http:
            headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
            if era == "legacy":
                init = {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                }
                started = await http.post(proxy.url, json=jsonrpc(1, "initialize", init), headers=headers)
                headers["Mcp-Session-Id"] = started.headers["mcp-session-id"]
                await http.post(
                    proxy.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
                )
            answers = {}
            for number, tool in enumerate(["write", "read", "write"], start=2):
                if era == "modern":
                    body, call_headers = modern_call(number, tool, {})
                else:
                    body, call_headers = jsonrpc(number, "tools/call", {"name": tool, "arguments": {}}), headers
                answers[number] = _answer(await http.post(proxy.url, json=body, headers=call_headers))
        records = read_jsonl(proxy.events_file, strict=True)
    assert "error" in answers[2] and "error" in answers[4], answers
    assert answers[3]["result"]["content"][0]["text"] == "read"
    assert all(not str(a.get("id")).startswith(ID_PREFIX) for a in answers.values())
    listed = [r for r in records if r.get("event") == "tools_listed"]
    assert [(r["outcome"], r["pages"], r["tools"]) for r in listed] == [("complete", 3, 3)]
    assert [r["tool"] for r in read_events(proxy.events_file) if r.get("fault_type") == "error"] == ["write", "write"]


@pytest.mark.slow
async def test_requests_held_for_a_listing_the_server_never_answers_go_on_without_it(tmp_path: Path) -> None:
    from mcpfault.proxy.tool_listing import WAIT_S

    answers: list[dict[str, Any]] = []

    async def scenario(client: RawClient) -> None:
        await client.handshake()
        answers.append(await client.call("read"))  # held for the listing, which never comes

    events = await run_proxy(tmp_path, [sys.executable, str(LISTING_SERVER), "--never-list"], WRITES_FAIL, scenario)
    assert answers[0]["result"]["content"][0]["text"] == "read", answers  # it went on, unfaulted (tools unknown)
    [listed] = [e for e in events if e.get("event") == "tools_listed"]
    assert listed["outcome"] == "error" and listed["requests_waited"] == 1, listed
    assert listed["error"] == f"no complete answer within {WAIT_S:g} s"


@pytest.mark.slow
async def test_over_http_a_listing_the_server_never_answers_holds_no_request(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, WRITES_FAIL)
    server = ["--", sys.executable, str(LISTING_SERVER), "--never-list"]
    with http_proxy(profile, "", tmp_path, *server) as proxy:
        async with httpx.AsyncClient(timeout=60) as http:
            body, headers = modern_call(2, "read", {})
            answer = _answer(await http.post(proxy.url, json=body, headers=headers))
        records = read_jsonl(proxy.events_file, strict=True)
    assert answer["result"]["content"][0]["text"] == "read", answer  # it went on, unfaulted (tools unknown)
    [listed] = [r for r in records if r.get("event") == "tools_listed"]
    assert listed["outcome"] == "error", listed
