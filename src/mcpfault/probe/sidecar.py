"""``mcpfault probe-sidecar``: a sidecar speaking mcpfz-probe's protocol, with a fake or an eBPF backend.

It reads control lines on stdin and writes status and event lines on stdout (probe/protocol.py), so
it stands in for the mcpfz-probe binary (mcp-server-fuzzer's ``MCPFZ_PROBE_BIN``). The control loop
is the same for both backends; a backend says what happens on start, scope, begin, end and stop.
Both attribute events by when they happened (protocol.CallWindows): the kernel's stamp for eBPF,
the trigger's mark plus the entry's ``offset_ns`` for the fake.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from mcpfault.errors import UsageError
from mcpfault.probe import protocol
from mcpfault.probe.protocol import CallWindows, ControlLine, ControlLineError

TRIGGERS = ("startup", "scope", "begin", "end")


class Output:
    """One line at a time to stdout, from whichever thread; a reader that left ends the sidecar quietly."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.lock = threading.RLock()  # also held by backends around attribute-then-write
        self.closed = threading.Event()
        self._batching = 0

    def write(self, line: dict[str, Any]) -> None:
        with self.lock:
            if self.closed.is_set():
                return
            try:
                self._stream.write(protocol.encode(line))
                if not self._batching:
                    self._stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.closed.set()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Lines written inside leave in one write at the end (one wake-up of the reader, not one a line)."""
        with self.lock:
            self._batching += 1
        try:
            yield
        finally:
            with self.lock:
                self._batching -= 1
                if not self._batching and not self.closed.is_set():
                    try:
                        self._stream.flush()
                    except (BrokenPipeError, ValueError, OSError):
                        self.closed.set()

    def events(self, windows: CallWindows, released: list[dict[str, Any]]) -> None:
        """Events the windows let go, and a drop line for any they had to let go unattributed."""
        with self.lock:
            for event in released:
                self.write(event)
            dropped = windows.take_dropped()
            if dropped:
                self.write(
                    {
                        "type": protocol.DROP,
                        "count": dropped,
                        "reason": "held_events_full",  # no mark came for too long to attribute them
                        "bucket": protocol.BUCKET_AMBIENT,
                        "ts_ns": time.time_ns(),
                    }
                )


class Backend(Protocol):
    name: str

    def start(self, out: Output, windows: CallWindows) -> dict[str, Any]:
        """Attach; the fields of the ``ready`` status (the backend writes its start-up events after)."""
        ...

    def scope(self, control: ControlLine, at_ns: int) -> None: ...

    def begin(self, call_id: str, tool: str | None, at_ns: int) -> None: ...

    def end(self, call_id: str | None, at_ns: int) -> None: ...

    def stop(self) -> None: ...


def run(backend: Backend, stdin: TextIO, stdout: TextIO, clock_ns: Callable[[], int] = time.monotonic_ns) -> int:
    """The control loop: until ``shutdown`` or EOF on stdin. The exit status.

    A control line's moment is its ``ts_ns``, or the time it was read (``clock_ns``, CLOCK_MONOTONIC).
    """
    out = Output(stdout)
    windows = CallWindows()
    try:
        ready = backend.start(out, windows)
        out.write(
            protocol.status(
                "ready", protocol.BUCKET_STARTUP, backend=backend.name, mark_clock=protocol.MARK_CLOCK, **ready
            )
        )
        after_start = getattr(backend, "after_ready", None)
        if after_start is not None:
            after_start()
        for lines in _line_batches(stdin):
            with out.batch():  # the marks of one read (a call's begin and end, often) answered in one write
                if not _handle(backend, out, lines, clock_ns):
                    break
    finally:
        with out.lock:  # no mark comes any more: what still waits is attributed by the windows known
            out.events(windows, windows.finish())
        backend.stop()
    return 0


def _handle(backend: Backend, out: Output, lines: list[str], clock_ns: Callable[[], int]) -> bool:
    """Act on control lines; False at ``shutdown`` or when the reader has gone."""
    for line in lines:
        if not line.strip():
            continue
        try:
            control = protocol.parse_control(line)
        except ControlLineError as exc:
            out.write(protocol.status("parse_error", protocol.BUCKET_AMBIENT, error=str(exc)))
            continue
        if control.op == "shutdown":
            return False
        at_ns = control.ts_ns if control.ts_ns is not None else clock_ns()
        if control.op == "scope":
            backend.scope(control, at_ns)
        elif control.phase == "begin" and control.call_id is not None:
            backend.begin(control.call_id, control.tool, at_ns)
        elif control.phase == "end":
            backend.end(control.call_id, at_ns)
        else:
            out.write(protocol.status("unknown_phase", protocol.BUCKET_AMBIENT, phase=control.phase))
        if out.closed.is_set():
            return False
    return True


def _line_batches(stdin: TextIO) -> Iterator[list[str]]:
    """The complete lines of each read from stdin (one line at a time when it is not a file descriptor)."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        for line in stdin:
            yield [line]
        return
    rest = b""
    while chunk := os.read(fd, 65536):
        *complete, rest = (rest + chunk).split(b"\n")
        if complete:
            yield [line.decode("utf-8", "replace") for line in complete]
    if rest:
        yield [rest.decode("utf-8", "replace")]


