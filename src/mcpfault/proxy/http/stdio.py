"""A stdio MCP server behind the HTTP proxy (``mcpfault proxy --listen HOST:PORT -- SERVER_COMMAND``).

One server process serves every HTTP client, as behind a stdio-to-HTTP gateway. Each POSTed request
is written to its stdin under an id of the bridge's own (clients may all use id 1), and everything the
server writes on the way to the answer comes back as the POST's SSE stream, with the client's id
restored: progress notifications by their ``progressToken``, other messages and the server's own
requests (sampling) on the most recent request still waiting. The bridge looks like an HTTP
upstream to the proxy (``BridgeAnswer`` has the parts of an upstream response the proxy reads), so
every fault, HTTP-level ones included, acts exactly as in front of a real HTTP server.

Requests cross with a new id, so unlike the other transports their bytes change on the way. The
bridge issues a session id with each 2025-11-25 ``initialize`` answer (it does not end or check them:
one server serves them all); GET and DELETE get 405.
A client that goes away cancels its request with ``notifications/cancelled``, the stdio way.

The server is a ``Supervisor``'s (the profile's ``[server]`` table), as behind the stdio proxy: after a
death it may be restarted; requests waiting get an error naming the new generation, requests posted
meanwhile wait for it (up to ``hold_s``), and the last client's initialize is replayed to it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import shlex
import signal
from collections.abc import AsyncIterator, Sequence
from typing import Any

import structlog
from multidict import CIMultiDict

from mcpfault.faults.profile import ServerSettings
from mcpfault.protocol import jsonrpc, sse
from mcpfault.protocol.eras import META_PROTOCOL_VERSION
from mcpfault.protocol.jsonrpc import MessageKind
from mcpfault.proxy.process.child import ChildProcess
from mcpfault.proxy.process.supervised import SupervisedServer
from mcpfault.proxy.process.supervisor import ServerDeath, ServerObserver, StartHook, Supervisor, unanswered_reply
from mcpfault.proxy.stdio import exit_status

log = structlog.get_logger("mcpfault.proxy")

MAX_LINE_BYTES = 64 * 1024 * 1024
SESSION_HEADER = "Mcp-Session-Id"


class BridgeAnswer:
    """What the server sends for one request, as an SSE stream that ends with the answer."""

    def __init__(self, bridge: StdioServerBridge, upstream_id: int | None, status: int = 200) -> None:
        self.status = status
        content_type = "text/event-stream" if upstream_id is not None else "application/json"
        self.headers: CIMultiDict[str] = CIMultiDict({"Content-Type": content_type})
        self._bridge = bridge
        self._upstream_id = upstream_id
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._done = upstream_id is None

    @property
    def content(self) -> BridgeAnswer:
        """The body's reader: the answer itself (a property: an attribute would make a reference cycle)."""
        return self

    def put(self, message: bytes, *, last: bool = False) -> None:
        self._queue.put_nowait(sse.encode(message))
        if last:
            self._done = True
            self._queue.put_nowait(None)

    async def iter_any(self) -> AsyncIterator[bytes]:
        while not self._queue.empty() or not self._done:
            chunk = await self._queue.get()
            if chunk is None:
                return
            yield chunk

    async def read(self, size: int = -1) -> bytes:
        return b""

    def release(self) -> None:
        self._bridge.forget(self._upstream_id)

    def close(self) -> None:
        """The client left before the answer: the server is told to stop, as over stdio."""
        if not self._done and self._upstream_id is not None:
            self._bridge.cancel(self._upstream_id)
        self._bridge.forget(self._upstream_id)


