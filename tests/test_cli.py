"""The command line as a new user meets it: pipes, seeds, help texts, printed addresses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.faults import profile
from mcpfault.harness.bench import fault_seed

MCPFAULT = [sys.executable, "-m", "mcpfault"]


def cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MCPFAULT, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("args", [("faults",), ("validate", "mixed"), ("profiles",), ("--help",)])
def test_a_reader_that_leaves_gets_no_traceback(args: tuple[str, ...]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head -1` after its line: every write now fails with EPIPE
    try:
        done = subprocess.run([*MCPFAULT, *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode in (0, 141)


def test_run_seed_reseeds_the_faults(tmp_path: Path) -> None:
    seen = {}
    for seed in (0, 5):
        out = tmp_path / f"s{seed}"
        done = cli("run", "--profile", "error", "--tasks", "4", "--seed", str(seed), "--out", str(out))
        assert done.returncode == 0, done.stderr
        found = re.search(r"profile 'error' \(seed (\d+)\)", (out / "proxy.log").read_text())
        assert found, (out / "proxy.log").read_text()
        seen[seed] = int(found.group(1))
    error_seed = profile.load(profile.resolve("error")).seed
    assert seen == {0: fault_seed(error_seed, 0), 5: fault_seed(error_seed, 5)}
    assert seen[0] != seen[5]
