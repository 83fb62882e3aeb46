"""The README's Streamable HTTP example: 20 sessions of the official mcp SDK client through the proxy,
each calling `next_ticket` and `countdown`, and what each session ended with.

    python tests/interop_servers/sdk_server.py --http 3000 &
    mcpfault proxy --config examples/http-demo.toml --listen 127.0.0.1:8080 --upstream http://127.0.0.1:3000/mcp &
    python examples/sdk_http_client.py [URL]
"""

from __future__ import annotations

import collections
import sys

import anyio
from mcp import Client


async def main(url: str) -> None:
    outcomes: collections.Counter[str] = collections.Counter()
    for _ in range(20):
        try:
            async with Client(url, mode="auto", read_timeout_seconds=5) as client:
                await client.call_tool("next_ticket", {"queue": "ops"})
                await client.call_tool("countdown", {"steps": 2})
            outcomes["ok"] += 1
        except Exception as exc:  # the SDK's task group wraps what went wrong
            leaf: BaseException = exc
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            outcomes[f"{type(leaf).__name__}: {leaf}"] += 1
    for outcome, count in outcomes.most_common():
        print(f"{count:3} {outcome}")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp")
