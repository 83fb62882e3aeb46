"""The Streamable HTTP transport end to end: the mcp SDK's HTTP client and server (both eras) through
a real `mcpfault proxy --listen ... --upstream ...` process, every HTTP-level fault as the SDK client
sees it, and the bad input of both peers. Every test is bounded (``anyio.fail_after`` or timeouts)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError

from tests.conftest import write_profile
from tests.http_support import (
    ACCEPT,
    LEGACY,
    SdkHttpServer,
    http_proxy,
    jsonrpc,
    modern_call,
    sdk_server,
    serve_in_thread,
    server_url,
    sse_messages,
)
from tests.sdk_support import Progress

pytestmark = [pytest.mark.slow]

BASELINE = 'name = "baseline"\nseed = 1\n'
MODES = ["legacy", "auto"]  # auto negotiates 2026-07-28


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SdkHttpServer]:
    with sdk_server(tmp_path_factory.mktemp("sse-upstream")) as server:
        yield server


@pytest.fixture(scope="module")
def json_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SdkHttpServer]:
    with sdk_server(tmp_path_factory.mktemp("json-upstream"), json_response=True) as server:
        yield server


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(exc, kind):
        return True
    inner = list(exc.exceptions) if isinstance(exc, BaseExceptionGroup) else []
    inner += [e for e in (exc.__cause__, exc.__context__) if e is not None]
    return any(_caused_by(e, kind) for e in inner)


def profile(tmp_path: Path, rules: str = "") -> Path:
    return write_profile(tmp_path, BASELINE + rules)


# -- transparent relaying, both eras, JSON and SSE ---------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("answers", ["sse", "json"])
async def test_sdk_client_and_server_through_the_proxy(
    upstream: SdkHttpServer, json_upstream: SdkHttpServer, tmp_path: Path, mode: str, answers: str
) -> None:
    server = upstream if answers == "sse" else json_upstream
    with http_proxy(profile(tmp_path), server.url, tmp_path) as proxy:
        with anyio.fail_after(30):
            async with Client(proxy.url, mode=mode, read_timeout_seconds=10) as client:
                tools = await client.list_tools()
                echoed = await client.call_tool("echo", {"text": "héllo\u2028world"})
                added = await client.call_tool("add", {"a": 2, "b": 40})
                progress = Progress()
                counted = await client.call_tool("countdown", {"steps": 3}, progress_callback=progress)
        events = proxy.events()
    assert {"echo", "add", "countdown"} <= {t.name for t in tools.tools}
    assert echoed.content[0].text == "héllo\u2028world"  # type: ignore[union-attr]
    assert added.structured_content == {"result": 42}
    assert counted.content[0].text == "done after 3 steps"  # type: ignore[union-attr]
    if answers == "sse":
        assert progress.values() == [1, 2, 3]
    era = "legacy" if mode == "legacy" else "modern"
    calls = [e for e in events if e["method"] == "tools/call"]
    assert len(calls) == 3
    for event in events:
        assert event["client_received"] == "response", event
        assert event["era"] == era
        assert event["fault_type"] is None


@pytest.mark.anyio
async def test_sse_is_relayed_event_by_event(upstream: SdkHttpServer, tmp_path: Path) -> None:
    """Progress reaches the client while the tool still runs: the stream is never buffered whole."""
    with http_proxy(profile(tmp_path), upstream.url, tmp_path) as proxy, anyio.fail_after(30):
        async with Client(proxy.url, mode="legacy", read_timeout_seconds=10) as client:
            progress = Progress()
            await client.call_tool("countdown", {"steps": 5}, progress_callback=progress)
            finished = time.monotonic() - progress.started
    first = progress.updates[0].elapsed
    assert len(progress.updates) == 5
    assert finished - first > 0.6, (first, finished)  # five steps 0.2 s apart: the first came ~0.8 s early


def test_untouched_answers_cross_byte_for_byte(json_upstream: SdkHttpServer, tmp_path: Path) -> None:
    body, headers = modern_call(7, "add", {"a": 1, "b": 2})
    with (
        http_proxy(profile(tmp_path), json_upstream.url, tmp_path, "--no-propagate") as proxy,
        httpx2.Client(timeout=10) as http,
    ):
        direct = http.post(json_upstream.url, json=body, headers=headers)
        relayed = http.post(proxy.url, json=body, headers=headers)
    assert relayed.status_code == direct.status_code == 200
    assert relayed.content == direct.content
    assert relayed.headers["content-type"] == direct.headers["content-type"]


# -- HTTP-level faults, as the SDK client meets them ---------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_http_status_fault_never_reaches_the_server(upstream: SdkHttpServer, tmp_path: Path, mode: str) -> None:
    rules = '[[faults]]\ntype = "http_status"\nstatus = 503\nretry_after_s = 7\ntools = ["next_ticket"]\n'
    before = len(upstream.calls())
    with http_proxy(profile(tmp_path, rules), upstream.url, tmp_path) as proxy:
        body, headers = modern_call(1, "next_ticket", {"queue": "raw"})
        answer = httpx2.post(proxy.url, json=body, headers=headers, timeout=10)
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "7"
        with anyio.fail_after(30):
            async with Client(proxy.url, mode=mode, read_timeout_seconds=10) as client:
                with pytest.raises(MCPError) as raised:
                    await client.call_tool("next_ticket", {"queue": "sdk"})
                assert (await client.call_tool("echo", {"text": "still fine"})).is_error is False
        events = proxy.events()
    assert "error response" in str(raised.value).lower()
    assert len(upstream.calls()) == before  # neither request reached the server
    faulted = [e for e in events if e["fault_type"] == "http_status"]
    assert len(faulted) == 2
    assert all(e["client_received"] == "http_error" and e["upstream_contacted"] is False for e in faulted)


@pytest.mark.anyio
async def test_reset_before_and_after_the_server_acts(upstream: SdkHttpServer, tmp_path: Path) -> None:
    for mode, acted in (("before", False), ("after", True)):
        rules = f'[[faults]]\ntype = "reset"\nmode = "{mode}"\ntools = ["next_ticket"]\n'
        before = len(upstream.calls())
        with http_proxy(profile(tmp_path, rules), upstream.url, tmp_path) as proxy:
            body, headers = modern_call(1, "next_ticket", {"queue": mode})
            with pytest.raises(httpx2.TransportError):
                httpx2.post(proxy.url, json=body, headers=headers, timeout=10)
            # The SDK client meets a connection closed with no response as the real thing: its
            # transport raises RemoteProtocolError and the session ends.
            with anyio.fail_after(30), pytest.raises(BaseException) as raised:
                async with Client(proxy.url, mode="auto", read_timeout_seconds=5) as client:
                    await client.call_tool("next_ticket", {"queue": mode})
            assert _caused_by(raised.value, httpx2.RemoteProtocolError), raised.value
            events = proxy.events()
        assert (len(upstream.calls()) - before == 2) is acted, (mode, upstream.calls()[before:])
        resets = [e for e in events if e["fault_type"] == "reset"]
        assert len(resets) == 2 and all(e["client_received"] == "reset" for e in resets)
        assert all(e["upstream_contacted"] is acted for e in resets)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_stream_cut_after_the_first_progress_event(upstream: SdkHttpServer, tmp_path: Path, mode: str) -> None:
    rules = '[[faults]]\ntype = "stream_cut"\nafter_events = 1\ntools = ["countdown"]\n'
    with http_proxy(profile(tmp_path, rules), upstream.url, tmp_path) as proxy:
        with anyio.fail_after(30):
            async with Client(proxy.url, mode=mode, read_timeout_seconds=10) as client:
                progress = Progress()
                with pytest.raises(MCPError) as raised:
                    await client.call_tool("countdown", {"steps": 3}, progress_callback=progress)
                assert (await client.call_tool("echo", {"text": "next"})).content[0].text == "next"  # type: ignore[union-attr]
        events = proxy.events()
    assert progress.values() == [1]
    assert "ended without a response" in str(raised.value)
    cut = [e for e in events if e["fault_type"] == "stream_cut"]
    assert len(cut) == 1 and cut[0]["client_received"] == "stream_cut" and cut[0]["upstream_contacted"] is True


@pytest.mark.anyio
async def test_session_expired_makes_the_client_start_over(upstream: SdkHttpServer, tmp_path: Path) -> None:
    # Over HTTP, after and limit count within each session: its second echo expires it.
    rules = '[[faults]]\ntype = "session_expired"\nafter = 1\nlimit = 1\ntools = ["echo"]\n'
    with http_proxy(profile(tmp_path, rules), upstream.url, tmp_path) as proxy:
        with anyio.fail_after(30):
            async with Client(proxy.url, mode="legacy", read_timeout_seconds=10) as client:
                await client.call_tool("echo", {"text": "first"})
                with pytest.raises(MCPError) as raised:
                    await client.call_tool("echo", {"text": "second"})
            async with Client(proxy.url, mode="legacy", read_timeout_seconds=10) as client:  # re-initialize
                again = await client.call_tool("echo", {"text": "again"})
            async with Client(proxy.url, mode="auto", read_timeout_seconds=10) as client:  # no session: not eligible
                modern = await client.call_tool("echo", {"text": "modern"})
        events = proxy.events()
    assert "session not found" in str(raised.value).lower()
    assert again.content[0].text == "again"  # type: ignore[union-attr]
    assert modern.content[0].text == "modern"  # type: ignore[union-attr]
    expired = [e for e in events if e["fault_type"] == "session_expired"]
    assert len(expired) == 1 and expired[0]["client_received"] == "session_expired"
    assert [e["method"] for e in events].count("initialize") == 2


def test_first_byte_latency_holds_everything(upstream: SdkHttpServer, tmp_path: Path) -> None:
    rules = '[[faults]]\ntype = "first_byte_latency"\ndelay_s = 0.6\ntools = ["echo"]\n'
    with http_proxy(profile(tmp_path, rules), upstream.url, tmp_path) as proxy:
        body, headers = modern_call(1, "echo", {"text": "slow"})
        started = time.monotonic()
        with httpx2.Client(timeout=10) as http, http.stream("POST", proxy.url, json=body, headers=headers) as answer:
            headers_after = time.monotonic() - started
            text = answer.read().decode()
        events = proxy.events()
    assert headers_after >= 0.6
    assert sse_messages(text)[-1]["result"]["content"][0]["text"] == "slow" if "data:" in text else json.loads(text)
    delayed = [e for e in events if e["fault_type"] == "first_byte_latency"]
    assert len(delayed) == 1 and delayed[0]["delay_s"] == pytest.approx(0.6)
    assert delayed[0]["duration_s"] >= 0.6  # written when the client got the answer, the delay included


def test_a_delayed_answer_is_recorded_when_the_client_gets_it_over_http(
    upstream: SdkHttpServer, tmp_path: Path
) -> None:
    rules = '[[faults]]\ntype = "latency"\ndelay_s = 2.0\ntools = ["echo"]\n'
    with http_proxy(profile(tmp_path, rules), upstream.url, tmp_path) as proxy:
        body, headers = modern_call(1, "echo", {"text": "slow"})
        assert httpx2.post(proxy.url, json=body, headers=headers, timeout=10).status_code == 200
        given_up, headers = modern_call(2, "echo", {"text": "given up"})
        with pytest.raises(httpx2.ReadTimeout):
            httpx2.post(proxy.url, json=given_up, headers=headers, timeout=0.3)  # leaves during the delay
        untouched, headers = modern_call(3, "add", {"a": 1, "b": 2})  # sent after the client left
        assert httpx2.post(proxy.url, json=untouched, headers=headers, timeout=10).status_code == 200
        deadline = time.monotonic() + 10
        while len(proxy.events()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        order = [e["request_id"] for e in proxy.events()]
        events = {e["request_id"]: e for e in proxy.events()}
    assert events[1]["client_received"] == "response" and events[1]["duration_s"] >= 2.0
    assert events[2]["client_received"] == "cancelled"
    # Written when the client left, not when the delay ended: before the call sent after it.
    assert order.index(2) < order.index(3), order


# -- JSON-RPC faults behave as they do over stdio -------------------------------------------------


@pytest.mark.anyio
async def test_jsonrpc_faults_over_http(upstream: SdkHttpServer, tmp_path: Path) -> None:
    rules = (
        '[[faults]]\ntype = "error"\ncode = -32001\nmessage = "injected"\ntools = ["add"]\n'
        '[[faults]]\ntype = "timeout"\ntools = ["next_ticket"]\n'
    )
    before = len(upstream.calls())
    with http_proxy(profile(tmp_path, rules), upstream.url, tmp_path, "--hold", "30") as proxy:
        with anyio.fail_after(30):
            async with Client(proxy.url, mode="auto", read_timeout_seconds=10) as client:
                with pytest.raises(MCPError) as raised:
                    await client.call_tool("add", {"a": 1, "b": 1})
        body, headers = modern_call(9, "next_ticket", {"queue": "lost"})
        started = time.monotonic()
        with pytest.raises(httpx2.ReadTimeout):
            httpx2.post(proxy.url, json=body, headers=headers, timeout=1.0)
        waited = time.monotonic() - started
        events = proxy.events()
    assert raised.value.error.code == -32001
    assert waited >= 0.9  # the answer was lost: the client waited until it gave up
    assert any(line.startswith("next_ticket lost") for line in upstream.calls()[before:])  # the server acted
    dropped = [e for e in events if e["fault_type"] == "timeout"]
    assert len(dropped) == 1 and dropped[0]["client_received"] == "nothing"


# -- determinism under concurrency --------------------------------------------------------------


@pytest.mark.anyio
async def test_each_session_gets_the_same_faults_however_many_run_beside_it(
    upstream: SdkHttpServer, tmp_path: Path
) -> None:
    rules = '[[faults]]\ntype = "error"\nprobability = 0.5\ntools = ["add"]\n'

    async def session(url: str) -> list[bool]:
        outcome = []
        async with Client(url, mode="legacy", read_timeout_seconds=10) as client:
            for i in range(12):
                try:
                    await client.call_tool("add", {"a": i, "b": 1})
                    outcome.append(True)
                except MCPError:
                    outcome.append(False)
        return outcome

    with http_proxy(profile(tmp_path, rules), upstream.url, tmp_path) as proxy:
        with anyio.fail_after(60):
            alone = await session(proxy.url)
            together: list[list[bool]] = []

            async def one() -> None:
                together.append(await session(proxy.url))

            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(one)
    assert True in alone and False in alone  # the profile does fault, and not always
    assert together == [alone] * 6


# -- what a peer can get wrong --------------------------------------------------------------------


def test_upstream_down_is_a_502_naming_it(tmp_path: Path) -> None:
    from tests.http_support import free_port

    dead = f"http://127.0.0.1:{free_port()}/mcp"
    with http_proxy(profile(tmp_path), dead, tmp_path) as proxy:
        body, headers = modern_call(5, "echo", {"text": "x"})
        answer = httpx2.post(proxy.url, json=body, headers=headers, timeout=15)
        events = proxy.events()
    assert answer.status_code == 502
    assert answer.headers["content-type"].startswith("application/json")
    error = answer.json()
    assert error["id"] == 5 and error["error"]["code"] == -32000
    assert dead in error["error"]["message"]
    assert events[-1]["client_received"] == "upstream_unreachable"


def test_oversized_body_is_a_413(upstream: SdkHttpServer, tmp_path: Path) -> None:
    with http_proxy(profile(tmp_path), upstream.url, tmp_path, "--max-body-bytes", "1000") as proxy:
        body, headers = modern_call(1, "echo", {"text": "x" * 5000})
        answer = httpx2.post(proxy.url, json=body, headers=headers, timeout=10)
        small = httpx2.post(proxy.url, json=modern_call(2, "echo", {"text": "ok"})[0], headers=headers, timeout=10)
    assert answer.status_code == 413
    assert "--max-body-bytes" in answer.json()["error"]["message"]
    assert small.status_code == 200


def test_legacy_session_headers_pass_through(upstream: SdkHttpServer, tmp_path: Path) -> None:
    """initialize issues Mcp-Session-Id; requests with it work; DELETE ends it; after that, 404."""
    init = jsonrpc(
        1,
        "initialize",
        {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    )
    base = {"Accept": ACCEPT, "Content-Type": "application/json"}
    with http_proxy(profile(tmp_path), upstream.url, tmp_path) as proxy, httpx2.Client(timeout=10) as http:
        opened = http.post(proxy.url, json=init, headers=base)
        session = opened.headers["mcp-session-id"]
        headers = {**base, "Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}
        assert (
            http.post(
                proxy.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
            ).status_code
            == 202
        )
        listed = http.post(proxy.url, json=jsonrpc(2, "tools/list"), headers=headers)
        assert any(t["name"] == "echo" for t in sse_messages(listed.text)[-1]["result"]["tools"])
        assert http.delete(proxy.url, headers=headers).status_code < 300
        gone = http.post(proxy.url, json=jsonrpc(3, "tools/list"), headers=headers)
    assert gone.status_code == 404


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--listen", "nonsense", "--upstream", "http://127.0.0.1:1/mcp"], "expected HOST:PORT"),
        (["--listen", "127.0.0.1:0", "--upstream", "ftp://127.0.0.1/mcp"], "is not an http(s) URL with a host"),
        (["--listen", "127.0.0.1:0", "--upstream", "http://user:pw@127.0.0.1:1/mcp"], "not in the URL"),
        (["--listen", "127.0.0.1:0"], "--listen needs --upstream"),
        (["--upstream", "http://127.0.0.1:1/mcp"], "--upstream needs --listen"),
        (["--listen", "0.0.0.0:0", "--upstream", "http://127.0.0.1:1/mcp"], "MCPFAULT_PROXY_TOKEN"),
    ],
)
def test_bad_listen_and_upstream_values(tmp_path: Path, options: list[str], expected: str) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "mcpfault", "proxy", "--config", str(profile(tmp_path)), *options],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


class _OddUpstream(BaseHTTPRequestHandler):
    """An upstream that answers every POST with ``self.server.answer`` (content type, body)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        content_type, body = self.server.answer  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def odd_upstream() -> Iterator[ThreadingHTTPServer]:
    with serve_in_thread(_OddUpstream) as server:
        yield server


