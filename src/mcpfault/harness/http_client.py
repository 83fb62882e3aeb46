"""The harness's own MCP client over Streamable HTTP, in both eras: what the stdio client is, over POSTs.

It starts the proxy in front of the mock (``mcpfault proxy --listen 127.0.0.1:0 -- SERVER``), reads the
endpoint the proxy announces in its log, and sends each request as one POST on kept-alive connections
(the proxy's own HTTP client, ``proxy.upstream``: asyncio protocols and httptools, no SDK). Everything
above the transport is the stdio client's: attempts, deadlines, CLIENT spans, the id bookkeeping.

HTTP fails in its own ways, and each is a ``TransportFailure`` the agent sees as it is: an error status
(``HttpStatusError``, with its ``Retry-After``), a 404 for the client's session (``SessionLost``: a
2025-11-25 client must ``reconnect``), a stream that ends before its answer (``StreamCut``: the answer
is lost; re-issuing the request means a new id, which every attempt has), a connection that closes with
no response (``ConnectionLost``). The client never re-sends on its own: retries are the agent's policy.
A deadline passed closes the request's stream, which is how a request is cancelled over HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Self

import anyio
from yarl import URL

from mcpfault.app import ready
from mcpfault.errors import (
    CallError,
    ConnectionLost,
    HttpStatusError,
    SessionLost,
    StreamCut,
    UpstreamError,
)
from mcpfault.harness.client import Era, StdioClient
from mcpfault.harness.forkserver import ForkServer
from mcpfault.protocol import jsonrpc, sse
from mcpfault.protocol.eras import LEGACY_VERSIONS, MODERN_VERSIONS
from mcpfault.proxy.http.stdio import SESSION_HEADER
from mcpfault.proxy.http.upstream import UpstreamBroke, UpstreamPool, UpstreamResponse
from mcpfault.telemetry import names as span_names

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

MAX_ANSWER_BYTES = 64 * 1024 * 1024
# What a name header carries for each method that has one (the 2026-07-28 era's Mcp-Name).
_NAME_PARAM = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def listen_command(proxy_command: Sequence[str]) -> list[str]:
    """A stdio proxy command (``... proxy OPTIONS -- SERVER``) as the HTTP bridge on a port the OS picks."""
    command = list(proxy_command)
    split = command.index("--")
    return [*command[:split], "--listen", "127.0.0.1:0", *command[split:]]


def retry_after_s(value: str | None) -> float | None:
    """The ``Retry-After`` header's delay in seconds (RFC 9110: seconds, or an HTTP date)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class HttpClient(StdioClient):
    """``StdioClient``'s interface over Streamable HTTP. The proxy command carries ``--ready-file
    ready_path``, where the proxy says its endpoint once it listens; ``log_path`` is where its stderr
    goes (``stderr`` opened on it), quoted when it never gets that far."""

    network_transport = span_names.NETWORK_TRANSPORT_TCP

    def __init__(
        self,
        command: Sequence[str],
        *,
        ready_path: Path,
        log_path: Path,
        deadline_s: float = 0.5,
        era: Era = "legacy",
        stderr: IO[bytes] | int | None = None,
        tracer: Tracer | None = None,
        launcher: ForkServer | None = None,
        start_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(command, deadline_s=deadline_s, era=era, stderr=stderr, tracer=tracer, launcher=launcher)
        self._ready_path = ready_path
        self._log_path = log_path
        self._start_timeout_s = start_timeout_s
        self.url: URL | None = None
        self.session_id: str | None = None
        self.sessions_started = 0  # handshakes that gave a session id (reconnects included)
        self._pool: UpstreamPool | None = None
        self._streams: dict[int, anyio.CancelScope] = {}  # request id -> its POST, closed to cancel it

    async def __aenter__(self) -> Self:
        self._ready_path.unlink(missing_ok=True)  # a record an earlier proxy left here is not this one's
        await super().__aenter__()  # the proxy's process (its stdout stays unread: over HTTP it writes none)
        try:
            self.url = await self._endpoint()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        self._pool = UpstreamPool(self.url, max_connections=8, connect_timeout_s=self._start_timeout_s)
        return self

    async def _endpoint(self) -> URL:
        """The URL the proxy's readiness record gives once it listens; UpstreamError if it exits or
        says nothing in time."""
        process = self._process
        assert process is not None
        try:
            readiness = await ready.wait_for_async(
                self._ready_path, exited=lambda: process.returncode is not None, timeout_s=self._start_timeout_s
            )
        except ready.ReadyFileError as exc:
            tail = self._log_path.read_text(errors="replace")[-600:] if self._log_path.exists() else ""
            raise UpstreamError(
                f"the HTTP proxy did not start listening: {exc} (see {self._log_path}): {tail.strip()}"
            ) from None
        if readiness.listen is None:
            raise UpstreamError(f"the HTTP proxy's readiness record {self._ready_path} names no endpoint")
        return URL(readiness.listen)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._process is not None and self._tg is not None
        with anyio.CancelScope(shield=True):
            for scope in list(self._streams.values()):
                scope.cancel()
            if self._pool is not None:
                await self._pool.close()
            if self._process.returncode is None:
                try:  # the HTTP proxy's clean stop: it flushes, then ends its servers
                    os.kill(self._process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            with anyio.move_on_after(10):
                self.exit_code = await self._process.wait()
            if self.exit_code is None:
                self._process.kill()
                self.exit_code = await self._process.wait()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            await self._process.aclose()

    # -- the protocol -----------------------------------------------------------------------------

    async def reconnect(self) -> dict[str, Any]:
        """A new session after ``SessionLost`` (2025-11-25); in the 2026-07-28 era there is none to renew."""
        self.session_id = None
        return await self.connect()

    # -- plumbing: StdioClient's hooks, over HTTP ---------------------------------------------------

    async def _send(self, body: Mapping[str, Any]) -> None:
        assert self._tg is not None
        if "method" in body and "id" in body:  # a request: its answer comes back on its own POST
            self._tg.start_soon(self._post_request, dict(body))
            return
        data = jsonrpc.encode(dict(body))
        try:
            response = await self._post(data, self._headers(body))
            if await _drained(response):
                response.release()
            else:
                response.close()
        except (UpstreamBroke, OSError) as exc:
            raise UpstreamError(f"the HTTP proxy at {self.url} is unreachable ({exc})") from None

    async def _cancel(self, request_id: int) -> None:
        scope = self._streams.get(request_id)
        if scope is not None:  # closing the stream is how a request is cancelled over HTTP; the bridge tells the server
            scope.cancel()

    async def _read(self) -> None:  # answers come on each request's POST, not on a stdout
        return

    def _headers(self, body: Mapping[str, Any]) -> list[tuple[str, str]]:
        headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")]
        method = body.get("method")
        if self.era == "modern":
            headers.append(("MCP-Protocol-Version", MODERN_VERSIONS[-1]))
            if isinstance(method, str):
                headers.append(("Mcp-Method", method))
                params = body.get("params")
                name = params.get(_NAME_PARAM.get(method, "")) if isinstance(params, dict) else None
                if isinstance(name, str):
                    headers.append(("Mcp-Name", name))
        elif method != "initialize":
            headers.append(("MCP-Protocol-Version", LEGACY_VERSIONS[-1]))
        if self.session_id is not None:
            headers.append((SESSION_HEADER, self.session_id))
        return headers

    async def _post(self, data: bytes, headers: list[tuple[str, str]]) -> UpstreamResponse:
        assert self._pool is not None and self.url is not None
        return await self._pool.request("POST", self.url.raw_path_qs, headers, data, resend_unanswered=False)

    async def _post_request(self, body: dict[str, Any]) -> None:
        request_id = body["id"]
        failure: CallError | None = None
        with anyio.CancelScope() as scope:
            self._streams[request_id] = scope
            try:
                failure = await self._exchange_http(body)
            finally:
                del self._streams[request_id]
        if scope.cancelled_caught:
            return  # given up on (deadline) or the session is closing: the waiter knows already
        waiter = self._waiting.get(request_id)
        if failure is not None and waiter is not None and not waiter.done.is_set():
            waiter.error = failure
            waiter.done.set()

    async def _exchange_http(self, body: dict[str, Any]) -> CallError | None:
        """POST one request and route what comes back; the failure when no answer did."""
        method = body.get("method")
        try:
            response = await self._post(jsonrpc.encode(body), self._headers(body))
        except (UpstreamBroke, OSError) as exc:
            return ConnectionLost(f"{method}: the connection closed with no HTTP response ({exc})")
        reusable = False
        try:
            session = response.headers.get(SESSION_HEADER)
            if method == "initialize" and session and response.status < 300:
                self.session_id = session
                self.sessions_started += 1
            content_type = response.headers.get("Content-Type", "").lower()
            if response.status >= 300:
                data = await response.body(MAX_ANSWER_BYTES)
                reusable = True
                return await self._http_error(body, response, data)
            if content_type.startswith("text/event-stream"):
                splitter = sse.EventSplitter(MAX_ANSWER_BYTES)
                async for chunk in response.iter_any():
                    for event in splitter.feed(chunk):
                        if event.data:
                            await self._on_line(event.data)
                reusable = True
            else:
                data = await response.body(MAX_ANSWER_BYTES)
                reusable = True
                await self._on_line(data)
        except (UpstreamBroke, OSError, ValueError) as exc:
            return StreamCut(f"{method}: the answer's stream broke off before the answer ({exc})")
        finally:
            if reusable:
                response.release()
            else:
                response.close()
        waiter = self._waiting.get(body["id"])
        if waiter is not None and not waiter.done.is_set():
            return StreamCut(f"{method}: the answer's stream ended before the answer")
        return None

    async def _http_error(self, body: dict[str, Any], response: UpstreamResponse, data: bytes) -> CallError | None:
        method, status = body.get("method"), response.status
        if status == 404 and self.session_id is not None and method != "initialize":
            return SessionLost(404, f"{method}: 404 for session {self.session_id[:8]}...: the server lost it")
        try:
            answer = json.loads(data)
        except ValueError:
            answer = None
        if isinstance(answer, dict) and answer.get("id") == body["id"] and isinstance(answer.get("error"), dict):
            await self._on_line(data)  # a JSON-RPC error (the proxy's "upstream unavailable"): judged as over stdio
            return None
        wait_s = retry_after_s(response.headers.get("Retry-After"))
        text = data[:120].decode("utf-8", "replace").strip()
        after = f", Retry-After {wait_s:g}s" if wait_s is not None else ""
        return HttpStatusError(status, f"{method}: HTTP {status} ({text}){after}", wait_s)


async def _drained(response: UpstreamResponse) -> bool:
    """Read a small answer (202 for a notification) to its end: True when the connection can be reused."""
    try:
        await response.body(MAX_ANSWER_BYTES)
    except (UpstreamBroke, OSError, ValueError):
        return False
    return True
