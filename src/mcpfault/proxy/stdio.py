"""The stdio transport: our stdin/stdout on one side, a child MCP server on the other.

It moves bytes and performs the ``Emit``s of ``ProxyCore``; it decides nothing about faults. One
thread per direction reads, runs the core (under one lock: the core is not thread-safe), and writes
with one ``write`` per destination per chunk read. Everything else with a lifetime (the two reader
threads, signal forwarding, delayed deliveries, the shutdown timer) is a task of one anyio task
group, and the reader threads stop when the group asks them to.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import structlog
from anyio import CancelScope, from_thread, to_thread
from anyio.abc import TaskGroup

from mcpfault.proxy import pipes
from mcpfault.proxy.child import ChildProcess
from mcpfault.proxy.core import Emit, ProxyCore, To

log = structlog.get_logger("mcpfault.proxy")

# How long a server's stdout may stay open after the process is gone (a grandchild holding it).
DRAIN_AFTER_EXIT_S = 0.5
# How long the client gets to take the last bytes before the proxy exits anyway.
FLUSH_TO_CLIENT_S = 5.0


@dataclass(frozen=True, slots=True)
class Lifecycle:
    # After the client leaves (stdin EOF) or a signal arrives: how long the server gets to exit
    # on its own, then how long after SIGTERM before SIGKILL.
    shutdown_timeout_s: float = 5.0
    kill_timeout_s: float = 2.0


def exit_status(returncode: int) -> int:
    """A shell's view of the status: 128+N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class StdioProxy:
    def __init__(self, core: ProxyCore, server: ChildProcess, lifecycle: Lifecycle = Lifecycle()) -> None:
        self.core = core
        self._server = server
        self._lifecycle = lifecycle
        self._stop = pipes.StopSignal()
        self._core_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._tg: TaskGroup
        self._to_server: pipes.FdWriter
        self._to_client: pipes.FdWriter
        self._server_stdout_closed = anyio.Event()
        self._delayed: dict[int, tuple[Emit, CancelScope]] = {}
        self._client_gone = False
        self._ending = False
        self._core_failed_logged = False
        self._client_mid_line = False  # the server's last bytes were a partial line (it died mid-write, say)
        self._client_lines = pipes.LineSplitter()
        self._server_lines = pipes.LineSplitter()
        self._loop_thread = threading.get_ident()

    def _in_loop(self, function: Callable[..., object], *args: object) -> None:
        """Run ``function`` on the event loop's thread, from whichever thread we are on."""
        if threading.get_ident() == self._loop_thread:
            function(*args)
        else:
            from_thread.run_sync(function, *args)

    async def run(self, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
        """Relay until the server exits; return its exit status."""
        self._loop_thread = threading.get_ident()
        server_stdin, server_stdout = self._server.take_pipes()
        modes = pipes.set_nonblocking([stdin_fd, stdout_fd, server_stdin, server_stdout])
        self._to_server = pipes.FdWriter(server_stdin, self._stop, owned=True)
        self._to_client = pipes.FdWriter(stdout_fd, self._stop, owned=False)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._pump, stdin_fd, self._client_data, self._client_eof)
                tg.start_soon(self._pump, server_stdout, self._server_data, self._server_eof)
                tg.start_soon(self._forward_signals)
                returncode = await self._server.wait()
                with anyio.move_on_after(DRAIN_AFTER_EXIT_S):
                    await self._server_stdout_closed.wait()
                status = exit_status(returncode)
                await self._finish(status)
                self._stop.set()
                tg.cancel_scope.cancel()
        finally:
            self._stop.set()
            self._to_server.close()
            os.close(server_stdout)
            self._stop.close()
            pipes.restore_blocking({fd: mode for fd, mode in modes.items() if fd in (stdin_fd, stdout_fd)})
        return status

    # -- the reader threads -----------------------------------------------------------------------

    async def _pump(self, fd: int, on_data: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        # Not abandoned on cancel: the task waits for its thread, which the stop pipe ends promptly.
        await to_thread.run_sync(pipes.read_loop, fd, self._stop, on_data)
        if not self._stop.is_set:
            on_eof()

    def _client_data(self, data: bytes) -> None:
        self._relay(self._client_lines.feed(data), self.core.from_client, To.SERVER)

    def _server_data(self, data: bytes) -> None:
        self._relay(self._server_lines.feed(data), self.core.from_server, To.CLIENT)

    def _client_eof(self) -> None:
        rest = self._client_lines.rest()
        if rest:
            self._relay([rest], self.core.from_client, To.SERVER)
        self._client_left("the client closed stdin")

    def _server_eof(self) -> None:
        rest = self._server_lines.rest()
        if rest:
            self._relay([rest], self.core.from_server, To.CLIENT)
            self._client_mid_line = True
        self._server_stdout_closed.set()

    def _relay(self, lines: list[bytes], handle: Callable[[bytes], list[Emit]], natural: To) -> None:
        to_server: list[bytes] = []
        to_client: list[bytes] = []
        later: list[Emit] = []
        with self._core_lock:
            for line in lines:
                try:
                    emits = handle(line)
                except Exception:  # a bug of ours must not cost the user a message: relay the line as is
                    if not self._core_failed_logged:
                        self._core_failed_logged = True
                        log.exception("internal error while handling a line; relaying it untouched", size=len(line))
                    emits = [Emit(natural, line)]
                for emit in emits:
                    if emit.delay_s > 0:
                        later.append(emit)
                    elif emit.to is To.SERVER:
                        to_server.append(emit.data)
                    else:
                        to_client.append(emit.data)
        # One write per destination per chunk: the syscall, not the parsing, is the cost that matters.
        if to_client and not self._to_client.write(b"".join(to_client) if len(to_client) > 1 else to_client[0]):
            self._client_left(f"the client stopped reading ({self._to_client.broken})")
        if to_server and not self._client_gone:
            self._to_server.write(b"".join(to_server) if len(to_server) > 1 else to_server[0])
        for emit in later:
            self._in_loop(self._schedule, emit)

    # -- the event loop side ----------------------------------------------------------------------

    def _schedule(self, emit: Emit) -> None:
        self._tg.start_soon(self._deliver_later, emit)

    async def _deliver_later(self, emit: Emit) -> None:
        with anyio.CancelScope() as scope:
            self._delayed[id(emit)] = (emit, scope)
            try:
                await anyio.sleep(emit.delay_s)
            finally:
                self._delayed.pop(id(emit), None)
            await self._write([emit])

    async def _write(self, emits: list[Emit]) -> None:
        """Write from the event loop without ever blocking it: a client that does not read stalls a thread."""
        to_client = b"".join(e.data for e in emits if e.to is To.CLIENT)
        to_server = b"".join(e.data for e in emits if e.to is To.SERVER)
        if to_client:
            await to_thread.run_sync(self._to_client.write, to_client, abandon_on_cancel=True)
        if to_server and not self._client_gone:
            await to_thread.run_sync(self._to_server.write, to_server, abandon_on_cancel=True)

    def _client_left(self, why: str) -> None:
        """Close the server's stdin, give it time to exit, then end it. Safe from any thread."""
        with self._state_lock:
            if self._client_gone or self._ending:
                return
            self._client_gone = True
        log.info("closing the MCP server's stdin", why=why)
        self._to_server.close()
        self._in_loop(self._tg.start_soon, self._end_server_after, self._lifecycle.shutdown_timeout_s)

    async def _forward_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("forwarding signal to the MCP server", signal=signal.Signals(signum).name)
                self._server.send_signal(signum)
                self._tg.start_soon(self._end_server_after, self._lifecycle.shutdown_timeout_s)

    async def _end_server_after(self, grace_s: float) -> None:
        await anyio.sleep(grace_s)
        if self._server.returncode is None:
            log.warning("the MCP server did not exit in time; sending SIGTERM", grace_s=grace_s)
            self._server.terminate()
            await anyio.sleep(self._lifecycle.kill_timeout_s)
            if self._server.returncode is None:
                log.warning("the MCP server ignored SIGTERM; sending SIGKILL")
                self._server.kill()

    async def _finish(self, status: int) -> None:
        """The server is gone: deliver what is held back, then answer what it never answered."""
        with self._state_lock:
            self._ending = True
        held = sorted(self._delayed.values(), key=lambda pair: pair[0].delay_s)
        for _, scope in held:
            scope.cancel()
        self._delayed.clear()
        with self._core_lock:
            emits = [emit for emit, _ in held] + self.core.upstream_exited(status)
        if self._client_mid_line and any(emit.to is To.CLIENT for emit in emits):
            # End the server's partial line first: glued to it, our own answers would be lost too.
            emits.insert(0, Emit(To.CLIENT, b"\n"))
        # Bounded: a client that stops reading cannot keep the proxy alive.
        with anyio.move_on_after(FLUSH_TO_CLIENT_S):
            await self._write(emits)


# Called with (pid, pgid, generation) each time the server starts (generation 1 for the first start).
StartHook = Callable[[int, int, int], None]


async def run_stdio(
    command: Sequence[str],
    core: ProxyCore,
    lifecycle: Lifecycle = Lifecycle(),
    *,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    on_start: Sequence[StartHook] = (),
) -> int:
    """Run the proxy on this process's stdin/stdout in front of ``command``; return the exit status."""
    server = ChildProcess.start(command, own_group=bool(on_start))
    try:
        for hook in on_start:
            hook(server.pid, server.pid, 1)
        return await StdioProxy(core, server, lifecycle).run(stdin_fd, stdout_fd)
    finally:
        server.kill()
