"""``run_experiment``: an experiment file performed as ``mcpfault experiment run`` does, from Python."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import anyio

from mcpfault.experiments import plan as plans
from mcpfault.experiments.runner import Outcome, run


def run_experiment(
    path: str | os.PathLike[str],
    *,
    out_dir: str | os.PathLike[str] | None = None,
    echo: Callable[[str], None] | None = None,
) -> Outcome:
    """Validate and run the experiment file at ``path``; its outcome (``verdict``, ``state``,
    ``exit_code`` as ``mcpfault experiment run`` exits, ``out_dir`` with journal.jsonl and report.md).

    An invalid file raises ``ExperimentError`` naming every problem, before anything starts. The
    proxy, its server and the load it starts are ended before this returns. ``echo`` receives the
    progress lines (default: none)."""
    plan = plans.load(Path(path))
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="mcpfault-experiment-"))
    return anyio.run(run, plan, out, echo or (lambda _line: None))
