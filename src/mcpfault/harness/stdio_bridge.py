"""``mcpfault connect URL``: a stdio MCP server that is a Streamable HTTP endpoint, for stdio-only clients.

An agent that can only start an MCP server as a subprocess (``MCPFAULT_MCP_COMMAND``) runs this. Each
JSON-RPC line on stdin goes to URL as one POST (the session id the ``initialize`` answer set, and the
protocol version it chose, on every later one); each message the answer carries (a JSON body or the
events of an SSE stream) comes out on stdout as one line. Over HTTP the proxy's faults reach this
bridge the way they reach any HTTP client, and the bridge passes them on as a stdio server would show
them: an answer as it came; an HTTP error status (with its ``Retry-After``) or a broken stream as a
JSON-RPC error for that request, so a stdio client learns at once what an HTTP client would; a request
never answered as no line at all. Requests run side by side, as they would over HTTP.

Built on the proxy's own HTTP client (``proxy.upstream``) and SSE splitter; stdout is written one
whole line at a time. At the end of stdin the bridge waits for the answers still due (at most
``DRAIN_S``), ends the HTTP session with a DELETE, and exits 0.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import IO, Any, Final

import anyio
from yarl import URL

from mcpfault.harness.http_client import MAX_ANSWER_BYTES, retry_after_s
from mcpfault.loopback import check_http_url
from mcpfault.protocol import jsonrpc, sse
from mcpfault.protocol.eras import LEGACY_VERSIONS
from mcpfault.proxy.http.stdio import SESSION_HEADER
from mcpfault.proxy.http.upstream import UpstreamBroke, UpstreamPool
from mcpfault.proxy.pipes import LineSplitter

DRAIN_S: Final = 5.0
# The JSON-RPC code of the bridge's own errors: the request got no answer over HTTP (the proxy's
# "upstream unavailable" code, which MCP clients already treat as a transport failure).
TRANSPORT_ERROR: Final = jsonrpc.UPSTREAM_UNAVAILABLE


def check_url(text: str) -> URL:
    check_http_url(text, "URL", "the MCP endpoint's URL, e.g. http://127.0.0.1:8080/mcp")
    return URL(text.strip())


class StdioBridge:
    def __init__(self, url: URL, out: IO[bytes]) -> None:
        self.url = url
        self._out = out
        self._pool = UpstreamPool(url, max_connections=16)
        self._session: str | None = None
        self._version = LEGACY_VERSIONS[-1]
        self._pending = 0  # exchanges under way

    async def run(self, lines: Any) -> None:
        """Relay every line of ``lines`` (an async iterator of byte chunks); returns at its end."""
        splitter = LineSplitter()
        async with anyio.create_task_group() as tg:
            async for chunk in lines:
                for line in splitter.feed(chunk):
                    message = jsonrpc.parse(line)
                    if message.kind is jsonrpc.MessageKind.REQUEST and message.method == "initialize":
                        await self._exchange(line, message)  # its session id goes on every later request
                    else:
                        tg.start_soon(self._exchange, line, message)
            with anyio.move_on_after(DRAIN_S):
                while self._pending:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()  # what is still unanswered stays so
        await self._end_session()
        await self._pool.close()

    def _headers(self) -> list[tuple[str, str]]:
        headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")]
        headers.append(("MCP-Protocol-Version", self._version))
        if self._session is not None:
            headers.append((SESSION_HEADER, self._session))
        return headers

    async def _exchange(self, line: bytes, message: jsonrpc.Message) -> None:
        self._pending += 1
        try:
            await self._relay(line, message)
        finally:
            self._pending -= 1

    async def _relay(self, line: bytes, message: jsonrpc.Message) -> None:
        is_request = message.kind is jsonrpc.MessageKind.REQUEST
        request_id = message.body.get("id") if is_request and message.body is not None else None
        try:
            response = await self._pool.request(
                "POST", self.url.raw_path_qs, self._headers(), line.rstrip(b"\r\n"), resend_unanswered=False
            )
        except (UpstreamBroke, OSError) as exc:
            if is_request:
                self._error(request_id, f"{message.method}: the connection closed with no HTTP response ({exc})")
            return
        try:
            if message.method == "initialize" and response.status < 300:
                self._session = response.headers.get(SESSION_HEADER) or self._session
            content_type = response.headers.get("Content-Type", "").lower()
            if response.status >= 300:
                data = await response.body(MAX_ANSWER_BYTES)
                if is_request:
                    self._http_error(request_id, message.method or "", response.status, data, response.headers)
            elif content_type.startswith("text/event-stream"):
                answered = False
                splitter = sse.EventSplitter(MAX_ANSWER_BYTES)
                async for chunk in response.iter_any():
                    for event in splitter.feed(chunk):
                        if event.data:
                            answered = answered or _answers(event.data, request_id)
                            self._write(event.data)
                if is_request and not answered:
                    self._error(request_id, f"{message.method}: the answer's stream ended before the answer")
            else:
                data = await response.body(MAX_ANSWER_BYTES)
                if data.strip():
                    self._remember_version(data, message)
                    self._write(data)
        except (UpstreamBroke, OSError, ValueError) as exc:
            if is_request:
                self._error(request_id, f"{message.method}: the answer's stream broke off ({exc})")
        finally:
            response.close()

    def _remember_version(self, data: bytes, message: jsonrpc.Message) -> None:
        if message.method != "initialize":
            return
        try:
            version = json.loads(data).get("result", {}).get("protocolVersion")
        except (ValueError, AttributeError):
            return
        if isinstance(version, str):
            self._version = version

    def _http_error(self, request_id: Any, method: str, status: int, data: bytes, headers: Any) -> None:
        try:
            answer = json.loads(data)
        except ValueError:
            answer = None
        if isinstance(answer, dict) and answer.get("id") == request_id and isinstance(answer.get("error"), dict):
            self._write(data)  # a JSON-RPC error in an HTTP error: the server's own words
            return
        wait_s = retry_after_s(headers.get("Retry-After"))
        detail: dict[str, Any] = {"http_status": status}
        if wait_s is not None:
            detail["retry_after_s"] = wait_s
        text = data[:200].decode("utf-8", "replace").strip()
        self._error(request_id, f"{method}: HTTP {status}" + (f" ({text})" if text else ""), detail)

    def _error(self, request_id: Any, message: str, data: Any = None) -> None:
        self._write(jsonrpc.encode(jsonrpc.error_response(request_id, TRANSPORT_ERROR, message, data)))

    def _write(self, data: bytes) -> None:
        self._out.write(data.rstrip(b"\r\n") + b"\n")
        self._out.flush()

    async def _end_session(self) -> None:
        if self._session is None:
            return
        try:
            with anyio.move_on_after(2):
                response = await self._pool.request("DELETE", self.url.raw_path_qs, self._headers())
                response.close()
        except (UpstreamBroke, OSError):
            pass


def _answers(data: bytes, request_id: Any) -> bool:
    try:
        message = json.loads(data)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("id") == request_id and "method" not in message


async def _stdin_chunks() -> Any:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while chunk := await reader.read(65536):
        yield chunk


async def serve(url: URL) -> None:
    await StdioBridge(url, sys.stdout.buffer).run(_stdin_chunks())
