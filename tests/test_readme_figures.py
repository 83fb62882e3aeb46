"""benchmarks/readme_figures.py: the README's make-bench block, rewritten from the benchmarks' JSON figures."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import Config, RoundResult, Summary, block_markers, write_figures  # noqa: E402

BEGIN, END = block_markers("make-bench")
STARTED = dt.datetime(2026, 12, 6, 5, 0, tzinfo=dt.UTC)


def summary(name: str, p50_us: float, rate: float) -> Summary[Config]:
    rounds = [RoundResult(p50_us + jitter, p50_us, p50_us * 2, rate, 10.0) for jitter in (-1.0, 0.0, 1.0)]
    return Summary(Config(name, (name,)), rounds)


def figures_dir(tmp_path: Path) -> Path:
    out = tmp_path / "figures"
    stdio = [summary("direct", 20, 90_000), summary("parsing-relay", 100, 70_000), summary("mcpfault", 120, 60_000)]
    notes = [
        "untraced against the floor: mcpfault added p50 / parsing-relay added p50 = 100.0 / 80.0 us = 1.250"
        " (meets target <= 1.5 in every round)",
        "(no target) mcpfault msgs/s / relay msgs/s = 0.86",
    ]
    write_figures(out / "stdio.json", stdio, notes, STARTED, ("0.40 0.30 0.20", "1.00 0.50 0.30"), 3)
    http = [summary("direct", 80, 8_000), summary("relay-uvloop", 230, 11_000), summary("mcpfault", 250, 11_000)]
    missed = ["mcpfault-spans-metrics req/s / relay-uvloop req/s = 0.71 (MISSES target >= 0.85)"]
    write_figures(out / "http.json", http, missed, STARTED, ("0.10 0.10 0.10", "0.80 0.30 0.10"), 3)
    (out / "memory.json").write_text(
        json.dumps(
            {
                "date": "2026-12-06T05:10:00+00:00",
                "load_average": {"start": "0.50 0.40 0.30", "end": "0.90 0.50 0.30"},
                "marks": [10_000, 100_000],
                "growth_target_mib": 5.0,
                "configs": [{"config": "baseline", "rss_mib_at_100000": 39.6, "growth_mib": 0.6}],
            }
        )
    )
    (out / "bench-cpu.json").write_text(
        json.dumps(
            {
                "date": "2026-12-06T05:20:00+0000",
                "load_average_at_end": "2.00 1.50 1.00",
                "target_ms_per_task": 10.0,
                "runs": [{"tasks": 3000, "cpu_s": 28.5, "ms_per_task": 9.5, "wall_s": 22.0, "exit_code": 0}],
            }
        )
    )
    return out


def rewrite(figures: Path, readme: Path) -> subprocess.CompletedProcess[str]:
    script = ROOT / "benchmarks" / "readme_figures.py"
    command = [sys.executable, str(script), "--figures", str(figures), "--readme", str(readme)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_block_quotes_each_run_with_its_date_load_and_verdicts(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# mcpfault\n\nBefore.\n\n{BEGIN}\nold figures\n{END}\n\nAfter.\n")
    done = rewrite(figures_dir(tmp_path), readme)
    text = readme.read_text()
    block = text[text.index(BEGIN) : text.index(END)]
    assert text.startswith("# mcpfault\n\nBefore.\n\n") and text.endswith(f"{END}\n\nAfter.\n")
    assert "old figures" not in text
    assert "2026-12-06 05:00 UTC, load 0.40 at the start; 3 interleaved rounds" in block
    assert "parsing-relay +80 us, mcpfault +100 us" in block  # added over direct, the medians
    assert "= 1.250 (meets target <= 1.5 in every round)" in block
    assert "(no target)" not in block  # only the lines about a target
    assert "0.71 (MISSES target >= 0.85)" in block
    assert "baseline +0.6 MiB (to 39.6 MiB) (target: under 5 MiB, met)" in block
    assert "9.5 ms of CPU per task for 3,000 tasks" in block and "at most 10 ms, met" in block
    # scale.json was not given: the block says so, and the run fails.
    assert "- scale.json: not measured yet" in block
    assert done.returncode == 1 and "scale.json" in done.stderr
    # Again: the block is replaced, not appended.
    rewrite(tmp_path / "figures", readme)
    assert readme.read_text() == text


def test_the_readme_has_the_block_and_its_figures_files_are_committed() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme.count(BEGIN) == readme.count(END) == 1
    figures = ROOT / "docs" / "results" / "figures"
    assert sorted(p.name for p in figures.glob("*.json")) == sorted(
        ["stdio.json", "http.json", "memory.json", "scale.json", "bench-cpu.json"]
    )
