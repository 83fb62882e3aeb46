"""The HTTP proxy's fast path: a POST nothing can happen to, and its JSON answer, carried by callbacks.

Most POSTs are a request no rule cares about, answered with a 200 and a JSON body. For those the
general path (serve.py) costs a task, a chain of coroutines, header multidicts and a second parse of
the request: more than the rest of the proxy's work. Here the request is offered as httptools parsed it
(the server's ``FastHandler``); when the core's lane takes it (``ProxyCore.lane_from_client``: the
core's one test of "nothing can happen to this request") it is sent at once on an idle pooled
connection, and the upstream connection's callbacks (``AnswerWatcher``) write the answer to the
client, through the lane, or through ``ProxyCore.from_server`` when the lane leaves it.

Everything else goes to the general path, from the point it had reached: a request the lane leaves
(or one the proxy's own tools/list must come before), no idle connection, an answer that is not a
200 with a JSON body, one that breaks off or is large, a decision that is more than the answer as it
came. So what the client gets, and the events, spans and metrics, are the general path's.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple, Protocol

import structlog

from mcpfault.proxy.core import Emit, ProxyCore, To
from mcpfault.proxy.http import server as web
from mcpfault.proxy.http.exchange import (
    IDENTITY,
    NOT_FORWARDED,
    TOKEN_HEADER,
    Exchange,
    Limits,
    json_answer,
    proxy_failed,
    relayed_headers,
    request_id_of,
)
from mcpfault.proxy.http.stdio import SESSION_HEADER
from mcpfault.proxy.http.upstream import UpstreamPool, UpstreamResponse

# What ``forwarded_head`` does with a header, by its lowercase name: not forwarded, read (the token is
# not forwarded either); any other is forwarded.
_DROP, _TOKEN, _SESSION, _VERSION = range(4)
_SPECIAL = {name.encode("latin-1"): _DROP for name in NOT_FORWARDED} | {
    TOKEN_HEADER.lower().encode("latin-1"): _TOKEN,
    SESSION_HEADER.lower().encode("latin-1"): _SESSION,
    b"mcp-protocol-version": _VERSION,
}
_IDENTITY = f"{IDENTITY[0]}: {IDENTITY[1]}\r\n".encode("latin-1")
# Content-Length, as clients spell it: of a client's headers, the one that changes from request to request.
_LENGTH = frozenset({b"Content-Length", b"content-length", b"CONTENT-LENGTH"})
# What varies from one answer of a server to the next, as servers spell it: left out of the key of the
# answer heads kept. Another spelling is kept in the key, which only makes the key unique more often.
_PER_ANSWER = frozenset({b"Date", b"date", b"DATE", b"Content-Length", b"content-length", b"CONTENT-LENGTH"})
_MAX_ANSWER_HEADS = 64

log = structlog.get_logger("mcpfault.proxy")


class GeneralPath(Protocol):
    """What the fast path shares with the general path (``HttpProxy``, serve.py) and hands requests to."""

    def core_for(self, session_id: str | None, protocol_version: str | None) -> ProxyCore: ...

    def decide(
        self, request: web.Request, body: bytes, session_id: str | None, core: ProxyCore, listing: bytes | None = None
    ) -> Awaitable[web.StreamResponse]: ...

    def carry_out(
        self, exchange: Exchange, upstream: Emit | None, to_client: list[Emit], sent: UpstreamResponse | None = None
    ) -> Awaitable[web.StreamResponse]: ...

    def deliver(
        self, exchange: Exchange, emits: list[Emit], status: int, headers: Mapping[str, str]
    ) -> Awaitable[web.StreamResponse]: ...

    def guarded(self, request: web.Request, work: Awaitable[web.StreamResponse]) -> Awaitable[web.StreamResponse]: ...

    def answer_arrived(self, session_id: str | None, core: ProxyCore, status: int, new_session: str | None) -> None: ...


class ForwardedHead(NamedTuple):
    """What the fast path reads of a request's headers."""

    block: bytes  # the forwarded headers, each "Name: value\r\n" as the client wrote it, then IDENTITY
    session_id: str | None
    protocol_version: str | None
    token: bytes | None


def forwarded_head(headers: web.RawHeaders) -> ForwardedHead:
    """The headers a request is forwarded with, as ``serve._forwarded`` makes them, and those the proxy
    reads (the first of each, as a multidict's ``get`` gives it)."""
    parts = []
    session_id = protocol_version = token = None
    special = _SPECIAL.get
    for name, value in headers:
        what = special(name.lower())
        if what is not None:
            if what == _DROP:
                continue
            if what == _TOKEN:
                if token is None:
                    token = value
                continue
            if what == _SESSION:
                if session_id is None:
                    session_id = value.decode("latin-1")
            elif protocol_version is None:
                protocol_version = value.decode("latin-1")
        parts.append(b"%b: %b\r\n" % (name, value))
    parts.append(_IDENTITY)
    return ForwardedHead(b"".join(parts), session_id, protocol_version, token)


