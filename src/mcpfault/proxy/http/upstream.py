"""The HTTP proxy's client to the upstream server: pooled HTTP/1.1 keep-alive connections on asyncio
protocols, responses parsed by httptools (llhttp, the parser Node.js uses).

Why not aiohttp's ClientSession: measured on the proxy's hot path it cost ~145 us a request, more
than a whole stdlib relay adds (docs/results/performance.md). Here a request is one ``write``, the
answer's bytes go from ``data_received`` straight to the reader, and a connection goes back to the
pool only after its answer was read to the end.

A response streams: ``content.iter_any()`` yields chunks as they arrive (SSE), and reading pauses
the socket when the proxy's client reads slower than the server writes (bounded memory).

A request can also go out without a coroutine (``send_idle``, the proxy's fast path): an
``AnswerWatcher`` is told, from ``data_received``, when the answer's head arrives and when the answer
ends; at any point it can hand the response to a coroutine, which reads it as any other
(``answer`` waits for its head, resending it as ``request`` would).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Protocol, cast

import httptools
from multidict import CIMultiDict
from yarl import URL

from mcpfault.errors import MCPFaultError

# Pause reading from the server above this many unread bytes; resume below the low mark.
HIGH_WATER = 1024 * 1024
LOW_WATER = 256 * 1024


class UpstreamBroke(MCPFaultError, ConnectionError):
    """The connection to the server ended before its answer did."""


class AnswerWatcher(Protocol):
    """Told of an answer's progress as the bytes arrive (from ``data_received``): what the proxy's fast
    path waits on instead of a coroutine. Either may hand the response to a coroutine (``watcher = None``)."""

    def head(self, response: UpstreamResponse) -> None:
        """The status and headers arrived."""
        ...

    def end(self, response: UpstreamResponse) -> None:
        """The answer is complete, or failed (``error``), or holds more than ``HIGH_WATER`` bytes (reading
        paused): the watcher must act now, nothing more will tell it."""
        ...


class UpstreamResponse:
    """One answer: status and headers once they arrived, then the body as it comes."""

    def __init__(
        self, connection: _UpstreamConnection, method: str, request: bytes, watcher: AnswerWatcher | None = None
    ) -> None:
        self.status = 0  # until the head arrives (HTTP has no status 0)
        self.raw_headers: list[tuple[bytes, bytes]] = []  # as they came, until someone reads ``headers``
        self._headers_read: CIMultiDict[str] | None = None
        self.watcher = watcher
        self._connection = connection
        self._method = method
        self._request = request  # as sent, for ``UpstreamPool.answer`` to send again
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._wakeup: asyncio.Future[None] | None = None
        self._headers_ready: asyncio.Future[None] | None = None  # made when someone waits for the head
        self._complete = False
        self._error: BaseException | None = None

    @property
    def content(self) -> UpstreamResponse:
        """The body's reader (aiohttp's name for it): the response itself. A property, not an attribute
        pointing back at the response, so that a response is freed as soon as it is done with."""
        return self

    @property
    def headers(self) -> CIMultiDict[str]:
        """The headers (made on first use: the proxy's fast path reads ``raw_headers``)."""
        if self._headers_read is None:
            self._headers_read = CIMultiDict([(n.decode("latin-1"), v.decode("latin-1")) for n, v in self.raw_headers])
        return self._headers_read

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def error(self) -> BaseException | None:
        return self._error

    @property
    def buffered(self) -> int:
        """Bytes of the body received and not yet read."""
        return self._buffered

    # -- fed by the connection --------------------------------------------------------------------

    def _headers(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status, self.raw_headers = status, headers
        if self._headers_ready is not None and not self._headers_ready.done():
            self._headers_ready.set_result(None)
        if self.watcher is not None:
            self.watcher.head(self)

    def _feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        if self._buffered > HIGH_WATER:
            self._connection.pause()
            if self.watcher is not None:
                self.watcher.end(self)
        self._wake()

    def _finish(self, error: BaseException | None = None) -> None:
        if self._complete or self._error is not None:
            return
        if error is None:
            self._complete = True
        else:
            self._error = error
            if self._headers_ready is not None and not self._headers_ready.done():
                self._headers_ready.set_exception(error)
        self._wake()
        if self.watcher is not None:
            self.watcher.end(self)

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    # -- read by the proxy --------------------------------------------------------------------------

    async def started(self) -> UpstreamResponse:
        if not self.status:
            if self._error is not None:
                raise self._error
            if self._headers_ready is None:
                self._headers_ready = asyncio.get_running_loop().create_future()
            await self._headers_ready
        return self

    def take_body(self) -> bytes:
        """The body received so far (all of it, once ``complete``), taken out of the buffer."""
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        return data

    async def iter_any(self) -> AsyncIterator[bytes]:
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._buffered < LOW_WATER:
                    self._connection.resume()
                yield chunk
                continue
            if self._complete:
                return
            if self._error is not None:
                raise self._error
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup
            self._wakeup = None

    async def body(self, limit: int) -> bytes:
        """The whole body (a JSON answer); ValueError past ``limit`` bytes. No backpressure: it is bounded."""
        while not self._complete:
            if self._error is not None:
                raise self._error
            if self._buffered > limit:
                break
            self._connection.resume()
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup
            self._wakeup = None
        if self._buffered > limit:
            raise ValueError(f"sent a body larger than {limit} bytes")
        return self.take_body()

    async def read(self, n: int = -1) -> bytes:
        async for chunk in self.iter_any():
            if n < 0:
                continue
            return chunk[:n]
        return b""

    def release(self) -> None:
        """Done with the answer: its connection goes back to the pool if it was read to the end."""
        self._connection.done(reusable=self._complete and not self._chunks)

    def close(self) -> None:
        """Done early (the client left): the connection closes, which the server sees as cancellation."""
        self._connection.done(reusable=False)


class _UpstreamConnection(asyncio.Protocol):
    def __init__(self, pool: UpstreamPool) -> None:
        self._pool = pool
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._response: UpstreamResponse | None = None
        self._header_list: list[tuple[bytes, bytes]] = []
        self._received_any = False
        self._paused = False
        self.reused = False  # taken from the idle list for this request
        self.busy = False
        self.counted = False  # counted against the pool's limit
        self.keep_alive = True
        self.closed = False

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        self._received_any = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamBroke(f"the server's answer is not valid HTTP: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response = self._response
        if response is not None and not response._complete:
            headers = response.headers
            if (
                response.status
                and "content-length" not in headers
                and "chunked" not in headers.get("transfer-encoding", "")
            ):
                response._finish()  # a body that ends when the connection does (HTTP/1.0 style)
            else:
                self._fail(UpstreamBroke(f"the server closed the connection mid-answer ({exc or 'EOF'})"))
        self._pool.lost(self)

    # -- httptools callbacks ------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_list.append((name, value))

    def on_headers_complete(self) -> None:
        response = self._response
        if response is None:  # an answer no request is waiting for: nothing on this connection can be trusted
            self.abort()
            return
        response._headers(self._parser.get_status_code(), self._header_list)
        self._header_list = []
        if response._method == "HEAD":
            response._finish()

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._feed(body)

    def on_message_complete(self) -> None:
        # Before the response learns it is complete: whoever is told may give the connection back at once.
        if not self._parser.should_keep_alive():
            self.keep_alive = False
        if self._response is not None:
            self._response._finish()

    # -- used by the pool and the response ----------------------------------------------------------

    def send(self, request: bytes, method: str, watcher: AnswerWatcher | None = None) -> UpstreamResponse:
        assert self._transport is not None
        self._response = UpstreamResponse(self, method, request, watcher)
        self._received_any = False
        self._transport.write(request)
        return self._response

    @property
    def received_any(self) -> bool:
        return self._received_any

    def pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self._transport is not None and not self.closed:
            self._paused = False
            self._transport.resume_reading()

    def done(self, *, reusable: bool) -> None:
        self.resume()
        self._response = None
        self._pool.give_back(self, reusable=reusable)

    def _fail(self, error: BaseException) -> None:
        if self._response is not None:
            self._response._finish(error)

    def abort(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.abort()


class UpstreamPool:
    """Keep-alive connections to one server (``url``'s scheme, host and port), at most ``max_connections``."""

    def __init__(self, url: URL, *, max_connections: int = 256, connect_timeout_s: float = 10.0) -> None:
        self._host = url.host or "127.0.0.1"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._host_header = url.raw_host if url.is_default_port() else f"{url.raw_host}:{self._port}"
        self._ssl = ssl.create_default_context() if url.scheme == "https" else None
        self._connect_timeout_s = connect_timeout_s
        self._max = max_connections
        self._open = 0
        self._idle: list[_UpstreamConnection] = []
        self._busy: set[_UpstreamConnection] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._request_heads: dict[tuple[str, str], bytes] = {}

    async def request(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes = b"",
        *,
        resend_unanswered: bool = True,
        long_lived: bool = False,
    ) -> UpstreamResponse:
        """Send one request; return once the answer's status and headers arrived.

        ``resend_unanswered=False``: a kept-alive connection that closes before any answer raises
        UpstreamBroke instead of sending the request again (a client that must see every reset).
        ``long_lived``: an answer that may stay open as long as its client (a session's GET stream) goes
        on a connection of its own, outside the pool's limit and never reused, so that streams held open
        can never leave the requests waiting for a connection.
        """
        head = [f"{name}: {value}\r\n" for name, value in headers]
        if body or method not in ("GET", "HEAD", "DELETE"):
            head.append(f"Content-Length: {len(body)}\r\n")
        head.append("\r\n")
        request = self.request_head(method, target) + "".join(head).encode("latin-1") + body
        connection = await self._connect(counted=False) if long_lived else await self._connection()
        response = connection.send(request, method)
        return await self.answer(response, resend_unanswered=resend_unanswered, long_lived=long_lived)

    def request_head(self, method: str, target: str) -> bytes:
        """The request line and Host header that every request to this server starts with."""
        key = (method, target)
        head = self._request_heads.get(key)
        if head is None:
            head = f"{method} {target} HTTP/1.1\r\nHost: {self._host_header}\r\n".encode("latin-1")
            if len(self._request_heads) < 64:  # bounded: targets come from clients (GET, DELETE)
                self._request_heads[key] = head
        return head

    def send_idle(self, request: bytes, method: str, watcher: AnswerWatcher) -> UpstreamResponse | None:
        """Send ``request`` (whole, as ``request`` would encode it) now on an idle kept-alive connection,
        without waiting for anything; None, with nothing sent, when no connection is idle."""
        connection = self._take_idle() if not self._closed else None
        return connection.send(request, method, watcher) if connection is not None else None

    def _take_idle(self) -> _UpstreamConnection | None:
        """An idle kept-alive connection, now busy; None when none is left (the closed ones are forgotten)."""
        while self._idle:
            connection = self._idle.pop()
            if connection.closed:
                self._forget(connection)
                continue
            connection.reused = connection.busy = True
            self._busy.add(connection)
            return connection
        return None

    async def answer(
        self, response: UpstreamResponse, *, resend_unanswered: bool = True, long_lived: bool = False
    ) -> UpstreamResponse:
        """``response`` once its status and headers arrived (see ``request`` for the arguments)."""
        for attempt in (1, 2):
            connection = response._connection
            try:
                return await response.started()
            except UpstreamBroke:
                self.give_back(connection, reusable=False)
                # A kept-alive connection the server closed just as we wrote: nothing was answered,
                # nothing was read, so the request goes once more on a fresh connection.
                if resend_unanswered and attempt == 1 and connection.reused and not connection.received_any:
                    connection = await self._connect(counted=False) if long_lived else await self._connection()
                    response = connection.send(response._request, response._method)
                    continue
                raise
            except BaseException:
                self.give_back(connection, reusable=False)
                raise
        raise AssertionError("unreachable")

    async def _connection(self) -> _UpstreamConnection:
        while True:
            if self._closed:
                raise UpstreamBroke("the proxy is shutting down")
            idle = self._take_idle()
            if idle is not None:
                return idle
            if self._open < self._max:
                return await self._connect()
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def _connect(self, *, counted: bool = True) -> _UpstreamConnection:
        if self._closed:
            raise UpstreamBroke("the proxy is shutting down")
        self._open += counted
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _UpstreamConnection(self),
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl else None,
                ),
                self._connect_timeout_s,
            )
        except BaseException:
            self._open -= counted
            self._notify()
            raise
        connection.counted, connection.busy = counted, True
        self._busy.add(connection)
        return connection

    def give_back(self, connection: _UpstreamConnection, *, reusable: bool) -> None:
        if not connection.busy:
            return
        connection.busy = False
        self._busy.discard(connection)
        if reusable and connection.counted and connection.keep_alive and not connection.closed and not self._closed:
            self._idle.append(connection)
            self._notify()
            return
        connection.abort()
        self._forget(connection)

    def lost(self, connection: _UpstreamConnection) -> None:
        """The server closed a connection; an idle one leaves the pool now, a busy one when given back."""
        if not connection.busy:
            if connection in self._idle:
                self._idle.remove(connection)
            self._forget(connection)

    def _forget(self, connection: _UpstreamConnection) -> None:
        if connection.counted:
            connection.counted = False
            self._open -= 1
            self._notify()

    def _notify(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def close(self) -> None:
        self._closed = True
        for connection in [*self._idle, *self._busy]:
            connection.abort()
        self._idle.clear()
        self._busy.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
