"""The Streamable HTTP transport: a reverse proxy in front of an MCP server's HTTP endpoint.

Each POST carries one JSON-RPC message; the core (one per session, or one per request outside a
session: see http_sessions.py) decides what happens to it, and this module carries that out over
HTTP: it forwards the request upstream over a pooled connection, and relays the answer, a JSON
body or an SSE stream event by event as it arrives (an event the core leaves alone crosses byte
for byte). HTTP-level faults (an ``HttpBehaviour`` each) are carried out here: a status instead of an answer,
a dropped connection, a stream cut before the answer, a 404 for a live session, a held first byte.

GET (the server's own SSE stream) and DELETE on the MCP endpoint, and anything on other paths,
are relayed as they are; events on the GET stream still pass the session's core. Both sides are
ours, on asyncio protocols and httptools (http_server.py, upstream.py; aiohttp cost more than a whole
stdlib relay): a client going away cancels its handler, which closes the upstream request (in the
2026-07-28 era, closing the stream is how a request is cancelled).
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from multidict import CIMultiDictProxy
from yarl import URL

from mcpfault.errors import UsageError
from mcpfault.faults.base import HttpBehaviour
from mcpfault.loopback import check_http_url, parse_host_port, require_token_beyond_loopback
from mcpfault.protocol import headers as mirrored
from mcpfault.protocol import jsonrpc, sse
from mcpfault.protocol.jsonrpc import MessageKind
from mcpfault.proxy.core import Emit, ProxyCore, To
from mcpfault.proxy.http import server as web
from mcpfault.proxy.http.exchange import (
    IDENTITY,
    NOT_FORWARDED,
    SSE,
    TOKEN_HEADER,
    Exchange,
    Limits,
    UpstreamAnswer,
    abort,
    error_response,
    proxy_failed,
    read_limited,
    relayed_headers,
    write_event,
)
from mcpfault.proxy.http.fast import FastPath
from mcpfault.proxy.http.process import HttpServerProcess
from mcpfault.proxy.http.sessions import Sessions
from mcpfault.proxy.http.stdio import SESSION_HEADER, StdioServerBridge
from mcpfault.proxy.http.stdio_eras import EraRouter
from mcpfault.proxy.http.upstream import UpstreamPool, UpstreamResponse
from mcpfault.proxy.process.supervised import ServerDown
from mcpfault.proxy.process.supervisor import unanswered_reply
from mcpfault.proxy.replies import server_down_reply, server_gone_reply
from mcpfault.proxy.tool_listing import WAIT_S as LISTING_WAIT_S
from mcpfault.proxy.tool_listing import is_own_id
from mcpfault.telemetry.names import Received

log = structlog.get_logger("mcpfault.proxy")

# How long a request the upstream broke off waits to learn whether the server the proxy started died.
FATE_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str
    port: int


def parse_listen(value: str) -> ListenAddress:
    """``HOST:PORT``, ``[::1]:PORT`` for IPv6, or a bare ``PORT`` on 127.0.0.1 (``loopback.parse_host_port``)."""
    return ListenAddress(*parse_host_port(value, "--listen"))


def parse_upstream(value: str) -> URL:
    """An http(s) URL with a host: the server's MCP endpoint, e.g. http://127.0.0.1:3000/mcp."""
    check_http_url(value, "--upstream", "the server's MCP endpoint, e.g. http://127.0.0.1:3000/mcp")
    url = URL(value.strip())
    if url.user or url.password:
        raise UsageError(
            "--upstream: put credentials in headers the client sends, not in the URL (they would be logged)"
        )
    return url


