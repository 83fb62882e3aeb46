"""A minimal, fast Streamable HTTP MCP server with one tool, ``echo``.

It exists so the HTTP benchmark measures the transport rather than server work: the standard
library's ``ThreadingHTTPServer`` speaking HTTP/1.1 with keep-alive (one thread per connection),
no SDK, no validation beyond what a correct answer needs. ``POST /mcp`` carries one JSON-RPC
message and is answered with ``application/json`` (or, with ``--sse``, ``tools/call`` with a
one-event ``text/event-stream``). Each answer, headers and body, leaves in one ``sendall`` with
TCP_NODELAY, so no Nagle/delayed-ACK stall can creep into the figures.

Both protocol eras: ``initialize`` (2025-11-25) issues an ``Mcp-Session-Id`` that later requests
must carry (400 without it, 404 for an unknown one, ``DELETE`` ends it); ``server/discover`` and
requests carrying the 2026-07-28 ``_meta`` envelope need no session. Notifications get 202.
``GET /mcp`` gets 405 (no server-initiated stream), unless ``--get-stream``: then a session's GET
opens a 2025-11-25 SSE stream (chunked, one comment to say it is open) that stays open, sending
nothing more, until the client closes it; ``benchmarks/scale.py`` holds one per session.

Run: ``python benchmarks/http_echo_server.py PORT [--sse] [--get-stream]`` (port 0 picks a free one). It binds
127.0.0.1 only and prints ``listening on http://127.0.0.1:PORT/mcp`` on stdout once it accepts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO = {"name": "mcpfault-bench-http-echo", "version": "1.0.0"}
MCP_PATH = "/mcp"
MAX_BODY = 16 * 1024 * 1024

ECHO_TOOL: dict[str, Any] = {
    "name": "echo",
    "description": "Return the given text unchanged.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "outputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _result(msg_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def _error(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def _call_tool(msg_id: Any, params: Any, modern: bool) -> dict[str, Any]:
    if not isinstance(params, dict) or params.get("name") != "echo":
        name = params.get("name") if isinstance(params, dict) else None
        return _error(msg_id, INVALID_PARAMS, f"Unknown tool: {name!r}")
    arguments = params.get("arguments")
    text = arguments.get("text") if isinstance(arguments, dict) else None
    result: dict[str, Any]
    if isinstance(text, str):
        result = {"content": [{"type": "text", "text": text}], "structuredContent": {"text": text}, "isError": False}
    else:
        result = {"content": [{"type": "text", "text": "argument 'text' must be a string"}], "isError": True}
    if modern:
        result["resultType"] = "complete"
    return _result(msg_id, result)


class Sessions:
    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def new(self) -> str:
        session_id = uuid.uuid4().hex
        with self._lock:
            self._ids.add(session_id)
        return session_id

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._ids  # a set lookup is atomic under the GIL

    def end(self, session_id: str) -> bool:
        with self._lock:
            if session_id in self._ids:
                self._ids.remove(session_id)
                return True
            return False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True  # TCP_NODELAY on every accepted connection
    server_version = "mcpfault-bench-echo"
    sys_version = ""
    server: EchoServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no per-request logging: it would cost more than the answer

    # -- answers ------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str | None, extra: str = "") -> None:
        # One buffer, one sendall: status line, headers and body leave together.
        head = f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\nContent-Length: {len(body)}\r\n"
        if content_type is not None:
            head += f"Content-Type: {content_type}\r\n"
        self.wfile.write((head + extra + "\r\n").encode("latin-1") + body)

    def _json(self, status: int, message: dict[str, Any], extra: str = "") -> None:
        self._send(status, _dumps(message).encode(), "application/json", extra)

    def _sse(self, message: dict[str, Any]) -> None:
        body = b"event: message\ndata: " + _dumps(message).encode() + b"\n\n"
        self._send(200, body, "text/event-stream", "Cache-Control: no-cache\r\n")

    # -- methods ------------------------------------------------------------------------------

    def do_POST(self) -> None:
        if self.path != MCP_PATH:
            self._send(404, b"not found\n", "text/plain")
            return
        length_text = self.headers.get("Content-Length")
        if length_text is None or not length_text.isdigit() or int(length_text) > MAX_BODY:
            self._json(400, _error(None, INVALID_REQUEST, "a Content-Length up to 16 MiB is required"))
            self.close_connection = True
            return
        raw = self.rfile.read(int(length_text))
        try:
            message = json.loads(raw)
        except ValueError:
            self._json(400, _error(None, PARSE_ERROR, "Parse error"))
            return
        if not isinstance(message, dict):
            self._json(400, _error(None, INVALID_REQUEST, "expected one JSON-RPC message (an object)"))
            return
        method = message.get("method")
        if "id" not in message or not isinstance(method, str):
            self._send(202, b"", None)  # a notification, or a response to a request we never send
            return
        msg_id = message["id"]
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        modern = isinstance(meta, dict) and META_PROTOCOL_VERSION in meta
        if method == "initialize":
            session_id = self.server.sessions.new()
            result = {"protocolVersion": LEGACY_VERSION, "capabilities": {"tools": {}}, "serverInfo": SERVER_INFO}
            self._json(200, _result(msg_id, result), f"Mcp-Session-Id: {session_id}\r\n")
            return
        if method == "server/discover" or modern:
            pass  # stateless era: no session
        else:
            session_id_header = self.headers.get("Mcp-Session-Id")
            if session_id_header is None:
                self._json(400, _error(msg_id, INVALID_REQUEST, "Bad Request: Mcp-Session-Id header is required"))
                return
            if session_id_header not in self.server.sessions:
                self._json(404, _error(msg_id, INVALID_REQUEST, "Session not found"))
                return
        if method == "tools/call":
            reply = _call_tool(msg_id, params, modern)
            if self.server.sse:
                self._sse(reply)
            else:
                self._json(200, reply)
            return
        if method == "server/discover":
            discovered = {
                "supportedVersions": [MODERN_VERSION],
                "capabilities": {"tools": {}},
                "resultType": "complete",
                "ttlMs": 0,
                "cacheScope": "private",
                "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
            }
            self._json(200, _result(msg_id, discovered))
        elif method == "tools/list":
            listing: dict[str, Any] = {"tools": [ECHO_TOOL]}
            if modern:
                listing.update(resultType="complete", ttlMs=0, cacheScope="private")
            self._json(200, _result(msg_id, listing))
        elif method == "ping":
            self._json(200, _result(msg_id, {}))
        else:
            self._json(200, _error(msg_id, METHOD_NOT_FOUND, f"Method not found: {method}"))

    def do_DELETE(self) -> None:
        session_id = self.headers.get("Mcp-Session-Id")
        if self.path == MCP_PATH and session_id is not None and self.server.sessions.end(session_id):
            self._send(200, b"", None)
        else:
            self._send(404, b"", None)

    def do_GET(self) -> None:
        if not self.server.get_stream:
            # No server-initiated stream: the spec's answer for a server that offers none.
            self._send(405, b"", None, "Allow: POST, DELETE\r\n")
            return
        session_id = self.headers.get("Mcp-Session-Id")
        if self.path != MCP_PATH or session_id is None or session_id not in self.server.sessions:
            self._send(404, b"", None)
            return
        # A chunked stream, so its end is the end of a message (and the connection), not a guess.
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        opened = b": stream open\n\n"
        chunk = f"{len(opened):x}\r\n".encode() + opened + b"\r\n"
        self.wfile.write((head + "Transfer-Encoding: chunked\r\n\r\n").encode("latin-1") + chunk)
        # Held open, sending nothing more, until the client goes: this thread waits on its socket.
        with contextlib.suppress(OSError):
            while self.rfile.read1(65536):
                pass
        self.close_connection = True


class EchoServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port: int, sse: bool, get_stream: bool = False) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.sse = sse
        self.get_stream = get_stream
        self.sessions = Sessions()

    def server_bind(self) -> None:
        # HTTPServer.server_bind would look up the host's FQDN; nothing here needs it.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = "127.0.0.1", int(self.server_address[1])


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends serve_forever like Ctrl-C: a clean exit with status 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A minimal Streamable HTTP MCP echo server on 127.0.0.1.")
    parser.add_argument("port", type=int, help="TCP port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--sse", action="store_true", help="answer tools/call with a one-event SSE stream")
    parser.add_argument(
        "--get-stream", action="store_true", help="answer a session's GET with an SSE stream held open until closed"
    )
    args = parser.parse_args(argv)
    server = EchoServer(args.port, args.sse, args.get_stream)
    print(f"listening on http://127.0.0.1:{server.server_port}{MCP_PATH}", flush=True)
    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
