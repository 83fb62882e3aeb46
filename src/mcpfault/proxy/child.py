"""The MCP server as a child process: start, signal, wait, end. Its lifecycle lives here only.

Exit is noticed through a pidfd (no thread, no polling) where the kernel has them, by polling where
it does not. Later a restarting supervisor (crash faults) builds on this one class.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Sequence

import anyio

from mcpfault.errors import UpstreamError

POLL_INTERVAL_S = 0.05


class ChildProcess:
    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen

    @classmethod
    def start(cls, command: Sequence[str], *, own_group: bool = False) -> ChildProcess:
        """Start ``command`` with piped stdin/stdout and our stderr (so its logs pass straight through).

        ``own_group``: in a process group of its own (its pid is the group's id), so what watches the
        server's processes (the side-effect probe) sees them and never the proxy's."""
        try:
            popen = subprocess.Popen(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                process_group=0 if own_group else None,
            )
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
        return cls(popen)

    @property
    def pid(self) -> int:
        return self._popen.pid

    def take_pipes(self) -> tuple[int, int]:
        """Hand over (stdin, stdout) descriptors: the taker closes them (closing stdin is the server's EOF)."""
        assert self._popen.stdin is not None and self._popen.stdout is not None
        fds = (os.dup(self._popen.stdin.fileno()), os.dup(self._popen.stdout.fileno()))
        self.close_pipes()
        return fds

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        try:
            pidfd = os.pidfd_open(self._popen.pid)
        except (AttributeError, OSError):
            while self._popen.poll() is None:
                await anyio.sleep(POLL_INTERVAL_S)
            return self._popen.returncode
        try:
            if self._popen.poll() is None:
                await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        return self._popen.wait()

    def send_signal(self, signum: int) -> None:
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signum)

    def terminate(self) -> None:
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.terminate()

    def kill(self) -> None:
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.kill()
            self._popen.wait()

    async def stop(self, *, grace_s: float, kill_after_s: float) -> int:
        """End a server whose stdin is already closed: ``grace_s`` to exit on its own, then SIGTERM,
        then SIGKILL ``kill_after_s`` later. Its return code."""
        with anyio.move_on_after(grace_s):
            return await self.wait()
        self.terminate()
        with anyio.move_on_after(kill_after_s):
            return await self.wait()
        self.kill()
        return await self.wait()

    def close_pipes(self) -> None:
        for pipe in (self._popen.stdin, self._popen.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