class HttpProxy:
    def __init__(
        self,
        sessions: Sessions,
        upstream: URL | EraRouter,
        *,
        limits: Limits | None = None,
        token: str | None = None,
        process: HttpServerProcess | None = None,
    ) -> None:
        self._sessions = sessions
        self._bridge = upstream if isinstance(upstream, EraRouter) else None
        self._process = process  # the HTTP server behind --upstream, when the proxy started it
        self._upstream = upstream if isinstance(upstream, URL) else URL("http://stdio/mcp")
        self._mcp_path = self._upstream.path or "/"
        self._limits = limits if limits is not None else Limits()
        self._token = token.encode() if token else None
        self._pool: UpstreamPool | None = None
        self._server: web.HttpServer | None = None
        self.url = ""

    @property
    def upstream_label(self) -> str:
        if self._bridge is not None:
            return f"the stdio server {self._bridge.label!r}"
        return str(self._upstream.with_query(None))

    @property
    def bridge(self) -> EraRouter | None:
        return self._bridge

    @property
    def sessions(self) -> Sessions:
        return self._sessions

    @property
    def owned(self) -> EraRouter | HttpServerProcess | None:
        """The server the proxy started and supervises (stdio servers, one per era, or an HTTP one)."""
        return self._bridge or self._process

    async def start(self, listen: ListenAddress) -> str:
        """Listen; return the proxy's MCP endpoint URL (with the real port when ``listen.port`` is 0)."""
        require_token_beyond_loopback(
            f"--listen {listen.host}:{listen.port}",
            listen.host,
            self._token.decode() if self._token is not None else None,
            f"set MCPFAULT_PROXY_TOKEN and have clients send it in the {TOKEN_HEADER} header",
        )
        if self._bridge is None:
            self._pool = UpstreamPool(
                self._upstream,
                max_connections=self._limits.max_connections,
                connect_timeout_s=self._limits.connect_timeout_s,
            )
        # The fast path needs an upstream it only has to reach: not a server the proxy started and supervises.
        fast = None
        if self._pool is not None and self._process is None:
            fast = FastPath(
                self,
                self._pool,
                mcp_path=self._mcp_path,
                upstream_target=self._upstream.raw_path_qs,
                limits=self._limits,
                token=self._token,
                is_lost=self._sessions.is_lost,
            )
        self._server = web.HttpServer(self._dispatch, max_body_bytes=self._limits.max_body_bytes, fast=fast)
        try:
            port = await self._server.listen(listen.host, listen.port)
        except OSError as exc:
            await self.close()
            raise UsageError(f"--listen {listen.host}:{listen.port}: cannot listen ({exc.strerror})") from None
        host = f"[{listen.host}]" if ":" in listen.host else listen.host
        self.url = f"http://{host}:{port}{self._mcp_path}"
        return self.url

    async def close(self, drain_s: float = 0.0) -> None:
        """Stop serving (``drain_s``: how long the requests being handled get to finish first)."""
        if self._server is not None:
            await self._server.close(drain_s)
            self._server = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # -- dispatch -------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        return await self.guarded(request, self._handle(request))

    async def guarded(self, request: web.Request, work: Awaitable[web.StreamResponse]) -> web.StreamResponse:
        """``work``'s response to ``request``; a failure of ours still gets the client JSON-RPC."""
        try:
            return await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug of ours: the client still gets JSON-RPC, never a plain-text 500
            log.exception("the HTTP proxy failed on a request", path=request.path, method=request.method)
            return proxy_failed(exc)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self._token is not None:
            given = request.headers.get(TOKEN_HEADER, "").encode()
            if not hmac.compare_digest(given, self._token):
                return error_response(401, None, f"mcpfault: missing or wrong {TOKEN_HEADER} header")
        if request.path == self._mcp_path and request.method == "POST":
            return await self._post(request)
        session_id = request.headers.get(SESSION_HEADER)
        core = self._sessions.session(session_id).core if session_id and request.path == self._mcp_path else None
        response = await self._relay(request, core)
        if session_id and request.method == "DELETE" and response.status < 300:
            self._sessions.forget(session_id)
        return response

    # -- POST: one JSON-RPC message -------------------------------------------------------------

    async def _post(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.read()
        except web.BodyTooLarge:
            return error_response(
                413,
                None,
                f"mcpfault: the request body is larger than {self._limits.max_body_bytes} bytes; "
                "send less, or start the proxy with a larger --max-body-bytes",
            )
        session_id = request.headers.get(SESSION_HEADER)
        if session_id and self._sessions.is_lost(session_id):
            return self._on_lost_session(request, body, session_id)
        core = self.core_for(session_id, request.headers.get("MCP-Protocol-Version"))
        return await self.decide(request, body, session_id, core)

    def core_for(self, session_id: str | None, protocol_version: str | None) -> ProxyCore:
        """The core that decides a POST: its session's, or one of its own outside a session."""
        core = self._sessions.session(session_id).core if session_id else self._sessions.exchange_core(protocol_version)
        owned = self.owned
        if owned is not None and owned.supervisor.settings.restart != "never":
            core.generation = owned.supervisor.generation  # on this request's event and span
        return core

    async def decide(
        self, request: web.Request, body: bytes, session_id: str | None, core: ProxyCore, listing: bytes | None = None
    ) -> web.StreamResponse:
        """The core decides the POST (after the proxy's own tools/list, when one is due: ``listing``, its
        first request when the caller already started it), and the decision is carried out."""
        await self._list_tools(request, core, body, listing)
        try:
            emits = core.from_client(body)
        except Exception:  # the core is fuzzed never to raise; if it does, the request still goes through
            log.exception("the proxy core failed on a request; relaying it untouched")
            emits = [Emit(To.SERVER, body)]
        upstream = next((e for e in emits if e.to is To.SERVER), None)
        to_client = [e for e in emits if e.to is To.CLIENT]
        exchange = Exchange(request, core, body, session_id, self._limits)
        return await self.carry_out(exchange, upstream, to_client)

    async def carry_out(
        self, exchange: Exchange, upstream: Emit | None, to_client: list[Emit], sent: UpstreamResponse | None = None
    ) -> web.StreamResponse:
        """What the core decided for the POST, carried out: ``upstream`` goes to the server (``sent``: it went
        already, this is its answer), ``to_client`` to the client."""
        return await self._ending(exchange, self._carried_out(exchange, upstream, to_client, sent))

    async def deliver(
        self, exchange: Exchange, emits: list[Emit], status: int, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        """What the core made of the upstream's JSON answer (``emits``), delivered as ``Exchange.relay_json``
        delivers it (the fast path's, when it is more than the answer as it came)."""
        return await self._ending(exchange, exchange.deliver(emits, status=status, headers=relayed_headers(headers)))

    async def _carried_out(
        self, exchange: Exchange, upstream: Emit | None, to_client: list[Emit], sent: UpstreamResponse | None
    ) -> web.StreamResponse:
        if upstream is None and not to_client and exchange.request_id is None:
            # A message that asks for no answer (the client's answer to a server request, a
            # notification) that a fault kept from the server: accepted, as the server would have.
            return web.Response(status=202)
        if upstream is not None and upstream.delay_s and exchange.request_id is None:
            await asyncio.sleep(upstream.delay_s)  # a client's answer a fault holds back
        if upstream is None:
            response = await exchange.answer_locally(to_client)
            if exchange.session_id and response.status == 404:
                self._sessions.lose(exchange.session_id)
            return response
        return await self._forward(exchange, upstream, to_client, sent)

    async def _ending(self, exchange: Exchange, work: Awaitable[web.StreamResponse]) -> web.StreamResponse:
        """``work``'s response, and the end of the request in the core however it ends."""
        core = exchange.core
        try:
            response = await work
            core.answer_delivered(exchange.request_id)  # an answer a fault held back is out now
            return response
        except asyncio.CancelledError:
            core.end(exchange.request_id, "cancelled")  # the client went away: nothing more to tell it
            raise
        finally:
            if exchange.session_id is None and core.in_flight:
                # Outside a session nothing can resume this stream: its answer is gone for good.
                core.end(exchange.request_id, "nothing")

    async def _list_tools(self, request: web.Request, core: ProxyCore, body: bytes, listing: bytes | None) -> None:
        """The proxy's own tools/list before the client's request, when rules match on annotations
        and the core has none current (proxy/tool_listing.py): POSTs of its own, in the client's
        session and with its headers, whose answers the client never sees; for at most ``WAIT_S``."""
        if listing is None:
            listing = core.listing_due(body)
        if listing is None:
            return
        try:
            async with asyncio.timeout(LISTING_WAIT_S):  # a server that never answers it does not hold the client
                while listing is not None:
                    listing = core.listing_answer(await self._own_request(request, listing))
        except TimeoutError:
            core.listing_answer(None)  # recorded as a failed listing; the client's request goes on

    async def _own_request(self, request: web.Request, data: bytes) -> bytes | None:
        """The JSON-RPC answer to a request of the proxy's own; None when none came."""
        try:
            bridge = await self._bridge.bridge_for(data) if self._bridge is not None else None
            if bridge is not None:
                answer: UpstreamAnswer = await bridge.post(data)
            else:
                answer, _generation = await self._post_upstream(request, Emit(To.SERVER, data, rewritten=True))
        except (ServerDown, TimeoutError, OSError):
            return None
        try:
            raw = await read_limited(answer, self._limits.max_response_bytes)
        except (ValueError, TimeoutError, OSError):
            return None
        finally:
            answer.release()
        if "event-stream" not in answer.headers.get("Content-Type", ""):
            return raw
        splitter = sse.EventSplitter(self._limits.max_response_bytes)
        for event in splitter.feed(raw + b"\n\n"):
            message = jsonrpc.parse(event.data) if event.data is not None else None
            if (
                message is not None
                and message.kind is MessageKind.RESPONSE
                and message.body is not None
                and is_own_id(message.body.get("id"))
            ):
                return event.data
        return None

    def _on_lost_session(self, request: web.Request, body: bytes, session_id: str) -> web.Response:
        """A session the proxy answered 404 for (session_expired) stays lost, as on a server that lost it:
        the client must start a new one. The request is recorded like any other (event, span)."""
        core = self._sessions.lost_core(session_id, request.headers.get("MCP-Protocol-Version"))
        core.from_client(body)  # no rules: it only starts the request's record
        exchange = Exchange(request, core, body, session_id, self._limits)
        core.end(exchange.request_id, "session_expired", upstream_contacted=False)
        return error_response(404, None, "Session not found", code=jsonrpc.INVALID_REQUEST)

    async def _forward(
        self, exchange: Exchange, upstream: Emit, notes: list[Emit], sent: UpstreamResponse | None = None
    ) -> web.StreamResponse:
        request = exchange.request
        answer: UpstreamAnswer
        bridge = await self._bridge.bridge_for(upstream.data) if self._bridge is not None else None
        # The server the proxy started, whichever transport it speaks: what process faults act on.
        owned: StdioServerBridge | HttpServerProcess | None = bridge or self._process
        if upstream.process is not None and owned is not None:
            # A process fault, performed before the request goes out (a stall stops the server first).
            if upstream.process.before_request:
                owned.going_down()
            upstream.process.perform(owned.supervisor.ops)
            if upstream.process.before_request:
                return await self._killed_before(exchange, owned)
        generation = 0  # of the server the request went to, when the proxy started it (an HTTP server)
        try:
            if bridge is not None:
                answer = await bridge.post(upstream.data)
            elif sent is not None:  # sent by the fast path, never to a server the proxy started
                assert self._pool is not None
                answer = await self._pool.answer(sent)
            else:
                answer, generation = await self._post_upstream(request, upstream)
        except ServerDown as exc:
            return self._server_down(exchange, exc.hold_s)
        except (TimeoutError, OSError) as exc:
            # A server the proxy started died with the request in flight: the client learns what became of it.
            fate = await self._fate_of(generation, exchange.request_id) if self._process is not None else None
            return self._unanswered(exchange, fate) if fate is not None else self._unreachable(exchange, exc)
        if self._process is not None:
            exchange.server_fate = functools.partial(self._fate_of, generation)  # for a stream it breaks off
        try:
            response = await self._relay_answer(exchange, answer, upstream.http, notes)
        except BaseException:
            answer.close()  # closing the upstream request is how a client's cancellation reaches the server
            raise
        answer.release()
        if self._process is not None and self._process.supervisor.down and answer.status < 300:
            self._process.supervisor.answered()  # the restarted server answers: its downtime ends
        return response

    async def _post_upstream(self, request: web.Request, upstream: Emit) -> tuple[UpstreamAnswer, int]:
        """POST to the HTTP upstream; the answer, and the generation of the server the proxy started that
        got it (held while that server restarts). Never sent twice: a connection refused by a server
        that just died may follow a first try it received (the pool retries a reused connection)."""
        assert self._pool is not None
        generation = 0
        if self._process is not None:
            await self._process.held()
            generation = self._process.supervisor.generation
        headers = _forwarded(request.headers)
        if upstream.rewritten:  # a fault rewrote the body: the headers that mirror it follow it
            message = jsonrpc.parse(upstream.data)
            if message.body is not None:
                headers = mirrored.consistent(headers, message.body)
        if upstream.http is not None:
            headers = upstream.http.request_headers(headers)
        answer = await self._pool.request(
            "POST", self._upstream.raw_path_qs, headers, upstream.data, resend_unanswered=self._process is None
        )
        return answer, generation

    async def _fate_of(self, generation: int, request_id: Any) -> tuple[bytes, Received] | None:
        """The error for a request ``generation`` never answered, when it died (None when it lives)."""
        assert self._process is not None
        death = await self._process.fate(generation, FATE_WAIT_S)
        return unanswered_reply(request_id, death) if death is not None else None

    def _unanswered(self, exchange: Exchange, fate: tuple[bytes, Received]) -> web.Response:
        body, received = fate
        return _proxy_error(exchange, body, received, contacted=True)

    def _server_down(self, exchange: Exchange, hold_s: float) -> web.Response:
        """Held while the server restarted, and it was not back in time: a timeout; no server saw it."""
        return _proxy_error(exchange, server_down_reply(exchange.request_id, hold_s), "timeout", contacted=False)

    async def _relay_answer(
        self, exchange: Exchange, answer: UpstreamAnswer, action: HttpBehaviour | None, notes: list[Emit]
    ) -> web.StreamResponse:
        core, status = exchange.core, answer.status
        self.answer_arrived(exchange.session_id, core, status, answer.headers.get(SESSION_HEADER))
        content_type = answer.headers.get("Content-Type", "").lower()
        if status >= 300 or (status != 200 and exchange.request_id is None):
            # Not an answer to judge (202 for a notification, a 4xx or 5xx): relayed as it came.
            try:
                data = await read_limited(answer, self._limits.max_response_bytes)
            except (TimeoutError, OSError) as exc:
                return await self._broke_off(exchange, exc)
            if exchange.request_id is not None:
                if content_type.startswith("application/json"):
                    core.from_server(data)  # a JSON-RPC error in the body ends the request the usual way
                core.end(exchange.request_id, "http_error")
            return web.Response(status=status, headers=relayed_headers(answer.headers), body=data)
        if content_type.startswith(SSE):
            return await exchange.relay_stream(answer, action, notes)
        if content_type.startswith("application/json") or exchange.request_id is None:
            try:
                data = await read_limited(answer, self._limits.max_response_bytes)
            except ValueError as exc:
                return exchange.bad_gateway(self.upstream_label, str(exc))
            except (TimeoutError, OSError) as exc:
                return await self._broke_off(exchange, exc)
            return await exchange.relay_json(answer, data, action, notes)
        sample = (await answer.content.read(200)).decode("utf-8", "replace")
        return exchange.bad_gateway(
            self.upstream_label,
            f"answered with Content-Type {content_type or '(none)'} instead of JSON or an SSE stream: {sample!r}",
        )

    async def _broke_off(self, exchange: Exchange, exc: BaseException) -> web.Response:
        """The upstream broke off an answer the proxy reads whole: an error for the request (as for a
        stream it breaks off), which ends it, rather than the proxy's own failure."""
        reply, received = await exchange.broken_reply(exc)
        return _proxy_error(exchange, reply, received, contacted=True, status=502)

    def answer_arrived(self, session_id: str | None, core: ProxyCore, status: int, new_session: str | None) -> None:
        """What the head of the upstream's answer to a POST tells the sessions: one it opens (``new_session``,
        its Mcp-Session-Id, on an initialize's answer), one the server no longer knows (404), and the era."""
        if session_id is None and new_session and status < 300:
            self._sessions.session(new_session, era=core.era)
        if session_id is not None and status == 404:
            self._sessions.forget(session_id)
        self._sessions.learned(core.era)

    async def _killed_before(self, exchange: Exchange, owned: StdioServerBridge | HttpServerProcess) -> web.Response:
        """The server was killed before it saw the request: the client learns what became of the server."""
        await owned.until_back()
        exited = owned.exit_code
        restarted_as = owned.supervisor.generation if exited is None else None
        body, received = server_gone_reply(
            exchange.request_id, exit_status=exited, restarted_as=restarted_as, before="this request"
        )
        return _proxy_error(exchange, body, received, contacted=False)

    def _unreachable(self, exchange: Exchange, exc: BaseException) -> web.Response:
        reason = str(exc) or type(exc).__name__
        message = f"mcpfault: cannot reach the upstream MCP server {self.upstream_label}: {reason}"
        log.warning("upstream unreachable", upstream=self.upstream_label, error=reason)
        data = {"mcpfault": {"reason": "upstream_unreachable", "upstream": self.upstream_label}}
        body = jsonrpc.encode(jsonrpc.error_response(exchange.request_id, jsonrpc.UPSTREAM_UNAVAILABLE, message, data))
        return _proxy_error(exchange, body, "upstream_unreachable", contacted=False, status=502)

    # -- everything else: relayed as it is ------------------------------------------------------

    async def _relay(self, request: web.Request, core: ProxyCore | None) -> web.StreamResponse:
        if self._bridge is not None:  # no sessions, no server-side stream, nothing but the MCP endpoint
            if request.path != self._mcp_path:
                return error_response(404, None, f"mcpfault: nothing here; the MCP endpoint is {self._mcp_path}")
            return web.Response(status=405, headers={"Allow": "POST"})
        assert self._pool is not None
        try:
            body = await request.read()
        except web.BodyTooLarge:
            return error_response(413, None, f"mcpfault: the body is larger than {self._limits.max_body_bytes} bytes")
        try:
            answer = await self._pool.request(
                request.method,
                request.raw_path,
                _forwarded(request.headers),
                body,
                long_lived=request.method == "GET",  # a session's stream, open as long as its client
            )
        except (TimeoutError, OSError) as exc:
            message = (
                f"mcpfault: cannot reach the upstream MCP server {self.upstream_label}: {exc or type(exc).__name__}"
            )
            return error_response(502, None, message)
        try:
            response = web.StreamResponse(status=answer.status, headers=relayed_headers(answer.headers))
            await response.prepare(request)
            streamed = answer.headers.get("Content-Type", "").startswith(SSE)
            splitter = sse.EventSplitter(self._limits.max_response_bytes) if core is not None and streamed else None
            async for chunk in answer.content.iter_any():
                if splitter is None:
                    await response.write(chunk)
                    continue
                for event in splitter.feed(chunk):
                    emits = core.from_server(event.data) if core is not None and event.data is not None else None
                    await write_event(response, event, emits)
            await response.write_eof()
            return response
        except (TimeoutError, OSError, ValueError):
            abort(request)  # the upstream broke off: so does the stream it was feeding
            return response
        finally:
            answer.release()  # back to the pool when read to the end (a DELETE's answer); else closed


def _proxy_error(
    exchange: Exchange, body: bytes, received: Received, *, contacted: bool, status: int = 200
) -> web.Response:
    """The proxy's own JSON-RPC error (-32000) for the request, recorded as what the client received."""
    code = jsonrpc.UPSTREAM_UNAVAILABLE
    exchange.core.end(exchange.request_id, received, reply=body, error_code=code, upstream_contacted=contacted)
    return web.Response(status=status, body=body, content_type="application/json")


def _forwarded(headers: CIMultiDictProxy[str]) -> list[tuple[str, str]]:
    out = [(k, v) for k, v in headers.items() if k.lower() not in NOT_FORWARDED]
    out.append(IDENTITY)
    return out


def loop_options() -> dict[str, Any]:
    """uvloop when it is installed: it took ~100 us off every proxied request (docs/results/performance.md)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


async def _timed_faults(sessions: Sessions, owned: EraRouter | HttpServerProcess) -> None:
    """Time-triggered process rules (``start_after_s``), performed on the server when due (on the
    bridge: on every era's server). Time counts from the proxy's start, as for time windows."""
    while (due_s := sessions.next_due_s()) is not None:
        await asyncio.sleep(max(0.05, due_s - (time.monotonic() - sessions.epoch)))
        for decision in sessions.due(time.monotonic() - sessions.epoch):
            if decision.process is not None:
                decision.process.perform(owned.supervisor.ops)


async def serve(proxy: HttpProxy, listen: ListenAddress, announce: Callable[[str], None]) -> int:
    """Serve until SIGINT or SIGTERM (then 0, a clean stop), or, in front of a server the proxy started
    (a stdio server, or an HTTP one given after ``--``), until that server exits for good (then its
    exit status; a signal ends it first)."""
    import signal

    import anyio

    owned = proxy.owned
    status = 0
    received: list[int] = []  # the signal that ends the proxy, forwarded to the server it started
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        if owned is not None:
            await owned.start()
        try:
            await proxy.start(listen)
            announce(proxy.url)
            async with anyio.create_task_group() as tg:

                async def until_signal() -> None:
                    async for signum in signals:
                        received.append(signum)
                        if proxy.sessions.stats.ended_by is None:  # the events file's closing line says it
                            proxy.sessions.stats.ended_by = f"signal {signal.Signals(signum).name}"
                        break
                    tg.cancel_scope.cancel()

                tg.start_soon(until_signal)
                if owned is not None and proxy.sessions.next_due_s() is not None:
                    tg.start_soon(_timed_faults, proxy.sessions, owned)
                if owned is not None:
                    status = await owned.wait()
                    if proxy.sessions.stats.ended_by is None:
                        proxy.sessions.stats.ended_by = f"the server exited (status {status})"
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                # The server the proxy started died for good: what was in flight gets its error first.
                await proxy.close(drain_s=FATE_WAIT_S if owned is not None and not received else 0.0)
                if owned is not None:
                    await owned.stop(received[0] if received else None)
                    status = await owned.wait()
    return status
