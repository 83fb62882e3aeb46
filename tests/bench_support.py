"""A small real bench for the tests that read a bench's output: every outcome, a silent duplicate.

The ``lost_once`` profile drops the answer of the first open_incident of each session: the naive agent
fails detected, retry-only retries blindly and creates the incident twice (failed_silent with a duplicate),
the resilient agent reconciles (recovered). The bundled ``error`` profile adds tool errors.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LOST_ONCE = """\
name = "lost_once"
seed = 3

[[faults]]
name = "lost"
type = "timeout"
tools = ["open_incident"]
mode = "drop"
limit = 1
"""


def run_small_bench(out: Path) -> Path:
    """Run the bench (2 profiles x 3 agents x 6 tasks in sessions of 3) into ``out``; return ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    profile = out.parent / "lost_once.toml"
    profile.write_text(LOST_ONCE, encoding="utf-8")
    matrix = ["--profiles", f"{profile},error", "--tasks", "6", "--session-tasks", "3", "--jobs", "2"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcpfault",
            "bench",
            *matrix,
            "--workflows",
            "open_incident,interface_check",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out
