"""Experiments: validation, the dry run, and real runs of the proxy, the harness load and the mock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpfault.experiments import plan as plans
from mcpfault.experiments.probes import event_time
from mcpfault.protocol.jsonlines import read_jsonl
from tests.conftest import write_profile

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "experiments"


def experiment(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mcpfault", "experiment", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT)


def test_an_invalid_file_names_every_problem_at_once(tmp_path: Path) -> None:
    path = write_profile(
        tmp_path,
        """
title = ""
colour = "red"
[load]
agent = "reckless"
[[hypothesis]]
name = "h"
probe = "metric"
metric = "happiness"
tolerance = [2, 1]
[[method]]
name = "m"
start_after_s = -1
fault = { type = "error", probability = 3 }
[[method]]
name = "p"
duration_s = 1
action = "explode"
[[stop_conditions]]
name = "s"
probe = "metric"
metric = "silent_failure_rate"
tolerance = 0
[blast_radius]
sessions = 0.5
""",
        "bad.toml",
    )
    done = experiment("validate", str(path))
    assert done.returncode == 2
    problems = [line for line in done.stderr.splitlines() if line.startswith(str(path))]
    wheres = [line.split(": ")[1] for line in problems]
    assert wheres == [
        "colour",
        "title",
        "load.agent",
        "hypothesis[0].tolerance",
        "hypothesis[0].metric",
        "stop_conditions[0].metric",
        "method[0].start_after_s",
        "method[0].duration_s",
        "method[0].fault.probability",
        "method[1].action",
        "blast_radius.sessions",
    ], done.stderr
    assert "1 of 1 experiment file(s) have problems" in done.stderr
    assert experiment("run", str(path), "--dry-run").returncode == 2


def test_the_bundled_experiments_are_valid() -> None:
    files = sorted(EXPERIMENTS.glob("*.toml"))
    assert len(files) >= 2
    done = experiment("validate", *map(str, files))
    assert done.returncode == 0, done.stderr
    for path in files:
        assert plans.load(path).total_s < 60  # each runs in under a minute


def test_a_dry_run_prints_the_timeline_and_starts_no_process(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    out = tmp_path / "out"
    server = json.dumps([sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    path = write_profile(
        tmp_path,
        f"""
