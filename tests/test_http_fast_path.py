"""The HTTP proxy's fast path (proxy/http/fast.py) against its general path, in one process.

The same conversation goes through an ``HttpProxy`` twice, with the fast path and without it (its
server's ``fast`` handler removed), in front of a scripted upstream: both eras, JSON, SSE and error
answers, a large answer, a server that closes its connection, pipelining, a client leaving mid-request
and a server that goes away. The client must get the same bytes, the upstream the same requests, and
the events, spans and metrics must say the same.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import generate_latest
from yarl import URL

from mcpfault.faults import profile
from mcpfault.faults.catalog import CATALOG
from mcpfault.proxy.events import MemoryEventSink
from mcpfault.proxy.http import server as web
from mcpfault.proxy.http.serve import HttpProxy, ListenAddress
from mcpfault.proxy.http.sessions import Sessions
from mcpfault.proxy.observe import TelemetryObserver, fault_label_sets
from mcpfault.telemetry import names
from mcpfault.telemetry.fastspans import SpanRecorder
from mcpfault.telemetry.metrics import ProxyMetrics
from tests.test_core_lanes import built, normalized

pytestmark = pytest.mark.anyio

LEGACY, MODERN = "2025-11-25", "2026-07-28"
META = "io.modelcontextprotocol/protocolVersion"


# -- a scripted upstream ----------------------------------------------------------------------------


class Upstream:
    """Answers each POST by its method and tool (see ``_answer``); keeps every request as it came."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.hung = asyncio.Event()  # a request that is never answered arrived
        self.hung_closed = asyncio.Event()  # and the proxy closed its connection
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> URL:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return URL(f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/mcp")

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                found = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                body = await reader.readexactly(int(found.group(1))) if found else b""
                self.received.append(head + body)
                answer = self._answer(head, body)
                if answer is None:
                    self.hung.set()
                    await reader.read()  # until the proxy closes the connection
                    self.hung_closed.set()
                    return
                writer.write(answer)
                await writer.drain()
                if b"Connection: close" in answer or answer.endswith(b"cut"):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()

    def _answer(self, head: bytes, body: bytes) -> bytes | None:
        if not head.startswith(b"POST"):
            return b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n"
        message = orjson.loads(body)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            return b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"
        tool = message.get("params", {}).get("name")
        headers = [b"Date: Thu, 01 Jan 2026 00:00:00 GMT", b"Server: scripted", b"X-Upstream: 1"]
        if method == "initialize":
            result: dict[str, Any] = {"protocolVersion": LEGACY, "capabilities": {}, "serverInfo": {"name": "s"}}
            headers.append(b"Mcp-Session-Id: s-1")
        elif method == "server/discover":
            result = {"supportedVersions": [MODERN], "capabilities": {}}
        elif tool == "hang":
            return None
        else:
            result = {"content": [{"type": "text", "text": f"{tool}:{request_id}"}]}
        if tool == "big":
            result["content"][0]["text"] = "x" * (2 * 1024 * 1024)  # past the pool's high-water mark
        data = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})
        status = b"200 OK"
        content_type = b"application/json; charset=utf-8"
        if tool == "sse":
            note = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "hi"}})
            data = b"event: message\r\ndata: " + note + b"\r\n\r\nevent: message\r\ndata: " + data + b"\r\n\r\n"
            content_type = b"text/event-stream"
        elif tool == "fails":
            status = b"500 Internal Server Error"
            data = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32603, "message": "no"}})
        elif tool == "closes":
            headers.append(b"Connection: close")
        elif tool == "cut":  # the head and part of the body, then the connection ends
            return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\ncut"
        headers += [b"Content-Type: " + content_type, b"Content-Length: %d" % len(data)]
        return b"HTTP/1.1 " + status + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + data


# -- a client ---------------------------------------------------------------------------------------


def post(
    body: dict[str, Any], *, session: str | None = None, version: str = LEGACY, close: bool = False, extra: str = ""
) -> bytes:
    data = json.dumps(body).encode()
    head = (
        "POST /mcp HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {version}\r\nX-Client: t\r\n{extra}"
    )
    if session is not None:
        head += f"Mcp-Session-Id: {session}\r\n"
    if close:
        head += "Connection: close\r\n"
    return f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data


