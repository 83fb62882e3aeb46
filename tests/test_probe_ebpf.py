"""`mcpfault probe-sidecar --backend ebpf`: real kernel events through bpftrace (CI runs as root, so no skip)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcpfz_probe import SidecarRuntimeMonitor

pytestmark = pytest.mark.slow  # real sidecars, bpftrace attaching for seconds

SIDECAR = [sys.executable, "-m", "mcpfault", "probe-sidecar", "--backend", "ebpf"]

ACTOR = """
import ctypes, os, socket, subprocess, sys
work = sys.argv[1]
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "shell":
        subprocess.run(["/bin/sh", "-c", "true"])
    elif cmd == "files":
        path = os.path.join(work, "a.txt")
        with open(path, "w") as f:
            f.write("x")
        os.chmod(path, 0o600)
        os.rename(path, path + ".moved")
        os.mkdir(os.path.join(work, "d"))
        os.symlink(path + ".moved", os.path.join(work, "link"))
        os.unlink(path + ".moved")
    elif cmd == "net":
        s = socket.socket()
        s.settimeout(0.5)
        try:
            s.connect(("127.0.0.1", int(sys.argv[2])))
        except OSError:
            pass
        s.close()
    elif cmd == "ptrace":
        ctypes.CDLL(None, use_errno=True).ptrace(2, 4194303, 0, 0)  # PEEKDATA on no such pid: ESRCH, still a syscall
    print("done", flush=True)
"""


def wait_ready(monitor: SidecarRuntimeMonitor, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(e.type == "status" and e.data.get("message") == "ready" for e in monitor.ambient_events()):
        assert time.monotonic() < deadline, "the ebpf sidecar never said ready"
        time.sleep(0.05)


def test_kernel_events_are_scoped_to_the_process_tree_and_attributed_per_call(tmp_path: Path) -> None:
    listener = __import__("socket").socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    monitor = SidecarRuntimeMonitor(SIDECAR)
    monitor.start()
    actor = None
    try:
        wait_ready(monitor)
        actor = subprocess.Popen(
            [sys.executable, "-c", ACTOR, str(tmp_path), str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            process_group=0,
        )
        monitor.set_scope_pgid(actor.pid, 1)
        summaries = {}
        for call in ("shell", "files", "net", "ptrace"):
            monitor.begin_call(call, call)
            assert actor.stdin is not None and actor.stdout is not None
            actor.stdin.write(call + "\n")
            actor.stdin.flush()
            assert actor.stdout.readline() == "done\n"
            summaries[call] = [e for e in monitor.end_call(call).events if e.type != "status"]
        # something outside the tree, during no call: never reported
        subprocess.run(["/bin/true"], check=True)
        ambient = monitor.ambient_events()
    finally:
        if actor is not None:
            actor.communicate(timeout=10)
        monitor.stop()
        listener.close()
    assert all(e.bucket == "call" and e.call_id == call for call, events in summaries.items() for e in events)
    shell = summaries["shell"]
    assert "process_spawn" in {e.type for e in shell}
    assert any(e.type == "exec" and e.data["argv"] == ["/bin/sh", "-c", "true"] for e in shell)
    files = [
        (e.type, e.data.get("path"))
        for e in summaries["files"]
        if e.type != "file_open" or "O_WRONLY" in e.data["flags"]
    ]
    base = str(tmp_path / "a.txt")
    assert files == [
        ("file_open", base),
        ("chmod", base),
        ("file_rename", base + ".moved"),
        ("file_mkdir", str(tmp_path / "d")),
        ("file_symlink", str(tmp_path / "link")),
        ("file_delete", base + ".moved"),
    ]
    assert [e.data.get("mode") for e in summaries["files"] if e.type == "chmod"] == ["600"]
    assert [(e.type, e.data["proto"], e.data["dst"]) for e in summaries["net"]] == [
        ("connect", "tcp", f"127.0.0.1:{port}")
    ]
    assert [(e.type, e.data["request"], e.data["target_pid"]) for e in summaries["ptrace"]] == [("ptrace", 2, 4194303)]
    assert all(isinstance(e.data["ts_ns"], int) and e.data["comm"] for events in summaries.values() for e in events)
    assert not any(e.type == "exec" and e.data.get("path") == "/bin/true" for e in ambient)


def run_sidecar(env: dict[str, str], prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(prefix or []), *SIDECAR], input="", capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


def test_no_bpftrace_is_one_clear_line_and_exit_2() -> None:
    done = run_sidecar({"MCPFAULT_BPFTRACE": "/nonexistent/bpftrace", "PATH": "/nonexistent"})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "needs bpftrace, which is not installed" in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root to start from")
def test_no_privileges_is_one_clear_line_and_exit_2() -> None:
    done = run_sidecar({}, ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "needs root, or CAP_BPF and CAP_PERFMON" in done.stderr


def test_a_server_restart_rescopes_the_sidecar_to_the_new_process_tree(tmp_path: Path) -> None:
    """What the proxy does on each (re)start: scope(pgid, generation); the old tree drops out in the kernel."""
    from mcpfault.probe.monitor import ProbeMonitor

    monitor = ProbeMonitor(SIDECAR)
    actors: list[subprocess.Popen[str]] = []

    def spawn() -> subprocess.Popen[str]:
        actor = subprocess.Popen(
            [sys.executable, "-c", ACTOR, str(tmp_path), "9"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            process_group=0,
        )
        actors.append(actor)
        # Started and done importing before it is scoped: a start-up's own file opens must not land in
        # another call's window.
        assert actor.stdin is not None and actor.stdout is not None
        actor.stdin.write("ready\n")
        actor.stdin.flush()
        assert actor.stdout.readline() == "done\n"
        return actor

    def act(actor: subprocess.Popen[str], call_id: str) -> list[str]:
        assert monitor.begin(call_id, "shell")
        assert actor.stdin is not None and actor.stdout is not None
        actor.stdin.write("shell\n")
        actor.stdin.flush()
        assert actor.stdout.readline() == "done\n"
        assert monitor.mark_end(call_id)
        summary, confirmed = monitor.collect(call_id)
        assert confirmed
        return [e.type for e in summary.events if e.type != "status"]

    try:
        assert monitor.start_and_wait()["backend"] == "ebpf"
        first = spawn()
        assert monitor.scope(first.pid, 1)
        assert "exec" in act(first, "gen1")
        second = spawn()  # the "restarted" server
        assert monitor.scope(second.pid, 2)
        assert act(first, "old-tree") == []  # the first generation's processes are out of scope now
        assert "exec" in act(second, "gen2")
    finally:
        for actor in actors:
            actor.communicate(timeout=10)
        monitor.close()


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_bpftrace_ends_when_the_sidecar_ends(how: str) -> None:
    """mcpfz_probe's stop() sends shutdown and SIGTERM at once; a SIGKILLed sidecar takes bpftrace along too."""
    monitor = SidecarRuntimeMonitor(SIDECAR)
    monitor.start()
    try:
        wait_ready(monitor)
        sidecar = monitor._process
        (bpftrace,) = children(sidecar.pid)
        assert "bpftrace" in Path(f"/proc/{bpftrace}/cmdline").read_text()
        if how == "kill":
            sidecar.kill()
    finally:
        monitor.stop()
    deadline = time.monotonic() + 20
    while Path(f"/proc/{bpftrace}").exists():
        status = Path(f"/proc/{bpftrace}/status").read_text() if Path(f"/proc/{bpftrace}").exists() else ""
        if "State:\tZ" in status:
            break
        assert time.monotonic() < deadline, "bpftrace outlived its sidecar by 20 s"
        time.sleep(0.1)


