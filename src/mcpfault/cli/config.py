"""``mcpfault config CLIENT --profile P -- SERVER_COMMAND``: the client configuration that wraps a server."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mcpfault.cli.common import EXIT_OK, usage


def add_parser(commands: Any) -> None:
    from mcpfault.client_config import CLIENTS

    config = commands.add_parser(
        "config",
        help="print the client configuration that runs a server behind mcpfault",
        description="Print what to add to an MCP client so it launches SERVER_COMMAND behind mcpfault proxy: "
        "for claude-code the 'claude mcp add' line, for claude-desktop and cursor the mcpServers JSON. Paths are "
        "absolute and PATH is set, because clients start servers with the working directory / and a minimal PATH.",
        epilog="examples:\n"
        "  mcpfault config claude-code --profile error -- uvx mcp-server-time\n"
        "  mcpfault config cursor --profile ./my.toml --events ~/mcpfault-events.jsonl -- npx -y "
        "@modelcontextprotocol/server-memory",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    clients = config.add_subparsers(dest="client", metavar="CLIENT")
    for client in CLIENTS:
        one = clients.add_parser(client, help=f"the configuration for {client}", description=config.description)
        one.add_argument(
            "--profile", default="baseline", help="a bundled profile's name or a .toml path (default baseline)"
        )
        one.add_argument("--name", help="the server's name in the client (default: from the command, + -mcpfault)")
        one.add_argument("--events", type=Path, metavar="FILE.jsonl", help="have the proxy append its events here")
        one.add_argument("server", nargs=argparse.REMAINDER, metavar="-- SERVER_COMMAND [ARGS...]")
        one.set_defaults(handler=_config, command=f"config {client}")
    config.set_defaults(handler=lambda _args: usage(config))


def _config(args: argparse.Namespace) -> int:
    from mcpfault.client_config import WHERE, launch, render

    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    launched = launch(command, args.profile, name=args.name, events=args.events)
    print(render(args.client, launched))
    if args.client in WHERE:
        print(f"add it to {WHERE[args.client]}; restart the client after editing", file=sys.stderr)
    return EXIT_OK
