"""`mcpfault probe-sidecar --backend fake`, driven by mcpfz_probe's own SidecarRuntimeMonitor."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcpfz_probe import RuntimePolicy, SidecarRuntimeMonitor, evaluate_events

from mcpfault.protocol.jsonlines import parse_jsonl, read_jsonl

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
    lines = read_jsonl(raw, strict=True)
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
    return parse_jsonl(done.stdout, where="the sidecar's stdout")


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


def test_a_mark_read_after_an_event_stamped_in_its_window_still_gets_the_event(tmp_path: Path) -> None:
    """Marks carry their moment (ts_ns); the sidecar holds an event until no earlier mark can come."""
    script = [  # the first three fire when a's begin is read, stamped relative to it (t + 1_000)
        {"trigger": "begin", "tool": "a", "offset_ns": 500, "event": {"type": "exec", "argv": ["/in/b"]}},
        {"trigger": "begin", "tool": "a", "offset_ns": -1, "event": {"type": "exec", "argv": ["/before/a"]}},
        {"trigger": "begin", "tool": "a", "offset_ns": 0, "event": {"type": "exec", "argv": ["/at/a/begin"]}},
        {"trigger": "end", "tool": "b", "offset_ns": 0, "event": {"type": "exec", "argv": ["/at/b/end"]}},
        {"trigger": "end", "tool": "b", "offset_ns": 1, "event": {"type": "exec", "argv": ["/after/b"]}},
    ]
    events = tmp_path / "events.json"
    events.write_text(json.dumps(script))
    t = time.monotonic_ns()
    lines = run_sidecar(
        events,
        [
            {"op": "scope", "pgid": 7, "generation": 1, "ts_ns": t},
            {"op": "mark", "phase": "begin", "call_id": "a", "tool": "a", "ts_ns": t + 1_000},
            {"op": "mark", "phase": "end", "call_id": "a", "ts_ns": t + 1_100},
            {"op": "mark", "phase": "begin", "call_id": "b", "tool": "b", "ts_ns": t + 1_200},  # after /in/b came
            {"op": "mark", "phase": "end", "call_id": "b", "ts_ns": t + 2_000},
            {"op": "shutdown"},
        ],
    )
    order = [line.get("argv", [line.get("message")])[0] + "@" + str(line.get("call_id")) for line in lines]
    placed = {line["argv"][0]: (line["bucket"], line.get("call_id")) for line in lines if line["type"] == "exec"}
    assert placed == {
        "/before/a": ("startup", None),  # 1 ns before a's begin, the scope's first mark
        "/at/a/begin": ("call", "a"),
        "/in/b": ("call", "b"),  # read before b's begin mark, stamped inside b's window
        "/at/b/end": ("call", "b"),
        "/after/b": ("ambient", None),  # 1 ns after b's end: let go at shutdown, in no window
    }
    assert order.index("/in/b@b") < order.index("end@b")  # mcpfz_probe's reader files it before b's end
    ready = lines[0]
    assert ready["message"] == "ready" and ready["mark_clock"] == "CLOCK_MONOTONIC"
    wall = time.time_ns() - time.monotonic_ns()
    stamp = next(line["ts_ns"] for line in lines if line.get("argv") == ["/in/b"])
    assert abs(stamp - (t + 1_500 + wall)) < 1_000_000_000  # ts_ns out is wall-clock, as eBPF's


def test_an_offset_on_a_startup_entry_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[{"trigger": "startup", "offset_ns": 5, "event": {"type": "exec"}}]')
    done = subprocess.run(sidecar_command(path), input="", capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "'offset_ns' is for begin and end entries" in done.stderr


STUCK_SIDECAR = """
import json, sys, time
print(json.dumps({"type": "status", "message": "ready", "bucket": "startup", "mark_clock": "CLOCK_MONOTONIC"}), flush=True)
time.sleep(120)  # never reads a mark
"""


def test_a_sidecar_that_stops_reading_never_blocks_a_mark_and_is_reported_dead() -> None:
    from mcpfault.probe import monitor as probe_monitor

    monitor = probe_monitor.ProbeMonitor([sys.executable, "-c", STUCK_SIDECAR])
    try:
        assert monitor.start_and_wait(timeout_s=60)["mark_clock"] == "CLOCK_MONOTONIC"
        assert monitor.stamped_marks
        tool = "t" * 1_000
        calls = 0
        while not monitor._backlog:  # the pipe (64 KiB here) is full: the next marks wait in the backlog
            assert monitor.begin(f"{calls}:1", tool) and monitor.mark_end(f"{calls}:1")
            assert monitor.flush_marks()  # as collect does, on the probe's thread
            calls += 1
        assert monitor.alive
        while monitor.begin(f"{calls}:1", tool) and monitor.flush_marks():  # until past MAX_BACKLOG
            calls += 1
        assert not monitor.alive and not monitor.mark_end("0:1")  # dead: nothing more is sent
        summary, confirmed = monitor.collect("0:1", timeout_s=0.1)
        assert not confirmed and summary.events == ()
    finally:
        monitor.close()
