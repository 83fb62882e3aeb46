"""The probe's pure parts: policy files, metric labels, the eBPF line decoding, attribution windows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from mcpfault.errors import UsageError
from mcpfault.probe import ebpf, policy
from mcpfault.probe.observer import FINDING_CATEGORIES
from mcpfault.probe.protocol import EVENT_TYPES, CallWindows, redact_argv
from mcpfault.telemetry.metrics import SideEffectMetrics


def test_a_policy_file_takes_runtime_policys_keys_and_names_a_wrong_one(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[probe]\nworkspace = "ws"\nexec_allow = ["/usr/bin/git"]\nnet_allow = ["*.internal"]\n')
    loaded = policy.load_file(path)
    assert loaded.workspace == Path("ws").absolute() and loaded.exec_allow == ("/usr/bin/git",)
    assert loaded.fs_write_allow[0] == str(Path("ws").absolute().resolve())  # the package's own default
    path.write_text("[probe]\nexec_alow = []\n")
    with pytest.raises(UsageError, match="unknown key 'exec_alow'; the keys are RuntimePolicy's: workspace"):
        policy.load_file(path)
    path.write_text('[probe]\nnet_allow = "*"\n')
    with pytest.raises(UsageError, match="net_allow must be a list of strings"):
        policy.load_file(path)


def test_metric_labels_stay_in_their_fixed_sets() -> None:
    registry = CollectorRegistry()
    metrics = SideEffectMetrics(registry, types=EVENT_TYPES, categories=FINDING_CATEGORIES)
    metrics.side_effect("exec")
    metrics.side_effect("something a sidecar made up")
    metrics.finding("runtime.ptrace", "critical")
    metrics.finding("made.up", "apocalyptic")
    metrics.duplicate_side_effect()
    text = generate_latest(registry).decode()
    assert 'mcpfault_side_effects_total{type="exec"} 1.0' in text
    assert 'mcpfault_side_effects_total{type="_OTHER"} 1.0' in text
    assert 'mcpfault_findings_total{category="_OTHER",severity="_OTHER"} 1.0' in text
    assert "mcpfault_duplicate_side_effects_total 1.0" in text


def test_bpftrace_lines_become_protocol_events() -> None:
    assert ebpf.open_flags(0o1101) == "O_WRONLY|O_CREAT|O_TRUNC"
    assert ebpf.open_flags(0o2002) == "O_RDWR|O_APPEND"
    assert ebpf.to_event("X", 7, ["sh", "-100", "/usr/bin/curl", "-s", ""]) == {
        "type": "exec",
        "path": "/usr/bin/curl",
        "argv": ["/usr/bin/curl", "-s"],
        "pid": 7,
        "comm": "sh",
    }
    v6 = ebpf.to_event("N6", 7, ["py", "connect", "::1", "8080"])
    udp = ebpf.to_event("N", 7, ["py", "sendto", "10.0.0.1", "53"])
    chmod = ebpf.to_event("C", 7, ["py", "-100", str(0o104755), "/x"])
    assert v6 is not None and udp is not None and chmod is not None
    assert (v6["dst"], udp["proto"], chmod["mode"]) == ("[::1]:8080", "udp", "4755")
    assert ebpf.to_event("O", 7, ["py", "-100", "0", ""]) is None  # a name not paged in: nothing to judge


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["/usr/bin/mysql", "--password=hunter2", "-u", "app"],
            ["/usr/bin/mysql", "--password=[redacted]", "-u", "app"],
        ),
        (
            ["/usr/bin/tool", "--api-key", "K-123", "--verbose"],
            ["/usr/bin/tool", "--api-key", "[redacted]", "--verbose"],
        ),
        (
            ["/usr/bin/env", "GITHUB_TOKEN=ghp_abc", "PGPASSWORD=pw", "LANG=C"],
            ["/usr/bin/env", "GITHUB_TOKEN=[redacted]", "PGPASSWORD=[redacted]", "LANG=C"],
        ),
        (
            ["/usr/bin/curl", "-H", "Authorization: Basic dXNlcjpwdw=="],
            ["/usr/bin/curl", "-H", "Authorization: Basic [redacted]"],
        ),
        (["/usr/bin/curl", "-H", "X-Auth: Bearer abc.def"], ["/usr/bin/curl", "-H", "X-Auth: [redacted]"]),
        (
            ["/usr/bin/git", "clone", "https://bob:s3cret@git.example/r"],
            ["/usr/bin/git", "clone", "https://***@git.example/r"],
        ),
        (  # a shell script is one argument of many words
            ["/bin/sh", "-c", "deploy --db-password s3cret AWS_SECRET_ACCESS_KEY=x now"],
            ["/bin/sh", "-c", "deploy --db-password [redacted] AWS_SECRET_ACCESS_KEY=[redacted] now"],
        ),
        (
            ["/usr/bin/python3", "-c", "print(1)", "a=b", "--keep"],
            ["/usr/bin/python3", "-c", "print(1)", "a=b", "--keep"],
        ),
        ([], []),
    ],
)
def test_secrets_in_an_exec_argv_are_redacted(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


def test_the_ebpf_backend_redacts_an_exec_before_it_leaves_the_sidecar() -> None:
    event = ebpf.to_event("X", 7, ["sh", "-100", "/usr/bin/tool", "--token", "t0ps3cret"])
    assert event is not None and event["argv"] == ["/usr/bin/tool", "--token", "[redacted]"]


def test_every_probe_is_on_a_syscall_the_kernel_has() -> None:
    available = ebpf.available_syscalls()
    missing = {p.syscall for p in ebpf.PROBES} - available
    assert missing <= {"open", "creat", "unlink", "rmdir", "rename", "mkdir", "symlink", "link", "chmod", "fchmodat2"}
    text = ebpf.program(available)
    assert "IN_SCOPE" not in text and text.index("sys_enter_getpgid") > text.index("sys_enter_openat")


def test_windows_attribute_by_time_and_overlaps_are_ambiguous() -> None:
    windows = CallWindows()
    windows.scope(1, 1)
    assert windows.attribute({}, 5)["bucket"] == "startup"
    windows.begin("a", "t", 10)
    windows.begin("b", "t", 20)
    assert windows.attribute({}, 15) == {"bucket": "call", "call_id": "a"}
    assert windows.attribute({}, 25) == {"bucket": "ambient", "ambiguous": True, "candidates": ["a", "b"]}
    assert windows.end("a", 30) == ("a", [])
    assert windows.attribute({}, 29)["candidates"] == ["a", "b"]  # read late, happened while both were open
    assert windows.attribute({}, 31) == {"bucket": "call", "call_id": "b"}
    windows.close("a")
    windows.close("b")
    assert windows.attribute({}, 40) == {"bucket": "ambient"}
    assert windows.attribute({}, 5)["bucket"] == "startup"  # still: before the first mark of that scope


def edges(begin: int, end: int) -> tuple[CallWindows, list[dict[str, Any]]]:
    """Events 1 ns either side of a window's two ends and right on them, all read before any mark."""
    windows = CallWindows()
    assert windows.scope(1, begin - 100) == []
    held = []
    for name, at in (("before", begin - 1), ("at_begin", begin), ("at_end", end), ("after", end + 1)):
        held += windows.event({"name": name}, at)
    assert held == []  # later than every control line read so far: a mark before them may still come
    released = windows.begin("c", "t", begin)
    released += windows.end("c", end)[1]
    return windows, released


