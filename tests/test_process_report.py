"""The bench's account of the server process: crashes, restarts and downtime per agent and fault type,
from the lifecycle lines the proxy's supervisor writes to its events file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.analysis.records import TaskRecord, read_records
from mcpfault.analysis.server import ServerAccount, account_of, read_accounts, write_accounts
from mcpfault.analysis.summary import summarize
from mcpfault.harness.report import ReportMeta, render_markdown
from mcpfault.proxy.events import read_server_events
from tests.conftest import ROOT, write_profile

META = ReportMeta(command="mcpfault bench", seed=0, tasks_per_cell=2, wall_s=1.0, jobs=1, started_at="", machine="")


def rows_of(report: str, title: str) -> list[list[str]]:
    section = report.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_the_account_counts_each_cause_from_the_server_lines() -> None:
    rows = [
        {"event": "server_exited", "generation": 0, "exit_status": 143, "cause": "crash", "crashed": True},
        {"event": "server_restarted", "generation": 1, "cause": "crash"},
        {"event": "server_back", "cause": "crash", "downtime_s": 0.4, "back": True},
        {"event": "server_exited", "generation": 1, "exit_status": 0, "cause": "none", "crashed": False},
        {"event": "server_exited", "generation": 1, "exit_status": 137, "cause": "oom_kill", "crashed": True},
        {"event": "server_restarted", "generation": 2, "cause": "oom_kill"},
        {"event": "server_back", "cause": "oom_kill", "downtime_s": 1.5, "back": False},
    ]
    account = account_of(rows, profile="p", agent="naive", session=3)
    assert account.crashes == {"crash": 1, "oom_kill": 1}  # a clean exit is no crash
    assert account.restarts == {"crash": 1, "oom_kill": 1}
    assert account.downtimes_s == {"crash": [0.4]}
    assert account.lost == {"oom_kill": 1}  # the session ended before the server was back
    assert not account.empty and account_of([], profile="p", agent="naive", session=0).empty


def test_accounts_round_trip_and_a_bad_line_is_named(tmp_path: Path) -> None:
    account = ServerAccount("p", "naive", 1, 0, {"crash": 2}, {"crash": 2}, {"crash": [0.5, 0.7]})
    path = tmp_path / "server.jsonl"
    write_accounts(path, [account])
    assert read_accounts(path) == [account]
    path.write_text(path.read_text() + '{"agent": "naive"}\n')
    with pytest.raises(ValueError, match=r"server\.jsonl:2: not a server account"):
        read_accounts(path)


def test_the_report_tables_downtime_recovery_and_outcomes_per_agent_and_fault_type() -> None:
    def task(index: int, agent: str, outcome: str, recovery_s: float | None = None) -> TaskRecord:
        return TaskRecord(
            profile="crash_restart",
            agent=agent,
            session=0,
            task_index=index,
            task="site_triage",
            outcome=outcome,  # type: ignore[arg-type]
            fault_types=("crash",),
            affected_types=("crash",),
            recovery_s=recovery_s,
        )

    records = [
        task(0, "naive", "failed_detected"),
        task(1, "naive", "success"),
        task(0, "resilient", "recovered", 0.2),
        task(1, "resilient", "recovered", 0.6),
    ]
    servers = [
        ServerAccount("crash_restart", "naive", 0, 0, {"crash": 1}, {"crash": 1}, {"crash": [0.9]}),
        ServerAccount("crash_restart", "resilient", 0, 0, {"crash": 2}, {"crash": 2}, {"crash": [0.3, 0.5]}),
        ServerAccount("crash_restart", "resilient", 1, 0, {"none": 1}, {}, {}, {"none": 1}),
    ]
    report = render_markdown(summarize(records), META, records=records, servers=servers)
    assert rows_of(report, "The server process: downtime and recovery by fault type") == [
        ["naive", "crash", "2", "1", "0", "1", "0", "1", "1", "900 ms / 900 ms (1)", "-"],
        ["resilient", "crash", "2", "0", "2", "0", "0", "2", "2", "400 ms / 500 ms (2)", "400 ms / 600 ms (2)"],
        ["resilient", "none", "0", "0", "0", "0", "0", "1", "0", "-, lost 1", "-"],
    ]
    # Without process faults or server accounts there is no such section.
    plain = [TaskRecord("baseline", "naive", 0, 0, "site_triage", "success")]
    assert "The server process" not in render_markdown(summarize(plain), META, records=plain)


@pytest.mark.slow
def test_a_small_process_bench_reports_what_the_proxy_recorded(tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path,
        """
name = "one_crash"

[server]
restart = "on-crash"
restart_delay_s = 0.3

[[faults]]
name = "kill"
type = "crash"
signal = "SIGTERM"
after = 2
limit = 1
""",
    )
    out = tmp_path / "bench"
    args = ["--profiles", str(profile), "--agents", "naive,resilient", "--tasks", "4", "--session-tasks", "4"]
    done = subprocess.run(
        [sys.executable, "-m", "mcpfault", "bench", *args, "--jobs", "2", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    accounts = {a.agent: a for a in read_accounts(out / "server.jsonl")}
    assert sorted(accounts) == ["naive", "resilient"]
    for agent, account in accounts.items():
        assert account.crashes == {"crash": 1} and account.restarts == {"crash": 1}, account
        # The figure is the supervisor's own, as the proxy wrote it to the session's events file.
        events = out / "sessions" / "one_crash" / agent / "s000" / "events.jsonl"
        backs = [r["downtime_s"] for r in read_server_events(events) if r["event"] == "server_back"]
        assert account.downtimes_s == {"crash": backs} and backs[0] >= 0.3  # at least the restart delay
    report = (out / "report.md").read_text()
    rows = {row[0]: row for row in rows_of(report, "The server process: downtime and recovery by fault type")}
    assert set(rows) == {"naive", "resilient"}
    for agent, row in rows.items():
        assert row[1] == "crash" and row[7:9] == ["1", "1"], row
        tasks = [r for r in read_records(out / "records.jsonl") if r.agent == agent and "crash" in r.fault_types]
        assert row[2] == str(len(tasks)) and int(row[2]) >= 1
        downtime_ms = round(accounts[agent].downtimes_s["crash"][0] * 1000)
        assert re.fullmatch(rf"{downtime_ms:,} ms / {downtime_ms:,} ms \(1\)", row[9]), row[9]
    assert json.loads((out / "bench.json").read_text())["broken"] == []
