"""One POST through the HTTP proxy: what its answer is and how it reaches the client.

``Exchange`` carries out what the core decided for one request (an answer in the server's place,
an HTTP-level fault) and relays the upstream's answer, a JSON body or an SSE stream cut into events
as it arrives, each event through the core (an untouched one crosses byte for byte).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol

from multidict import CIMultiDict

from mcpfault.faults.base import HttpBehaviour
from mcpfault.protocol import jsonrpc, sse
from mcpfault.protocol.jsonrpc import MessageKind
from mcpfault.proxy.core import Emit, ProxyCore, To
from mcpfault.proxy.http import server as web
from mcpfault.proxy.http.upstream import UpstreamResponse
from mcpfault.telemetry.names import Received

SSE = "text/event-stream"
# Hop-by-hop headers (RFC 9110 7.6.1): for one connection, never passed on.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Nor what the proxy's server writes itself.
NOT_RELAYED = HOP_BY_HOP | {"content-length", "date", "server"}
TOKEN_HEADER = "X-Mcpfault-Token"  # only when listening beyond loopback; never forwarded
# Hop-by-hop headers, what the proxy's client writes itself, and the proxy's own token are not forwarded.
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "accept-encoding", TOKEN_HEADER.lower()}
# Sent with every request instead of the client's Accept-Encoding: the proxy reads the answers.
IDENTITY = ("Accept-Encoding", "identity")


class _Body(Protocol):
    def iter_any(self) -> AsyncIterator[bytes]: ...

    async def read(self, n: int = -1) -> bytes: ...


class UpstreamAnswer(Protocol):
    """The parts of an answer the proxy reads: the upstream pool's response, or the stdio bridge's."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> _Body: ...

    def close(self) -> None: ...

    def release(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_bytes: int = 16 * 1024 * 1024  # a client's request body; more gets 413
    max_response_bytes: int = 64 * 1024 * 1024  # an upstream JSON body or one SSE event; more gets 502
    connect_timeout_s: float = 10.0
    hold_s: float = 300.0  # how long a request whose answer a fault lost stays open before the proxy closes it
    max_connections: int = 256  # pooled connections to the upstream


class Exchange:
    """One POST: the client's request, the core that decided it, and how its answer reaches the client.

    It is the ``HttpExchangeOps`` an HTTP fault's behaviour acts through (faults/base.py), and it
    calls the behaviour's hooks at fixed points without knowing which fault it carries out.
    """

    def __init__(
        self, request: web.Request, core: ProxyCore, body: bytes, session_id: str | None, limits: Limits
    ) -> None:
        self.request = request
        self.core = core
        self.body = body
        self.session_id = session_id
        self._limits = limits
        self._request_id: Any = ...
        # What became of a server the proxy started, when it broke off the answer: the error for the
        # request and what the client received (None: it lives; the break was something else).
        self.server_fate: Callable[[Any], Awaitable[tuple[bytes, Received] | None]] | None = None

    @property
    def request_id(self) -> Any:
        """The JSON-RPC id, when the body is a request (None otherwise). Parsed only when needed."""
        if self._request_id is ...:
            self._request_id = request_id_of(self.body)
        return self._request_id

    async def answer_locally(self, emits: list[Emit]) -> web.StreamResponse:
        """The engine answered in the server's place (or broke the exchange before it left)."""
        behaviour = next((e.http for e in emits if e.http is not None), None)
        if behaviour is not None:
            response: web.StreamResponse = behaviour.answer_instead(self)
            return response
        return await self.deliver(emits, status=200, headers=CIMultiDict())

    # -- HttpExchangeOps: what an HTTP fault acts through -----------------------------------------

    def status_answer(self, status: int, headers: tuple[tuple[str, str], ...]) -> web.StreamResponse:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:  # a status the standard library has no name for, such as 599
            reason = "Error"
        return web.Response(status=status, headers=dict(headers), text=f"{status} {reason}\n")

    def json_error_answer(self, status: int, code: int, message: str) -> web.StreamResponse:
        return error_response(status, None, message, code=code)

    def reset(self) -> web.StreamResponse:
        return abort(self.request)

    # -- relaying the upstream's answer ---------------------------------------------------------

    async def relay_json(
        self, answer: UpstreamAnswer, data: bytes, action: HttpBehaviour | None, notes: list[Emit]
    ) -> web.StreamResponse:
        headers = relayed_headers(answer.headers)
        cut = action.cut_after_events if action is not None else None
        if action is not None and cut is not None:
            # Sent as a stream so that it can be cut: the notes (up to the cut) and then the end.
            headers["Content-Type"] = SSE
            response = await self._open_stream(answer.status, headers, action)
            for note in notes[:cut]:
                await response.write(sse.encode(note.data))
            self.core.end(self.request_id, action.received or "nothing")
            await response.write_eof()
            return response
        emits = [e for e in self.core.from_server(data) if e.to is To.CLIENT]
        if action is not None and action.loses_answer:
            return abort(self.request)
        if action is not None and action.first_byte_delay_s:
            await asyncio.sleep(action.first_byte_delay_s)
        return await self.deliver([*notes, *emits], status=answer.status, headers=headers)

    async def relay_stream(
        self, answer: UpstreamAnswer, action: HttpBehaviour | None, notes: list[Emit]
    ) -> web.StreamResponse:
        if action is not None and action.loses_answer:
            # The server finishes its work and answers; the connection drops before a byte of it leaves.
            for line in _sse_data(await read_limited(answer, self._limits.max_response_bytes)):
                self.core.from_server(line)
            self.core.end(self.request_id, action.received or "nothing")
            return abort(self.request)
        cut = action.cut_after_events if action is not None else None
        cut_as: Received = (action.received or "nothing") if action is not None else "nothing"
        response = await self._open_stream(answer.status, relayed_headers(answer.headers), action)
        relayed = 0
        for note in notes:
            if cut is not None and relayed >= cut:
                break
            await response.write(sse.encode(note.data))
            relayed += 1
        splitter = sse.EventSplitter(self._limits.max_response_bytes)
        lost = False
        try:
            async for chunk in answer.content.iter_any():
                for event in splitter.feed(chunk):
                    if event.data is None:
                        await response.write(event.raw)
                        continue
                    if cut is not None and (relayed >= cut or self._answers(event.data)):
                        self.core.end(self.request_id, cut_as)
                        await response.write_eof()
                        return response
                    emits = [e for e in self.core.from_server(event.data) if e.to is To.CLIENT]
                    lost = lost or not emits
                    await write_event(response, event, emits)
                    relayed += 1
        except (TimeoutError, OSError, ValueError) as exc:
            await self._broken(response, exc)
            return response
        if lost:
            return await self._hold(response)
        await response.write_eof()
        return response

    async def _broken(self, response: web.StreamResponse, exc: BaseException) -> None:
        """The upstream broke off mid-stream: the client gets an error for its request, then the end."""
        reply, received = await self.broken_reply(exc)
        if self.request_id is not None and self.core.end(self.request_id, received, reply=reply):
            await response.write(sse.encode(reply))
        await response.write_eof()

    async def broken_reply(self, exc: BaseException) -> tuple[bytes, Received]:
        """The error for the request whose answer the upstream broke off, and what the client received:
        what became of a server the proxy started, when it died; else that it broke off."""
        fate = await self.server_fate(self.request_id) if self.server_fate is not None else None
        if fate is not None:
            return fate
        message = f"mcpfault: the upstream MCP server broke off its answer: {exc or type(exc).__name__}"
        data = {"mcpfault": {"reason": "upstream_broke_off"}}
        reply = jsonrpc.encode(jsonrpc.error_response(self.request_id, jsonrpc.UPSTREAM_UNAVAILABLE, message, data))
        return reply, "upstream_exited"

    def bad_gateway(self, upstream: str, what: str) -> web.Response:
        message = f"mcpfault: the upstream MCP server {upstream} {what}"
        data = {"mcpfault": {"reason": "bad_upstream_answer", "upstream": upstream}}
        body = jsonrpc.encode(jsonrpc.error_response(self.request_id, jsonrpc.UPSTREAM_UNAVAILABLE, message, data))
        self.core.end(self.request_id, "error", reply=body, error_code=jsonrpc.UPSTREAM_UNAVAILABLE)
        return web.Response(status=502, body=body, content_type="application/json")

    def _answers(self, data: bytes) -> bool:
        message = jsonrpc.parse(data)
        return (
            message.kind is MessageKind.RESPONSE
            and message.body is not None
            and (jsonrpc.valid_id(message.body.get("id")) and message.body.get("id") == self.request_id)
        )

    async def _open_stream(
        self, status: int, headers: CIMultiDict[str], action: HttpBehaviour | None
    ) -> web.StreamResponse:
        if action is not None and action.first_byte_delay_s:
            await asyncio.sleep(action.first_byte_delay_s)
        headers["Content-Type"] = headers.get("Content-Type", SSE)
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(self.request)
        return response

    async def deliver(self, emits: Sequence[Emit], *, status: int, headers: CIMultiDict[str]) -> web.StreamResponse:
        """One message as a JSON body; several (notifications first) as an SSE stream; none: held open."""
        if not emits:
            return await self._hold(None)  # not even the headers: a server that never answers
        if len(emits) == 1:
            emit = emits[0]
            if emit.delay_s:
                await asyncio.sleep(emit.delay_s)
            return json_answer(status, headers, emit.data)
        headers["Content-Type"] = SSE
        response = await self._open_stream(status, headers, None)
        for emit in emits:
            if emit.delay_s:
                await asyncio.sleep(emit.delay_s)
            await response.write(sse.encode(emit.data))
        await response.write_eof()
        return response

    async def _hold(self, response: web.StreamResponse | None) -> web.StreamResponse:
        """A lost answer: the client waits, as it would for a server that never answers, until it
        gives up (its disconnect cancels this) or ``hold_s`` passes and the proxy closes the connection."""
        await asyncio.sleep(self._limits.hold_s)
        return abort(self.request) if response is None else abort(self.request, response)


async def write_event(response: web.StreamResponse, event: sse.Event, emits: Sequence[Emit] | None) -> None:
    if emits is None:
        await response.write(event.raw)
        return
    for emit in emits:
        if emit.delay_s:
            await asyncio.sleep(emit.delay_s)
        if emit.data is event.data:
            await response.write(event.raw)
        else:
            await response.write(sse.encode(emit.data, event_id=event.event_id, event_type=event.event_type))


def request_id_of(body: bytes) -> Any:
    """The JSON-RPC id of ``body``, when it is a request (None otherwise)."""
    message = jsonrpc.parse(body)
    return message.body.get("id") if message.kind is MessageKind.REQUEST and message.body else None


def json_answer(status: int, headers: CIMultiDict[str], body: bytes) -> web.Response:
    """One JSON-RPC message as the client gets it: ``headers`` (the upstream's that are relayed) as JSON."""
    headers["Content-Type"] = "application/json"
    return web.Response(status=status, headers=headers, body=body)


def abort(request: web.Request, response: web.StreamResponse | None = None) -> web.StreamResponse:
    """Close the client's connection with no (further) bytes: what a reset looks like from outside."""
    request.abort()
    return response if response is not None else web.Response(status=204)


def relayed_headers(headers: Mapping[str, str]) -> CIMultiDict[str]:
    return CIMultiDict([(k, v) for k, v in headers.items() if k.lower() not in NOT_RELAYED])


async def read_limited(answer: UpstreamAnswer, limit: int) -> bytes:
    if isinstance(answer, UpstreamResponse):
        return await answer.body(limit)
    chunks, size = [], 0
    async for chunk in answer.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise ValueError(f"sent a body larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _sse_data(stream: bytes) -> list[bytes]:
    splitter = sse.EventSplitter()
    return [e.data for e in splitter.feed(stream + b"\n\n") if e.data is not None]


def proxy_failed(exc: Exception) -> web.Response:
    """What the client gets when the proxy fails on its request (a bug of ours): JSON-RPC, never a plain 500."""
    message = f"mcpfault: the proxy failed on this request ({type(exc).__name__}: {exc}); please report it"
    return error_response(502, None, message, code=jsonrpc.INTERNAL_ERROR)


def error_response(status: int, request_id: Any, message: str, *, code: int = jsonrpc.INVALID_REQUEST) -> web.Response:
    body = jsonrpc.encode(jsonrpc.error_response(request_id, code, message))
    return web.Response(status=status, body=body, content_type="application/json")