def call(request_id: Any, tool: str, *, modern: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": {}}
    if modern:
        params["_meta"] = {META: MODERN}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    """One answer, whole, with its Date line set aside (the only part that may differ)."""
    head = await reader.readuntil(b"\r\n\r\n")
    if b"Transfer-Encoding: chunked" in head:
        body = b""
        while True:
            size_line = await reader.readuntil(b"\r\n")
            chunk = await reader.readexactly(int(size_line, 16) + 2)
            body += size_line + chunk
            if size_line == b"0\r\n":
                break
    else:
        found = re.search(rb"\r\nContent-Length: (\d+)", head)
        body = await reader.readexactly(int(found.group(1))) if found else b""
    return re.sub(rb"\r\nDate: [^\r]*", b"", head) + body


class Run:
    """One proxy (with or without its fast path) in front of a fresh ``Upstream``, and what it recorded."""

    def __init__(self, tmp_path: Path, *, fast: bool, traced: bool, rules: str = "") -> None:
        self.fast = fast
        self.rules = rules
        self.upstream = Upstream()
        self.events = MemoryEventSink()
        self.queued: list[tuple[Any, ...]] = []
        self.recorder: SpanRecorder | None = None
        self.metrics: ProxyMetrics | None = None
        if traced:
            self.recorder = SpanRecorder("svc", spans_file=tmp_path / f"spans-{fast}.jsonl", otlp_endpoint=None)
            self.recorder._enqueue = self.queued.append  # type: ignore[method-assign,assignment]  # built here
            types, modes = fault_label_sets(CATALOG)
            self.metrics = ProxyMetrics(names.TRANSPORT_HTTP, fault_types=types, fault_modes=modes)
        self.taken = 0  # POSTs the fast path answered itself
        self.proxy: HttpProxy | None = None

    def observers(self, session_id: str | None) -> list[Any]:
        if self.recorder is None:
            return []
        return [TelemetryObserver(self.recorder, self.metrics, transport="tcp", session_id=session_id)]

    @asynccontextmanager
    async def serving(self, *, events: bool = True) -> AsyncIterator[tuple[str, int]]:
        url = await self.upstream.start()
        loaded = profile.loads(self.rules)
        sessions = Sessions(
            loaded, events=self.events if events else None, observers_for=self.observers, propagate=True
        )
        self.proxy = HttpProxy(sessions, url)
        await self.proxy.start(ListenAddress("127.0.0.1", 0))
        server = self.proxy._server
        assert server is not None
        if not self.fast:
            server.fast = None
        port = URL(self.proxy.url).port
        assert port is not None
        try:
            yield "127.0.0.1", port
        finally:
            await self.proxy.close()
            await self.upstream.stop()

    def spans(self) -> list[dict[str, Any]]:
        return normalized(built(self.recorder, self.queued)) if self.recorder is not None and self.queued else []

    def counts(self) -> list[str]:
        """The metrics' counters and histogram counts (their sums are times)."""
        if self.metrics is None:
            return []
        text = generate_latest(self.metrics.registry).decode()
        return [line for line in text.splitlines() if re.match(r"\w+(_total|_count)\{", line)]

    def recorded(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k not in ("time", "duration_s")} for e in self.events.records]


async def converse(host: str, port: int, steps: list[bytes | list[bytes]]) -> list[bytes]:
    """Each step's answers, on one keep-alive connection; a list is pipelined, in one write."""
    reader, writer = await asyncio.open_connection(host, port)
    answers = []
    try:
        async with asyncio.timeout(20):
            for step in steps:
                batch = step if isinstance(step, list) else [step]
                writer.write(b"".join(batch))
                answers += [await read_answer(reader) for _ in batch]
    finally:
        writer.close()
    return answers


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
DISCOVER = {"jsonrpc": "2.0", "id": "d", "method": "server/discover", "params": {"_meta": {META: MODERN}}}


def legacy_steps() -> list[bytes | list[bytes]]:
    s = "s-1"
    return [
        post(INITIALIZE),
        post(INITIALIZED, session=s),
        post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session=s),
        post(call(2, "echo"), session=s),
        post(call("three", "echo"), session=s),
        post(call(31, "echo"), session=s, extra="X-Extra: 1\r\naccept-encoding: gzip\r\n"),  # other headers
        post(call(32, "echo"), session=s),  # and back
        post(call(4, "sse"), session=s),
        post(call(5, "fails"), session=s),
        post(call(6, "big"), session=s),
        post(call(7, "closes"), session=s),
        post(call(70, "cut"), session=s),
        [post(call(8, "echo"), session=s), post(call(9, "echo"), session=s), post(call(10, "sse"), session=s)],
        post(call(11.5, "echo"), session=s),  # a float id: the core's full path
        post(call(12, "echo"), session="unknown"),  # a session the proxy has not seen
        post(call(13, "echo"), session=s, close=True),
    ]


