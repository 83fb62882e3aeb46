"""The scale benchmark's small form: 50 sessions through one real proxy in front of the real HTTP echo
server, each on its own connection, then GET streams, then churn. A functional check only (no timing):
no errors, every session seen, the proxy's memory and descriptor figures present, and every process the
benchmark started gone when it returns."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCALE = ROOT / "benchmarks" / "scale.py"


def run_scale(tmp_path: Path, *flags: str) -> dict[str, object]:
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, str(SCALE), "--sessions", "50", "--churn", "50", "--json", str(out), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures: dict[str, object] = json.loads(out.read_text(encoding="utf-8"))
    return figures


def assert_gone(pids: object) -> None:
    """The proxy and the echo server the run started are no longer running (a pid reused since by an
    unrelated process is told apart by its command line)."""
    assert isinstance(pids, dict) and set(pids) == {"proxy", "echo_server"}
    for pid in pids.values():
        assert isinstance(pid, int) and pid > 0
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # gone
        assert b"mcpfault" not in command and b"http_echo_server" not in command, f"process {pid} outlived the run"


@pytest.mark.slow
def test_fifty_legacy_sessions_with_get_streams_and_churn(tmp_path: Path) -> None:
    figures = run_scale(tmp_path)
    assert figures["errors"] == 0 and figures["first_errors"] == []
    assert figures["sessions_opened"] == 50 and figures["get_streams_opened"] == 50 and figures["churned"] == 50
    burst, lone = figures["burst"], figures["lone"]
    assert isinstance(burst, dict) and burst["calls"] == 150 and burst["p50_ms"] > 0
    assert isinstance(lone, dict) and lone["calls"] == 200
    samples = figures["samples"]
    assert isinstance(samples, list)
    by_step = {s["step"]: s for s in samples}
    assert all(s["rss_kib"] > 0 and s["fds"] > 0 for s in samples)
    # Fifty sessions are fifty client connections on the proxy, and fifty GET streams as many again.
    assert by_step["sessions open"]["fds"] >= by_step["baseline"]["fds"] + 50
    assert by_step["GET streams open"]["fds"] >= by_step["sessions open"]["fds"] + 50
    assert by_step["sessions open"]["rss_kib"] > by_step["baseline"]["rss_kib"]
    assert isinstance(figures["kib_per_session"], float) and figures["kib_per_session"] > 0
    # Ended sessions leave none of their connections open on the proxy: it may keep an idle upstream
    # connection for each DELETE relayed at once (the pool keeps them, up to its limit), no more; and
    # churn grows nothing (a leak would grow with every quarter of it).
    assert by_step["sessions closed"]["fds"] <= by_step["baseline"]["fds"] + 50 + 5
    assert by_step["churn 4/4"]["fds"] <= by_step["baseline"]["fds"] + 50 + 5
    assert by_step["churn 4/4"]["fds"] <= by_step["churn 1/4"]["fds"] + 5
    assert isinstance(figures["churn_growth_kib"], int)
    assert_gone(figures["pids"])


@pytest.mark.slow
def test_fifty_modern_clients_without_sessions(tmp_path: Path) -> None:
    figures = run_scale(tmp_path, "--era", "modern", "--bursts", "1", "--lone-calls", "20")
    assert figures["errors"] == 0 and figures["sessions_opened"] == 50 and figures["churned"] == 50
    assert figures["get_streams_opened"] == 0 and "kib_per_get_stream" not in figures
    samples = figures["samples"]
    assert isinstance(samples, list) and all(s["rss_kib"] > 0 and s["fds"] > 0 for s in samples)
    assert_gone(figures["pids"])


def test_a_bad_choice_says_what_to_do(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCALE), "--era", "modern", "--get-streams", "5", "--sessions", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "the 2026-07-28 era has no GET stream" in done.stderr


def test_too_low_an_open_files_limit_says_what_to_do() -> None:
    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    done = subprocess.run(
        [sys.executable, str(SCALE), "--sessions", "1000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=low_limit,
    )
    assert done.returncode == 2
    assert "open files are needed" in done.stderr and "ulimit -n` is 256" in done.stderr
    assert "or run fewer --sessions" in done.stderr


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="ascii")
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_sigterm_mid_run_stops_the_proxy_and_the_server() -> None:
    run = subprocess.Popen(
        [sys.executable, str(SCALE), "--sessions", "50", "--churn", "1000000", "--lone-calls", "0"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stderr is not None
        for line in run.stderr:
            if line.startswith("burst 3/3"):
                break  # the proxy and the echo server are up, and the churn (a long one) is next
        children = children_of(run.pid)
        assert len(children) == 2
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 143
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    for pid in children:
        assert not Path(f"/proc/{pid}").exists(), f"child {pid} outlived the benchmark"
