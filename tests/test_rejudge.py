"""A real bench run (sessions of real proxy and mock processes), judged again by ``mcpfault report --rejudge``,
and what the run shows of the judge: the same exposure for every agent, naive never recovered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.analysis.records import read_records
from mcpfault.errors import UsageError
from mcpfault.harness.rejudge import rejudge_run, session_dirs
from mcpfault.protocol.jsonlines import read_jsonl
from mcpfault.proxy.events import read_events

AGENTS = ("naive", "retry-only", "resilient")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcpfault", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lost_writes and stale_reads (rules chosen by annotations) x the three agents, 20 tasks a cell."""
    out = tmp_path_factory.mktemp("rejudge") / "bench"
    done = cli(
        "bench",
        *("--profiles", "lost_writes,stale_reads", "--agents", ",".join(AGENTS)),
        *("--tasks", "20", "--session-tasks", "20", "--jobs", "2", "--out", str(out)),
    )
    assert done.returncode == 0, done.stderr
    return out


def test_report_rejudge_reproduces_the_outcomes_of_a_run(run_dir: Path, tmp_path: Path) -> None:
    original = [r.as_dict() for r in read_records(run_dir / "records.jsonl")]
    assert len(original) == 2 * 3 * 20
    assert all("answer" in r and "expected" in r for r in original)
    done = cli("report", "--rejudge", str(run_dir), "--out", str(tmp_path / "again"))
    assert done.returncode == 0, done.stderr
    assert "every outcome as the run judged it" in done.stdout
    again = [r.as_dict() for r in read_records(tmp_path / "again" / "records.jsonl")]
    assert again == original  # every field, not only the outcomes
    assert (tmp_path / "again" / "report.md").is_file()
    assert "re-judged" in (tmp_path / "again" / "report.html").read_text(encoding="utf-8")


def test_naive_meets_the_read_only_rules_as_resilient_does(run_dir: Path) -> None:
    """Each session's rule draws once per matching call, seeded alike for every agent: naive's calls to
    annotated tools meet exactly the faults the first as many of resilient's did, though naive never lists."""
    faults_met: dict[str, int] = {}
    for profile, tools in (("lost_writes", {"set_maintenance", "open_incident"}), ("stale_reads", None)):
        met = {}
        for agent in AGENTS:
            decisions = []
            for session in sorted((run_dir / "sessions" / profile / agent).iterdir()):
                calls = [e for e in read_events(session / "events.jsonl") if e["method"] == "tools/call"]
                decisions.append([e["fault_type"] is not None for e in calls if tools is None or e["tool"] in tools])
                listed = read_jsonl(session / "events.jsonl", strict=True)
                assert any(r.get("event") == "tools_listed" and r["outcome"] == "complete" for r in listed)
            met[agent] = decisions
        for naive, resilient in zip(met["naive"], met["resilient"], strict=True):
            shared = min(len(naive), len(resilient))
            # A stale answer needs an earlier one of the same call, and resilient's retries add to those:
            # there the draws are alike but not what they can replay, so only a lost write compares exactly.
            assert shared > 0 and (profile == "stale_reads" or naive[:shared] == resilient[:shared]), profile
        faults_met[profile] = sum(map(sum, met["naive"]))
    # Before the proxy listed tools itself, naive met none of either (at --tasks 40: 0 and 0, now 3 and 10).
    assert faults_met["lost_writes"] > 0 and faults_met["stale_reads"] > 0, faults_met


def test_naive_is_never_recovered(run_dir: Path) -> None:
    records = list(read_records(run_dir / "records.jsonl"))
    naive = [r for r in records if r.agent == "naive"]
    assert naive and all(r.outcome != "recovered" for r in naive)
    assert any(r.affected_types for r in naive)  # faults did change what it received
    assert all(r.recovery_s is None for r in naive)
    # What a fault changed and naive carried on with: absorbed, or a failure.
    assert all(r.absorbed or r.outcome != "success" for r in naive if r.affected_types)


def test_rejudge_needs_a_bench_run(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"records\.jsonl does not exist"):
        rejudge_run(tmp_path)
    (tmp_path / "records.jsonl").write_text("")
    with pytest.raises(UsageError, match="did not keep what a re-judge needs"):
        rejudge_run(tmp_path)
    assert session_dirs(tmp_path) == []


def test_the_report_shows_exposure_per_cell(run_dir: Path) -> None:
    report = (run_dir / "report.md").read_text()
    section = report.split("## Exposure per cell", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if line.startswith("| stale_reads | naive "))
    assert "stale-read " in row and "stale-read 0" not in row


def test_a_rule_that_never_fired_in_a_cell_is_warned_about(tmp_path: Path) -> None:
    from mcpfault.analysis.records import TaskRecord
    from mcpfault.harness.exposure import exposure_section

    session = tmp_path / "sessions" / "two-rules" / "naive" / "s000"
    session.mkdir(parents=True)
    (session / "profile.toml").write_text(
        'name = "two-rules"\n\n[[faults]]\nname = "often"\ntype = "timeout"\n\n'
        '[[faults]]\nname = "never"\ntype = "error"\ntools = ["no-such-tool"]\n'
    )
    (session / "session.json").write_text(json.dumps({"profile_name": "two-rules", "agent": "naive"}))
    event = {"request_id": 3, "method": "tools/call", "rule": "often", "fault_type": "timeout", "fault_mode": "drop"}
    (session / "events.jsonl").write_text(json.dumps(event) + "\n")
    record = TaskRecord("two-rules", "naive", 0, 0, "site_triage", "failed_detected", ("timeout",))
    lines = exposure_section([record], tmp_path / "sessions")
    assert "- two-rules / naive: `never` fired 0 times" in lines
    assert any("often 1, never 0" in line for line in lines)