def modern_steps() -> list[bytes | list[bytes]]:
    return [
        post(DISCOVER, version=MODERN),
        post(call(1, "echo", modern=True), version=MODERN),
        post(call(2, "sse", modern=True), version=MODERN),
        [post(call(3, "echo", modern=True), version=MODERN), post(call(3, "echo", modern=True), version=MODERN)],
        post(call(4, "fails", modern=True), version=MODERN),
        post(call(5, "echo", modern=True), version=MODERN, close=True),
    ]


async def through(run: Run, steps: list[bytes | list[bytes]], *, events: bool = True) -> list[bytes]:
    async with run.serving(events=events) as (host, port):
        answers = await converse(host, port, steps)
        if run.recorder is not None:
            await asyncio.sleep(0.05)  # the spans of answers the lane let through end just after the write
    return answers


@pytest.fixture
def count_taken(monkeypatch: pytest.MonkeyPatch) -> Callable[[Run], None]:
    """Counts, per run, the answers the fast path wrote itself."""
    runs: list[Run] = []
    answer, answer_encoded = web.Connection.answer, web.Connection.answer_encoded

    def counted(connection: web.Connection, response: web.Response, keep_alive: bool) -> None:
        runs[-1].taken += 1
        answer(connection, response, keep_alive)

    def counted_encoded(connection: web.Connection, data: bytes) -> None:
        runs[-1].taken += 1
        answer_encoded(connection, data)

    monkeypatch.setattr(web.Connection, "answer", counted)
    monkeypatch.setattr(web.Connection, "answer_encoded", counted_encoded)
    return runs.append


def without_context(request: bytes) -> bytes:
    """A request as the upstream got it, without its port and the proxy's span ids (each run has its own)."""
    request = re.sub(rb"\r\nHost: 127.0.0.1:\d+\r\n", b"\r\nHost: upstream\r\n", request)
    return re.sub(rb'"traceparent":"00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]"', b'"traceparent":"-"', request)


# Rules on tools/call: every call is the engine's to decide (the general path), tools/list is not.
RULES = """
[[faults]]
name = "boom"
type = "error"
mode = "protocol"
tools = ["boom"]
probability = 1.0

[[faults]]
name = "busy"
type = "http_status"
status = 503
tools = ["busy"]
probability = 1.0
"""


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
@pytest.mark.parametrize("rules", ["", RULES], ids=["no-rules", "rules"])
async def test_the_fast_path_and_the_general_path_give_the_same_bytes_events_and_spans(
    tmp_path: Path, era: str, traced: bool, rules: str, count_taken: Callable[[Run], None]
) -> None:
    steps = legacy_steps() if era == "legacy" else modern_steps()
    if rules:  # before the last step, which closes the connection
        session, version = ("s-1", LEGACY) if era == "legacy" else (None, MODERN)
        faulted = [call(20, "boom", modern=era == "modern"), call(21, "busy", modern=era == "modern")]
        steps[-1:-1] = [post(body, session=session, version=version) for body in faulted]
    fast = Run(tmp_path, fast=True, traced=traced, rules=rules)
    general = Run(tmp_path, fast=False, traced=traced, rules=rules)
    count_taken(fast)
    fast_answers = await through(fast, steps)
    count_taken(general)
    general_answers = await through(general, steps)

    assert fast_answers == general_answers
    assert [without_context(r) for r in fast.upstream.received] == [
        without_context(r) for r in general.upstream.received
    ]
    assert fast.recorded() == general.recorded()
    assert fast.spans() == general.spans()
    assert fast.counts() == general.counts()
    assert general.taken == 0
    # What the fast path answers itself: plain requests with a JSON answer, while the pool has an idle
    # connection and no request waits before them on the client's connection. Legacy: tools/list, 2,
    # "three", 31, 32, 7 (its server then closes the connection: the next two connect), 13; modern: 1, the first
    # 3 (the second was pipelined behind it), 5. SSE, errors, large or broken answers, the float id and
    # the unknown session's request (its era is unknown) end on the general path.
    if rules:
        assert fast.taken == (1 if era == "legacy" else 0)  # tools/list
        assert any(e["fault_type"] == "error" for e in fast.recorded())
        assert any(e["fault_type"] == "http_status" for e in fast.recorded())
    else:
        assert fast.taken == (7 if era == "legacy" else 3)
    if traced:
        assert len(fast.spans()) == len(fast.recorded())
        assert any(line.startswith(names.REQUESTS_TOTAL) for line in fast.counts())


