"""What the control API needs from a proxy that owns its server process: ``ServerControl``.

The transport that starts the process implements it (a restarting supervisor, or ``ChildControl``
over a plain ``ChildProcess`` that can crash and stall it but not restart it). Where the proxy owns
no process (``--upstream URL``), there is none, and process actions are refused.
"""

from __future__ import annotations

import signal
from typing import Protocol, runtime_checkable

import anyio

from mcpfault.proxy.child import ChildProcess


@runtime_checkable
class ServerControl(Protocol):
    @property
    def pid(self) -> int | None:
        """The running server's process id; None while there is none (between a crash and a restart)."""
        ...

    @property
    def generation(self) -> int:
        """0 for the first process, one more for each restart."""
        ...

    async def crash(self, signal_name: str = "SIGKILL") -> None:
        """Send the server ``signal_name`` (SIGKILL, SIGTERM, SIGSEGV, ...), as a crash would end it."""
        ...

    async def stall(self, duration_s: float) -> None:
        """Freeze the server (SIGSTOP) for ``duration_s``, then let it go on (SIGCONT); returns after."""
        ...

    async def restart(self) -> None:
        """End the server and start a new one (a new generation)."""
        ...


class CannotRestart(RuntimeError):
    """This proxy's server runs without a supervisor: when it ends, the proxy ends with it."""


def signal_number(signal_name: str) -> int:
    """``SIGKILL`` or ``KILL`` -> its number; ValueError naming the choices otherwise."""
    name = signal_name.upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal {signal_name!r}; e.g. SIGKILL, SIGTERM, SIGSEGV, SIGABRT") from None


class ChildControl:
    """Crash and stall for a server that is a plain ``ChildProcess`` (one generation, no restart)."""

    def __init__(self, child: ChildProcess) -> None:
        self._child = child

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child.returncode is None else None

    @property
    def generation(self) -> int:
        return 0

    async def crash(self, signal_name: str = "SIGKILL") -> None:
        self._child.send_signal(signal_number(signal_name))

    async def stall(self, duration_s: float) -> None:
        self._child.send_signal(signal.SIGSTOP)
        try:
            await anyio.sleep(duration_s)
        finally:  # cancelled or not, the server must not stay frozen
            self._child.send_signal(signal.SIGCONT)

    async def restart(self) -> None:
        raise CannotRestart(
            "this proxy runs its server without a supervisor, so it cannot restart it; "
            "crash ends the server and the proxy with it"
        )
