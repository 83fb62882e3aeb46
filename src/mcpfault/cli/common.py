"""What every command of the CLI shares: exit codes and the logging options."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mcpfault.errors import ProblemsError, UsageError

T = TypeVar("T")
G = TypeVar("G", str, Path)

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_STARTED = 127
# stdout's reader went away (`| head`), or the proxy's client stopped reading: the status of a process
# ended by SIGPIPE, as other command-line tools give. One convention for every command.
EXIT_READER_LEFT = 141


def stdout_console(width: int, **options: Any) -> Any:
    """A rich Console on stdout, ``width`` columns when it is not a terminal (a pipe gets whole lines).
    A reader that leaves ends the command as everywhere else (EXIT_READER_LEFT): rich's own
    Console exits 1 then, which is also "a check failed"."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError  # cli.main turns it into EXIT_READER_LEFT, stdout to /dev/null

    return _Console(width=None if sys.stdout.isatty() else width, **options)


def logging_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="the least severe log lines written to stderr (default warning)",
    )
    parser.add_argument(
        "--log-format",
        default="auto",
        choices=["auto", "json", "console"],
        help="auto: JSON lines unless stderr is a terminal (default)",
    )


def usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def announce_metrics(url: str | None) -> None:
    """Say where /metrics is served: with ``--metrics-addr HOST:0`` only the bound port tells."""
    if url is not None:
        print(f"mcpfault: metrics at {url}", file=sys.stderr)
        sys.stderr.flush()


def check_files(given: Sequence[G], load: Callable[[G], T], describe: Callable[[T], str], noun: str) -> int:
    """Load each file, printing every problem of the bad ones and a line for the good; how many were bad.

    ``describe`` gives the good line's text: the resolved path and what was loaded. A name that
    resolves to no file (a :class:`UsageError`) counts as bad, with its message after the name.
    """
    failed = 0
    for item in given:
        try:
            loaded = load(item)
        except ProblemsError as exc:
            failed += 1
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            continue
        except UsageError as exc:
            failed += 1
            print(f"{item}: {exc}", file=sys.stderr)
            continue
        print(describe(loaded))
    if failed:
        print(f"{failed} of {len(given)} {noun}(s) have problems", file=sys.stderr)
    return failed


def table_console() -> Any:
    """A console for the outcome tables."""
    # Wide enough for the tables even when stdout is a pipe (rich would assume 80 columns).
    return stdout_console(110)


def output_dir(out: Path | None, default_name: str) -> Path:
    """--out, or a new directory under runs/, made and checked writable."""
    return writable(output_path(out, default_name))


def output_path(out: Path | None, default_name: str) -> Path:
    """--out, or a new directory under runs/ named for the time and the run."""
    import time

    return out or Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{default_name}"


def writable(path: Path) -> Path:
    """``path``, made if it is not there and checked writable; a UsageError says why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write there ({exc.strerror}); choose another directory") from None
    return path
