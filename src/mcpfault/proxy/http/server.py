"""The HTTP proxy's server side: HTTP/1.1 on asyncio protocols, requests parsed by httptools (llhttp).

Why our own: aiohttp's server and client together cost more per request than a whole stdlib relay
adds (docs/results/performance.md); what the proxy needs is small. A connection keeps alive and
handles pipelined requests in order, one handler task at a time; the client going away cancels that
task (which is how a cancellation reaches the upstream). Limits: request line and headers 64 KiB
(431), body ``max_body_bytes`` (the handler gets ``BodyTooLarge`` from ``read``), an idle
keep-alive connection closes after ``keepalive_s``. Malformed HTTP gets 400 and the connection closes.

The surface mirrors aiohttp's web module where the proxy uses it (``Response``, ``StreamResponse``
with ``prepare``/``write``/``write_eof``, ``Request.read``), so the transport reads the same either way.

A server may also have a ``FastHandler``: offered each request that arrives while its connection has
nothing else to do, before any ``Request`` or task is made for it, it may answer it from callbacks
(``Connection.answer``) or give it to a coroutine (``Connection.hand_off``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from email.utils import formatdate
from http import HTTPStatus
from typing import Protocol, cast

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


RawHeaders = list[tuple[bytes, bytes]]


class Request:
    def __init__(
        self, connection: Connection, method: bytes, raw_path: bytes, headers: RawHeaders, body: bytes | None
    ) -> None:
        self.method = method.decode("ascii", "replace")
        self.raw_path = raw_path.decode("latin-1")
        self.path = self.raw_path.split("?", 1)[0]
        self.headers = CIMultiDictProxy(CIMultiDict([(n.decode("latin-1"), v.decode("latin-1")) for n, v in headers]))
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


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        line = f"HTTP/1.1 {status} {reason}\r\n".encode("latin-1")
        if 100 <= status <= 999:  # bounded: the statuses HTTP can carry
            _STATUS_LINES[status] = line
    return line


_STATUS_LINES: dict[int, bytes] = {}


def header_block(headers: Iterable[tuple[str, str]]) -> bytes:
    """Header lines, as a response's head carries them."""
    return "".join([f"{name}: {value}\r\n" for name, value in headers]).encode("latin-1")


def head_bytes(status: int, block: bytes, extra: bytes) -> bytes:
    """A response's head: its status line, Date, ``block`` (``header_block``), ``extra`` and the blank line."""
    return b"%b%b%b%b\r\n" % (_status_line(status), _date(), block, extra)


def _head(status: int, headers: Iterable[tuple[str, str]], extra: str) -> bytes:
    return head_bytes(status, header_block(headers), extra.encode("latin-1"))


class StreamResponse:
    """A response sent as it is written (chunked), such as an SSE stream."""

    def __init__(self, *, status: int = 200, headers: Headers | None = None) -> None:
        self.status = status
        self.headers: CIMultiDict[str] = CIMultiDict(headers or ())
        self._connection: Connection | None = None
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

    def header_block(self) -> bytes:
        """Its headers as its head carries them (its framing is the server's own)."""
        kept = [(k, v) for k, v in self.headers.items() if k.lower() not in ("content-length", "transfer-encoding")]
        return header_block(kept)

    def encode(self, head_only: bool) -> bytes:
        head = head_bytes(self.status, self.header_block(), b"Content-Length: %d\r\n" % len(self.body))
        return head if head_only else head + self.body


Handler = Callable[[Request], Awaitable[StreamResponse]]


class FastHandler(Protocol):
    """Offered a request before a ``Request`` or a task is made for it (see the module's docstring).

    True: it took the request, and ends it with ``Connection.answer`` or ``Connection.hand_off``,
    each exactly once, unless the connection is lost first (then ``Connection`` tells the ``Handling``
    it was given). False: it did nothing, and the request goes to the server's handler.
    """

    def __call__(  # noqa: PLR0917 - called once per request on the hot path, positionally
        self, connection: Connection, method: bytes, target: bytes, headers: RawHeaders, body: bytes, keep_alive: bool
    ) -> bool: ...


class Handling(Protocol):
    """A request a ``FastHandler`` took, while it has not ended."""

    def client_gone(self) -> None:
        """The connection was lost: the request is cancelled, as a handler's task would be."""
        ...