class AnswerHead(NamedTuple):
    """What the fast path reads of a 200 answer's headers, and makes of them."""

    json: bool  # a JSON body: the fast path may answer it
    session_id: str | None  # its Mcp-Session-Id (``GeneralPath.answer_arrived``)
    block: bytes  # the client's header lines, as ``json_answer`` makes them (``Response.header_block``)


def _answer_head_of(headers: Mapping[str, str]) -> AnswerHead:
    """``AnswerHead`` of a 200 answer with these headers, made the general path's way."""
    json = headers.get("Content-Type", "").lower().startswith("application/json")
    return AnswerHead(json, headers.get(SESSION_HEADER), json_answer(200, relayed_headers(headers), b"").header_block())


class _Memo(NamedTuple):
    """What the fast path keeps with a connection: its last request's headers, and what they make."""

    key: list[tuple[bytes, bytes]]
    head: ForwardedHead


class FastPath:
    """The ``FastHandler`` of an HTTP proxy in front of a server it reaches over ``pool``."""

    def __init__(
        self,
        general: GeneralPath,
        pool: UpstreamPool,
        *,
        mcp_path: str,
        upstream_target: str,
        limits: Limits,
        token: bytes | None,
        is_lost: Callable[[str], bool],
    ) -> None:
        self.general = general
        self.pool = pool
        self.limits = limits
        self._target = mcp_path.encode("latin-1")
        self._request_head = pool.request_head("POST", upstream_target)
        self._token = token
        self._is_lost = is_lost
        # A server sends most answers with the same headers but for Date and Content-Length: what they
        # make is kept, by the rest (bounded: a server may send something new in every answer).
        self._answer_heads: dict[tuple[tuple[bytes, bytes], ...], AnswerHead] = {}

    def __call__(  # noqa: PLR0917 - the server's FastHandler, called once per request positionally
        self,
        connection: web.Connection,
        method: bytes,
        target: bytes,
        headers: web.RawHeaders,
        body: bytes,
        keep_alive: bool,
    ) -> bool:
        if method != b"POST" or target != self._target:
            return False
        # A client sends the same headers each time but for Content-Length: they are read again only when
        # they differ from the last request's on the connection (another spelling of it: each time).
        key = [header for header in headers if header[0] not in _LENGTH]
        memo = connection.memo
        if isinstance(memo, _Memo) and memo.key == key:
            head = memo.head
        else:
            head = forwarded_head(headers)
            connection.memo = _Memo(key, head)
        # Compared as the general path compares it (a str from a latin-1 header, in UTF-8); it answers 401.
        if self._token is not None and not hmac.compare_digest(
            (head.token or b"").decode("latin-1").encode(), self._token
        ):
            return False
        session_id = head.session_id
        if session_id and self._is_lost(session_id):
            return False
        core = self.general.core_for(session_id, head.protocol_version)
        post = FastPost(self, connection, core, session_id, target, headers, body, keep_alive)
        listing = core.listing_due(body)
        if listing is not None:  # started: the general path sends it, then decides the request
            post.decide(listing)
            return True
        line = core.lane_from_client(body)
        if line is None:
            post.decide(None)
            return True
        post.line = line
        request = b"%b%bContent-Length: %d\r\n\r\n%b" % (self._request_head, head.block, len(line), line)
        response = self.pool.send_idle(request, "POST", post)
        if response is None:
            post.carry_out(None)  # the general path connects
            return True
        post.response = response
        connection.taken(post)
        return True

    def answer_head(self, response: UpstreamResponse) -> AnswerHead:
        key = tuple([header for header in response.raw_headers if header[0] not in _PER_ANSWER])
        head = self._answer_heads.get(key)
        if head is None:
            head = _answer_head_of(response.headers)
            if len(self._answer_heads) >= _MAX_ANSWER_HEADS:
                self._answer_heads.clear()
            self._answer_heads[key] = head
        return head