title = "dry"
[target]
command = {server}
listen = "127.0.0.1:0"
url = "http://127.0.0.1:9/mcp"
[[method]]
name = "errors"
start_after_s = 2
duration_s = 3
fault = {{ type = "error" }}
[[method]]
name = "freeze"
start_after_s = 6
duration_s = 1
action = "stall"
""",
    )
    done = experiment("run", str(path), "--dry-run", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "errors: fault rule (type='error')" in done.stdout and "freeze: stall the server for 1 s" in done.stdout
    assert "dry run: nothing started" in done.stdout
    assert not marker.exists() and not out.exists()


def journal(out: Path) -> list[dict[str, Any]]:
    return read_jsonl(out / "journal.jsonl", strict=True)


@pytest.mark.slow
def test_a_stop_condition_switches_every_fault_off_within_one_interval(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = experiment("run", str(EXPERIMENTS / "error-burst-stops.toml"), "--out", str(out))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "stopped at t=" in done.stdout

    entries = journal(out)
    assert all(
        e["version"] == "2" and set(e["data"]) == {"experimentId", "actionId", "state", "reason"} for e in entries
    )
    states = [e["data"]["state"] for e in entries if e["type"] == "experiment-state-change"]
    assert states == ["pending", "initiating", "running", "stopped"]
    actions = [e["data"]["state"] for e in entries if e["type"] == "action-state-change"]
    assert actions == ["pending", "running", "stopped"]
    times = [e["time"] for e in entries]
    assert times == sorted(times)

    records = read_jsonl(out / "events.jsonl", strict=True)
    (off,) = [r for r in records if r.get("control") == "off"]
    requests = [r for r in records if "request_id" in r]
    faulted = [r for r in requests if r.get("fault_type")]
    assert faulted, "the burst injected nothing"
    # Measured: not one fault after the kill switch.
    assert [r for r in faulted if event_time(r) > event_time(off)] == []
    assert [r for r in requests if event_time(r) > event_time(off) + 0.5], "the load went on after the stop"
    # Within one interval of the condition becoming true (1 s window over 30 % errors), plus the check itself.
    crossed = None
    for request in requests:
        now = event_time(request)
        window = [r for r in requests if now - 1.0 <= event_time(r) <= now]
        if sum(r["client_received"] != "response" for r in window) / len(window) > 0.3:
            crossed = now
            break
    assert crossed is not None
    assert event_time(off) - crossed <= 0.5 + 0.5, (event_time(off), crossed)

    report = (out / "report.md").read_text()
    assert "Verdict: stopped at t=" in report and "error-burst" in report and "timeline.svg" in report
    svg = (out / "timeline.svg").read_text()
    assert svg.startswith("<svg") and "error-burst: stopped" in svg and "polyline" in svg
    metrics = (out / "metrics.prom").read_text()
    assert 'mcpfault_experiment_state{state="stopped"} 1.0' in metrics
    assert 'mcpfault_experiment_actions_total{state="running"} 1.0' in metrics
    spans = read_jsonl(out / "experiment-spans.jsonl", strict=True)
    names = [
        s["name"] for batch in spans for rs in batch["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]
    ]
    assert sorted(names) == ["mcpfault.experiment", "mcpfault.experiment.action"]


@pytest.mark.slow
def test_a_hypothesis_that_holds_completes_with_exit_0(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = experiment("run", str(EXPERIMENTS / "latency-holds.toml"), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr + (out / "report.md").read_text()
    entries = journal(out)
    assert [e["data"]["state"] for e in entries if e["type"] == "experiment-state-change"] == [
        "pending",
        "initiating",
        "running",
        "completed",
    ]
    assert [e["data"]["state"] for e in entries if e["type"] == "action-state-change"] == [
        "pending",
        "running",
        "completed",
    ]
    outcome = json.loads((out / "outcome.json").read_text())
    assert outcome["hypothesis"]["tasks succeed"]["during"] >= 0.9
    assert outcome["hypothesis"]["no silent failures"]["after"] == 0.0
    records = read_jsonl(out / "events.jsonl", strict=True)
    assert any(r.get("fault_type") == "latency" for r in records)
    assert [r["control"] for r in records if "control" in r] == ["add", "remove"]


@pytest.mark.slow
def test_a_target_that_cannot_start_fails_with_exit_4(tmp_path: Path) -> None:
    path = write_profile(
        tmp_path,
        """
title = "no server"
[target]
command = ["/nonexistent/server"]
listen = "127.0.0.1:0"
url = "http://127.0.0.1:9/mcp"
[[method]]
name = "errors"
duration_s = 1
fault = { type = "error" }
""",
    )
    out = tmp_path / "run"
    done = experiment("run", str(path), "--out", str(out), timeout=60)
    assert done.returncode == 4, done.stdout + done.stderr
    states = [e["data"]["state"] for e in journal(out) if e["type"] == "experiment-state-change"]
    assert states == ["pending", "initiating", "failed"]
    assert "cannot start '/nonexistent/server'" in (out / "report.md").read_text()


def test_tolerances_follow_chaos_toolkit() -> None:
    exact, span, regex = plans.Tolerance(exact=0), plans.Tolerance(low=0.0, high=0.5), plans.Tolerance(regex="^2")
    assert exact.holds(0) and not exact.holds(1) and not exact.holds(None)
    assert span.holds(0.0) and span.holds(0.5) and not span.holds(0.51) and not span.holds(True)
    assert regex.holds(200) and not regex.holds(503)


def test_recovery_is_measured_from_the_action_to_the_first_clean_second() -> None:
    from mcpfault.experiments.report import recovery_s

    rows = [(0.0, 5, 0, 0), (1.0, 5, 0, 0), (2.0, 3, 3, 0), (3.0, 2, 1, 0), (4.0, 4, 0, 0)]
    assert recovery_s(rows, 2.0) == 2.0
    assert recovery_s([(0.0, 5, 0, 0), (1.0, 0, 0, 0)], 0.5) is None  # nothing answered after: never recovered
    assert recovery_s([(0.0, 5, 0, 0), (1.0, 5, 0, 0)], 0.5) == 0.0


def test_the_blast_radius_narrows_every_fault_action() -> None:
    plan = plans.from_mapping(
        {
            "title": "radius",
            "target": {"listen": "127.0.0.1:0", "url": "http://127.0.0.1:9/mcp"},
            "blast_radius": {"tools": ["get_*"], "sessions": 0.5},
            "method": [
                {"name": "a", "duration_s": 1, "fault": {"type": "error"}},
                {"name": "b", "duration_s": 1, "fault": {"type": "error", "tools": ["set_*"]}},
            ],
        }
    )
    assert [a.fault for a in plan.method] == [
        {"name": "a", "type": "error", "tools": ["get_*"], "sessions": 0.5},
        {"name": "b", "type": "error", "tools": ["set_*"], "sessions": 0.5},  # a rule may narrow it further
    ]


@pytest.mark.slow
def test_an_http_target_is_observed_while_a_client_of_our_own_calls_it(tmp_path: Path) -> None:
    import http.client
    import re
    import threading
    import time
    from urllib.parse import urlsplit

    from tests.http_support import SDK_SERVER, free_port, modern_call

    port = free_port()
    server = json.dumps([sys.executable, str(SDK_SERVER), "--http", str(port), "--json"])
    path = write_profile(
        tmp_path,
        f"""
