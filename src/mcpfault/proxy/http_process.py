"""An HTTP MCP server the proxy starts itself (``mcpfault proxy --listen H:P --upstream URL -- CMD``).

The command is started as a ``Supervisor``'s child (its output goes to our stderr; its stdin is
empty), the proxy waits until URL's host and port accept connections, and then relays to it as to
any ``--upstream``. When the server dies it may be restarted (the profile's ``[server]`` table);
requests posted meanwhile wait for it (up to ``hold_s``). Process faults act on it, as behind the
stdio transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from collections.abc import Sequence

import structlog
from yarl import URL

from mcpfault.errors import UpstreamError
from mcpfault.faults.profile import ServerSettings
from mcpfault.proxy.stdio import exit_status
from mcpfault.proxy.supervisor import Later, ServerObserver, Supervisor

log = structlog.get_logger("mcpfault.proxy")

ACCEPT_POLL_S = 0.05


class HttpServerProcess:
    def __init__(
        self,
        command: Sequence[str],
        url: URL,
        *,
        settings: ServerSettings | None = None,
        observers: Sequence[ServerObserver] = (),
        start_timeout_s: float = 30.0,
        kill_timeout_s: float = 5.0,
    ) -> None:
        self.supervisor = Supervisor(command, settings, observers=observers, stdio=False)
        self._host = url.host or "127.0.0.1"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._start_timeout_s = start_timeout_s
        self._kill_timeout_s = kill_timeout_s
        self._up = asyncio.Event()
        self._done = asyncio.Event()
        self._stopping = False
        self._watch: asyncio.Task[None] | None = None
        self._later: set[asyncio.Task[None]] = set()
        self.exit_code: int | None = None
        joined = shlex.join(list(command))
        self.label = joined if len(joined) <= 80 else joined[:77] + "..."

    async def start(self) -> None:
        """Start the server and wait until it accepts connections; a clear error when it never does."""
        loop = asyncio.get_running_loop()
        self.supervisor.bind(lambda make: loop.call_soon_threadsafe(self._run_later, make))
        self.supervisor.start()
        await self._accepting()
        self._up.set()
        self._watch = asyncio.create_task(self._supervise())

    def _run_later(self, make: Later) -> None:
        task = asyncio.create_task(make())
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    async def _accepting(self) -> None:
        child = self.supervisor.child
        deadline = time.monotonic() + self._start_timeout_s
        while True:
            if child.returncode is not None:
                raise UpstreamError(
                    f"the HTTP server {self.label!r} exited with status {exit_status(child.returncode)} "
                    f"before {self._host}:{self._port} accepted connections; check the command after '--'"
                )
            try:
                _, writer = await asyncio.open_connection(self._host, self._port)
            except OSError:
                if time.monotonic() > deadline:
                    child.kill()
                    raise UpstreamError(
                        f"the HTTP server {self.label!r} did not accept connections on {self._host}:{self._port} "
                        f"within {self._start_timeout_s:g}s; check that --upstream names the port it listens on"
                    ) from None
                await asyncio.sleep(ACCEPT_POLL_S)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return

    async def _supervise(self) -> None:
        while True:
            status = exit_status(await self.supervisor.child.wait())
            self._up.clear()
            restart = self.supervisor.died(status, shutting_down=self._stopping)
            if restart:
                await asyncio.sleep(self.supervisor.settings.restart_delay_s)
                restart = not self._stopping and await self._restart()
            if not restart:
                self.exit_code = status
                if self.supervisor.down:
                    self.supervisor.gave_up()
                self._done.set()
                return

    async def _restart(self) -> bool:
        try:
            self.supervisor.start()
            await self._accepting()
        except Exception as exc:
            log.error("cannot restart the HTTP server", error=str(exc))
            return False
        self._up.set()
        return True

    # -- what the HTTP proxy uses -----------------------------------------------------------------

    def going_down(self) -> None:
        """A process fault is ending the server: from now on requests wait for the next generation."""
        self._up.clear()

    async def until_back(self) -> None:
        """Wait for the server to accept connections again after a crash (or to be gone for good)."""
        up, done = asyncio.create_task(self._up.wait()), asyncio.create_task(self._done.wait())
        try:
            await asyncio.wait({up, done}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            up.cancel()
            done.cancel()

    async def ready(self) -> None:
        """Before a request goes upstream: wait (up to ``hold_s``) while the server is restarting."""
        if self._up.is_set() or self._done.is_set():
            return
        hold_s = self.supervisor.settings.hold_s
        try:
            await asyncio.wait_for(self.until_back(), hold_s)
        except TimeoutError:
            raise ConnectionError(f"the HTTP server is restarting and was not back within {hold_s:g}s") from None

    async def wait(self) -> int:
        """Until the server exits for good; its exit status, as a shell shows it."""
        await self._done.wait()
        assert self.exit_code is not None
        return self.exit_code

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after the grace; its supervision ends."""
        self._stopping = True
        for task in list(self._later):
            task.cancel()
        child = self.supervisor.child
        child.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(child.wait(), self._kill_timeout_s)
        child.kill()
        if self._watch is not None:
            await self._watch
