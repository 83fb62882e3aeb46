"""An HTTP MCP server the proxy starts itself (``mcpfault proxy --listen H:P --upstream URL -- CMD``).

The command is started as a ``Supervisor``'s child (its output goes to our stderr; its stdin is
empty), the proxy waits until URL's host and port accept connections, and then relays to it as to
any ``--upstream``. When the server dies it may be restarted (the profile's ``[server]`` table):
requests in flight then get an error naming the new generation (without a restart: the one saying
it exited), requests posted meanwhile wait for it (up to ``hold_s``). Process faults act on it, as
behind the stdio transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import signal
import time
from collections.abc import Sequence

import structlog
from yarl import URL

from mcpfault.errors import UpstreamError
from mcpfault.faults.profile import ServerSettings
from mcpfault.proxy.process.supervised import SupervisedServer
from mcpfault.proxy.process.supervisor import ServerObserver, Supervisor
from mcpfault.proxy.stdio import exit_status

log = structlog.get_logger("mcpfault.proxy")

ACCEPT_POLL_S = 0.05


class HttpServerProcess(SupervisedServer):
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
        joined = shlex.join(list(command))
        label = joined if len(joined) <= 80 else joined[:77] + "..."
        super().__init__(Supervisor(command, settings, observers=observers, stdio=False), label)
        self._host = url.host or "127.0.0.1"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._start_timeout_s = start_timeout_s
        self._kill_timeout_s = kill_timeout_s
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the server and wait until it accepts connections; a clear error when it never does."""
        self._bind()
        self.supervisor.start()
        await self._accepting()
        self._up.set()
        self._watch = asyncio.create_task(self._supervise())

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
        # A request in flight learns of the death through ``fate`` (its connection broke).
        while await self._outlive(exit_status(await self.supervisor.child.wait()), self._restart, lambda _d: None):
            pass

    async def _restart(self) -> None:
        self.supervisor.start()
        await self._accepting()
        self._up.set()

    async def stop(self, signum: int | None = None) -> None:
        """SIGTERM (or ``signum``, the signal that ends the proxy), then SIGKILL after the grace; its
        supervision ends."""
        self._stop_supervising()
        child = self.supervisor.child
        child.send_signal(signal.Signals(signum) if signum is not None else signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(child.wait(), self._kill_timeout_s)
        child.kill()
        if self._watch is not None:
            await self._watch