# -- the fake backend ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScriptEntry:
    trigger: str  # startup, scope, begin, end
    event: dict[str, Any]
    tool: str | None = None  # begin/end: only for marks of this tool
    offset_ns: int = 0  # begin/end: when the event happened, from its mark (-1: just before a begin)


def load_script(path: Path) -> list[ScriptEntry]:
    """An events file: ``{"events": [...]}`` or a bare list of ``{"trigger", "tool"?, "offset_ns"?,
    "event": {"type", ...}}``."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--events-file {path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise UsageError(f"--events-file {path}: not JSON ({exc})") from None
    entries = raw.get("events", []) if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise UsageError(f"--events-file {path}: give a list of events, or an object with an 'events' list")
    script = []
    for index, entry in enumerate(entries):
        where = f"--events-file {path}: events[{index}]"
        if not isinstance(entry, dict) or entry.get("trigger") not in TRIGGERS:
            raise UsageError(f"{where}: 'trigger' must be one of {', '.join(TRIGGERS)}")
        event, tool, offset = entry.get("event"), entry.get("tool"), entry.get("offset_ns", 0)
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise UsageError(f"{where}: 'event' must be an object with a string 'type', e.g. {{\"type\": \"exec\"}}")
        if tool is not None and not isinstance(tool, str):
            raise UsageError(f"{where}: 'tool' must be a tool name")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise UsageError(f"{where}: 'offset_ns' must be an integer (nanoseconds from the mark, may be negative)")
        if offset and entry["trigger"] not in ("begin", "end"):
            raise UsageError(f"{where}: 'offset_ns' is for begin and end entries (startup and scope keep their bucket)")
        script.append(ScriptEntry(entry["trigger"], event, tool, offset))
    return script


class FakeBackend:
    """Replays a script: each entry fires on its trigger, in file order, as an event that happened at
    the trigger's mark plus its ``offset_ns``, attributed by that time as a kernel event would be (so
    overlapping calls make it ambiguous, and an event stamped after a mark still to come waits for it).
    Start-up and scope entries keep the buckets mcpfz-probe's fake gives them."""

    name = "fake"

    def __init__(self, script: list[ScriptEntry], clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self._script = script
        self._clock_ns = clock_ns
        self._wall_offset_ns = time.time_ns() - time.monotonic_ns()  # events' ts_ns are wall-clock, as eBPF's
        self._out: Output
        self._windows: CallWindows

    def start(self, out: Output, windows: CallWindows) -> dict[str, Any]:
        self._out, self._windows = out, windows
        return {"grace_ms": 0}

    def after_ready(self) -> None:
        self._fire("startup", None, self._clock_ns(), bucket=protocol.BUCKET_STARTUP)

    def scope(self, control: ControlLine, at_ns: int) -> None:
        self._out.events(self._windows, self._windows.scope(control.generation, at_ns))
        self._out.write(
            protocol.status("scope", protocol.BUCKET_AMBIENT, pgid=control.pgid, generation=control.generation)
        )
        self._fire("scope", None, self._windows.watermark, bucket=protocol.BUCKET_AMBIENT)

    def begin(self, call_id: str, tool: str | None, at_ns: int) -> None:
        released = self._windows.begin(call_id, tool, at_ns)
        self._out.write(protocol.status("begin", protocol.BUCKET_CALL, call_id))
        self._out.events(self._windows, released)
        self._fire("begin", tool, self._windows.watermark)  # the mark's moment, as the windows took it

    def end(self, call_id: str | None, at_ns: int) -> None:
        ended, released = self._windows.end(call_id, at_ns)
        self._out.events(self._windows, released)
        tool = self._windows.tool(ended) if ended is not None else None
        self._fire("end", tool, self._windows.watermark)  # the trailing part of the window
        if ended is not None:
            self._windows.close(ended)  # nothing stamped up to its end can still be waiting
        self._out.write(protocol.status("end", protocol.BUCKET_CALL, ended or call_id))

    def stop(self) -> None:
        pass

    def _fire(self, trigger: str, tool: str | None, mark_ns: int, *, bucket: str | None = None) -> None:
        for entry in self._script:
            if entry.trigger != trigger or (entry.tool is not None and entry.tool != tool):
                continue
            event = dict(entry.event)
            at_ns = mark_ns + entry.offset_ns
            event["ts_ns"] = at_ns + self._wall_offset_ns
            if bucket is not None:
                event.setdefault("bucket", bucket)
            if "bucket" in event or "call_id" in event:  # the script placed it itself
                self._out.write(event)
            else:
                self._out.events(self._windows, self._windows.event(event, at_ns))


def _stop_on_signal(signum: int, _frame: object) -> None:
    # mcpfz_probe's monitor sends shutdown and then SIGTERM at once: leave through the finally that
    # stops the backend, or bpftrace would outlive us with its probes attached.
    raise SystemExit(128 + signum)


def main(backend_name: str, events_file: Path | None) -> int:
    """``mcpfault probe-sidecar``: the chosen backend on this process's stdin/stdout."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _stop_on_signal)
    backend: Backend
    if backend_name == "fake":
        backend = FakeBackend(load_script(events_file) if events_file is not None else [])
    else:
        from mcpfault.probe import ebpf

        if events_file is not None:
            raise UsageError("--events-file is for --backend fake; the ebpf backend reads the kernel")
        backend = ebpf.EbpfBackend(ebpf.preflight())
    return run(backend, sys.stdin, sys.stdout)
