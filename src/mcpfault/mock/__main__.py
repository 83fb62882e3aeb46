"""`python -m mcpfault.mock [--seed N] [--state FILE] [--spans FILE] [--journal FILE]`: the mock MCP server.

The same server as `mcpfault mock-server`, started without the command-line tool's parser and the
modules behind it: the bench starts one per session, so what its start-up imports is paid 135 times.
"""

from __future__ import annotations

import atexit
import os
import pathlib
import sys
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import argparse

JOURNAL_HELP = (
    "append each state change here before answering, and replay the file on start: "
    "the state survives a restart (same --seed)"
)
# Each flag's parameter of `serve`, and how its value is read: what `_plain_options` reads without argparse.
_FLAGS: Final = {
    "--seed": ("seed", int),
    "--state": ("state_path", pathlib.Path),
    "--spans": ("spans_path", pathlib.Path),
    "--otlp-endpoint": ("otlp_endpoint", str),
    "--journal": ("journal_path", pathlib.Path),
}


def _plain_options(argv: list[str]) -> dict[str, Any] | None:
    """`serve`'s arguments from `--flag value` pairs of whole flag names, as a proxy's server command
    writes them; None for anything else (--help, `--flag=value`, an abbreviation, a value that looks
    like an option, a seed that is not a number), which argparse reads, with its messages.

    argparse, its gettext and the locale module it loads cost a start ~2.5 ms of CPU; the bench starts
    a mock server per session. For what this accepts, argparse gives the same values.
    """
    if len(argv) % 2:
        return None
    options: dict[str, Any] = {}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        known = _FLAGS.get(flag)
        if known is None or value.startswith("-"):
            return None
        name, read = known
        try:
            options[name] = read(value)
        except ValueError:
            return None
    return options


def _parser() -> argparse.ArgumentParser:
    import argparse

    class HelpFormatter(argparse.HelpFormatter):
        """argparse's formatter, told the terminal's width: left to find it, it imports `shutil` (and with
        it `bz2`, `lzma`, `zlib`) at every start, ~4 ms of CPU, only to format a help nobody asked for."""

        def __init__(self, prog: str) -> None:
            super().__init__(prog, width=_terminal_columns() - 2)  # the margin argparse leaves itself

    parser = argparse.ArgumentParser(
        prog="python -m mcpfault.mock",
        description="Serve a deterministic simulated network-operations world as an MCP server on stdio.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=0, help="world seed; the same seed gives the same world")
    parser.add_argument(
        "--state",
        type=pathlib.Path,
        metavar="FILE",
        help="on exit (stdin closed, SIGTERM, SIGINT) write the final world state here as JSON",
    )
    parser.add_argument(
        "--spans",
        type=pathlib.Path,
        metavar="FILE.jsonl",
        help="a SERVER span per request, as OTLP JSON lines (appended)",
    )
    parser.add_argument(
        "--otlp-endpoint", metavar="URL", help="export spans over OTLP/HTTP (also OTEL_EXPORTER_OTLP_ENDPOINT)"
    )
    parser.add_argument("--journal", type=pathlib.Path, metavar="FILE.jsonl", help=JOURNAL_HELP)
    return parser


def _terminal_columns() -> int:
    """As `shutil.get_terminal_size().columns`: $COLUMNS, else the terminal on stdout, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
        except (OSError, ValueError):
            columns = 0
    return columns or 80


def main(argv: list[str] | None = None) -> int:
    options = _plain_options(sys.argv[1:] if argv is None else argv)
    if options is None:
        args = _parser().parse_args(argv)
        options = {
            "seed": args.seed,
            "state_path": args.state,
            "spans_path": args.spans,
            "otlp_endpoint": args.otlp_endpoint,
            "journal_path": args.journal,
        }
    # Imported late so --help answers without building the tool schemas.
    from mcpfault.mock.server import serve

    serve(**options)
    return 0


def _exit_now(code: int) -> None:
    """End the process without tearing the interpreter down.

    By now the state file is written (fsynced, closed) and the spans are exported (the provider was
    shut down); what is left of a normal exit is freeing every module and object one by one, which
    costs a server this small more CPU than its whole session of requests. Exit handlers still run.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
