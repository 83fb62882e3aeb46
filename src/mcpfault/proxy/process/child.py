"""The MCP server as a child process: start, signal, wait, end. Its lifecycle lives here only.

Exit is noticed through a pidfd (no thread, no polling) where the kernel has them, by polling where
it does not. The server leads a process group of its own, and every signal goes to the group, so
its own children end with it; a stopped (SIGSTOP) server is continued (SIGCONT) after a signal that
is to end it. The restarting supervisor (proxy/process/supervisor.py) builds on this one class.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import anyio

from mcpfault.errors import UpstreamError

POLL_INTERVAL_S = 0.05
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class ChildProcess:
    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen

    @classmethod
    def start(cls, command: Sequence[str], *, stdio: bool = True) -> ChildProcess:
        """Start ``command`` with piped stdin/stdout and our stderr (so its logs pass straight through),
        in a process group of its own (its pid is the group's id): its children end with it, and what
        watches the server's processes (the side-effect probe) sees them and never the proxy's.

        ``stdio=False`` (an HTTP server): no stdin, and its stdout goes to our stderr too."""
        stdin = subprocess.PIPE if stdio else subprocess.DEVNULL
        stdout = subprocess.PIPE if stdio else 2
        try:
            popen = subprocess.Popen(list(command), stdin=stdin, stdout=stdout, bufsize=0, process_group=0)
        except FileNotFoundError:
            raise UpstreamError(
                f"cannot start the MCP server: {command[0]!r} was not found; check the command after '--' "
                f"(a full path, or a program on PATH){_launcher_hint(command)}"
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

    @property
    def pgid(self) -> int:
        """The server's process group (it leads it: the same number as its pid)."""
        return self._popen.pid

    def rss_bytes(self) -> int | None:
        """The server's resident memory, from /proc; None once it is gone."""
        try:
            with open(f"/proc/{self._popen.pid}/statm", "rb") as statm:
                return int(statm.read().split()[1]) * _PAGE_SIZE
        except (OSError, ValueError, IndexError):
            return None

    def take_pipes(self) -> tuple[int, int]:
        """Hand over (stdin, stdout) descriptors: the taker closes them (closing stdin is the server's EOF)."""
        assert self._popen.stdin is not None and self._popen.stdout is not None
        fds = (os.dup(self._popen.stdin.fileno()), os.dup(self._popen.stdout.fileno()))
        self.close_pipes()
        return fds

    @property
    def returncode(self) -> int | None:
        if self._popen.returncode is None:
            try:
                exited = os.waitid(os.P_PID, self._popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return self._popen.poll()
            if exited is not None:
                self._reap()
        return self._popen.returncode

    def _reap(self) -> None:
        """The server has exited: SIGKILL what is left of its group, then reap it.

        In this order only: until it is reaped the server is a zombie that keeps its pid, so the group
        id cannot have been given to another process; after, it could be anyone's."""
        self._signal_group(signal.SIGKILL)
        self._popen.wait()

    async def wait(self) -> int:
        if self._popen.returncode is not None:
            return self._popen.returncode
        try:
            pidfd = os.pidfd_open(self._popen.pid)
        except (AttributeError, OSError):
            while (polled := self.returncode) is None:
                await anyio.sleep(POLL_INTERVAL_S)
            return polled
        try:
            if self.returncode is None:
                await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        code = self.returncode
        assert code is not None
        return code

    def send_signal(self, signum: int) -> None:
        """Signal the server's process group; continue it after a signal that is to end it, so that
        a stopped server gets it too."""
        if self.returncode is None:
            self._signal_group(signum)
            if signum not in (signal.SIGSTOP, signal.SIGCONT, signal.SIGKILL):
                self._signal_group(signal.SIGCONT)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the whole group and reap the server: nothing of it is left behind."""
        if self._popen.returncode is None:
            self._signal_group(signal.SIGKILL)
            self._reap()

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, signum)

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


# The launchers a server's README often starts it with, and what to install (or run instead) without them.
_LAUNCHERS = {
    "uvx": "uvx comes with uv: 'pip install uv', or install the server with pip and give its own command "
    "(pip install {package}, then '-- {package}')",
    "uv": "uv is not installed: 'pip install uv'",
    "npx": "npx comes with Node.js: install it (apt-get install nodejs npm), or give the server's own command",
}


def _launcher_hint(command: Sequence[str]) -> str:
    hint = _LAUNCHERS.get(Path(command[0]).name)
    package = next((word for word in command[1:] if not word.startswith("-")), "the-server")
    return f"; {hint.format(package=package)}" if hint else ""
