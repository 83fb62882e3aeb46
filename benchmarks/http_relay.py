"""The yardsticks: the least an HTTP relay can do with the standard library, and, with ``--uvloop``,
the fastest minimal relay on the event loop the proxy runs on.

A ``ThreadingHTTPServer`` (HTTP/1.1, keep-alive, one thread per client connection) that forwards
every request to the upstream with ``http.client`` over that thread's own persistent connection,
and copies the status, the headers (all but the hop-by-hop ones) and the body back, without
parsing JSON-RPC. The answer's body is read whole and sent with a Content-Length, headers and body
in one ``sendall``; TCP_NODELAY on both sides. Whatever mcpfault adds over this is the cost of
understanding the messages (and of its framework).

With ``--uvloop`` (the floor issue 33 measures the proxy against): asyncio streams on uvloop, one
upstream connection per client connection, opened on its first request; a request's head is read to
the blank line and its body by Content-Length, and both are written upstream as they came (the Host
header too); the answer's head likewise, its body by Content-Length (to the end of the connection when
it has none, which then closes), copied back. No header is parsed beyond the Content-Length, no copy is
made that forwarding does not need: what is left is the event loop's and the sockets' cost.

Run: ``python benchmarks/http_relay.py [--uvloop] PORT http://127.0.0.1:UPORT`` (port 0 picks a free one).
It binds 127.0.0.1 only and prints ``listening on http://127.0.0.1:PORT`` on stdout once it accepts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import signal
import socket
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# RFC 9110 7.6.1 hop-by-hop fields, plus the framing this relay sets itself.
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
        "host",
        "content-length",
    }
)
MAX_BODY = 64 * 1024 * 1024
UPSTREAM_TIMEOUT_S = 30.0


class NoDelayConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: RelayServer
    _upstream: NoDelayConnection | None = None  # this connection's (this thread's) own upstream connection

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _connection(self) -> NoDelayConnection:
        if self._upstream is None:
            self._upstream = NoDelayConnection(
                self.server.upstream_host, self.server.upstream_port, timeout=UPSTREAM_TIMEOUT_S
            )
        return self._upstream

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._reply(413, [], b"")
            self.close_connection = True
            return
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        for attempt in (1, 2):
            connection = self._connection()
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                # A keep-alive connection the upstream closed: one fresh try, then give up.
                connection.close()
                self._upstream = None
                if attempt == 2:
                    self._reply(502, [("Content-Type", "text/plain")], f"relay: upstream failed: {exc}\n".encode())
                    return
        relayed = [(k, v) for k, v in answer.getheaders() if k.lower() not in HOP_BY_HOP]
        self._reply(answer.status, relayed, data, answer.reason)

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes, reason: str = "") -> None:
        lines = [f"HTTP/1.1 {status} {reason}\r\n", f"Content-Length: {len(body)}\r\n"]
        lines += [f"{k}: {v}\r\n" for k, v in headers]
        lines.append("\r\n")
        self.wfile.write("".join(lines).encode("latin-1") + body)

    do_POST = do_GET = do_DELETE = _forward

    def finish(self) -> None:
        super().finish()
        if self._upstream is not None:
            self._upstream.close()


class RelayServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port: int, upstream: str) -> None:
        url = urllib.parse.urlsplit(upstream)
        if url.scheme != "http" or not url.hostname:
            raise SystemExit(f"upstream {upstream!r}: expected http://HOST:PORT")
        self.upstream_host, self.upstream_port = url.hostname, url.port or 80
        super().__init__(("127.0.0.1", port), Handler)

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = "127.0.0.1", int(self.server_address[1])


# --------------------------------------------------------------------------- --uvloop


def _content_length(head: bytes) -> int | None:
    """The Content-Length of a message head, None without one (the name matched case-insensitively)."""
    at = head.lower().find(b"\r\ncontent-length:")
    if at < 0:
        return None
    start = at + len(b"\r\ncontent-length:")
    return int(head[start : head.index(b"\r\n", start)])


async def _relay_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream_host: str, upstream_port: int
) -> None:
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # the client closed its keep-alive connection
            length = _content_length(head) or 0
            if length > MAX_BODY:
                writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            request = head + await reader.readexactly(length) if length else head
            if upstream is None:
                upstream = await asyncio.wait_for(
                    asyncio.open_connection(upstream_host, upstream_port), UPSTREAM_TIMEOUT_S
                )
            up_reader, up_writer = upstream
            up_writer.write(request)
            answer = await asyncio.wait_for(up_reader.readuntil(b"\r\n\r\n"), UPSTREAM_TIMEOUT_S)
            answer_length = _content_length(answer)
            if answer_length is None:
                # No length: the answer runs to the end of the upstream connection; so does this one.
                writer.write(answer + await up_reader.read())
                return
            writer.write(answer + await up_reader.readexactly(answer_length) if answer_length else answer)
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
        return  # either side broke off: close both
    finally:
        writer.close()
        if upstream is not None:
            upstream[1].close()


async def _serve_uvloop(port: int, upstream_host: str, upstream_port: int) -> None:
    server = await asyncio.start_server(
        lambda r, w: _relay_connection(r, w, upstream_host, upstream_port), "127.0.0.1", port, backlog=1024
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on http://127.0.0.1:{bound}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with server:
        await stop.wait()


def run_uvloop(port: int, upstream: str) -> int:
    import uvloop  # a dependency of mcpfault (its HTTP proxy runs on it), so installed beside it

    url = urllib.parse.urlsplit(upstream)
    if url.scheme != "http" or not url.hostname:
        raise SystemExit(f"upstream {upstream!r}: expected http://HOST:PORT")
    # asyncio (and uvloop) set TCP_NODELAY on every TCP transport they make, both sides.
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(_serve_uvloop(port, url.hostname, url.port or 80))
    return 0


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends serve_forever like Ctrl-C: a clean exit with status 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A minimal stdlib HTTP relay on 127.0.0.1.")
    parser.add_argument(
        "--uvloop", action="store_true", help="asyncio streams on uvloop instead of the stdlib threaded server"
    )
    parser.add_argument("port", type=int, help="TCP port on 127.0.0.1 (0: any free port)")
    parser.add_argument("upstream", help="http://HOST:PORT of the server (request paths are kept as they are)")
    args = parser.parse_args(argv)
    if args.uvloop:
        return run_uvloop(args.port, args.upstream)
    server = RelayServer(args.port, args.upstream)
    print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
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