class FastPost:
    """One POST the fast path took: the ``Handling`` of its connection, the ``AnswerWatcher`` of its answer."""

    __slots__ = (
        "_body",
        "_connection",
        "_core",
        "_headers",
        "_keep_alive",
        "_path",
        "_session_id",
        "_target",
        "answer_head",
        "line",
        "response",
    )

    def __init__(  # noqa: PLR0917 - built once per request on the hot path, positionally
        self,
        path: FastPath,
        connection: web.Connection,
        core: ProxyCore,
        session_id: str | None,
        target: bytes,
        headers: web.RawHeaders,
        body: bytes,
        keep_alive: bool,
    ) -> None:
        self._path = path
        self._connection = connection
        self._core = core
        self._session_id = session_id
        self._target = target
        self._headers = headers
        self._body = body
        self._keep_alive = keep_alive
        self.line = b""  # what went upstream
        self.response: UpstreamResponse | None = None
        self.answer_head: AnswerHead | None = None

    # -- the answer, as it arrives (AnswerWatcher) --------------------------------------------------

    def head(self, response: UpstreamResponse) -> None:
        try:
            self._head(response)
        except Exception as exc:
            self._failed(exc)

    def end(self, response: UpstreamResponse) -> None:
        try:
            self._end(response)
        except Exception as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """A bug of ours, in the upstream connection's callbacks: the upstream request is closed, and the
        client gets the general path's answer for it unless it got its answer already."""
        log.exception("the HTTP proxy's fast path failed on a request")
        if self.response is not None:
            self.response.watcher = None
            self.response.close()
            self.response = None
        if self._connection.handling is self:
            self._connection.answer(proxy_failed(exc), self._keep_alive)

    def _head(self, response: UpstreamResponse) -> None:
        if response.status == 200:
            self.answer_head = self._path.answer_head(response)
            if self.answer_head.json:
                return
        self.carry_out(response)  # relayed as it came, or an SSE stream: the general path reads it

    def _end(self, response: UpstreamResponse) -> None:
        head = self.answer_head
        if head is None or not response.complete or response.buffered > self._path.limits.max_response_bytes:
            self.carry_out(response)  # broke off, or large: the general path reads, or refuses, the rest
            return
        data = response.take_body()
        core = self._core
        line = core.lane_from_server(data)
        if line is None:
            emits = [e for e in core.from_server(data) if e.to is To.CLIENT]
            if len(emits) != 1 or emits[0].delay_s:
                self._answered(response, head)
                self.deliver(emits, response)
                return
            line = emits[0].data
        if self._keep_alive:
            answer = web.head_bytes(200, head.block, b"Content-Length: %d\r\n" % len(line))
            self._connection.answer_encoded(answer + line)
        else:
            self._connection.answer(json_answer(200, relayed_headers(response.headers), line), False)
        # After the write, off the client's wait: nothing runs in between that could need them sooner.
        self._answered(response, head)
        core.end_passed()  # the spans of answers the lane let through end once the client has them

    def _answered(self, response: UpstreamResponse, head: AnswerHead) -> None:
        """The answer was read: its connection goes back to the pool, and what its head tells the sessions."""
        self.response = response.watcher = None  # no cycle left: both are freed as soon as they are done with
        response.release()
        self._path.general.answer_arrived(self._session_id, self._core, 200, head.session_id)

    # -- the client leaving (Handling) --------------------------------------------------------------

    def client_gone(self) -> None:
        """As the general path's task, cancelled: the upstream request is closed (which is how the server
        learns of it) and the request ends as cancelled."""
        if self.response is not None:
            self.response.watcher = None
            self.response.close()
        request_id = request_id_of(self._body)
        core = self._core
        core.end(request_id, "cancelled")
        if self._session_id is None and core.in_flight:
            core.end(request_id, "nothing")

    # -- to the general path ------------------------------------------------------------------------

    def decide(self, listing: bytes | None) -> None:
        """Before the core decided: the general path decides (after the proxy's own tools/list, when due)."""
        general, body, session_id, core = self._path.general, self._body, self._session_id, self._core
        self._hand_off(lambda request: general.decide(request, body, session_id, core, listing))

    def carry_out(self, sent: UpstreamResponse | None) -> None:
        """After the lane took the request: the general path sends it (``sent`` None) or reads its answer."""
        if sent is not None:
            self.response = sent.watcher = None  # the general path's now
        general, line = self._path.general, self.line
        self._hand_off(lambda request: general.carry_out(self._exchange(request), Emit(To.SERVER, line), [], sent))

    def deliver(self, emits: list[Emit], response: UpstreamResponse) -> None:
        """After the core made more of the answer than the answer as it came: the general path delivers it."""
        general, status, headers = self._path.general, response.status, response.headers
        self._hand_off(lambda request: general.deliver(self._exchange(request), emits, status, headers))

    def _exchange(self, request: web.Request) -> Exchange:
        return Exchange(request, self._core, self._body, self._session_id, self._path.limits)

    def _hand_off(self, work: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> None:
        connection = self._connection
        request = connection.request_of(b"POST", self._target, self._headers, self._body)
        general = self._path.general
        connection.hand_off(request, self._keep_alive, lambda request: general.guarded(request, work(request)))
