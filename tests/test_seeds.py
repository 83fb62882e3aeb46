"""bench --seeds N: the matrix under N seeds, records that carry their seed, a column per seed and the
spread in the report, and a profile with nothing random marked "fixed" with no interval."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.analysis.records import TaskRecord
from mcpfault.analysis.seeds import seed_spreads
from mcpfault.faults import profile
from mcpfault.protocol.jsonlines import read_jsonl


def record(seed: int, outcome: str, profile_name: str = "timeout", index: int = 0) -> TaskRecord:
    return TaskRecord(profile_name, "naive", 0, index, "site_triage", outcome, seed=seed)  # type: ignore[arg-type]


def test_the_spread_is_the_highest_seeds_share_minus_the_lowests() -> None:
    records = [
        record(0, "success", index=0),
        record(0, "failed_detected", index=1),
        record(1, "success", index=0),
        record(1, "recovered", index=1),
        record(2, "failed_silent", index=0),
        record(2, "failed_detected", index=1),
    ]
    (spread,) = seed_spreads(records)
    assert [(r.seed, r.correct, r.tasks) for r in spread.rates] == [(0, 1, 2), (1, 2, 2), (2, 0, 2)]
    assert spread.spread == 1.0 and (spread.correct, spread.tasks) == (3, 6)


def test_a_profile_is_fixed_only_when_nothing_in_it_is_drawn() -> None:
    fixed = {name for name, path in profile.bundled().items() if profile.load(path).is_fixed()}
    assert {"baseline", "outage", "outage_1s", "outage_10s"} <= fixed
    assert not fixed & {"timeout", "storm", "burst", "latency", "malformed", "mixed"}


def test_records_keep_their_seed_through_a_file() -> None:
    assert TaskRecord.from_dict(record(7, "success").as_dict()).seed == 7
    old = {k: v for k, v in record(0, "success").as_dict().items() if k != "seed"}
    assert TaskRecord.from_dict(old).seed == 0  # records written before seeds were recorded still read


@pytest.mark.slow
def test_seeds_3_gives_three_seed_columns_and_a_spread(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    command = [sys.executable, "-m", "mcpfault", "bench", "--profiles", "timeout,outage", "--agents", "naive"]
    done = subprocess.run(
        [*command, "--tasks", "4", "--session-tasks", "4", "--seeds", "3", "--jobs", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    records = read_jsonl(out / "records.jsonl", strict=True)
    assert sorted({r["seed"] for r in records}) == [0, 1, 2]
    assert len(records) == 2 * 4 * 3
    assert (out / "sessions").exists() is False and (out / "seed-2" / "sessions" / "timeout" / "naive").is_dir()
    report = (out / "report.md").read_text()
    section = report.split("## Across seeds", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in section.splitlines() if line.startswith("| profile"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "profile",
        "agent",
        "seed 0",
        "seed 1",
        "seed 2",
        "all seeds",
        "spread",
        "faults",
    ]
    rows = {
        line.split("|")[1].strip(): line
        for line in section.splitlines()
        if line.startswith("| timeout") or line.startswith("| outage")
    }
    assert rows["timeout"].rstrip(" |").endswith("sampled") and " pp " in rows["timeout"]
    assert rows["outage"].rstrip(" |").endswith("fixed")
    intervals = report.split("## Rates with 95% intervals", 1)[1].split("\n## ", 1)[0]
    outage_row = next(line for line in intervals.splitlines() if line.startswith("| outage"))
    assert outage_row.count("fixed") == 2  # no interval for one fixed scenario
    assert "under each of 3 seeds (0 to 2)" in report
