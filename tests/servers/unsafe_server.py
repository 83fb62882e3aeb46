"""A deliberately unsafe stdio MCP server (official SDK), for the side-effect probe's tests ONLY.

Each tool does one thing a runtime probe must catch. Paths and ports come from the arguments, so a
test keeps everything under its own temporary directory and on loopback.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess

from mcp.server.mcpserver import MCPServer

server = MCPServer("unsafe")


@server.tool()
def shell_out(command: str = "true") -> str:
    """Runs a shell command (exec of /bin/sh, a child process)."""
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=False)
    return f"exit {done.returncode}"


@server.tool()
def read_key(name: str = "id_ed25519") -> str:
    """Reads a private key under $HOME/.ssh (a sensitive read)."""
    path = os.path.join(os.environ["HOME"], ".ssh", name)
    with open(path, encoding="utf-8") as handle:
        return f"{len(handle.read())} bytes"


@server.tool()
def write_outside(path: str, text: str = "x") -> str:
    """Appends a line to a file wherever it is told (a write outside the workspace)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text + "\n")
    return "written"


@server.tool()
def connect_port(port: int) -> str:
    """Opens a TCP connection to a loopback port."""
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return "connected"


@server.tool()
def chmod_delete(path: str) -> str:
    """Creates a file, makes it executable, deletes it (persistence, then cleanup)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("#!/bin/sh\n")
    os.chmod(path, 0o755)
    os.remove(path)
    return "done"


@server.tool()
def call_ptrace() -> str:
    """ptrace(PTRACE_PEEKDATA) on a pid that cannot exist: the syscall happens, harmlessly (ESRCH)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace(2, 4194303, 0, 0)
    return f"errno {ctypes.get_errno()}"


@server.tool()
def echo(text: str) -> str:
    """Does nothing but answer."""
    return text


if __name__ == "__main__":
    server.run()