def test_an_event_at_the_begin_is_the_calls_and_one_a_nanosecond_before_is_not() -> None:
    windows, released = edges(1_000, 2_000)
    by_name = {event.pop("name"): event for event in released}
    assert by_name["before"] == {"bucket": "startup"}  # after the scope, before its first mark
    assert by_name["at_begin"] == {"bucket": "call", "call_id": "c"}
    assert by_name["at_end"] == {"bucket": "call", "call_id": "c"}
    assert "after" not in by_name  # still waiting: a mark stamped before it could come
    windows.close("c")
    (after,) = windows.begin("d", "t", 3_000)
    assert after == {"name": "after", "bucket": "ambient"}  # 1 ns after c's end, before d's begin


def test_an_event_a_nanosecond_before_a_later_calls_begin_is_ambient_not_startup() -> None:
    windows = CallWindows()
    windows.scope(1, 10)
    windows.begin("a", "t", 100)
    windows.end("a", 200)
    windows.close("a")
    assert windows.event({}, 999) == []
    assert windows.begin("b", "t", 1_000) == [{"bucket": "ambient"}]
    assert windows.event({}, 1_000) == [{"bucket": "call", "call_id": "b"}]  # not later than the last mark


def test_events_are_let_go_oldest_first_when_the_mark_after_them_comes() -> None:
    windows = CallWindows()
    windows.scope(1, 10)
    windows.begin("a", "t", 100)
    for at in (300, 150, 250):  # bpftrace's per-CPU buffers are read in no global order
        assert windows.event({"at": at}, at) == []
    assert [e["at"] for e in windows.end("a", 260)[1]] == [150, 250]
    assert windows.finish() == [{"at": 300, "bucket": "ambient"}]
    assert windows.event({}, 10_000) == [{"bucket": "ambient"}]  # finished: nothing waits any more


