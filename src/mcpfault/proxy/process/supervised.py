"""A server the HTTP proxy started and supervises, whichever transport it speaks: what the stdio bridge
(http_stdio.py) and an HTTP server started after ``--`` (http_process.py) share.

Both are up (requests go to it), down (between a death and the next generation's readiness:
requests wait, up to ``hold_s``) or done (gone for good, with an exit status). The death of a
generation is handed to the ``Supervisor`` (``after_death``), which restarts it or not; a request
that was in flight can ask how its generation ended (``fate``) to tell the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from mcpfault.errors import MCPFaultError
from mcpfault.proxy.process.supervisor import Later, ServerDeath, Supervisor


class ServerDown(MCPFaultError, ConnectionError):
    """A request waited for a restarting server longer than ``hold_s``."""

    def __init__(self, message: str, hold_s: float) -> None:
        super().__init__(message)
        self.hold_s = hold_s


class SupervisedServer:
    def __init__(self, supervisor: Supervisor, label: str) -> None:
        self.supervisor = supervisor
        self.label = label
        self.exit_code: int | None = None
        self._up = asyncio.Event()  # the server can take requests
        self._done = asyncio.Event()  # it died for good
        self._died = asyncio.Event()  # set (and replaced) at each death
        self._later: set[asyncio.Task[None]] = set()

    def _bind(self) -> None:
        """Process faults' later work (a SIGCONT, a duty cycle, a delayed kill) runs on this loop."""
        loop = asyncio.get_running_loop()
        self.supervisor.bind(lambda make: loop.call_soon_threadsafe(self._run_later, make))

    def _run_later(self, make: Later) -> None:
        task = asyncio.create_task(make())
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    def _stop_supervising(self) -> None:
        self.supervisor.stop_supervising()
        for task in list(self._later):
            task.cancel()

    async def _outlive(
        self, exit_status: int, start_next: Callable[[], Awaitable[None]], on_death: Callable[[ServerDeath], None]
    ) -> bool:
        """The current generation died: the supervisor's restart, or the end (then ``wait`` returns)."""
        self._up.clear()

        def died(death: ServerDeath) -> None:
            on_death(death)
            seen, self._died = self._died, asyncio.Event()
            seen.set()

        if await self.supervisor.after_death(exit_status, start_next=start_next, on_death=died):
            return True
        self.exit_code = exit_status
        self._done.set()
        return False

    # -- what the HTTP proxy uses -----------------------------------------------------------------

    def going_down(self) -> None:
        """A process fault is ending the server: from now on requests wait for the next generation."""
        self._up.clear()

    async def until_back(self) -> None:
        """Wait for the server to be up again after a crash (or to be gone for good)."""
        up, done = asyncio.create_task(self._up.wait()), asyncio.create_task(self._done.wait())
        try:
            await asyncio.wait({up, done}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            up.cancel()
            done.cancel()

    async def held(self) -> None:
        """Before a request goes to the server: wait (up to ``hold_s``) while it restarts; ``ServerDown`` after."""
        if self._up.is_set() or self._done.is_set():
            return
        hold_s = self.supervisor.settings.hold_s
        try:
            await asyncio.wait_for(self.until_back(), hold_s)
        except TimeoutError:
            raise ServerDown(f"{self.label!r} is restarting and was not back within {hold_s:g}s", hold_s) from None

    async def fate(self, generation: int, within_s: float) -> ServerDeath | None:
        """How ``generation`` ended, once the supervisor recorded it; None when it has not died within
        ``within_s`` (what broke a request was something else)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while (death := self.supervisor.deaths.get(generation)) is None:
            remaining = deadline - loop.time()
            if remaining <= 0 or self._done.is_set():
                return None
            try:
                await asyncio.wait_for(self._died.wait(), remaining)
            except TimeoutError:
                return None
        return death

    async def wait(self) -> int:
        """Until the server exits for good (no restart follows); its exit status, as a shell shows it."""
        await self._done.wait()
        assert self.exit_code is not None
        return self.exit_code
