"""The one entry point: ``mcpfault COMMAND``. Parses, wires, prints; the work happens elsewhere.

Exit codes: 0 success; 1 a check failed (``validate`` found problems); 2 bad command-line input or an
invalid profile; 127 the MCP server command could not be started; 141 (128+SIGPIPE) the reader of
stdout went away (``| head``), for every command, and the proxy's client stopped reading while its
server exited 0 (answers were lost); otherwise ``proxy`` exits with the server's own status (128+N
when a signal N ended it).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Sequence

from mcpfault import __version__
from mcpfault.cli import (
    audit,
    cassette,
    config,
    connect,
    ctl,
    experiment,
    fake_llm,
    harness,
    mcp_server,
    probe,
    proxy,
    report,
    tools,
)
from mcpfault.cli.common import EXIT_NOT_STARTED, EXIT_READER_LEFT, EXIT_USAGE
from mcpfault.errors import ProfileError, UpstreamError, UsageError


def main(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Run ``mcpfault ARGV``. ``parser``: one ``parser()`` built before (the bench's fork server builds it
    once for every proxy it forks), else a new one."""
    parser = parser if parser is not None else _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = args.handler(args)
        sys.stdout.flush()  # inside the try: a reader that left (`| head`) shows up here, not at exit
    except BrokenPipeError:
        return _reader_left()
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


def _reader_left() -> int:
    """stdout's reader went away (``mcpfault faults | head -1``): stop quietly, as CLI tools do, with the
    status of a process ended by SIGPIPE. stdout goes to /dev/null so the interpreter's last flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_READER_LEFT


def prepared_main() -> Callable[[Sequence[str]], int]:
    """``main`` with its parser built now, for a launcher that runs many commands from one
    interpreter (the bench's fork server, through ``app.argv.ENTRY_POINT``): ~14 ms of CPU each saved."""
    return functools.partial(main, parser=_parser())


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
    report.add_parser(commands)
    tools.add_tools(commands)
    probe.add_parser(commands)
    mcp_server.add_parser(commands)
    config.add_parser(commands)
    audit.add_parser(commands)
    connect.add_parser(commands)
    fake_llm.add_parser(commands)
    cassette.add_parsers(commands)
    return parser