def test_a_mark_stamped_before_the_previous_line_is_taken_just_after_it() -> None:
    windows = CallWindows()
    windows.scope(1, 500)
    windows.begin("a", "t", 400)  # stamped out of order: its window opens 1 ns after the scope
    assert windows.watermark == 501
    assert windows.attribute({}, 500) == {"bucket": "startup"}
    assert windows.attribute({}, 501) == {"bucket": "call", "call_id": "a"}


def test_too_many_held_events_drop_the_oldest_and_count_it() -> None:
    windows = CallWindows(max_held=2)
    windows.scope(1, 10)
    for at in (20, 30, 40):
        windows.event({"at": at}, at)
    assert windows.take_dropped() == 1 and windows.take_dropped() == 0
    assert [e["at"] for e in windows.finish()] == [30, 40]


def test_a_control_lines_stamp_is_read_and_a_bad_one_refused() -> None:
    from mcpfault.probe.protocol import ControlLineError, parse_control

    mark = parse_control('{"op":"mark","phase":"begin","call_id":"1:1","tool":"t","ts_ns":123}')
    assert (mark.call_id, mark.ts_ns) == ("1:1", 123)
    assert parse_control('{"op":"scope","pgid":4,"generation":2,"ts_ns":9}').ts_ns == 9
    assert parse_control('{"op":"mark","phase":"end","call_id":"x"}').ts_ns is None
    for bad in ('"12"', "-1", "true", "1.5"):
        with pytest.raises(ControlLineError, match="ts_ns must be a non-negative integer"):
            parse_control('{"op":"mark","phase":"end","call_id":"x","ts_ns":' + bad + "}")


def test_a_profiles_probe_table_is_the_policy_and_the_profile_still_loads(tmp_path: Path) -> None:
    from mcpfault.faults import profile

    path = tmp_path / "profile.toml"
    path.write_text('name = "p"\n[probe]\nexec_allow = ["/bin/sh"]\n\n[[faults]]\ntype = "latency"\ndelay_s = 0.1\n')
    assert profile.load(path).name == "p"
    loaded = policy.from_profile(path)
    assert loaded is not None and loaded.exec_allow == ("/bin/sh",)
    path.write_text('name = "p"\n')
    assert policy.from_profile(path) is None


def test_the_probes_duplicates_are_counted_as_the_judge_counts_them() -> None:
    from mcpfault.analysis.join import probe_duplicates_by_task

    journal = {"type": "file_open", "detail": "/run/s000/server-journal.jsonl (O_WRONLY|O_CREAT|O_APPEND)"}
    spans = {"type": "file_open", "detail": "/run/s000/server-spans.jsonl (O_WRONLY|O_CREAT|O_APPEND)"}
    attempts = [{"request_id": n, "task": n // 10} for n in range(40)]

    def record(request_id: int, tool: str, effects: list[dict[str, str]], **extra: str) -> dict[str, Any]:
        return {"record": "side_effects", "request_id": request_id, "tool": tool, "side_effects": effects, **extra}

    events = [
        {"request_id": 1, "client_received": "nothing"},  # a request record: not the probe's
        record(1, "open_incident", [journal], server_acted="true"),
        record(2, "open_incident", [journal], duplicate_of="1:1"),  # task 0: a duplicate state change
        record(11, "get_site", [spans], server_acted="true"),
        record(12, "get_site", [spans], duplicate_of="3:11"),  # task 1: a read acts only by flushing spans
        record(21, "open_incident", [journal], server_acted="true"),
        record(22, "open_incident", [spans], duplicate_of="5:21"),  # task 2: the key was known, no state change
        record(31, "open_incident", [], server_acted="unknown"),  # task 3: the probe cannot tell
        record(99, "open_incident", [journal], duplicate_of="9:1"),  # no attempt of the harness: no task
    ]
    found, unknown = probe_duplicates_by_task(
        attempts, events, state_changes="server-journal.jsonl", write_tools={"open_incident", "set_maintenance"}
    )
    assert found == {0: 1}
    assert unknown == {3}
