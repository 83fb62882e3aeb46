"""The HTTP proxy's server side: HTTP/1.1 on asyncio protocols, requests parsed by httptools (llhttp).

Why our own: aiohttp's server and client together cost more per request than a whole stdlib relay
adds (docs/results/performance.md); what the proxy needs is small. A connection keeps alive and
handles pipelined requests in order, one handler task at a time; the client going away cancels that
task (which is how a cancellation reaches the upstream). Limits: request line and headers 64 KiB
(431), body ``max_body_bytes`` (the handler gets ``BodyTooLarge`` from ``read``), an idle
keep-alive connection closes after ``keepalive_s``. Malformed HTTP gets 400 and the connection closes.

The surface mirrors aiohttp's web module where the proxy uses it (``Response``, ``StreamResponse``
with ``prepare``/``write``/``write_eof``, ``Request.read``), so the transport reads the same either way.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from email.utils import formatdate
from http import HTTPStatus
from typing import cast

import httptools
import structlog
from multidict import CIMultiDict, CIMultiDictProxy

from mcpfault.errors import MCPFaultError

log = structlog.get_logger("mcpfault.proxy")

MAX_HEAD_BYTES = 64 * 1024
KEEPALIVE_S = 75.0  # an idle connection, and a request still arriving, get this long
MAX_PIPELINED = 16  # requests read ahead of their answers; then the connection is not read until they drain


class BodyTooLarge(MCPFaultError):
    """The request body is larger than the server accepts."""


class Request:
    def __init__(
        self, connection: _Connection, method: str, raw_path: str, headers: CIMultiDict[str], body: bytes | None
    ) -> None:
        self.method = method
        self.raw_path = raw_path
        self.path = raw_path.split("?", 1)[0]
        self.headers = CIMultiDictProxy(headers)
        self._body = body
        self._connection = connection

    async def read(self) -> bytes:
        if self._body is None:
            raise BodyTooLarge(f"larger than {self._connection.max_body_bytes} bytes")
        return self._body

    def abort(self) -> None:
        """Drop the connection at once, without a response: what a reset looks like."""
        self._connection.abort()


Headers = Mapping[str, str] | Iterable[tuple[str, str]]


def _head(status: int, headers: Iterable[tuple[str, str]], extra: str) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}\r\nDate: {_date()}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in headers)
    lines.append(extra)
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


class StreamResponse:
    """A response sent as it is written (chunked), such as an SSE stream."""

    def __init__(self, *, status: int = 200, headers: Headers | None = None) -> None:
        self.status = status
        self.headers: CIMultiDict[str] = CIMultiDict(headers or ())
        self._connection: _Connection | None = None
        self.prepared = False
        self.finished = False

    async def prepare(self, request: Request) -> None:
        connection = request._connection
        self._connection = connection
        self.prepared = True
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in ("content-length", "transfer-encoding")]
        connection.write(_head(self.status, headers, "Transfer-Encoding: chunked\r\n"))
        await connection.drain()

    async def write(self, data: bytes) -> None:
        assert self._connection is not None, "prepare() first"
        if data:
            self._connection.write(b"%x\r\n%b\r\n" % (len(data), data))
            await self._connection.drain()

    async def write_eof(self) -> None:
        if self._connection is not None and not self.finished:
            self.finished = True
            self._connection.write(b"0\r\n\r\n")
            await self._connection.drain()


class Response(StreamResponse):
    """A whole response, sent in one write when the handler returns it."""

    def __init__(
        self,
        *,
        status: int = 200,
        headers: Headers | None = None,
        body: bytes = b"",
        text: str | None = None,
        content_type: str | None = None,
    ) -> None:
        super().__init__(status=status, headers=headers)
        if text is not None:
            body = text.encode()
            content_type = content_type or "text/plain; charset=utf-8"
        if content_type is not None:
            self.headers["Content-Type"] = content_type
        self.body = body

    def encode(self, head_only: bool) -> bytes:
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in ("content-length", "transfer-encoding")]
        head = _head(self.status, headers, f"Content-Length: {len(self.body)}\r\n")
        return head if head_only else head + self.body


Handler = Callable[[Request], Awaitable[StreamResponse]]


class _Connection(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self.max_body_bytes = server.max_body_bytes
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = bytearray()
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self._body_size = 0
        self._head_size = 0
        self._head_too_large = False
        self._waiting: deque[tuple[Request, bool]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._reading_paused = False
        self.closed = False

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes
        self._server.connections.add(self)
        self._arm_idle_timer()

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed HTTP request: {exc}")
        if self._head_too_large:
            self._refuse(431, f"request line and headers over {MAX_HEAD_BYTES} bytes")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._server.connections.discard(self)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the client left: its request is cancelled, upstream included
        self._wake_drain()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain()

    # -- httptools callbacks ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url.clear()
        self._headers = []
        self._body = []
        self._body_size = 0
        self._head_size = 0
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        # A request that never finishes arriving (a slow or stuck client) must not hold the connection forever.
        self._idle_timer = asyncio.get_running_loop().call_later(self._server.keepalive_s, self._request_timeout)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        for name, value in self._headers:
            if name.lower() == "expect" and value.lower() == "100-continue" and self.transport is not None:
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size <= self.max_body_bytes:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._head_too_large:
            return
        body = None if self._body_size > self.max_body_bytes else b"".join(self._body)
        method = self._parser.get_method().decode("ascii", "replace")
        request = Request(self, method, self._url.decode("latin-1"), CIMultiDict(self._headers), body)
        self._waiting.append((request, self._parser.should_keep_alive()))
        self._body = []
        if len(self._waiting) >= MAX_PIPELINED and self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()  # a client pipelining without reading: stop taking more
        if self._task is None:
            self._next()

    # -- requests, one at a time --------------------------------------------------------------------

    def _next(self) -> None:
        if self.closed or not self._waiting:
            self._task = None
            if not self.closed:
                self._arm_idle_timer()
            return
        request, keep_alive = self._waiting.popleft()
        if self._reading_paused and len(self._waiting) < MAX_PIPELINED // 2 and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        self._task = asyncio.get_running_loop().create_task(self._serve(request, keep_alive))

    async def _serve(self, request: Request, keep_alive: bool) -> None:
        try:
            response = await self._server.handler(request)
        except asyncio.CancelledError:
            return  # the connection is gone
        except Exception:  # the handler is supposed to answer everything; never leave a client hanging
            log.exception("the HTTP handler failed", path=request.path)
            self._refuse(500, "internal error")
            return
        if self.closed:
            return
        if isinstance(response, Response) and not response.prepared:
            if not keep_alive:
                response.headers["Connection"] = "close"
            self.write(response.encode(head_only=request.method == "HEAD"))
            try:
                await self.drain()  # a client that does not read holds the next answer back, not our memory
            except asyncio.CancelledError:
                return
        elif not response.finished:
            self.close()  # a stream the handler did not end: only closing tells the client it is over
            return
        if keep_alive:
            self._next()
        else:
            self.close()

    # -- writing ------------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    async def drain(self) -> None:
        if self._paused and not self.closed:
            self._drain_waiter = asyncio.get_running_loop().create_future()
            await self._drain_waiter

    def _wake_drain(self) -> None:
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()

    def _refuse(self, status: int, message: str) -> None:
        if self.transport is not None and not self.closed:
            body = f"{status} {message}\n".encode()
            self.transport.write(Response(status=status, body=body, content_type="text/plain").encode(False))
            self.transport.close()
            self.closed = True

    def _count_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > MAX_HEAD_BYTES:
            self._head_too_large = True

    def _arm_idle_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._idle_timer = loop.call_later(self._server.keepalive_s, self._idle_timeout)

    def _request_timeout(self) -> None:
        self._refuse(408, f"the request did not finish arriving within {self._server.keepalive_s:g} s")

    def _idle_timeout(self) -> None:
        if self._task is None and not self._waiting:
            self.close()


class HttpServer:
    def __init__(self, handler: Handler, *, max_body_bytes: int, keepalive_s: float = KEEPALIVE_S) -> None:
        self.handler = handler
        self.max_body_bytes = max_body_bytes
        self.keepalive_s = keepalive_s
        self.connections: set[_Connection] = set()
        self._server: asyncio.AbstractServer | None = None

    async def listen(self, host: str, port: int) -> int:
        """Start listening; the port (the system's choice when ``port`` is 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, backlog=1024)
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def close(self, drain_s: float = 0.0) -> None:
        """Stop listening; give the requests being handled up to ``drain_s`` to finish; end every connection."""
        if self._server is not None:
            self._server.close()
        handling = [c._task for c in self.connections if c._task is not None and not c._task.done()]
        if handling and drain_s > 0:
            await asyncio.wait(handling, timeout=drain_s)
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


class _DateHeader:
    """The Date header, formatted once a second."""

    def __init__(self) -> None:
        self._second, self._text = 0, ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self._second:
            self._second, self._text = now, formatdate(now, usegmt=True)
        return self._text


_date = _DateHeader()
