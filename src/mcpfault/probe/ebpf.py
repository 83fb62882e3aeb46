"""The eBPF backend: Debian's bpftrace on syscall tracepoints, scoped in the kernel to one process tree.

The kernel program keeps the scope itself: a map of the thread ids of the scoped tree, seeded with
the processes of the scoped group and grown on every fork (``sched_process_fork``), so only the
server's own syscalls ever leave the kernel. The sidecar steers it without a second channel: it
makes syscalls the program watches for its own pid only (``getsid(-n)`` starts scope number n,
``getsid(pid)`` adds a process to it, ``getpgid(-n)`` asks for sync line ``n``), and the kernel answers in
the same ordered output as the events.

Events carry the kernel's ``nsecs`` (``bpf_ktime_get_ns()``: CLOCK_MONOTONIC); the call windows are
on the same clock, from the proxy's stamps on its marks (or the time a mark without one was read), so
an event read late still lands in the window it happened in, and one read before its mark waits for
it (protocol.CallWindows). An end mark closes its window once a sync line has come back from every
CPU: bpftrace's output is one buffer per CPU, each in order, so a CPU's sync line read means all that
CPU did before the end mark has been read too.

bpftrace's stack allows one 200-byte string per probe, so a syscall with several strings (exec's
argv, rename's two names) is several probes on one tracepoint, printing parts the reader joins by
thread id (probes of one tracepoint run back to back on one CPU, so the parts are adjacent).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from mcpfault.errors import UsageError
from mcpfault.probe import protocol
from mcpfault.probe.protocol import CallWindows, ControlLine

log = structlog.get_logger("mcpfault.probe")

TRACEFS = Path("/sys/kernel/tracing")
SYSCALL_EVENTS = TRACEFS / "events" / "syscalls"
STRLEN = 200  # bpftrace 0.17's most; longer paths are cut
ATTACH_TIMEOUT_S = 60.0
STOP_WAIT_S = 0.5
SYNC_TIMEOUT_S = 5.0  # a CPU whose sync line never comes (taken offline): the window closes anyway
_CAP_SYS_ADMIN, _CAP_PERFMON, _CAP_BPF = 21, 38, 39
_AT_FDCWD = -100
_CLONE_THREAD = 0x10000
_AT_REMOVEDIR = 0x200

# One key type everywhere (bpftrace types a map by its first use, in program order).
# A process is in scope when its entry holds the current scope's number: a new scope needs no
# clear() (which bpftrace performs later, in user space, racing the entries added right after it).
_IN_SCOPE = "(@scope && (@tracked[(uint32)tid] == @scope || @tracked[(uint32)pid] == @scope))"
_HEAD = 'printf("{kind}\\t%d\\t%d\\t%llu\\t0\\t%s{fmt}\\n", pid, tid, nsecs, comm{args});'
_PART = 'printf("{kind}\\t%d\\t%d\\t%llu\\t{index}\\t%s\\n", pid, tid, nsecs, {arg});'

# Control probes: for the sidecar's own pid ($1) only. Last in the program, so attached last: the
# first sync line (the sidecar's "ready") means every event probe is in place.
_CONTROL = """
tracepoint:syscalls:sys_enter_getsid /pid == $1/ {
  if ((int32)args->pid < 0) { @scope = -(int32)args->pid; } else { @tracked[(uint32)args->pid] = @scope; }
}
tracepoint:syscalls:sys_enter_getpgid /pid == $1 && (int32)args->pid < 0/ {
  printf("Y\\t%d\\t%d\\n", -(int32)args->pid, cpu);
}
tracepoint:sched:sched_process_fork /IN_SCOPE/ { @tracked[(uint32)args->child_pid] = @scope; }
tracepoint:sched:sched_process_exit /@tracked[(uint32)tid]/ { delete(@tracked[(uint32)tid]); }
END { clear(@tracked); clear(@scope); }
""".replace("IN_SCOPE", _IN_SCOPE)


@dataclass(frozen=True, slots=True)
class _Probe:
    syscall: str
    kind: str
    head: tuple[tuple[str, str], ...]  # (printf format, expression) after comm
    # One string expression per extra probe; (guard, expression): printed when guard holds, else "".
    parts: tuple[str | tuple[str, str], ...] = ()
    predicate: str = ""  # joined to the scope filter with &&

    def text(self) -> str:
        where = f"/{_IN_SCOPE}/" if not self.predicate else f"/{_IN_SCOPE} && {self.predicate}/"
        fmt = "".join(f"\\t{f}" for f, _ in self.head)
        args = "".join(f", {e}" for _, e in self.head)
        head = _HEAD.format(kind=self.kind, fmt=fmt, args=args)
        lines = [f"tracepoint:syscalls:sys_enter_{self.syscall} {where} {{ {head} }}"]
        for index, part in enumerate(self.parts, 1):
            if isinstance(part, str):
                choices = [(where, part)]
            else:  # exactly one of the two fires, so the part is always there for the reader to join
                guard, expression = part
                choices = [(f"{where[:-1]} && ({guard})/", expression), (f"{where[:-1]} && !({guard})/", '""')]
            for predicate, arg in choices:
                lines.append(
                    f"tracepoint:syscalls:sys_enter_{self.syscall} {predicate} "
                    f"{{ {_PART.format(kind=self.kind, index=index, arg=arg)} }}"
                )
        return "\n".join(lines)


def _argv(index: int) -> tuple[str, str]:
    # Stop at argv's NULL: the words beyond it are the environment, which must not leak. A guard of
    # its own (not a ternary, whose string bpftrace 0.17 cuts to 64 bytes whatever BPFTRACE_STRLEN says).
    guard = " && ".join(f"args->argv[{i}] != 0" for i in range(1, index + 1))
    return guard, f"str(args->argv[{index}])"


def _net(syscall: str, op: str, pointer: str) -> list[_Probe]:
    v4 = f"((struct sockaddr_in *){pointer})"
    v6 = f"((struct sockaddr_in6 *){pointer})"
    port4 = f"(({v4}->sin_port >> 8) | (({v4}->sin_port & 0xff) << 8))"
    port6 = f"(({v6}->sin6_port >> 8) | (({v6}->sin6_port & 0xff) << 8))"
    return [
        _Probe(
            syscall,
            "N",
            (("%s", f'"{op}"'), ("%s", f"ntop(2, {v4}->sin_addr.s_addr)"), ("%d", port4)),
            predicate=f"{pointer} != 0 && {v4}->sin_family == 2",
        ),
        _Probe(
            syscall,
            "N6",
            (("%s", f'"{op}"'), ("%s", f"ntop(10, {v6}->sin6_addr.in6_u.u6_addr8)"), ("%d", port6)),
            predicate=f"{pointer} != 0 && {v6}->sin6_family == 10",
        ),
    ]


def _path(syscall: str, kind: str, dfd: str, path: str, *numbers: tuple[str, str]) -> _Probe:
    return _Probe(syscall, kind, (("%d", dfd), *numbers, ("%s", f"str({path})")))


PROBES: tuple[_Probe, ...] = (
    _Probe("execve", "X", (("%d", str(_AT_FDCWD)), ("%s", "str(args->filename)")), (_argv(1), _argv(2))),
    _Probe("execveat", "X", (("%d", "args->fd"), ("%s", "str(args->filename)")), (_argv(1), _argv(2))),
    _Probe("fork", "F", (("%s", '"fork"'),)),
    _Probe("vfork", "F", (("%s", '"vfork"'),)),
    _Probe("clone", "F", (("%s", '"clone"'),), predicate=f"(args->clone_flags & {_CLONE_THREAD}) == 0"),
    _Probe(
        "clone3",
        "F",
        (("%s", '"clone3"'),),
        predicate=f"(((struct clone_args *)args->uargs)->flags & {_CLONE_THREAD}) == 0",
    ),
    *_net("connect", "connect", "args->uservaddr"),
    *_net("sendto", "sendto", "args->addr"),
    *_net("bind", "bind", "args->umyaddr"),
    _Probe("listen", "L", (("%d", "args->fd"), ("%d", "args->backlog"))),
    _path("openat", "O", "args->dfd", "args->filename", ("%d", "args->flags")),
    _path("open", "O", str(_AT_FDCWD), "args->filename", ("%d", "args->flags")),
    _path("creat", "O", str(_AT_FDCWD), "args->pathname", ("%d", "0x241")),  # O_WRONLY|O_CREAT|O_TRUNC
    _path("unlinkat", "D", "args->dfd", "args->pathname", ("%d", "args->flag")),
    _path("unlink", "D", str(_AT_FDCWD), "args->pathname", ("%d", "0")),
    _path("rmdir", "D", str(_AT_FDCWD), "args->pathname", ("%d", str(_AT_REMOVEDIR))),
    _Probe("renameat", "R", (("%d", "args->newdfd"), ("%s", "str(args->newname)")), ("str(args->oldname)",)),
    _Probe("renameat2", "R", (("%d", "args->newdfd"), ("%s", "str(args->newname)")), ("str(args->oldname)",)),
    _Probe("rename", "R", (("%d", str(_AT_FDCWD)), ("%s", "str(args->newname)")), ("str(args->oldname)",)),
    _path("mkdirat", "M", "args->dfd", "args->pathname"),
    _path("mkdir", "M", str(_AT_FDCWD), "args->pathname"),
    _Probe("symlinkat", "S", (("%d", "args->newdfd"), ("%s", "str(args->newname)")), ("str(args->oldname)",)),
    _Probe("symlink", "S", (("%d", str(_AT_FDCWD)), ("%s", "str(args->newname)")), ("str(args->oldname)",)),
    _Probe("linkat", "K", (("%d", "args->newdfd"), ("%s", "str(args->newname)")), ("str(args->oldname)",)),
    _Probe("link", "K", (("%d", str(_AT_FDCWD)), ("%s", "str(args->newname)")), ("str(args->oldname)",)),
    _path("fchmodat", "C", "args->dfd", "args->filename", ("%d", "args->mode")),
    _path("fchmodat2", "C", "args->dfd", "args->filename", ("%d", "args->mode")),
    _path("chmod", "C", str(_AT_FDCWD), "args->filename", ("%d", "args->mode")),
    _Probe("fchmod", "CF", (("%d", "args->fd"), ("%d", "args->mode"))),
    _Probe("ptrace", "P", (("%ld", "args->request"), ("%ld", "args->pid"))),
)


def program(available: set[str] | None = None) -> str:
    """The bpftrace program: the control probes, and a probe for each syscall this kernel has."""
    probes = [p for p in PROBES if available is None or p.syscall in available]
    return "\n".join(p.text() for p in probes) + "\n" + _CONTROL


def available_syscalls() -> set[str]:
    return {entry.name.removeprefix("sys_enter_") for entry in SYSCALL_EVENTS.glob("sys_enter_*")}


# -- before anything starts -----------------------------------------------------------------------


def preflight() -> str:
    """bpftrace's path, once it can run here: found, privileged, tracefs mounted. Else one clear UsageError."""
    binary = os.environ.get("MCPFAULT_BPFTRACE") or shutil.which("bpftrace")
    if not binary or not os.access(binary, os.X_OK):
        raise UsageError(
            "the ebpf probe needs bpftrace, which is not installed: apt-get install bpftrace "
            "(or use --probe fake:EVENTS.json, which needs neither root nor bpftrace)"
        )
    if not privileged():
        raise UsageError(
            "the ebpf probe needs root, or CAP_BPF and CAP_PERFMON: run with sudo "
            "(or use --probe fake:EVENTS.json, which needs no privileges)"
        )
    if not SYSCALL_EVENTS.is_dir():
        done = subprocess.run(
            ["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True, text=True, check=False
        )
        if not SYSCALL_EVENTS.is_dir():
            why = done.stderr.strip() or f"mount exited {done.returncode}"
            raise UsageError(
                f"the ebpf probe needs tracefs at {TRACEFS}, which is not mounted, and mounting it failed ({why}); "
                f"mount it: mount -t tracefs nodev {TRACEFS}"
            )
        log.info("mounted tracefs", path=str(TRACEFS))
    return binary


def privileged() -> bool:
    if os.geteuid() == 0:
        return True
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    match = re.search(r"^CapEff:\s*([0-9a-f]+)", status, re.MULTILINE)
    caps = int(match.group(1), 16) if match else 0
    bpf, perfmon, admin = (bool(caps >> cap & 1) for cap in (_CAP_BPF, _CAP_PERFMON, _CAP_SYS_ADMIN))
    return admin or (bpf and perfmon)


# -- from bpftrace's lines to protocol events ----------------------------------------------------

_PARTS = {"X": 3, "R": 2, "S": 2, "K": 2}


def open_flags(flags: int) -> str:
    """open(2) flags as mcpfz-probe writes them: the access mode, then O_CREAT, O_EXCL, O_TRUNC, O_APPEND."""
    names = [("O_RDONLY", "O_WRONLY", "O_RDWR", "O_RDWR")[flags & 0o3]]
    names += [
        n
        for bit, n in ((0o100, "O_CREAT"), (0o200, "O_EXCL"), (0o1000, "O_TRUNC"), (0o2000, "O_APPEND"))
        if flags & bit
    ]
    return "|".join(names)


def resolve(pid: int, dirfd: int, path: str) -> str:
    """An absolute path for a syscall's (dirfd, path), read from /proc while the process lives."""
    if path.startswith("/"):
        return path
    link = f"/proc/{pid}/cwd" if dirfd == _AT_FDCWD else f"/proc/{pid}/fd/{dirfd}"
    try:
        base = os.readlink(link)
    except OSError:
        return path
    return os.path.normpath(os.path.join(base, path)) if path else base


def to_event(kind: str, pid: int, fields: list[str]) -> dict[str, Any] | None:
    """One syscall's fields (comm first) as a protocol event; None for what is not worth a line."""
    comm, rest = fields[0], fields[1:]
    event: dict[str, Any]
    if kind == "X":
        dirfd, path, *argv = rest
        path = resolve(pid, int(dirfd), path)
        # Secrets never leave the sidecar: its lines may be kept (mcpfz_probe's raw log) or printed.
        event = {"type": "exec", "path": path, "argv": protocol.redact_argv([path, *(a for a in argv if a)])}
    elif kind == "F":
        event = {"type": "process_spawn", "syscall": rest[0]}
    elif kind in ("N", "N6"):
        op, addr, port = rest
        dst = f"[{addr}]:{port}" if kind == "N6" else f"{addr}:{port}"
        if op == "bind":
            event = {"type": "bind", "dst": dst}
        else:
            event = {"type": "connect", "proto": "udp" if op == "sendto" else "tcp", "dst": dst}
    elif kind == "L":
        event = {"type": "listen", "fd": int(rest[0]), "backlog": int(rest[1])}
    elif kind == "O":
        dirfd, flags, path = rest
        if not path:  # the name was not paged in when the syscall began: nothing to judge it by
            return None
        event = {"type": "file_open", "path": resolve(pid, int(dirfd), path), "flags": open_flags(int(flags))}
    elif kind == "D":
        dirfd, flag, path = rest
        event = {"type": "file_delete", "path": resolve(pid, int(dirfd), path)}
        if int(flag) & _AT_REMOVEDIR:
            event["directory"] = True
    elif kind in ("R", "S", "K"):
        dirfd, path, other = rest
        name = {"R": "file_rename", "S": "file_symlink", "K": "file_link"}[kind]
        event = {"type": name, "path": resolve(pid, int(dirfd), path)}
        event["from" if kind == "R" else "target"] = resolve(pid, _AT_FDCWD, other) if kind != "S" else other
    elif kind == "M":
        event = {"type": "file_mkdir", "path": resolve(pid, int(rest[0]), rest[1])}
    elif kind == "C":
        dirfd, mode, path = rest
        event = {"type": "chmod", "path": resolve(pid, int(dirfd), path), "mode": format(int(mode) & 0o7777, "o")}
    elif kind == "CF":
        fd, mode = rest
        event = {"type": "chmod", "path": resolve(pid, int(fd), ""), "mode": format(int(mode) & 0o7777, "o")}
    elif kind == "P":
        event = {"type": "ptrace", "request": int(rest[0]), "target_pid": int(rest[1])}
    else:
        return None
    event["pid"] = pid
    event["comm"] = comm
    return event


@dataclass(slots=True)
class _Pending:
    kind: str
    pid: int
    at_ns: int
    fields: list[str] = field(default_factory=list)


class EbpfBackend:
    name = "ebpf"

    def __init__(self, bpftrace: str) -> None:
        self._bpftrace = bpftrace
        self._cpus = sorted(os.sched_getaffinity(0))
        self._scopes = 0
        self._out: Any  # sidecar.Output
        self._windows: CallWindows
        self._process: subprocess.Popen[str] | None = None
        self._threads: list[threading.Thread] = []
        self._seq = 0
        self._seq_lock = threading.Lock()
        self._on_sync: dict[int, tuple[set[int], Callable[[], None]]] = {}  # seq -> (CPUs still due, then)
        self._pending: dict[int, _Pending] = {}  # by thread id: a syscall whose parts are still arriving
        self._closing: queue.Queue[str | None] = queue.Queue()
        self._clock_offset_ns = time.time_ns() - time.monotonic_ns()
        self._stderr_tail: list[str] = []

    # -- the sidecar's side ------------------------------------------------------------------------

    def start(self, out: Any, windows: CallWindows) -> dict[str, Any]:
        self._out, self._windows = out, windows
        env = {**os.environ, "BPFTRACE_STRLEN": str(STRLEN)}
        self._process = subprocess.Popen(
            [self._bpftrace, "-B", "none", "-e", program(available_syscalls()), str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=env,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - started before any thread of ours
        )
        attached = threading.Event()
        self._on_sync[0] = (set(), attached.set)
        for target, name in (
            (self._read, "bpftrace-out"),
            (self._read_errors, "bpftrace-err"),
            (self._close_later, "closer"),
        ):
            thread = threading.Thread(target=target, name=f"mcpfault-probe-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        while not attached.wait(0.1):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                problem = next((e for e in self._stderr_tail if e.startswith("ERROR") and "RLIMIT" not in e), None)
                raise UsageError(
                    f"bpftrace could not attach its probes: {problem or self._stderr_tail[-1:] or 'timed out'}"
                )
            self._syscall_sync(0)
        return {"grace_ms": 0, "strlen": STRLEN, "tracer": "bpftrace", "cpus": len(self._cpus)}

    def scope(self, control: ControlLine, at_ns: int) -> None:
        members = _group_members(control.pgid)
        with self._out.lock:
            self._out.events(self._windows, self._windows.scope(control.generation, at_ns))
        self._scopes += 1
        with contextlib.suppress(OSError):
            os.getsid(-self._scopes)  # the kernel program starts a new scope: the old tree is out
        for pid in members:
            with contextlib.suppress(OSError):
                os.getsid(pid)  # and adds each member of the group

        def scoped() -> None:
            self._out.write(
                protocol.status(
                    "scope",
                    protocol.BUCKET_AMBIENT,
                    pgid=control.pgid,
                    generation=control.generation,
                    pids=len(members),
                )
            )

        self._sync(scoped)

    def begin(self, call_id: str, tool: str | None, at_ns: int) -> None:
        with self._out.lock:
            released = self._windows.begin(call_id, tool, at_ns)
            self._out.write(protocol.status("begin", protocol.BUCKET_CALL, call_id))
            self._out.events(self._windows, released)

    def end(self, call_id: str | None, at_ns: int) -> None:
        with self._out.lock:
            ended, released = self._windows.end(call_id, at_ns)
            self._out.events(self._windows, released)
        if ended is None:  # no such window: nothing can still arrive for it
            self._out.write(protocol.status("end", protocol.BUCKET_CALL, call_id))
            return
        self._closing.put(ended)  # the closer syncs every CPU: this thread must stay free for the next mark

    def stop(self) -> None:
        self._closing.put(None)
        if self._process is not None and self._process.poll() is None:
            # Detaching ~50 probes takes bpftrace a second or two: it finishes on its own (and its
            # parent-death signal repeats the SIGTERM), while the sidecar, and the proxy, end now.
            self._process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=STOP_WAIT_S)
        for thread in self._threads:
            thread.join(timeout=5)

    # -- sync lines ------------------------------------------------------------------------------

    def _sync(self, then: Callable[[], None], *, every_cpu: bool = False) -> None:
        with self._seq_lock:
            self._seq += 1
            seq = self._seq
            self._on_sync[seq] = (set(self._cpus) if every_cpu else set(), then)
        if not every_cpu:
            self._syscall_sync(seq)
            return
        try:
            for cpu in self._cpus:  # this thread only (pid 0): the sync lands in that CPU's buffer
                os.sched_setaffinity(0, {cpu})
                self._syscall_sync(seq)
        finally:
            os.sched_setaffinity(0, self._cpus)

    @staticmethod
    def _syscall_sync(seq: int) -> None:
        with contextlib.suppress(OSError):
            os.getpgid(-seq - 1)  # -1 is the attach probe's; getpgid of a negative pid fails harmlessly

    def _close_later(self) -> None:
        stopping = False
        while not stopping and (call_id := self._closing.get()) is not None:
            call_ids = [call_id]  # every end already queued shares one sync: one round of CPUs, not one a call
            while not self._closing.empty():
                more = self._closing.get_nowait()
                if more is None:
                    stopping = True
                    break
                call_ids.append(more)
            synced = threading.Event()
            self._sync(synced.set, every_cpu=True)
            if not synced.wait(SYNC_TIMEOUT_S):
                log.warning("a CPU's sync line did not come back; closing the call windows anyway", call_ids=call_ids)
            with self._out.lock, self._out.batch():
                self._flush_pending()
                for ended in call_ids:
                    self._windows.close(ended)
                    self._out.write(protocol.status("end", protocol.BUCKET_CALL, ended))

    # -- bpftrace's output -----------------------------------------------------------------------

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            try:
                self._line(line.rstrip("\n").split("\t"))
            except (ValueError, IndexError):
                log.debug("skipping a bpftrace line", line=line[:200])

    def _line(self, fields: list[str]) -> None:
        kind = fields[0]
        if kind == "Y":
            seq, cpu = int(fields[1]) - 1, int(fields[2])
            with self._seq_lock:
                waiting = self._on_sync.get(seq)
                if waiting is None:
                    return
                waiting[0].discard(cpu)
                if waiting[0]:
                    return
                del self._on_sync[seq]
            waiting[1]()
            return
        if len(fields) < 6:
            return
        pid, tid, at_ns, index = int(fields[1]), int(fields[2]), int(fields[3]), int(fields[4])
        with self._out.lock:
            if index == 0:
                previous = self._pending.pop(tid, None)
                if previous is not None:
                    self._emit(previous)  # its last parts never came
                pending = _Pending(kind, pid, at_ns, fields[5:])
            else:
                found = self._pending.pop(tid, None)
                if found is None or found.kind != kind:
                    return
                pending = found
                pending.fields.append(fields[5])
            if index + 1 < _PARTS.get(kind, 1):
                self._pending[tid] = pending
            else:
                self._emit(pending)

    def _flush_pending(self) -> None:
        for tid in list(self._pending):
            self._emit(self._pending.pop(tid))

    def _emit(self, pending: _Pending) -> None:
        """Under the output lock: attribute by the kernel's time (or hold until a later mark), then write."""
        expected = {"X": 5, "R": 4, "S": 4, "K": 4}.get(pending.kind)
        while expected is not None and len(pending.fields) < expected:
            pending.fields.append("")
        event = to_event(pending.kind, pending.pid, pending.fields)
        if event is None:
            return
        event["ts_ns"] = pending.at_ns + self._clock_offset_ns
        self._out.events(self._windows, self._windows.event(event, pending.at_ns))

    def _read_errors(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        for line in self._process.stderr:
            text = line.strip()
            self._stderr_tail = [*self._stderr_tail[-9:], text]
            lost = re.search(r"Lost (\d+) events", text)
            if lost:
                self._out.write(
                    {
                        "type": protocol.DROP,
                        "count": int(lost.group(1)),
                        "reason": "perf_buffer_full",
                        "bucket": protocol.BUCKET_AMBIENT,
                        "ts_ns": time.time_ns(),
                    }
                )
            elif text and "RLIMIT_MEMLOCK" not in text and not text.startswith("Attaching"):
                log.warning("bpftrace", message=text[:300])


def _die_with_parent() -> None:
    """In bpftrace, before it runs: SIGTERM when the sidecar dies, however it dies (even SIGKILL)."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _group_members(pgid: int) -> list[int]:
    """The pids of a process group now (its leader first): the seed of the kernel's scope."""
    members = [pgid]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == pgid:
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid):
            members.append(int(entry.name))
    return members
