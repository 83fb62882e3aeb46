"""An agent for a server you recorded: asks mcp-server-time for the time in a city, on the official SDK client.

Standalone it starts its server itself, so recording its session is putting `mcpfault record` in front:

    python examples/agents/time_agent.py -- mcpfault record --out time.cassette -- uvx mcp-server-time

Under `mcpfault run` it follows the agent contract (MCPFAULT_TASK, MCPFAULT_MCP_URL, MCPFAULT_ANSWER) and
meets the recorded server, replayed behind the fault proxy:

    mcpfault run --server-cassette time.cassette --cassette-task "What time is it in Paris?" \\
        --agent cmd:time --agent-command "python examples/agents/time_agent.py" --profile error

A failed call makes it say so (status "failed"): an honest agent, judged failed_detected; a "done" is
unjudged, since a cassette holds no ground truth to check the time against.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

TIMEZONE = "Europe/Paris"


async def ask(server: str | StdioServerParameters) -> dict[str, Any]:
    """The contract's answer document: done with the server's answer, or failed with the reason."""
    try:
        async with Client(server, mode="legacy", read_timeout_seconds=10) as client:
            await client.list_tools()
            result = await client.call_tool("get_current_time", {"timezone": TIMEZONE})
    except Exception as exc:  # a JSON-RPC error, a timeout, a broken connection: the SDK raises
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    if result.is_error or not isinstance(result.structured_content, dict):
        return {"status": "failed", "reason": "get_current_time reported an error"}
    return {"status": "done", "answer": result.structured_content}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("server", nargs="*", help="standalone: the stdio server's command line, after --")
    args = parser.parse_args()
    url = os.environ.get("MCPFAULT_MCP_URL")
    if url is None:
        if not args.server:
            parser.error("give the server's command after --, or run under mcpfault run (MCPFAULT_MCP_URL)")
        answer = anyio.run(ask, StdioServerParameters(command=args.server[0], args=args.server[1:]))
        print(json.dumps(answer))
        return
    answer = anyio.run(ask, url)
    if answer["status"] == "failed":
        print(answer["reason"], file=sys.stderr)
    with open(os.environ["MCPFAULT_ANSWER"], "w", encoding="utf-8") as out:
        json.dump(answer, out)


if __name__ == "__main__":
    main()