title = "observed"
[target]
command = {server}
listen = "127.0.0.1:0"
url = "http://127.0.0.1:{port}/mcp"
[[hypothesis]]
name = "errors stay rare"
probe = "metric"
metric = "error_rate"
window_s = 2
tolerance = [0, 0.05]
[[method]]
name = "errors"
start_after_s = 0.5
duration_s = 2
fault = {{ type = "error", tools = ["echo"] }}
""",
    )
    out = tmp_path / "run"
    command = [sys.executable, "-m", "mcpfault", "experiment", "run", str(path), "--out", str(out)]
    runner = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    answers: list[tuple[float, bool]] = []
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline and runner.poll() is None:
            log = out / "proxy.log"
            found = re.search(r"serving (\S+) ->", log.read_text() if log.exists() else "")
            url = found.group(1) if found else None
            time.sleep(0.05)
        assert url is not None, "the experiment's proxy never served"
        parts = urlsplit(url)

        def client() -> None:
            connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
            i = 0
            while runner.poll() is None and i < 2000:
                body, headers = modern_call(i, "echo", {"text": "hi"})
                try:
                    connection.request("POST", parts.path, body=json.dumps(body), headers=headers)
                    answer = json.loads(connection.getresponse().read())
                except (OSError, ValueError, http.client.HTTPException):
                    break
                answers.append((time.time(), "error" in answer))
                i += 1
                time.sleep(0.02)
            connection.close()

        thread = threading.Thread(target=client)
        thread.start()
        output, _ = runner.communicate(timeout=90)
        thread.join(15)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(5)
    assert runner.returncode == 0, output
    assert "clients connect to http://127.0.0.1:" in output
    errors = [t for t, failed in answers if failed]
    assert errors and len(errors) < len(answers)  # faults during the method only
    entries = read_jsonl(out / "journal.jsonl", strict=True)
    started, ended = (
        datetime_of(e["time"])
        for e in entries
        if e["type"] == "action-state-change" and e["data"]["state"] in ("running", "completed")
    )
    assert all(started - 0.5 <= t <= ended + 0.5 for t in errors)


def datetime_of(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_a_server_table_is_checked_by_the_profiles_own_code() -> None:
    document = {
        "title": "t",
        "target": {"listen": "127.0.0.1:0", "url": "http://127.0.0.1:9/mcp"},
        "server": {"restart": 5},
        "method": [{"name": "m", "duration_s": 1, "action": "crash"}],
    }
    with pytest.raises(plans.ExperimentError) as caught:
        plans.from_mapping(document, "x.toml")
    assert [p.where.split(".")[0] for p in caught.value.problems] == ["server"]  # what this proxy accepts there
    assert plans.profile_text({}).startswith('name = "experiment"\nseed = 0\nfaults = []')  # no rules, on purpose
    assert plans.profile_text({"restart": "on-crash", "hold_s": 2.5}).endswith(
        '[server]\nrestart = "on-crash"\nhold_s = 2.5\n'
    )
