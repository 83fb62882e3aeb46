"""The HTTP proxy's own server (proxy/http/server.py) over real loopback sockets: keep-alive and
pipelining, HEAD, 100-continue, chunked request bodies, malformed HTTP, oversized heads and bodies,
a streamed response to a client that stops reading, the idle timeout, and a client leaving mid-answer."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from mcpfault.proxy.http import server as web

pytestmark = pytest.mark.anyio

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serving(handler: Handler, **kw: float) -> AsyncIterator[int]:
    max_body_bytes, keepalive_s = int(kw.pop("max_body_bytes", 1000)), kw.pop("keepalive_s", web.KEEPALIVE_S)
    assert not kw, kw
    server = web.HttpServer(handler, max_body_bytes=max_body_bytes, keepalive_s=keepalive_s)
    port = await server.listen("127.0.0.1", 0)
    try:
        yield port
    finally:
        await server.close()


async def echo(request: web.Request) -> web.StreamResponse:
    try:
        body = await request.read()
    except web.BodyTooLarge:
        return web.Response(status=413, text="too large")
    return web.Response(body=f"{request.method} {request.raw_path} {len(body)}".encode(), content_type="text/plain")


async def exchange(port: int, data: bytes, *, until: bytes | None = None, timeout: float = 5.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    received = b""
    try:
        async with asyncio.timeout(timeout):
            while until is None or until not in received:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                received += chunk
    finally:
        writer.close()
    return received


async def test_keep_alive_and_pipelined_requests_answer_in_order() -> None:
    async with serving(echo) as port:
        two = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b?q=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
        received = await exchange(port, two, until=b"POST /b?q=1 3")
    assert received.count(b"HTTP/1.1 200 OK") == 2
    assert received.index(b"GET /a 0") < received.index(b"POST /b?q=1 3")
    assert b"Date: " in received and b"Content-Length: 8" in received


async def test_head_gets_headers_only_and_100_continue_is_sent() -> None:
    async with serving(echo) as port:
        head = await exchange(port, b"HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        expect = (
            b"POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
        )
        continued = await exchange(port, expect)
    assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n")  # no body after the head
    assert continued.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")
    assert continued.endswith(b"POST /e 2")


async def test_chunked_request_body() -> None:
    async with serving(echo) as port:
        chunked = b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        received = await exchange(port, chunked)
    assert received.endswith(b"POST /c 5")


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header Without Colon\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", b"431"),
    ],
)
async def test_malformed_http_is_refused_and_the_server_lives_on(data: bytes, status: bytes) -> None:
    async with serving(echo) as port:
        refused = await exchange(port, data)
        after = await exchange(port, b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert refused.startswith(b"HTTP/1.1 " + status), refused[:80]
    assert after.endswith(b"GET /ok 0")


async def test_oversized_body_reaches_the_handler_as_body_too_large() -> None:
    async with serving(echo, max_body_bytes=10) as port:
        received = await exchange(
            port, b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\nConnection: close\r\n\r\n" + b"x" * 50
        )
    assert received.startswith(b"HTTP/1.1 413")


async def test_a_client_that_stops_reading_holds_the_stream_back() -> None:
    written = 0
    buffered: list[int] = []

    async def stream(request: web.Request) -> web.StreamResponse:
        nonlocal written
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(2000):  # 128 MiB if nothing held it back
            await response.write(b"x" * 65536)
            written += 65536
            buffered.append(request._connection.transport.get_write_buffer_size())  # type: ignore[union-attr]
        await response.write_eof()
        return response

    async with serving(stream) as port:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(1.0)  # the client reads nothing for a second
        sock.close()
        await asyncio.sleep(0.2)
    assert written < 32 * 1024 * 1024  # the writer waited for the client instead of buffering 128 MiB
    assert max(buffered) < 4 * 1024 * 1024


async def test_a_client_leaving_cancels_its_handler() -> None:
    cancelled = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return web.Response(body=b"late")

    async with serving(slow) as port:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.close()
        async with asyncio.timeout(5):
            await cancelled.wait()


async def test_an_idle_keep_alive_connection_is_closed() -> None:
    async with serving(echo, keepalive_s=0.3) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        async with asyncio.timeout(5):
            first = await reader.read(65536)
            rest = await reader.read(65536)  # EOF once the idle timeout closes the connection
        writer.close()
    assert first.startswith(b"HTTP/1.1 200") and rest == b""


async def test_a_request_that_never_finishes_arriving_gets_408() -> None:
    async with serving(echo, keepalive_s=0.3) as port:
        received = await exchange(port, b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly part")
    assert received.startswith(b"HTTP/1.1 408")


async def test_pipelining_without_reading_is_held_back() -> None:
    served = 0

    async def count(request: web.Request) -> web.StreamResponse:
        nonlocal served
        served += 1
        return web.Response(body=b"x" * 200_000)  # answers the client does not read

    async with serving(count) as port:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.setblocking(False)
        request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        for _ in range(5000):
            try:
                sock.send(request)
            except BlockingIOError:
                break
            await asyncio.sleep(0)
        await asyncio.sleep(0.5)
        sock.close()
    assert served < 200  # the server stopped reading instead of queueing thousands of requests


class _Later:
    """A fast handler that takes requests to /fast and answers each 50 ms later from a callback, and
    hands requests to /handoff to a coroutine; it records the clients that left before their answer."""

    def __init__(self) -> None:
        self.gone: list[bytes] = []
        self.taken = 0

    def __call__(
        self,
        connection: web.Connection,
        method: bytes,
        target: bytes,
        headers: web.RawHeaders,
        body: bytes,
        keep_alive: bool,
    ) -> bool:
        if target == b"/handoff":
            request = connection.request_of(method, target, headers, body)
            connection.hand_off(request, keep_alive, echo)
            return True
        if target != b"/fast":
            return False
        self.taken += 1
        later = self

        class Taken:
            def client_gone(self) -> None:
                timer.cancel()
                later.gone.append(body)

        def answer() -> None:
            connection.answer(web.Response(body=b"fast " + body, content_type="text/plain"), keep_alive)

        timer = asyncio.get_running_loop().call_later(0.05, answer)
        connection.taken(Taken())
        return True


async def test_a_fast_handler_answers_in_order_with_pipelined_requests() -> None:
    fast = _Later()
    server = web.HttpServer(echo, max_body_bytes=1000, fast=fast)
    port = await server.listen("127.0.0.1", 0)
    try:
        three = (
            b"POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na"
            b"POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nb"  # behind a taken one: the handler
            b"POST /handoff HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nc"
        )
        received = await exchange(port, three, until=b"POST /handoff 1")
        one = b"POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nd"
        closed = await exchange(port, one)
    finally:
        await server.close()
    assert received.index(b"fast a") < received.index(b"POST /fast 1") < received.index(b"POST /handoff 1")
    assert fast.taken == 2  # a and d
    assert b"Connection: close" in closed and closed.endswith(b"fast d")


async def test_a_client_leaving_tells_the_fast_handler_and_the_close_waits_for_it() -> None:
    fast = _Later()
    server = web.HttpServer(echo, max_body_bytes=1000, fast=fast)
    port = await server.listen("127.0.0.1", 0)
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\ngone")
        await asyncio.sleep(0.01)
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nkept")
        await asyncio.sleep(0.01)
    finally:
        await server.close(drain_s=2.0)  # waits for the answer to "kept", not for the full 2 s
    assert fast.gone == [b"gone"]
    async with asyncio.timeout(5):
        received = await reader.read(65536)
    writer.close()
    assert received.endswith(b"fast kept")
