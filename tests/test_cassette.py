"""Cassettes: record the official SDK client against real servers, replay, get the same answers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError, StdioServerParameters, stdio_client

from mcpfault.protocol.jsonlines import parse_jsonl, read_jsonl
from tests.sdk_support import Progress
from tests.test_interop import EVERYTHING, TIME_SERVER, needs_npm

ROOT = Path(__file__).resolve().parent.parent
MCPFAULT = [sys.executable, "-m", "mcpfault"]

pytestmark = [pytest.mark.anyio]


def params(command: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT))


def record(out: Path, server: list[str], *extra: str) -> list[str]:
    return [*MCPFAULT, "record", "--out", str(out), *extra, "--", *server]


def replay(cassette: Path, *extra: str) -> list[str]:
    return [*MCPFAULT, "replay", str(cassette), *extra]


async def time_session(command: list[str], mode: str) -> dict[str, Any]:
    async with Client(stdio_client(params(command)), mode=mode, read_timeout_seconds=10) as client:
        tools = await client.list_tools()
        now = await client.call_tool("get_current_time", {"timezone": "Europe/Paris"})
        converted = await client.call_tool(
            "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
        )
    return {
        "tools": sorted(tool.name for tool in tools.tools),
        "now": now.model_dump(mode="json"),
        "converted": converted.model_dump(mode="json"),
    }


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_time_server_recorded_then_replayed_gives_the_same_answers(tmp_path: Path, mode: str) -> None:
    cassette = tmp_path / "time.cassette"
    live = await time_session(record(cassette, TIME_SERVER), mode)
    lines = read_jsonl(cassette, strict=True)
    header = lines[0]
    assert header["cassette"] == 1 and header["eras"] == [{"legacy": "legacy", "auto": "modern"}[mode]]
    assert {line["direction"] for line in lines[1:]} == {"client", "server"}
    replayed = await time_session(replay(cassette), mode)
    assert replayed == live
    assert "Europe/Paris" in json.dumps(live["now"])


async def test_an_unmatched_request_gets_an_error_naming_the_closest_recorded_one(tmp_path: Path) -> None:
    cassette = tmp_path / "time.cassette"
    await time_session(record(cassette, TIME_SERVER), "legacy")
    async with Client(stdio_client(params(replay(cassette))), mode="legacy", read_timeout_seconds=10) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("get_current_time", {"timezone": "America/Lima"})
    message = str(raised.value)
    assert "no recorded request matches tools/call" in message
    assert 'params.arguments.timezone: recorded "Europe/Paris", got "America/Lima"' in message


@needs_npm
async def test_server_everything_replays_tools_resources_prompts_and_progress(tmp_path: Path) -> None:
    cassette = tmp_path / "everything.cassette"

    async def session(command: list[str]) -> dict[str, Any]:
        progress = Progress()

        async with Client(stdio_client(params(command)), mode="legacy", read_timeout_seconds=15) as client:
            tools = await client.list_tools()
            echo = await client.call_tool("echo", {"message": "hello cassette"})
            long_op = await client.call_tool(
                "trigger-long-running-operation", {"duration": 1, "steps": 4}, progress_callback=progress
            )
            resources = await client.list_resources()
            first = resources.resources[0]
            read = await client.read_resource(first.uri)
            prompts = await client.list_prompts()
            prompt = await client.get_prompt("simple-prompt", {})
        return {
            "tools": [tool.name for tool in tools.tools],
            "echo": echo.model_dump(mode="json"),
            "long_op": long_op.model_dump(mode="json"),
            "progress": progress.values(),
            "read": read.model_dump(mode="json"),
            "prompts": [p.name for p in prompts.prompts],
            "prompt": prompt.model_dump(mode="json"),
        }

    live = await session(record(cassette, EVERYTHING))
    assert live["progress"] == [1, 2, 3, 4]
    replayed = await session(replay(cassette))
    assert replayed == live


ZONES = [
    "Europe/Paris",
    "Asia/Tokyo",
    "America/Lima",
    "Africa/Cairo",
    "Europe/Oslo",
    "Asia/Seoul",
    "UTC",
    "Europe/Rome",
]
FLAKY = """
seed = 7
[[faults]]
name = "flaky-time"
type = "error"
mode = "tool"
probability = 0.5
"""


async def calls_each_zone(command: list[str]) -> list[bool]:
    async with Client(stdio_client(params(command)), mode="legacy", read_timeout_seconds=10) as client:
        return [(await client.call_tool("get_current_time", {"timezone": zone})).is_error for zone in ZONES]


async def test_a_fault_profile_over_a_replay_gives_the_same_faults_as_over_the_live_server(tmp_path: Path) -> None:
    cassette = tmp_path / "time.cassette"
    assert await calls_each_zone(record(cassette, TIME_SERVER)) == [False] * len(ZONES)
    profile = tmp_path / "flaky.toml"
    profile.write_text(FLAKY, encoding="utf-8")

    def proxied(events: Path, server: list[str]) -> list[str]:
        return [*MCPFAULT, "proxy", "--config", str(profile), "--events", str(events), "--", *server]

    live = await calls_each_zone(proxied(tmp_path / "live.jsonl", TIME_SERVER))
    replayed = await calls_each_zone(proxied(tmp_path / "replay.jsonl", replay(cassette)))
    shortcut = await calls_each_zone(replay(cassette, "--config", str(profile)))
    assert True in live and False in live  # the seed makes some calls fail, not all
    assert replayed == live and shortcut == live

    def faults(path: Path) -> list[tuple[Any, ...]]:
        rows = read_jsonl(path, strict=True)
        return [(r["method"], r.get("tool"), r.get("rule"), r.get("fault_type")) for r in rows if "method" in r]

    live_faults = faults(tmp_path / "live.jsonl")
    assert sum(row[2] == "flaky-time" for row in live_faults) == live.count(True)
    assert faults(tmp_path / "replay.jsonl") == live_faults


async def test_secrets_and_redact_arguments_are_absent_from_the_cassette(tmp_path: Path) -> None:
    cassette = tmp_path / "time.cassette"
    secret, bearer = "hunter2-account-secret", "Bearer abcDEF123456789xyz"
    async with Client(
        stdio_client(params(record(cassette, TIME_SERVER, "--redact", "timezone"))),
        mode="legacy",
        read_timeout_seconds=10,
    ) as client:
        await client.call_tool("get_current_time", {"timezone": secret})
        await client.call_tool("get_current_time", {"timezone": "UTC", "api_key": "k-1", "note": bearer})
    text = cassette.read_text()
    assert secret not in text and "abcDEF123456789xyz" not in text and '"k-1"' not in text
    assert "[redacted]" in text and "get_current_time" in text
    header = parse_jsonl(text)[0]
    assert header["redacted_arguments"] == ["timezone"]
    # A redacted argument still matches on replay: the recorded [redacted] stands for any value.
    async with Client(stdio_client(params(replay(cassette))), mode="legacy", read_timeout_seconds=10) as client:
        answer = await client.call_tool("get_current_time", {"timezone": "Europe/Paris"})
    assert answer.is_error  # what the server answered to the secret zone (an invalid one), replayed


def write_cassette(path: Path, tools: list[dict[str, Any]]) -> Path:
    header = {"cassette": 1, "eras": ["legacy"]}
    request = {
        "t": 0.0,
        "direction": "client",
        "session": "1",
        "era": "legacy",
        "message": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    }
    answer = {
        "t": 0.01,
        "direction": "server",
        "session": "1",
        "era": "legacy",
        "message": {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}},
    }
    path.write_text("\n".join(json.dumps(row) for row in (header, request, answer)) + "\n", encoding="utf-8")
    return path


def tool(name: str, properties: dict[str, str], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": {k: {"type": t} for k, t in properties.items()}, "required": required}
    return {"name": name, "inputSchema": schema}


def test_cassette_diff_classifies_breaking_and_compatible_changes(tmp_path: Path) -> None:
    import subprocess

    old = write_cassette(tmp_path / "old.cassette", [tool("get", {"id": "string"}, ["id"]), tool("gone", {}, [])])
    removed_and_required = write_cassette(
        tmp_path / "new.cassette", [tool("get", {"id": "string", "region": "string"}, ["id", "region"])]
    )
    optional_only = write_cassette(
        tmp_path / "ok.cassette", [tool("get", {"id": "string", "limit": "integer"}, ["id"]), tool("gone", {}, [])]
    )
    breaking = subprocess.run(
        [*MCPFAULT, "cassette", "diff", str(old), str(removed_and_required)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert breaking.returncode == 1, breaking.stderr
    assert "breaking   tool gone: removed" in breaking.stdout
    assert "breaking   tool get: new required argument 'region'" in breaking.stdout
    compatible = subprocess.run(
        [*MCPFAULT, "cassette", "diff", str(old), str(optional_only)], capture_output=True, text=True, check=False
    )
    assert compatible.returncode == 0, compatible.stdout
    assert "compatible tool get: new optional argument 'limit'" in compatible.stdout
    shown = subprocess.run([*MCPFAULT, "cassette", "show", str(old)], capture_output=True, text=True, check=True)
    assert "tools/list" in shown.stdout and "-> " in shown.stdout
    bad = subprocess.run(
        [*MCPFAULT, "replay", str(tmp_path / "missing.cassette")], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and "cannot read the cassette" in bad.stderr


async def test_a_stdio_replay_served_over_http_behind_the_proxy(tmp_path: Path) -> None:
    from mcpfault.api import Proxy

    cassette = tmp_path / "time.cassette"
    live = await time_session(record(cassette, TIME_SERVER), "legacy")
    with Proxy(replay(cassette), profile="baseline", transport="http", workdir=tmp_path / "proxy") as proxy:
        assert proxy.url is not None
        async with Client(proxy.url, mode="legacy", read_timeout_seconds=10) as client:
            tools = await client.list_tools()
            now = await client.call_tool("get_current_time", {"timezone": "Europe/Paris"})
    assert sorted(tool.name for tool in tools.tools) == live["tools"]
    assert now.model_dump(mode="json") == live["now"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_replay_listen_serves_the_cassette_over_http_in_both_eras(tmp_path: Path, mode: str) -> None:
    import subprocess

    from tests.http_support import free_port, stop, wait_for_port

    cassette = tmp_path / "time.cassette"
    live = await time_session(record(cassette, TIME_SERVER), mode)
    port = free_port()
    server = subprocess.Popen(replay(cassette, "--listen", f"127.0.0.1:{port}"), cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, server)
        async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode, read_timeout_seconds=10) as client:
            now = await client.call_tool("get_current_time", {"timezone": "Europe/Paris"})
    finally:
        stop(server)
    assert now.model_dump(mode="json") == live["now"]


async def test_record_listen_records_an_http_client_and_replays_it(tmp_path: Path) -> None:
    import subprocess

    from tests.http_support import free_port, stop, wait_for_port

    cassette = tmp_path / "time.cassette"
    port = free_port()
    recorder = subprocess.Popen(
        [*MCPFAULT, "record", "--out", str(cassette), "--listen", f"127.0.0.1:{port}", "--", *TIME_SERVER],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, recorder)
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy", read_timeout_seconds=10) as client:
            live = await client.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
    finally:
        stop(recorder, timeout=15)
    async with Client(stdio_client(params(replay(cassette))), mode="legacy", read_timeout_seconds=10) as client:
        replayed = await client.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
    assert replayed.model_dump(mode="json") == live.model_dump(mode="json")


async def test_record_listen_keeps_the_sessions_of_clients_of_both_eras(tmp_path: Path) -> None:
    """Behind the HTTP bridge each protocol era has its own server, and so its own recorder: both write
    one cassette, each adding its sessions, and an older recording there is replaced, not joined."""
    import subprocess

    from mcpfault.cassette.format import load
    from tests.http_support import free_port, stop, wait_for_port

    cassette = tmp_path / "time.cassette"
    await time_session(record(cassette, TIME_SERVER), "legacy")  # an earlier recording at the same path
    port = free_port()
    recorder = subprocess.Popen(
        [*MCPFAULT, "record", "--out", str(cassette), "--listen", f"127.0.0.1:{port}", "--", *TIME_SERVER],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    live = {}
    try:
        wait_for_port(port, recorder)
        for mode, zone in [("legacy", "Asia/Tokyo"), ("auto", "Europe/Paris")]:
            async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode, read_timeout_seconds=10) as client:
                live[mode] = (await client.call_tool("get_current_time", {"timezone": zone})).model_dump(mode="json")
    finally:
        stop(recorder, timeout=15)
    recorded = load(cassette)
    assert recorded.header["eras"] == ["legacy", "modern"], recorded.header
    assert len(recorded.sessions()) == 2 and recorded.header["sessions"] == 2
    assert {entry.era for entry in recorded.entries if entry.session == "1"} != {
        entry.era for entry in recorded.entries if entry.session == "2"
    }
    assert [entry.t for entry in recorded.entries] == sorted(entry.t for entry in recorded.entries)
    calls = [
        e.message["params"]["arguments"]["timezone"]
        for e in recorded.entries
        if e.message.get("method") == "tools/call"
    ]
    assert calls == ["Asia/Tokyo", "Europe/Paris"]  # this recording's only: the earlier one was replaced
    for mode, zone in [("legacy", "Asia/Tokyo"), ("auto", "Europe/Paris")]:
        async with Client(stdio_client(params(replay(cassette))), mode=mode, read_timeout_seconds=10) as client:
            replayed = await client.call_tool("get_current_time", {"timezone": zone})
        assert replayed.model_dump(mode="json") == live[mode]


def book_of(calls: list[tuple[str, dict[str, Any]]], matcher: str) -> Any:
    from mcpfault.cassette.format import Entry
    from mcpfault.cassette.matching import Book, Recorded

    recorded = []
    for number, (method, args) in enumerate(calls, 1):
        request = Entry(float(number), "client", "1", "legacy", {"id": number, "method": method, "params": args})
        answer = Entry(number + 0.5, "server", "1", "legacy", {"id": number, "result": {"n": number}})
        recorded.append(Recorded(request, answer, []))
    return Book(recorded, matcher)  # type: ignore[arg-type]  # the test passes each matcher's name


def test_the_matchers_sequential_and_strict_and_method_params() -> None:
    from mcpfault.cassette.matching import Miss

    calls: list[tuple[str, dict[str, Any]]] = [
        ("tools/call", {"name": "a", "_meta": {"progressToken": 1}}),
        ("tools/call", {"name": "b"}),
    ]
    by_params = book_of(calls, "method+params")
    assert by_params.match("tools/call", {"name": "b", "_meta": {"x": 1}}).request.t == 2.0  # _meta ignored
    assert by_params.match("tools/call", {"name": "a"}).request.t == 1.0
    sequential = book_of(calls, "sequential")
    assert [sequential.match("tools/call", {"name": "z"}).request.t for _ in calls] == [1.0, 2.0]
    with pytest.raises(Miss, match="sequential: all 2 recorded tools/call requests were already answered"):
        sequential.match("tools/call", {})
    strict = book_of(calls, "strict")
    with pytest.raises(Miss, match=r"strict: the next recorded request is tools/call \{\"name\": \"a\"\}"):
        strict.match("tools/call", {"name": "b"})
    assert strict.match("tools/call", {"name": "a"}).request.t == 1.0


def test_timing_recorded_waits_as_the_server_did_and_none_does_not() -> None:
    import time

    from mcpfault.cassette.replay import answer

    sent: list[dict[str, Any]] = []
    for timing in ("none", "recorded"):
        book = book_of([("tools/call", {"name": "a"})], "method+params")
        started = time.monotonic()
        answer(book, {"id": 9, "method": "tools/call", "params": {"name": "a"}}, sent.append, timing)
        if timing == "recorded":
            assert time.monotonic() - started >= 0.5  # the recorded 0.5 s between request and answer
    assert [message["id"] for message in sent] == [9, 9] and sent[0]["result"] == {"n": 1}


class Recording:
    """``mcpfault record --listen 127.0.0.1:PORT --upstream URL``, stopped (and so written) by ``close``."""

    def __init__(self, cassette: Path, upstream: str, *extra: str) -> None:
        import subprocess

        from tests.http_support import free_port, wait_for_port

        self.port = free_port()
        listen = f"127.0.0.1:{self.port}"
        command = [*MCPFAULT, "record", "--out", str(cassette), "--listen", listen, "--upstream", upstream, *extra]
        self.proc = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.proc)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def close(self) -> int:
        from tests.http_support import stop

        return stop(self.proc, timeout=15)


async def ticket_session(url: str, mode: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A session of the official SDK client over Streamable HTTP against tests/interop_servers/sdk_server.py."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=headers or {}, timeout=15) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, read_timeout_seconds=15) as client:
            tools = await client.list_tools()
            ticket = await client.call_tool("next_ticket", {"queue": "support"})
            forecast = await client.call_tool("forecast", {"city": "Secretville"})
    return {
        "tools": sorted(tool.name for tool in tools.tools),
        "ticket": ticket.model_dump(mode="json"),
        "forecast": forecast.model_dump(mode="json"),
    }


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_record_upstream_records_a_remote_http_server_and_replay_gives_the_same_answers(
    tmp_path: Path, mode: str
) -> None:
    from tests.http_support import sdk_server

    cassette = tmp_path / "remote.cassette"
    bearer = "Bearer remote-secret-token-123456"
    with sdk_server(tmp_path) as upstream:
        recording = Recording(cassette, upstream.url, "--redact", "city")
        try:
            live = await ticket_session(recording.url, mode, {"Authorization": bearer})
        finally:
            assert recording.close() == 0
        assert upstream.calls()[:1] == ["next_ticket support 1"]  # the calls did reach the real server
    text = cassette.read_text()
    assert "remote-secret-token-123456" not in text and "Secretville" not in text  # header and --redact
    rows = parse_jsonl(text)
    assert rows[0]["eras"] == [{"legacy": "legacy", "auto": "modern"}[mode]]
    http = [row["http"] for row in rows[1:] if "http" in row]
    assert {"method": "POST", "headers": {**http[0]["headers"], "authorization": "[redacted]"}} == http[0]
    statuses = {entry["status"] for entry in http if "status" in entry}
    assert 200 in statuses
    answers = [entry for entry in http if "status" in entry]
    assert all("content-type" in entry["headers"] for entry in answers if entry["status"] == 200)
    port = free_port_of()
    server = replay_listening(cassette, port)
    try:
        replayed = await ticket_session(f"http://127.0.0.1:{port}/mcp", mode)
    finally:
        from tests.http_support import stop

        stop(server)
    # The redacted city matches any value on replay; the answer that echoed it was scrubbed of it.
    assert replayed["tools"] == live["tools"] and replayed["ticket"] == live["ticket"]
    assert "Secretville" in json.dumps(live["forecast"])
    assert replayed["forecast"] == json.loads(json.dumps(live["forecast"]).replace("Secretville", "[redacted]"))


def free_port_of() -> int:
    from tests.http_support import free_port

    return free_port()


def replay_listening(cassette: Path, port: int, *extra: str) -> Any:
    import subprocess

    from tests.http_support import wait_for_port

    server = subprocess.Popen(
        replay(cassette, "--listen", f"127.0.0.1:{port}", *extra), cwd=ROOT, stderr=subprocess.DEVNULL
    )
    wait_for_port(port, server)
    return server


@pytest.mark.slow
async def test_two_sessions_are_recorded_each_marked_and_replayed_in_order(tmp_path: Path) -> None:
    import subprocess

    from tests.http_support import sdk_server, stop

    cassette = tmp_path / "two.cassette"
    with sdk_server(tmp_path) as upstream:
        recording = Recording(cassette, upstream.url)
        try:
            first = await ticket_session(recording.url, "legacy")
            second = await ticket_session(recording.url, "legacy")
        finally:
            recording.close()
    assert first["ticket"] != second["ticket"]  # the live server counts: ticket 1, then ticket 2
    rows = read_jsonl(cassette, strict=True)
    assert rows[0]["sessions"] == 2
    assert [row["session"] for row in rows[1:] if row["message"].get("method") == "initialize"] == ["1", "2"]
    shown = subprocess.run([*MCPFAULT, "cassette", "show", str(cassette)], capture_output=True, text=True, check=True)
    assert "session 1: legacy" in shown.stdout and "session 2: legacy" in shown.stdout
    # Over HTTP, and over stdio: each new session is served from the recorded sessions in order.
    port = free_port_of()
    server = replay_listening(cassette, port)
    try:
        again = [await ticket_session(f"http://127.0.0.1:{port}/mcp", "legacy") for _ in range(2)]
    finally:
        stop(server)
    assert again == [first, second]


def test_what_the_server_sent_while_nothing_was_pending_is_replayed_after_the_answer(tmp_path: Path) -> None:
    import io
    import json as json_

    from mcpfault.cassette.format import FORMAT_VERSION, Entry, write
    from mcpfault.cassette.replay import serve_stdio

    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    logged = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "redeployed"}}
    entries = [
        Entry(
            0.0, "client", "1", "legacy", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a"}}
        ),
        Entry(0.1, "server", "1", "legacy", {"jsonrpc": "2.0", "id": 1, "result": {"content": []}}),
        Entry(0.2, "server", "1", "legacy", changed),  # no request pending: sent on the server's own account
        Entry(0.3, "server", "1", "legacy", logged),
        Entry(0.4, "client", "1", "legacy", {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
        Entry(0.5, "server", "1", "legacy", {"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}),
    ]
    cassette = tmp_path / "unsolicited.cassette"
    write(cassette, {"cassette": FORMAT_VERSION, "eras": ["legacy"]}, entries)
    live = b"".join(
        json_.dumps(m).encode() + b"\n"
        for m in [
            {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "a"}},
            {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {}},
        ]
    )
    out = io.BytesIO()
    assert serve_stdio(cassette, "method+params", "none", stdin=io.BytesIO(live), stdout=out) == 0
    sent = parse_jsonl(out.getvalue())
    assert sent == [
        {"jsonrpc": "2.0", "id": 7, "result": {"content": []}},
        changed,
        logged,
        {"jsonrpc": "2.0", "id": 8, "result": {"tools": []}},
    ]