async def test_without_events_the_lanes_take_both_ways(tmp_path: Path, count_taken: Callable[[Run], None]) -> None:
    fast, general = Run(tmp_path, fast=True, traced=True), Run(tmp_path, fast=False, traced=True)
    count_taken(fast)
    fast_answers = await through(fast, legacy_steps(), events=False)
    count_taken(general)
    general_answers = await through(general, legacy_steps(), events=False)
    assert fast_answers == general_answers
    assert fast.spans() == general.spans()
    assert fast.counts() == general.counts()
    assert fast.taken == 7


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
async def test_a_client_leaving_mid_request_cancels_it_upstream(tmp_path: Path, fast: bool) -> None:
    run = Run(tmp_path, fast=fast, traced=False)
    async with run.serving() as (host, port):
        await converse(host, port, [post(DISCOVER, version=MODERN), post(call(1, "echo", modern=True), version=MODERN)])
        _reader, writer = await asyncio.open_connection(host, port)
        writer.write(post(call(2, "hang", modern=True), version=MODERN))
        async with asyncio.timeout(10):
            await run.upstream.hung.wait()
            writer.close()
            await run.upstream.hung_closed.wait()  # the proxy closed the upstream request: the server knows
            while len(run.events.records) < 3:
                await asyncio.sleep(0.01)
    assert [e["client_received"] for e in run.recorded()] == ["response", "response", "cancelled"]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
async def test_an_upstream_that_went_away_gets_the_client_an_error(tmp_path: Path, fast: bool) -> None:
    run = Run(tmp_path, fast=fast, traced=False)
    async with run.serving() as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            async with asyncio.timeout(10):
                writer.write(post(DISCOVER, version=MODERN) + post(call(1, "echo", modern=True), version=MODERN))
                await read_answer(reader)
                await read_answer(reader)
                await run.upstream.stop()  # its connections close; nothing listens any more
                await asyncio.sleep(0.1)
                writer.write(post(call(2, "echo", modern=True), version=MODERN))
                answer = await read_answer(reader)
        finally:
            writer.close()
        run.upstream._server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # for the cleanup
    assert answer.startswith(b"HTTP/1.1 502")
    assert b"cannot reach the upstream MCP server" in answer
    assert run.recorded()[-1]["client_received"] == "upstream_unreachable"


async def test_a_failure_of_the_fast_path_still_answers_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the upstream's callbacks gets the client the general path's JSON-RPC error, and the
    connections go on; one while the request is taken gets a 500 and the connection closes."""
    from mcpfault.proxy.core import ProxyCore
    from mcpfault.proxy.http import fast as fast_module

    def broken(*_: Any) -> bytes:
        raise RuntimeError("boom")

    run = Run(tmp_path, fast=True, traced=False)
    async with run.serving() as (host, port):
        with monkeypatch.context() as patched:
            patched.setattr(ProxyCore, "lane_from_server", broken)
            answers = await converse(
                host,
                port,
                [post(DISCOVER, version=MODERN), post(call(1, "echo", modern=True), version=MODERN)],
            )
        after = await converse(host, port, [post(call(2, "echo", modern=True), version=MODERN)])
        with monkeypatch.context() as patched:
            patched.setattr(fast_module, "forwarded_head", broken)
            refused = await converse(host, port, [post(call(3, "echo", modern=True), version=MODERN)])
    assert (
        answers[1].startswith(b"HTTP/1.1 502")
        and b"the proxy failed on this request (RuntimeError: boom)" in answers[1]
    )
    assert after[0].startswith(b"HTTP/1.1 200") and b"echo:2" in after[0]
    assert refused[0].startswith(b"HTTP/1.1 500")


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
async def test_a_json_answer_broken_off_ends_the_request_with_an_error(tmp_path: Path, fast: bool) -> None:
    run = Run(tmp_path, fast=fast, traced=False)
    async with run.serving() as (host, port):
        answers = await converse(
            host,
            port,
            [post(INITIALIZE), post(call(1, "echo"), session="s-1"), post(call(2, "cut"), session="s-1")],
        )
        assert run.proxy is not None
        core = run.proxy.sessions.session("s-1").core
        assert core.in_flight == 0  # nothing left waiting for an answer that will never come
    assert answers[2].startswith(b"HTTP/1.1 502")
    assert b"the upstream MCP server broke off its answer" in answers[2] and b'"id":2' in answers[2]
    event = run.recorded()[-1]
    assert (event["request_id"], event["client_received"], event["error_code"]) == (2, "upstream_exited", -32000)