def test_stamped_marks_put_kernel_events_on_the_right_side_of_a_window(tmp_path: Path) -> None:
    """The proxy's marks are stamped with time.monotonic_ns() and not waited for; the kernel stamps
    events with bpftrace's nsecs. An exec just before a begin is not the call's, one inside it is."""
    from mcpfault.probe.monitor import ProbeMonitor

    monitor = ProbeMonitor(SIDECAR)
    actor = None
    try:
        assert monitor.start_and_wait()["mark_clock"] == "CLOCK_MONOTONIC" and monitor.stamped_marks
        actor = subprocess.Popen(
            [sys.executable, "-c", ACTOR, str(tmp_path), "9"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            process_group=0,
        )
        assert actor.stdin is not None and actor.stdout is not None
        actor.stdin.write("ready\n")
        actor.stdin.flush()
        assert actor.stdout.readline() == "done\n"
        assert monitor.scope(actor.pid, 1)

        def shell() -> None:
            assert actor is not None and actor.stdin is not None and actor.stdout is not None
            actor.stdin.write("shell\n")
            actor.stdin.flush()
            assert actor.stdout.readline() == "done\n"

        shell()  # done (its exec is stamped) before the begin below is stamped
        assert monitor.begin("quiet", "shell") and monitor.mark_end("quiet")
        quiet, quiet_confirmed = monitor.collect("quiet")
        assert monitor.begin("busy", "shell")
        shell()
        assert monitor.mark_end("busy")
        busy, busy_confirmed = monitor.collect("busy")
    finally:
        if actor is not None:
            actor.communicate(timeout=10)
        monitor.close()
    assert quiet_confirmed and busy_confirmed
    assert [e.type for e in quiet.events if e.type != "status"] == []
    assert any(e.type == "exec" and e.data["argv"] == ["/bin/sh", "-c", "true"] for e in busy.events)
    assert all(e.call_id == "busy" and e.bucket == "call" for e in busy.events)
