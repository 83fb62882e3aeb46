"""What the control API needs from a proxy that owns its server process: ``ServerControl``.

The transport that starts the process implements it (proxy/process/supervisor.py's ``Supervisor``, or for the
HTTP bridge every era's supervisor as one). Where the proxy owns no process (``--upstream URL``),
there is none, and process actions are refused.
"""

from __future__ import annotations

import signal
from typing import Protocol, runtime_checkable

from mcpfault.errors import MCPFaultError


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


class CannotRestart(MCPFaultError, RuntimeError):
    """This proxy's server runs without a supervisor: when it ends, the proxy ends with it."""


def signal_number(signal_name: str) -> int:
    """``SIGKILL`` or ``KILL`` -> its number; ValueError naming the choices otherwise."""
    name = signal_name.upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal {signal_name!r}; e.g. SIGKILL, SIGTERM, SIGSEGV, SIGABRT") from None
