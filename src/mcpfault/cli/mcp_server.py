"""``mcpfault mcp-server``: mcpfault's own tools as an MCP server (stdio, or Streamable HTTP with --listen)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mcpfault.errors import UsageError


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "mcp-server",
        help="serve mcpfault's tools over MCP (profiles, experiments, bench, reports, live faults)",
        description="Serve mcpfault as an MCP server, on stdin/stdout or (--listen) Streamable HTTP, for both "
        "protocol eras. Its files stay inside the work directory (--workdir, else $MCPFAULT_WORKDIR, else "
        "the working directory); run_experiment and set_faults are dry runs unless called with "
        "dry_run=false and confirm_destructive=true.",
        epilog="examples:\n"
        "  mcpfault mcp-server                          # stdio, for an MCP client's config\n"
        "  mcpfault mcp-server --listen 127.0.0.1:8765  # Streamable HTTP on /mcp\n"
        "  MCPFAULT_WORKDIR=~/chaos mcpfault mcp-server",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--listen", metavar="HOST:PORT", help="serve Streamable HTTP here (loopback only; port 0 picks)"
    )
    parser.add_argument(
        "--workdir", type=Path, metavar="DIR", help="the work directory (default $MCPFAULT_WORKDIR or .)"
    )
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import anyio

    from mcpfault import mcp_server
    from mcpfault.loopback import parse_host_port

    if args.workdir is not None:
        if not args.workdir.is_dir():
            raise UsageError(f"--workdir {args.workdir}: not a directory")
        os.environ[mcp_server.WORKDIR_VARIABLE] = str(args.workdir.resolve())
    server = mcp_server.build()
    if args.listen is None:
        server.run()
        return 0
    try:
        host, port = parse_host_port(args.listen, "--listen")
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    def announce(url: str) -> None:
        print(f"mcpfault mcp-server: serving {url} (work directory {mcp_server.workdir()})", file=sys.stderr)
        sys.stderr.flush()

    anyio.run(mcp_server.serve_http, server, host, port, announce)
    return 0