def test_non_json_upstream_answers(odd_upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    url = server_url(odd_upstream, "/mcp")
    body, headers = modern_call(3, "echo", {"text": "x"})
    with http_proxy(profile(tmp_path), url, tmp_path) as proxy, httpx2.Client(timeout=10) as http:
        odd_upstream.answer = ("text/html", b"<html><body>502 Bad Gateway (nginx)</body></html>")  # type: ignore[attr-defined]
        html = http.post(proxy.url, json=body, headers=headers)
        odd_upstream.answer = ("application/json", b'{"jsonrpc": "2.0", "id": 3, "result": {trunc')  # type: ignore[attr-defined]
        broken = http.post(proxy.url, json=body, headers=headers)
        events = proxy.events()
    assert html.status_code == 502
    error = html.json()["error"]
    assert error["code"] == -32000 and "text/html" in error["message"] and "nginx" in error["message"]
    assert broken.status_code == 200  # a JSON answer that does not parse is relayed as it came
    assert broken.content == b'{"jsonrpc": "2.0", "id": 3, "result": {trunc'
    assert [e["client_received"] for e in events] == ["error", "nothing"]


def test_a_client_leaving_mid_stream_cancels_the_upstream_request(upstream: SdkHttpServer, tmp_path: Path) -> None:
    """In the 2026-07-28 era closing the response stream is cancellation: the server's tool stops."""
    body, headers = modern_call(11, "countdown", {"steps": 15})
    body["params"]["_meta"]["progressToken"] = "p"  # progress makes the server answer with a stream
    before = len(upstream.calls())
    with http_proxy(profile(tmp_path), upstream.url, tmp_path) as proxy:
        with httpx2.Client(timeout=10) as http, http.stream("POST", proxy.url, json=body, headers=headers) as answer:
            for line in answer.iter_lines():
                if line.startswith("data:"):
                    break  # the first progress event: now leave
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (proxy.events() and upstream.calls()[before:]):
            time.sleep(0.05)
        events = proxy.events()
    assert upstream.calls()[before:][0].startswith("countdown cancelled after"), upstream.calls()[before:]
    assert [e["client_received"] for e in events] == ["cancelled"]


@pytest.mark.anyio
async def test_upstream_dying_mid_request_answers_with_an_error(tmp_path: Path) -> None:
    with sdk_server(tmp_path) as server, http_proxy(profile(tmp_path), server.url, tmp_path) as proxy:
        body, headers = modern_call(4, "crash", {"code": 3})
        answer = httpx2.post(proxy.url, json=body, headers=headers, timeout=10)
        after = httpx2.post(proxy.url, json=modern_call(5, "echo", {"text": "x"})[0], headers=headers, timeout=10)
    messages = sse_messages(answer.text) if "data:" in answer.text else [answer.json()]
    assert messages[-1]["id"] == 4 and messages[-1]["error"]["code"] == -32000, answer.text
    assert after.status_code == 502 and after.json()["error"]["code"] == -32000


def test_spans_carry_the_http_attributes(upstream: SdkHttpServer, tmp_path: Path, clean_otel_env: None) -> None:
    spans_file = tmp_path / "proxy-spans.jsonl"
    with http_proxy(profile(tmp_path), upstream.url, tmp_path, "--spans", str(spans_file)) as proxy:

        async def scenario() -> str:
            async with Client(proxy.url, mode="legacy", read_timeout_seconds=10) as client:
                await client.call_tool("echo", {"text": "traced"})
                return str(client.session.session_id if hasattr(client.session, "session_id") else "")

        anyio.run(scenario)
    from mcpfault.telemetry.tracing import read_spans

    spans = read_spans(spans_file)
    calls = [s for s in spans if s.attributes.get("mcp.method.name") == "tools/call"]
    assert len(calls) == 1
    attributes = calls[0].attributes
    assert attributes["network.transport"] == "tcp"
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == upstream.port
    assert attributes["mcp.session.id"]
    init = [s for s in spans if s.attributes.get("mcp.method.name") == "initialize"]
    assert init and "mcp.session.id" not in init[0].attributes  # no session yet when it was asked
