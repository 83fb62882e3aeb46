"""A small MCP server on the official Python SDK (mcp 2.x), for tests/test_interop.py.

Run as ``python tests/interop_servers/sdk_server.py``: stdio transport, both protocol eras
(the SDK answers ``initialize`` and ``server/discover``).
"""

from __future__ import annotations

import itertools
import os

import anyio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

server = MCPServer("interop-sdk-server")
_counter = itertools.count(1)


class DeviceStatus(BaseModel):
    device: str
    status: str
    utilization_pct: int


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def get_status(device: str) -> DeviceStatus:
    """Structured status of one device."""
    return DeviceStatus(device=device, status="up", utilization_pct=len(device) * 7)


@server.tool()
def next_ticket(queue: str) -> int:
    """A new ticket number on every call: a server whose answer changes each time."""
    return next(_counter)


@server.tool()
async def countdown(steps: int, ctx: Context) -> str:
    """Report progress `steps` times, 0.2 s apart, then answer."""
    for i in range(1, steps + 1):
        await anyio.sleep(0.2)
        await ctx.report_progress(i, steps, f"step {i}")
    return f"done after {steps} steps"


@server.tool()
def crash(code: int) -> str:
    """Exit the server process at once, mid-request, without answering."""
    os._exit(code)


if __name__ == "__main__":
    server.run()
