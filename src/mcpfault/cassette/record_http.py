"""``mcpfault record --listen HOST:PORT --upstream URL``: record in front of a remote (Streamable HTTP) server.

A transparent HTTP relay: every request goes to ``URL`` with the client's headers, every answer comes
back with the server's status and headers, an SSE stream event by event as it arrives. Each JSON-RPC
message crossing it (a POSTed body, a JSON answer, each event of a stream) is recorded with the status
and the headers that matter for replaying and judging it (content type, protocol version, retry-after,
www-authenticate; an ``Authorization`` the client sent as ``[redacted]``, never its value).

Sessions: a 2025-11-25 session is its ``Mcp-Session-Id`` (the server issues it with the ``initialize``
answer; the id itself is not written, it is a bearer of the session); a handshake without one begins a
new session, and a 2026-07-28 request without a session id belongs to the latest session begun so.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any, Final

from yarl import URL

from mcpfault.cassette.record import Recorder
from mcpfault.protocol import sse
from mcpfault.protocol.eras import HANDSHAKE_METHODS
from mcpfault.proxy.http import server as web
from mcpfault.proxy.http.exchange import HOP_BY_HOP
from mcpfault.proxy.http.serve import ListenAddress
from mcpfault.proxy.http.upstream import UpstreamPool
from mcpfault.telemetry.logging import REDACTED

SESSION_HEADER: Final = "mcp-session-id"
# The headers a cassette keeps: what replay and a reader need, none that carries a secret.
KEPT_HEADERS: Final = ("content-type", "mcp-protocol-version", "retry-after", "www-authenticate", "last-event-id")
_NOT_FORWARDED: Final = HOP_BY_HOP | {"host", "content-length", "accept-encoding"}
_NOT_RETURNED: Final = HOP_BY_HOP | {"content-length", "content-encoding", "date", "server"}


def kept_headers(headers: Any) -> dict[str, str]:
    """The headers worth recording, lower-cased; a secret one as ``[redacted]``."""
    kept = {name: str(headers[name]) for name in KEPT_HEADERS if name in headers}
    if "authorization" in headers:
        kept["authorization"] = REDACTED
    if SESSION_HEADER in headers:
        kept[SESSION_HEADER] = REDACTED
    return kept


def _messages(body: bytes) -> list[dict[str, Any]]:
    try:
        parsed = json.loads(body)
    except ValueError:
        return []
    items = parsed if isinstance(parsed, list) else [parsed]
    return [item for item in items if isinstance(item, dict)]


class HttpRecorder:
    """The relay; ``recorder`` holds what it saw."""

    def __init__(self, upstream: URL, recorder: Recorder) -> None:
        self.upstream = upstream
        self.recorder = recorder
        self._by_session_id: dict[str, str] = {}
        self._latest_without_id: str | None = None
        self._pool = UpstreamPool(upstream)
        self._target = upstream.raw_path_qs or "/"

    def _session_of(self, session_id: str | None, messages: list[dict[str, Any]]) -> str:
        if session_id is not None and session_id in self._by_session_id:
            return self._by_session_id[session_id]
        if any(message.get("method") in HANDSHAKE_METHODS for message in messages) or self._latest_without_id is None:
            self._latest_without_id = self.recorder.new_session()
            if session_id is not None:
                self._by_session_id[session_id] = self._latest_without_id
        return self._latest_without_id

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        messages = _messages(body) if request.method == "POST" else []
        session = self._session_of(request.headers.get(SESSION_HEADER), messages)
        request_http = {"method": request.method, "headers": kept_headers(request.headers)}
        for message in messages:
            self.recorder.add_message("client", message, session, request_http)
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED]
        try:
            upstream = await self._pool.request(request.method, self._target, headers, body)
        except OSError as exc:
            unreachable = f"mcpfault record: the upstream {self.upstream} is unreachable: {exc}"
            error = {"code": -32603, "message": unreachable}
            reply = {"jsonrpc": "2.0", "id": messages[0].get("id") if len(messages) == 1 else None, "error": error}
            return web.Response(status=502, body=json.dumps(reply).encode(), content_type="application/json")
        issued = upstream.headers.get(SESSION_HEADER)
        if issued is not None and issued not in self._by_session_id:
            self._by_session_id[issued] = session
        answer_http = {"status": upstream.status, "headers": kept_headers(upstream.headers)}
        response = web.StreamResponse(status=upstream.status)
        for name, value in upstream.headers.items():
            if name.lower() not in _NOT_RETURNED:
                response.headers.add(name, value)
        await response.prepare(request)
        streamed = "text/event-stream" in upstream.headers.get("content-type", "")
        splitter = sse.EventSplitter()
        whole = bytearray()
        recorded_any = False
        try:
            async for chunk in upstream.content.iter_any():
                if streamed:
                    for event in splitter.feed(chunk):
                        for message in _messages(event.data or b""):
                            # The status and headers go with the stream's first message, once.
                            self.recorder.add_message("server", message, session, None if recorded_any else answer_http)
                            recorded_any = True
                else:
                    whole += chunk
                await response.write(chunk)
        except BaseException:
            upstream.close()  # the client went away or the server broke off: no reuse of a half-read answer
            raise
        for message in _messages(bytes(whole)):
            self.recorder.add_message("server", message, session, None if recorded_any else answer_http)
            recorded_any = True
        if not recorded_any and upstream.status >= 400:
            # An HTTP refusal (401, 404 session gone, 429) carries no JSON-RPC answer: its status is the record.
            self.recorder.add_message("server", {}, session, answer_http)
        upstream.release()
        await response.write_eof()
        return response

    async def close(self) -> None:
        await self._pool.close()


async def _serve(out: Path, listen: ListenAddress, upstream: URL, recorder: Recorder) -> int:
    relay = HttpRecorder(upstream, recorder)
    server = web.HttpServer(relay.handle, max_body_bytes=64 * 1024 * 1024)
    port = await server.listen(listen.host, listen.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    where = f"http://{listen.host}:{port}/mcp"
    print(f"mcpfault record: serving {where} -> {upstream}, recording to {out}", file=sys.stderr, flush=True)
    try:
        await stop.wait()
    finally:
        await server.close(drain_s=1.0)
        await relay.close()
        recorder.save(out)
    return 0


def record_http(out: Path, listen: ListenAddress, upstream: URL, redact: list[str]) -> int:
    """Relay and record until SIGINT or SIGTERM, then write the cassette; 0."""
    recorder = Recorder([str(upstream)], redact)
    return asyncio.run(_serve(out, listen, upstream, recorder))
