"""What a finished run directory (``mcpfault bench --out DIR``) says about its tasks."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from mcpfault.analysis.records import read_records
from mcpfault.errors import UsageError


def task_outcomes(
    run_dir: str | os.PathLike[str], *, profile: str | None = None, agent: str | None = None
) -> Counter[str]:
    """Tasks by outcome (success, recovered, failed_detected, failed_silent) in ``run_dir/records.jsonl``,
    of one profile or agent only when given."""
    path = Path(run_dir) / "records.jsonl"
    if not path.is_file():
        raise UsageError(f"{path} does not exist; give the --out directory of a finished 'mcpfault bench'")
    return Counter(
        record.outcome
        for record in read_records(path)
        if (profile is None or record.profile == profile) and (agent is None or record.agent == agent)
    )
