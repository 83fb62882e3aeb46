"""A small MCP server on the official Python SDK (mcp 2.x), for tests/test_interop.py.

Run as ``python tests/interop_servers/sdk_server.py``: stdio transport, both protocol eras
(the SDK answers ``initialize`` and ``server/discover``). With ``--http PORT`` it serves Streamable
HTTP on 127.0.0.1:PORT/mcp instead (``--json``: JSON answers instead of SSE streams), and
``--calls FILE`` appends one line per tools/call it runs: what the server did, as ground truth.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from typing import Annotated

import anyio
import mcp.types as types
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer, Resolve, Sample
from pydantic import BaseModel, Field

server = MCPServer("interop-sdk-server")
_counter = itertools.count(1)
_calls_file: str | None = None


def _did(what: str) -> None:
    if _calls_file is not None:
        with open(_calls_file, "a") as calls:
            calls.write(what + "\n")


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
    ticket = next(_counter)
    _did(f"next_ticket {queue} {ticket}")
    return ticket


@server.tool()
async def countdown(steps: int, ctx: Context) -> str:
    """Report progress `steps` times, 0.2 s apart, then answer."""
    try:
        for i in range(1, steps + 1):
            await anyio.sleep(0.2)
            await ctx.report_progress(i, steps, f"step {i}")
    except anyio.get_cancelled_exc_class():
        _did(f"countdown cancelled after {i - 1} of {steps}")
        raise
    _did(f"countdown done {steps}")
    return f"done after {steps} steps"


_reads = itertools.count(1)


@server.resource("config://devices/{device}", mime_type="application/json")
def device_config(device: str) -> str:
    """A device's configuration; ``revision`` grows on every read (a resource whose content changes)."""
    return json.dumps({"device": device, "revision": next(_reads), "ntp_server": "10.0.0.1"})


@server.resource("status://fleet")
def fleet() -> str:
    """A static resource."""
    return "fleet: 3 devices up"


@server.prompt()
def summarize(device: str, severity: str = "minor") -> str:
    """A prompt with one required and one optional argument."""
    return f"Summarize the {severity} incident on {device}."


@server.tool()
def forecast(city: str, region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})] = "global") -> str:
    """A tool with an argument mirrored in an Mcp-Param-Region header (2026-07-28 over HTTP)."""
    return f"sunny in {city} ({region})"


@server.tool()
async def ask_model(question: str, ctx: Context) -> str:
    """Ask the client's model (sampling/createMessage, 2025-11-25), waiting at most 2 s for its answer."""
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=question))
    try:
        with anyio.fail_after(2):
            answer = await ctx.session.create_message([message], max_tokens=20)
    except TimeoutError:
        _did("ask_model no answer")
        return "no answer from the client's model within 2 s"
    except MCPError as exc:
        _did("ask_model refused")
        return f"the client refused: {exc.error.message}"
    text = answer.content.text if isinstance(answer.content, types.TextContent) else "(not text)"
    _did(f"ask_model answered {text}")
    return f"the model said: {text}"


def _sampled(question: str) -> Sample:
    return Sample(
        [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=question))], max_tokens=20
    )


@server.tool()
def ask_model_resolved(question: str, answer: Annotated[types.CreateMessageResult, Resolve(_sampled)]) -> str:
    """Ask the client's model through the SDK's resolver: a sampling request (2025-11-25) or an
    input_required result answered by a retry with inputResponses (2026-07-28)."""
    text = answer.content.text if isinstance(answer.content, types.TextContent) else "(not text)"
    _did(f"ask_model_resolved answered {text}")
    return f"the model said: {text}"


@server.tool()
def crash(code: int) -> str:
    """Exit the server process at once, mid-request, without answering."""
    os._exit(code)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--calls")
    args = parser.parse_args()
    _calls_file = args.calls
    if args.http is None:
        server.run()
    else:
        server.run(transport="streamable-http", host="127.0.0.1", port=args.http, json_response=args.json)
