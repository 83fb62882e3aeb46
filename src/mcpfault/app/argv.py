"""The one place that builds a ``python -m mcpfault ...`` command line.

A child mcpfault runs under the interpreter running now (``sys.executable``), so it sees the same
installation whatever ``PATH`` holds; the fork server recognises exactly this shape.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

_MODULE = ("-m", "mcpfault")
# What such a command runs, by name: ``cli.prepared_main()`` builds the parser once and returns a
# function of the argv after ``-m mcpfault``. A launcher below the CLI (the bench's fork server)
# resolves it at run time, so it runs the command line without importing it.
ENTRY_POINT = "mcpfault.cli:prepared_main"


def mcpfault_argv(*arguments: str, python: str | None = None) -> list[str]:
    """``[python, "-m", "mcpfault", *arguments]``; ``python`` defaults to this interpreter."""
    return [python or sys.executable, *_MODULE, *arguments]


def is_mcpfault_argv(command: Sequence[str], *, python: str | None = None) -> bool:
    """Whether ``command`` runs an mcpfault command (``mcpfault_argv`` with at least one argument)."""
    return (
        len(command) > len(_MODULE) + 1
        and command[0] == (python or sys.executable)
        and tuple(command[1 : 1 + len(_MODULE)]) == _MODULE
    )
