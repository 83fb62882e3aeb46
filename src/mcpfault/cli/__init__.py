"""The one entry point: ``mcpfault COMMAND``. Parses, wires, prints; the work happens elsewhere.

Exit codes: 0 success; 1 a check failed (``validate`` found problems); 2 bad command-line input or an
invalid profile; 127 the MCP server command could not be started; otherwise ``proxy`` exits with
the server's own status (128+N when a signal N ended it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mcpfault import __version__
from mcpfault.cli import ctl, experiment, harness, proxy, tools
from mcpfault.cli.common import EXIT_NOT_STARTED, EXIT_USAGE
from mcpfault.errors import ProfileError, UpstreamError, UsageError


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = args.handler(args)
    except UsageError as exc:
        print(f"mcpfault {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ProfileError as exc:
        print(f"mcpfault {args.command}: refusing an invalid profile.\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    except UpstreamError as exc:
        print(f"mcpfault {args.command}: {exc}", file=sys.stderr)
        return EXIT_NOT_STARTED
    except KeyboardInterrupt:
        return 130
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcpfault",
        description="Chaos engineering for AI agents that use the Model Context Protocol.",
        epilog="Run 'mcpfault COMMAND --help' for the options of each command.",
    )
    parser.add_argument("--version", action="version", version=f"mcpfault {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    proxy.add_parser(commands)
    ctl.add_parser(commands)
    experiment.add_parser(commands)
    tools.add_checks(commands)
    harness.add_parsers(commands)
    tools.add_tools(commands)
    return parser