class StdioServerBridge(SupervisedServer):
    def __init__(
        self,
        command: Sequence[str],
        *,
        kill_timeout_s: float = 5.0,
        settings: ServerSettings | None = None,
        observers: Sequence[ServerObserver] = (),
        on_start: Sequence[StartHook] = (),
    ) -> None:
        joined = shlex.join(list(command))
        super().__init__(
            Supervisor(command, settings, observers=observers), joined if len(joined) <= 80 else joined[:77] + "..."
        )
        self._kill_timeout_s = kill_timeout_s
        self.supervisor.start_hooks.extend(on_start)  # told (pid, pgid, generation) at every (re)start
        self._stdin: asyncio.StreamWriter | None = None
        self._stdout: asyncio.StreamReader | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[Any, BridgeAnswer]] = {}  # upstream id -> (client's id, answer)
        self._progress: dict[object, BridgeAnswer] = {}
        self._reader: asyncio.Task[None] | None = None
        self._initialize: dict[str, Any] | None = None  # the last client's handshake, replayed after a restart
        self._initialized: bytes | None = None
        self._replay_id: str | None = None
        self._modern = False  # the last request carried the 2026-07-28 envelope

    async def start(self) -> None:
        """Start the server (the stdio transport's ChildProcess: the same errors, the same lifecycle)."""
        self._bind()
        await self._attach(self.supervisor.start())
        self._up.set()
        self._reader = asyncio.create_task(self._read())

    async def _attach(self, child: ChildProcess) -> None:
        stdin_fd, stdout_fd = child.take_pipes()
        loop = asyncio.get_running_loop()
        self._stdout = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        stdout = self._stdout
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdout), os.fdopen(stdout_fd, "rb", 0))
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), os.fdopen(stdin_fd, "wb", 0)
        )
        self._stdin = asyncio.StreamWriter(transport, protocol, None, loop)

    async def wait(self) -> int:
        """Until the server exits for good (no restart follows); its exit status, as a shell shows it."""
        status = await super().wait()
        if self._reader is not None:
            await self._reader
        return status

    async def stop(self, signum: int | None = None) -> None:
        """Close the server's stdin (its EOF); SIGTERM after the grace, SIGKILL after as long again.
        ``signum``, the signal that ends the proxy, is forwarded at once (as the stdio proxy does)
        instead of the grace: a server slow to notice its EOF does not hold the proxy up."""
        self._stop_supervising()
        if self._reader is None:
            return
        child = self.supervisor.child
        forward = signum is not None and child.returncode is None
        if signum is not None and forward:
            # Before the EOF: a server that exits at once on EOF would otherwise end 0, racing the signal.
            child.send_signal(signal.Signals(signum))
        if self._stdin is not None:
            self._stdin.close()
        if forward:
            await child.stop(grace_s=self._kill_timeout_s, kill_after_s=0)
        else:
            await child.stop(grace_s=self._kill_timeout_s, kill_after_s=self._kill_timeout_s)
        await self._reader

    # -- the proxy's upstream ---------------------------------------------------------------------

    async def post(self, data: bytes) -> BridgeAnswer:
        await self.held()
        if self._done.is_set() or self._stdin is None:
            raise ConnectionError(f"the stdio server {self.label!r} exited with code {self.exit_code}")
        message = jsonrpc.parse(data)
        if message.kind is MessageKind.NOTIFICATION and message.method == "notifications/initialized":
            self._initialized = data
        if message.kind is not MessageKind.REQUEST or message.body is None:
            await self._write(data)  # notifications, answers to the server's own requests, what does not parse
            return BridgeAnswer(self, None, status=202)
        body = message.body
        if body.get("method") == "initialize":
            self._initialize = body
        else:
            # The 2026-07-28 era is stateless: a restarted server needs no handshake replayed.
            self._modern = _carries_envelope(body)
        upstream_id = next(self._ids)
        answer = BridgeAnswer(self, upstream_id)
        if body.get("method") == "initialize":
            # A session per 2025-11-25 handshake, as a stdio-to-HTTP gateway issues them: the proxy
            # then keeps an engine per session, and faults that need one (session_expired) can act.
            answer.headers[SESSION_HEADER] = secrets.token_hex(16)
        self._waiting[upstream_id] = (body["id"], answer)
        token = _progress_token(body)
        if token is not None:
            self._progress[token] = answer
        await self._write(jsonrpc.encode({**body, "id": upstream_id}))
        return answer

    def cancel(self, upstream_id: int) -> None:
        if upstream_id in self._waiting and self._stdin is not None and not self._stdin.is_closing():
            note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": upstream_id}}
            self._stdin.write(jsonrpc.encode(note))

    def forget(self, upstream_id: int | None) -> None:
        if upstream_id is None:
            return
        waiting = self._waiting.pop(upstream_id, None)
        if waiting is not None:
            for token in [t for t, a in self._progress.items() if a is waiting[1]]:
                del self._progress[token]

    async def _write(self, line: bytes) -> None:
        assert self._stdin is not None
        try:
            self._stdin.write(line if line.endswith(b"\n") else line + b"\n")
            await self._stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ConnectionError(f"the stdio server {self.label!r} stopped reading: {exc}") from None

    async def _read(self) -> None:
        """Each generation's stdout until its EOF; then its death, and the next generation if any."""
        while True:
            assert self._stdout is not None
            stdout = self._stdout
            while True:
                try:
                    line = await stdout.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    log.warning("the stdio server wrote a line over the limit; it is skipped", limit=MAX_LINE_BYTES)
                    continue
                if not line:
                    break
                self._route(line.rstrip(b"\r\n"))
            status = exit_status(await self.supervisor.child.wait())
            if self._stdin is not None:
                self._stdin.close()
            if not await self._outlive(status, self._restart, self._answer_waiting):
                return

    async def _restart(self) -> None:
        await self._attach(self.supervisor.start())
        if self.supervisor.settings.replay_handshake and self._initialize is not None and not self._modern:
            self._replay_id = f"mcpfault-replay-{self.supervisor.generation}"
            await self._write(jsonrpc.encode({**self._initialize, "id": self._replay_id}))
        else:
            self._up.set()  # requests go straight to the new server (stateless, or without replay)

    def _answer_waiting(self, death: ServerDeath) -> None:
        """Each request the dead server never answered gets an error: it restarted (a new generation), or it died."""
        for client_id, answer in list(self._waiting.values()):
            answer.put(unanswered_reply(client_id, death)[0], last=True)
        self._waiting.clear()
        self._progress.clear()

    def _route(self, line: bytes) -> None:
        message = jsonrpc.parse(line)
        body = message.body
        if message.kind is MessageKind.RESPONSE and self.supervisor.down:
            self.supervisor.answered()  # the restarted server answers: its downtime ends
        if message.kind is MessageKind.RESPONSE and body is not None and body.get("id") == self._replay_id:
            # The replayed initialize is answered (and the answer dropped): the session continues.
            self._replay_id = None
            if self._initialized is not None and self._stdin is not None:
                self._stdin.write(self._initialized if self._initialized.endswith(b"\n") else self._initialized + b"\n")
            self._up.set()
            return
        if message.kind is MessageKind.RESPONSE and body is not None:
            upstream_id = body.get("id")
            waiting = self._waiting.get(upstream_id) if isinstance(upstream_id, int) else None
            if waiting is not None:
                self.forget(upstream_id)
                waiting[1].put(jsonrpc.encode({**body, "id": waiting[0]}), last=True)
                return
        target: BridgeAnswer | None = None
        if message.kind is MessageKind.NOTIFICATION and message.method == "notifications/progress":
            target = self._progress.get(_freeze(message.params.get("progressToken")))
        if target is None and self._waiting:
            target = next(reversed(self._waiting.values()))[1]
        if target is None:
            log.warning("a message from the stdio server with no request waiting is dropped", size_bytes=len(line))
            return
        target.put(line)


def _carries_envelope(body: dict[str, Any]) -> bool:
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and META_PROTOCOL_VERSION in meta


def _progress_token(body: dict[str, Any]) -> object | None:
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return _freeze(token)


def _freeze(token: object) -> object | None:
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None
