"""An MCP server on the official SDK for the process-fault tests (tests/test_process_faults.py).

Tools: ``echo``; ``whoami`` (its pid, so a test sees a restart); ``spin`` (CPU-bound work, returns
the seconds it took); ``allocate`` (holds ``mb`` more MiB of resident memory); ``spawn_child``
(starts a long sleeping grandchild, which must die with the server's process group).
``--exit-after-s S`` makes the server exit by itself (status 3) S seconds after it starts;
``--http PORT`` serves Streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("process-fault-server")
_held: list[bytearray] = []


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool()
def whoami() -> int:
    """This server process's pid."""
    return os.getpid()


@server.tool()
def spin(iterations: int) -> float:
    """Count to ``iterations`` (pure CPU); the wall-clock seconds it took."""
    started = time.monotonic()
    total = 0
    for i in range(iterations):
        total += i
    return time.monotonic() - started


@server.tool()
def allocate(mb: int) -> int:
    """Hold ``mb`` more MiB, touched so that it is resident; the MiB held in all."""
    block = bytearray(mb * 1024 * 1024)
    for offset in range(0, len(block), 4096):
        block[offset] = 1
    _held.append(block)
    return sum(len(b) for b in _held) // (1024 * 1024)


@server.tool()
def spawn_child() -> int:
    """Start a grandchild that sleeps for a minute; its pid."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    return child.pid


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--exit-after-s", type=float)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp")
    args = parser.parse_args()
    if args.exit_after_s is not None:
        threading.Timer(args.exit_after_s, lambda: os._exit(3)).start()
    if args.http is None:
        server.run()
    else:
        server.run(transport="streamable-http", host="127.0.0.1", port=args.http)
