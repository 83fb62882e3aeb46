"""`mcpfault run/bench --probe`: the probe's duplicate side effects cross-check the judge's duplicates.

The mock journals each state change (one file write per call), so with the eBPF backend the kernel
sees it act: a dropped open_incident answer, then retry-only's retry, is a duplicate incident for the
judge and a duplicate side effect for the probe, and the two must agree. The fake backend replays a
script ("open_incident always writes"), which the resilient agent's idempotency key makes untrue for
its retries: that disagreement must be named and exit 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpfault.protocol.jsonlines import read_jsonl
from tests.conftest import write_profile

pytestmark = pytest.mark.slow  # whole sessions, and bpftrace attaching for seconds

# Every open_incident answer of the first three is lost (the server acts all the same).
LOST_INCIDENTS = """
name = "lost-incidents"
seed = 1
[[faults]]
name = "lost-response"
type = "timeout"
mode = "drop"
tools = ["open_incident"]
limit = 3
"""
WRITES_ON_OPEN_INCIDENT = {
    "events": [
        {
            "trigger": "begin",
            "tool": "open_incident",
            "event": {
                "type": "file_open",
                "pid": 1,
                "path": "/work/s000/server-journal.jsonl",
                "flags": "O_WRONLY|O_APPEND",
            },
        }
    ]
}


def mcpfault(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "mcpfault", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def side_effect_records(directory: Path) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(directory / "events.jsonl") if r.get("record") == "side_effects"]


def records(directory: Path) -> list[dict[str, Any]]:
    return read_jsonl(directory / "records.jsonl", strict=True)


def test_run_with_the_ebpf_probe_sees_the_mock_act_and_agrees_with_the_judge(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, LOST_INCIDENTS)
    out = tmp_path / "run"
    done = mcpfault(
        "run",
        "--profile",
        str(profile),
        "--agent",
        "retry-only",
        "--tasks",
        "4",
        "--workflows",
        "open_incident",
        "--probe",
        "ebpf",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    judged = sum(r["duplicates"] for r in records(out))
    assert judged >= 1  # retry-only retried a lost write without a key: a duplicate incident
    reports = side_effect_records(out)
    incidents = [r for r in reports if r["tool"] == "open_incident"]
    # Every open_incident that reached the server wrote its journal line, seen by the kernel in its window.
    journal = str(out / "server-journal.jsonl")
    assert all(any(journal in e["detail"] for e in r["side_effects"]) for r in incidents), incidents
    assert all(r["probe_confirmed"] for r in reports)
    assert [r["server_acted"] for r in incidents if "server_acted" in r] == ["true"] * 3
    assert sum(1 for r in reports if "duplicate_of" in r) == judged
    # Reads write nothing: no side effect in their windows.
    assert all(r["side_effects"] == [] for r in reports if r["tool"] != "open_incident")
    assert "side effects per tool (probe)" in (out / "proxy.log").read_text()


def test_bench_with_the_fake_probe_names_a_disagreement_and_exits_1(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, LOST_INCIDENTS)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(WRITES_ON_OPEN_INCIDENT))
    out = tmp_path / "bench"
    common = ["--profiles", str(profile), "--tasks", "3", "--session-tasks", "3", "--workflows", "open_incident"]
    done = mcpfault(
        "bench", *common, "--agents", "retry-only,resilient", "--probe", f"fake:{script}", "--out", str(out)
    )
    assert done.returncode == 1, done.stderr[-3000:]
    # retry-only: the script is right (each retry opened another incident), the cross-check agrees.
    # resilient: its retries reuse an idempotency key, so the mock did not act again, but the script says it did.
    lines = [line for line in done.stderr.splitlines() if line.startswith("mcpfault bench:")]
    assert len(lines) == 1, done.stderr
    assert "lost-incidents/resilient" in lines[0]
    assert "task 0: 0 duplicate(s) judged, 3 duplicate side effect(s) seen by the probe" in lines[0], lines[0]
    assert sum(r["duplicates"] for r in records(out) if r["agent"] == "retry-only") == 3
    broken = json.loads((out / "bench.json").read_text())["broken"]
    assert [b["agent"] for b in broken] == ["resilient"]


def test_a_bad_probe_option_is_one_line_and_exit_2_before_anything_starts(tmp_path: Path) -> None:
    out = tmp_path / "never"
    for option, message in [
        ("fake:" + str(tmp_path / "missing.json"), "no such file"),
        ("bpf", "give ebpf, or fake:EVENTS.json"),
    ]:
        done = mcpfault("run", "--profile", "baseline", "--tasks", "1", "--probe", option, "--out", str(out))
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr
        assert not out.exists()