class Connection(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self.max_body_bytes = server.max_body_bytes
        self.transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: RawHeaders = []
        self._expect_continue = False
        self._body: list[bytes] = []
        self._body_size = 0
        self._head_size = 0
        self._waiting: deque[tuple[Request, bool]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._handling: Handling | None = None  # a request the fast handler took
        self._handled: asyncio.Future[None] | None = None  # made when the server's close waits for it
        # One timer for both limits (a request still arriving, an idle connection), moved by a deadline
        # rather than made and cancelled for every request: it fires at most once per ``keepalive_s``.
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._on_deadline: Callable[[], None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._reading_paused = False
        self.closed = False
        self.memo: object = None  # what the fast handler keeps with the connection (only it reads it)

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes
        self._server.connections.add(self)
        self._arm(self._idle_timeout)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed HTTP request: {exc}")
        if self._head_size > MAX_HEAD_BYTES:
            self._refuse(431, f"request line and headers over {MAX_HEAD_BYTES} bytes")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._server.connections.discard(self)
        self._on_deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the client left: its request is cancelled, upstream included
        handling = self._handling
        if handling is not None:
            self._handling = None
            handling.client_gone()
            self._handling_over()
        self._wake_drain()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain()

    # -- httptools callbacks ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._expect_continue = False
        self._body = []
        self._body_size = 0
        self._head_size = 0
        # A request that never finishes arriving (a slow or stuck client) must not hold the connection forever.
        self._arm(self._request_timeout)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value)
        self._headers.append((name, value))
        if len(name) == 6 and name.lower() == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True

    def on_headers_complete(self) -> None:
        if self._expect_continue and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size <= self.max_body_bytes:
            self._body.append(body)

    def on_message_complete(self) -> None:
        self._on_deadline = None  # it arrived in time
        if self._head_size > MAX_HEAD_BYTES:
            return
        parser, parts = self._parser, self._body
        body = None if self._body_size > self.max_body_bytes else parts[0] if len(parts) == 1 else b"".join(parts)
        self._body = []  # not kept with an idle connection
        keep_alive = parser.should_keep_alive()
        fast = self._server.fast
        if (
            fast is not None
            and body is not None
            and self._task is None
            and self._handling is None
            and not self._waiting
        ):
            try:
                if fast(self, parser.get_method(), self._url, self._headers, body, keep_alive):
                    return
            except Exception:  # as for a handler: a bug, and the client must not be left waiting
                log.exception("the HTTP fast handler failed", path=self._url.decode("latin-1"))
                self._refuse(500, "internal error")
                return
        self._waiting.append((Request(self, parser.get_method(), self._url, self._headers, body), keep_alive))
        if len(self._waiting) >= MAX_PIPELINED and self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()  # a client pipelining without reading: stop taking more
        if self._task is None and self._handling is None:
            self._next()

    # -- requests, one at a time --------------------------------------------------------------------

    def _next(self) -> None:
        if self.closed or not self._waiting:
            self._task = None
            if not self.closed:
                self._arm(self._idle_timeout)
            return
        request, keep_alive = self._waiting.popleft()
        if self._reading_paused and len(self._waiting) < MAX_PIPELINED // 2 and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        self._task = self._loop.create_task(self._serve(request, keep_alive))

    async def _serve(self, request: Request, keep_alive: bool, handler: Handler | None = None) -> None:
        try:
            response = await (handler or self._server.handler)(request)
        except asyncio.CancelledError:
            return  # the connection is gone
        except Exception:  # the handler is supposed to answer everything; never leave a client hanging
            log.exception("the HTTP handler failed", path=request.path)
            self._refuse(500, "internal error")
            return
        if self.closed:
            return
        if isinstance(response, Response) and not response.prepared:
            self._write_response(response, keep_alive, head_only=request.method == "HEAD")
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

    # -- a request the fast handler took ------------------------------------------------------------

    @property
    def handling(self) -> Handling | None:
        """The request the fast handler took, until it is answered or handed off."""
        return self._handling

    def taken(self, handling: Handling) -> None:
        """The fast handler took the request it was offered; ``handling`` is told if the client leaves."""
        self._handling = handling

    def answer(self, response: Response, keep_alive: bool) -> None:
        """The fast handler's answer to the request it took, written as ``_serve`` writes a handler's; the
        connection goes on to the next request (or closes: not ``keep_alive``)."""
        self._write_response(response, keep_alive, head_only=False)
        self._finished(keep_alive)

    def answer_encoded(self, data: bytes) -> None:
        """As ``answer``, on a kept-alive connection, for an answer already encoded whole."""
        self.write(data)
        self._finished(True)

    def _write_response(self, response: Response, keep_alive: bool, *, head_only: bool) -> None:
        if not keep_alive:
            response.headers["Connection"] = "close"
        self.write(response.encode(head_only=head_only))

    def _finished(self, keep_alive: bool) -> None:
        self._handling = None
        self._handling_over()
        if self.closed:
            return
        if self._paused:  # a client that does not read holds the next answer back, as in ``_serve``
            self._task = self._loop.create_task(self._after_drain(keep_alive))
        elif keep_alive:
            self._next()
        else:
            self.close()

    def hand_off(self, request: Request, keep_alive: bool, handler: Handler) -> None:
        """The fast handler gives its request to a coroutine: ``handler`` answers it, as the server's
        handler answers the others (``request_of`` makes its ``request``)."""
        self._handling = None
        self._task = self._loop.create_task(self._serve(request, keep_alive, handler))
        if self._handled is not None:  # the server's close waits for it: now for the task
            handled = self._handled
            self._handled = None

            def over(_: asyncio.Task[None]) -> None:
                if not handled.done():
                    handled.set_result(None)

            self._task.add_done_callback(over)

    def request_of(self, method: bytes, target: bytes, headers: RawHeaders, body: bytes) -> Request:
        return Request(self, method, target, headers, body)

    async def _after_drain(self, keep_alive: bool) -> None:
        try:
            await self.drain()
        except asyncio.CancelledError:
            return
        if self.closed:
            return
        if keep_alive:
            self._next()
        else:
            self.close()

    def _handling_over(self) -> None:
        if self._handled is not None and not self._handled.done():
            self._handled.set_result(None)
        self._handled = None

    def in_progress(self) -> asyncio.Future[None] | None:
        """What the server's close may wait for: the request being handled, if any."""
        if self._task is not None and not self._task.done():
            return self._task
        if self._handling is not None:
            if self._handled is None:
                self._handled = self._loop.create_future()
            return self._handled
        return None

    # -- writing ------------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    async def drain(self) -> None:
        if self._paused and not self.closed:
            self._drain_waiter = self._loop.create_future()
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

    # -- the timer ----------------------------------------------------------------------------------

    def _arm(self, on_deadline: Callable[[], None]) -> None:
        """``on_deadline`` runs ``keepalive_s`` from now, unless armed again or disarmed (``_on_deadline = None``)."""
        self._deadline = self._loop.time() + self._server.keepalive_s
        self._on_deadline = on_deadline
        if self._timer is None:
            self._timer = self._loop.call_at(self._deadline, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        if self._on_deadline is None or self.closed:
            return
        if self._deadline > self._loop.time():  # moved on since it was set
            self._timer = self._loop.call_at(self._deadline, self._timer_fired)
            return
        on_deadline, self._on_deadline = self._on_deadline, None
        on_deadline()

    def _request_timeout(self) -> None:
        self._refuse(408, f"the request did not finish arriving within {self._server.keepalive_s:g} s")

    def _idle_timeout(self) -> None:
        if self._task is None and self._handling is None and not self._waiting:
            self.close()


class HttpServer:
    def __init__(
        self,
        handler: Handler,
        *,
        max_body_bytes: int,
        keepalive_s: float = KEEPALIVE_S,
        fast: FastHandler | None = None,
    ) -> None:
        self.handler = handler
        self.fast = fast
        self.max_body_bytes = max_body_bytes
        self.keepalive_s = keepalive_s
        self.connections: set[Connection] = set()
        self._server: asyncio.AbstractServer | None = None

    async def listen(self, host: str, port: int) -> int:
        """Start listening; the port (the system's choice when ``port`` is 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), host, port, backlog=1024)
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def close(self, drain_s: float = 0.0) -> None:
        """Stop listening; give the requests being handled up to ``drain_s`` to finish; end every connection."""
        if self._server is not None:
            self._server.close()
        handling = [f for f in (c.in_progress() for c in self.connections) if f is not None] if drain_s > 0 else []
        if handling:
            await asyncio.wait(handling, timeout=drain_s)
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


class _DateHeader:
    """The Date header's line, formatted once a second."""

    def __init__(self) -> None:
        self._second, self._line = 0, b""

    def __call__(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second, self._line = now, f"Date: {formatdate(now, usegmt=True)}\r\n".encode("latin-1")
        return self._line


_date = _DateHeader()
