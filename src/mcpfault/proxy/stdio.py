"""The stdio transport: our stdin/stdout on one side, a child MCP server on the other.

This module owns the child process: starting it, forwarding signals, closing its stdin when the
client leaves, waiting for it (bounded) and ending it. It moves bytes and performs the ``Emit``s
of ``ProxyCore``; it decides nothing about faults.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import structlog
from anyio import CancelScope
from anyio.abc import ByteReceiveStream, ByteSendStream, Process, TaskGroup

from mcpfault.errors import UpstreamError
from mcpfault.proxy import pipes
from mcpfault.proxy.core import Emit, ProxyCore, To

log = structlog.get_logger("mcpfault.proxy")

# How long a server's stdout may stay open after the process is gone (a grandchild holding it).
DRAIN_AFTER_EXIT_S = 0.5


@dataclass(frozen=True, slots=True)
class Lifecycle:
    # After the client leaves (stdin EOF) or a signal arrives: how long the server gets to exit
    # on its own, then how long after SIGTERM before SIGKILL.
    shutdown_timeout_s: float = 5.0
    kill_timeout_s: float = 2.0


def exit_status(returncode: int) -> int:
    """A shell's view of the status: 128+N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


async def start_server(command: Sequence[str]) -> Process:
    try:
        return await anyio.open_process(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
    except FileNotFoundError:
        raise UpstreamError(
            f"cannot start the MCP server: {command[0]!r} was not found; check the command after '--' "
            "(a full path, or a program on PATH)"
        ) from None
    except PermissionError:
        raise UpstreamError(
            f"cannot start the MCP server: {command[0]!r} is not executable; run 'chmod +x {command[0]}' "
            "or put its interpreter first (e.g. '-- python server.py')"
        ) from None
    except OSError as exc:
        raise UpstreamError(f"cannot start the MCP server {command[0]!r}: {exc}") from None


class StdioProxy:
    def __init__(
        self,
        core: ProxyCore,
        client_in: ByteReceiveStream,
        client_out: ByteSendStream,
        server: Process,
        lifecycle: Lifecycle = Lifecycle(),
    ) -> None:
        self.core = core
        self._client_in = client_in
        self._client_out = client_out
        self._server = server
        self._lifecycle = lifecycle
        self._delayed: dict[int, tuple[Emit, CancelScope]] = {}
        self._server_eof = anyio.Event()
        self._client_gone = False
        self._ending = False
        self._tg: TaskGroup

    async def run(self) -> int:
        """Relay until the server exits; return its exit status."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._pump_client, tg)
            tg.start_soon(self._pump_server, tg)
            tg.start_soon(self._forward_signals)
            returncode = await self._server.wait()
            with anyio.move_on_after(DRAIN_AFTER_EXIT_S):
                await self._server_eof.wait()
            status = exit_status(returncode)
            await self._finish(status)
            tg.cancel_scope.cancel()
        return status

    async def _pump_client(self, tg: TaskGroup) -> None:
        splitter = pipes.LineSplitter()
        try:
            while True:
                try:
                    chunk = await self._client_in.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    break
                for line in splitter.feed(chunk):
                    for emit in self.core.from_client(line):
                        await self._dispatch(emit, tg)
            rest = splitter.rest()
            if rest:
                for emit in self.core.from_client(rest):
                    await self._dispatch(emit, tg)
        finally:
            await self._client_left()

    async def _pump_server(self, tg: TaskGroup) -> None:
        assert self._server.stdout is not None
        splitter = pipes.LineSplitter()
        try:
            async for chunk in self._server.stdout:
                for line in splitter.feed(chunk):
                    for emit in self.core.from_server(line):
                        await self._dispatch(emit, tg)
            rest = splitter.rest()
            if rest:
                for emit in self.core.from_server(rest):
                    await self._dispatch(emit, tg)
        except (anyio.BrokenResourceError, OSError):
            pass
        finally:
            self._server_eof.set()

    async def _forward_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("forwarding signal to the MCP server", signal=signal.Signals(signum).name)
                if self._server.returncode is None:
                    self._server.send_signal(signum)
                    self._tg.start_soon(self._end_server_after, self._lifecycle.shutdown_timeout_s)

    async def _client_left(self) -> None:
        """The client closed stdin: close the server's stdin, give it time to exit, then end it."""
        if self._client_gone:
            return
        self._client_gone = True
        if self._server.stdin is not None:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(anyio.BrokenResourceError, OSError):
                    await self._server.stdin.aclose()
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

    async def _dispatch(self, emit: Emit, tg: TaskGroup) -> None:
        if emit.delay_s > 0 and not self._ending:
            tg.start_soon(self._deliver_later, emit)
            return
        await self._send(emit)

    async def _send(self, emit: Emit) -> None:
        if emit.to is To.SERVER:
            stream = self._server.stdin
            if stream is None or self._client_gone:
                return
            # A dead server's exit is handled where it is noticed, not here.
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await stream.send(emit.data)
            return
        try:
            await self._client_out.send(emit.data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            if not self._client_gone:
                log.info("the client stopped reading (its stdout closed); shutting the server down")
            await self._client_left()

    async def _deliver_later(self, emit: Emit) -> None:
        with anyio.CancelScope() as scope:
            self._delayed[id(emit)] = (emit, scope)
            try:
                await anyio.sleep(emit.delay_s)
            finally:
                self._delayed.pop(id(emit), None)
            await self._send(emit)

    async def _finish(self, status: int) -> None:
        """The server is gone: deliver what is held back, answer what is unanswered, close our stdout."""
        self._ending = True
        with anyio.CancelScope(shield=True):
            for emit, scope in sorted(self._delayed.values(), key=lambda pair: pair[0].delay_s):
                scope.cancel()
                await self._send(emit)
            self._delayed.clear()
            for emit in self.core.upstream_exited(status):
                await self._send(emit)
            with contextlib.suppress(anyio.BrokenResourceError, OSError):
                await self._client_out.aclose()


async def run_stdio(
    command: Sequence[str],
    core: ProxyCore,
    lifecycle: Lifecycle = Lifecycle(),
    *,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
) -> int:
    """Run the proxy on this process's stdin/stdout in front of ``command``; return the exit status."""
    blocking = {fd: os.get_blocking(fd) for fd in (stdin_fd, stdout_fd)}
    server = await start_server(command)
    try:
        client_in = await pipes.open_reader(stdin_fd)
        client_out = await pipes.open_writer(stdout_fd)
        return await StdioProxy(core, client_in, client_out, server, lifecycle).run()
    finally:
        if server.returncode is None:
            server.kill()
        for fd, was_blocking in blocking.items():
            with contextlib.suppress(OSError):
                os.set_blocking(fd, was_blocking)
