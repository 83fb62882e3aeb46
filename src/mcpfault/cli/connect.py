"""``mcpfault connect URL``: a stdio MCP server bridged into a Streamable HTTP endpoint (harness.stdio_bridge)."""

from __future__ import annotations

import argparse
from typing import Any

from mcpfault.cli.common import EXIT_OK


def add_parser(commands: Any) -> None:
    connect = commands.add_parser(
        "connect",
        help="a stdio bridge into a Streamable HTTP MCP endpoint (for stdio-only agents: MCPFAULT_MCP_COMMAND)",
        description="Speak MCP on stdin/stdout and relay every message to URL over Streamable HTTP: a stdio-only "
        "client then meets the endpoint's faults and world. HTTP errors and broken streams come back as JSON-RPC "
        "errors (code -32000, data.http_status, data.retry_after_s). Exits 0 at the end of stdin.",
    )
    connect.add_argument("url", metavar="URL", help="the MCP endpoint, e.g. $MCPFAULT_MCP_URL")
    connect.set_defaults(handler=_connect)


def _connect(args: argparse.Namespace) -> int:
    import anyio

    from mcpfault.harness.stdio_bridge import check_url, serve

    anyio.run(serve, check_url(args.url))
    return EXIT_OK
