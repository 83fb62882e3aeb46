"""benchmarks/bench_cpu.py and compare_records.py: CPU of the whole process tree, outcomes compared per task."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.protocol.jsonlines import parse_jsonl, read_jsonl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from compare_records import cell_counts, compare, read_outcomes, write_reference  # noqa: E402

RECORD = {
    "profile": "mixed",
    "agent": "naive",
    "session": 0,
    "task_index": 3,
    "task": "site_triage",
    "outcome": "success",
    "fault_types": [],
    "attempts": 4,
    "retries": 0,
    "duplicates": 0,
    "recovery_s": None,
    "duration_s": 0.031,
    "failure": None,
    "detail": "",
    "fault_modes": [],
    "trace_id": "ab" * 16,
}


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_timings_and_trace_ids_are_not_compared_outcomes_are(tmp_path):
    same = write(tmp_path / "a.jsonl", [RECORD])
    slower = write(tmp_path / "b.jsonl", [{**RECORD, "duration_s": 0.5, "trace_id": "cd" * 16}])
    assert compare(read_outcomes(same), read_outcomes(slower)) == []
    failed = write(tmp_path / "c.jsonl", [{**RECORD, "outcome": "failed_detected", "failure": "timeout"}])
    (difference,) = compare(read_outcomes(same), read_outcomes(failed))
    assert "('mixed', 'naive', 0, 3)" in difference and "outcome 'success' -> 'failed_detected'" in difference
    assert cell_counts(read_outcomes(failed)) == {("mixed", "naive", "failed_detected"): 1}


def test_a_task_on_one_side_only_is_a_difference(tmp_path):
    one = read_outcomes(write(tmp_path / "a.jsonl", [RECORD]))
    two = read_outcomes(write(tmp_path / "b.jsonl", [RECORD, {**RECORD, "task_index": 4}]))
    assert compare(one, two) == ["('mixed', 'naive', 0, 4): not in the reference"]
    assert compare(two, one) == ["('mixed', 'naive', 0, 4): only in the reference"]


def test_a_gzipped_reference_reads_back_as_the_records(tmp_path):
    records = write(tmp_path / "records.jsonl", [{**RECORD, "task_index": 4}, RECORD])
    write_reference(records, tmp_path / "ref.jsonl.gz")
    rows = parse_jsonl(gzip.decompress((tmp_path / "ref.jsonl.gz").read_bytes()), where="ref.jsonl.gz")
    assert [row["task_index"] for row in rows] == [3, 4]  # sorted
    assert "duration_s" not in rows[0]
    assert compare(read_outcomes(tmp_path / "ref.jsonl.gz"), read_outcomes(records)) == []


def test_the_committed_reference_is_the_default_matrix():
    reference = read_outcomes(ROOT / "benchmarks" / "reference" / "default-seed0.jsonl.gz")
    assert len(reference) == 3000  # the ten gentle profiles x three agents x 100 tasks
    assert {key[:2] for key in reference} == {(p, a) for p, a, _ in cell_counts(reference)}
    assert len({key[:2] for key in reference}) == 30


def bench_cpu(tmp_path: Path, name: str, *options: str) -> subprocess.CompletedProcess[str]:
    """bench_cpu.py on a small matrix: one cell, two sessions of two tasks."""
    small = ["--", "--profiles", "error", "--agents", "retry-only", "--tasks", "4", "--session-tasks", "2"]
    script = str(ROOT / "benchmarks" / "bench_cpu.py")
    command = [sys.executable, script, "--out", str(tmp_path / name), *options, *small]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.slow
def test_bench_cpu_reports_the_whole_tree_by_role_and_checks_outcomes(tmp_path):
    reference = tmp_path / "ref.jsonl"
    first = bench_cpu(tmp_path, "first", "--write-reference", str(reference))
    assert first.returncode == 0, first.stderr
    assert "run 1: 4 tasks" in first.stdout
    row = next(line for line in first.stdout.splitlines() if line.startswith("| 1 |"))
    # the bench, two forked proxies, two mock servers, the fork server: each process reported at exit
    assert "(1, " in row and "(2, " in row
    header = next(line for line in first.stdout.splitlines() if line.startswith("| run |"))
    assert all(role in header for role in ("bench", "proxy", "mock-server"))
    again = bench_cpu(tmp_path, "again", "--expect", str(reference))
    assert again.returncode == 0, again.stderr
    assert "outcomes identical" in again.stdout
    tampered = tmp_path / "tampered.jsonl"
    rows = read_jsonl(reference, strict=True)
    rows[0]["attempts"] += 1
    write(tampered, rows)
    wrong = bench_cpu(tmp_path, "wrong", "--expect", str(tampered))
    assert wrong.returncode == 1
    assert "1 tasks differ" in wrong.stderr
