"""Real processes for the HTTP transport's tests: an SDK Streamable HTTP server and `mcpfault proxy --listen`;
and small stdlib HTTP servers run on a thread of the test process."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mcpfault.proxy.events import read_events

ROOT = Path(__file__).resolve().parent.parent
SDK_SERVER = ROOT / "tests" / "interop_servers" / "sdk_server.py"
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[Any], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def stop(proc: subprocess.Popen[Any], timeout: float = 5.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


@contextlib.contextmanager
def serve_in_thread(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """A ``ThreadingHTTPServer`` with ``handler`` on a free loopback port, served by a daemon thread
    until the block ends (then shut down, closed and its thread joined)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def server_url(server: ThreadingHTTPServer, path: str = "") -> str:
    """``http://127.0.0.1:PORT`` of a server from ``serve_in_thread``, with ``path`` appended."""
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


class SdkHttpServer:
    """tests/interop_servers/sdk_server.py serving Streamable HTTP on 127.0.0.1 (the mcp SDK's MCPServer)."""

    def __init__(self, tmp_path: Path, *, json_response: bool = False) -> None:
        self.port = free_port()
        self.calls_file = tmp_path / f"calls-{self.port}.txt"
        command = [sys.executable, str(SDK_SERVER), "--http", str(self.port), "--calls", str(self.calls_file)]
        if json_response:
            command.append("--json")
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.proc)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def calls(self) -> list[str]:
        return self.calls_file.read_text().splitlines() if self.calls_file.exists() else []

    def close(self) -> None:
        stop(self.proc)


class HttpProxyProcess:
    """`mcpfault proxy --listen 127.0.0.1:0 --upstream URL` (or ``-- COMMAND`` in ``extra`` with no upstream);
    ``url`` is where it serves."""

    def __init__(self, profile: Path, upstream: str, tmp_path: Path, *extra: str) -> None:
        self.events_file = tmp_path / f"events-{time.monotonic_ns()}.jsonl"
        command = [
            sys.executable,
            "-m",
            "mcpfault",
            "proxy",
            "--config",
            str(profile),
            "--listen",
            "127.0.0.1:0",
            *(["--upstream", upstream] if upstream else []),
            "--events",
            str(self.events_file),
            *extra,
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self._stderr = b""
        self.url = self._read_url()

    def _read_url(self, timeout: float = 15.0) -> str:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stderr], [], [], 0.1)
            if ready:
                chunk = os.read(self.proc.stderr.fileno(), 65536)
                if not chunk:
                    break
                self._stderr += chunk
                found = re.search(rb"serving (\S+) ->", self._stderr)
                if found:
                    return found.group(1).decode()
        raise RuntimeError(f"the proxy did not start: {self._stderr.decode(errors='replace')}")

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.events_file)

    def close(self) -> tuple[int, str]:
        code = stop(self.proc)
        assert self.proc.stderr is not None
        rest = self.proc.stderr.read()
        return code, (self._stderr + rest).decode(errors="replace")


@contextlib.contextmanager
def sdk_server(tmp_path: Path, **kw: Any) -> Iterator[SdkHttpServer]:
    server = SdkHttpServer(tmp_path, **kw)
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def http_proxy(profile: Path, upstream: str, tmp_path: Path, *extra: str) -> Iterator[HttpProxyProcess]:
    proxy = HttpProxyProcess(profile, upstream, tmp_path, *extra)
    try:
        yield proxy
    finally:
        proxy.close()


def jsonrpc(request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return body


def modern_meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
    }


def modern_call(request_id: Any, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 tools/call body and its headers (no session; Mcp-Method and Mcp-Name)."""
    body = jsonrpc(request_id, "tools/call", {"name": tool, "arguments": arguments, "_meta": modern_meta()})
    headers = {
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    return body, headers


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body."""
    messages = []
    for block in re.split(r"\r?\n\r?\n", text):
        data = [line[5:].lstrip() for line in block.splitlines() if line.startswith("data:")]
        if data:
            messages.append(json.loads("\n".join(data)))
    return messages
