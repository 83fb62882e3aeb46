"""mcpfz_probe's ``SidecarRuntimeMonitor``, wrapped for a proxy's request path.

The package's monitor is thread-based and blocking: ``begin_call`` waits for the sidecar's ``begin``
status (so that the window is open before the request reaches the server; 0.2-0.7 ms a call when
the proxy did the same), and ``end_call`` sends the end mark and then waits for the ``end`` status
(0.5-1 ms with eBPF, up to its timeout when the sidecar is stuck). A proxy cannot wait there: the
client's answer would wait with it. With a sidecar whose ``ready`` status says it reads the marks'
stamps (``"mark_clock": "CLOCK_MONOTONIC"``, ours), the wrapper waits for neither. ``begin`` and
``mark_end`` stamp the mark with CLOCK_MONOTONIC, the clock the kernel's events carry, and only queue
it (past ``MAX_QUEUED_MARKS`` the path writes them itself, still without blocking): the sidecar
attributes each event by the stamps, however late it reads them. ``collect``, on the
probe's own thread, writes the queued marks (one write for a call's two, or for several calls) and
waits for the ``end`` status, using the monitor's own reader, buckets and end signals (pinned:
mcpfz-probe 0.1.3); the window counts as confirmed when the call's ``begin`` and ``end`` statuses both
came. With any other sidecar (``MCPFZ_PROBE_BIN``, which may attribute by the time it reads a mark)
``begin`` still sends at once and waits for the ``begin`` status, as the package does.

Writes never block: the sidecar's stdin is non-blocking, and what the pipe does not take at once
goes to a backlog a thread of ours writes when the sidecar reads again; a sidecar that falls
``MAX_BACKLOG`` bytes behind, or is gone, is reported dead (side effects unknown from then on)
instead of raising. The wrapper also drains the sidecar's stderr (the monitor pipes it and never
reads it: a chatty sidecar would block) and keeps ambient events bounded.
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
from collections import deque
from typing import Any

import structlog
from mcpfz_probe import RuntimeEvent, RuntimeSummary, SidecarRuntimeMonitor

from mcpfault.errors import MCPFaultError
from mcpfault.probe.protocol import MARK_CLOCK

log = structlog.get_logger("mcpfault.probe")

READY_TIMEOUT_S = 120.0  # bpftrace compiles and attaches ~50 probes: seconds on a busy machine
SCOPE_TIMEOUT_S = 10.0
BEGIN_TIMEOUT_S = 2.0  # the package's own default
END_TIMEOUT_S = 5.0
MAX_AMBIENT = 10_000
MAX_BACKLOG = 16 << 20  # bytes of control lines the sidecar has not read (~150,000 marks): it is stuck
MAX_QUEUED_MARKS = 10_000  # stamped marks the probe's thread has not written yet: the path writes them


class SidecarFailed(MCPFaultError, RuntimeError):
    """The sidecar exited or stopped reading; its last words in the message."""


class ProbeMonitor(SidecarRuntimeMonitor):  # type: ignore[misc]
    def __init__(self, command: list[str]) -> None:
        super().__init__(command)
        self.alive = False
        self.stamped_marks = False  # the sidecar attributes by the marks' ts_ns: no waiting for begin
        self._stderr_tail: deque[str] = deque(maxlen=5)
        self._stderr_thread: threading.Thread | None = None
        self._statuses: deque[RuntimeEvent] = deque(maxlen=256)  # ambient statuses already taken
        self._send_lock = threading.Condition()  # stamps and writes in one order; wakes the backlog writer
        self._backlog = bytearray()
        self._stamped: list[dict[str, Any]] = []  # stamped marks not yet written, in stamp order
        self._last_stamp_ns = 0
        self._stdin_fd = -1
        self._backlog_thread: threading.Thread | None = None
        self._closing = False

    def start_and_wait(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Start the sidecar and wait for its ``ready`` status (its fields); SidecarFailed if it never comes."""
        self.start()
        assert self._process is not None and self._process.stdin is not None
        self._stdin_fd = self._process.stdin.fileno()
        os.set_blocking(self._stdin_fd, False)
        self._backlog_thread = threading.Thread(target=self._write_backlog, name="mcpfault-probe-marks", daemon=True)
        self._backlog_thread.start()
        self._stderr_thread = threading.Thread(target=self._drain_stderr, name="mcpfault-probe-stderr", daemon=True)
        self._stderr_thread.start()
        ready = self._wait_status(lambda e: e.data.get("message") == "ready", timeout_s)
        self.stamped_marks = ready.data.get("mark_clock") == MARK_CLOCK
        self.alive = True
        return dict(ready.data)

    def scope(self, pgid: int, generation: int, timeout_s: float = SCOPE_TIMEOUT_S) -> bool:
        """Scope the sidecar to a process group; True once it says the scope is in place."""
        if not self._send_safely({"op": "scope", "pgid": pgid, "generation": generation}):
            return False
        try:
            self._wait_status(
                lambda e: e.data.get("message") == "scope" and e.data.get("generation") == generation, timeout_s
            )
        except SidecarFailed as exc:
            log.warning("the probe sidecar did not confirm its scope", reason=str(exc))
            return False
        return True

    def begin(self, call_id: str, tool: str, timeout_s: float = BEGIN_TIMEOUT_S) -> bool:
        """Open a call window: stamped and sent (True when sent), or, with a sidecar that does not read
        stamps, sent and confirmed within ``timeout_s`` (True when confirmed)."""
        if not self.alive:
            return False
        if not self.stamped_marks:
            try:
                self.begin_call(call_id, tool, timeout=timeout_s)
            except (OSError, RuntimeError, ValueError) as exc:
                self._died(exc)
                return False
            with self._lock:
                signal = self._begin_signals.get(call_id)
                return signal is not None and signal.is_set()
        # No signals here (an Event costs more than the mark): collect finds the statuses among the
        # call's lines, or waits on a signal it registers then.
        return self._mark({"op": "mark", "phase": "begin", "call_id": call_id, "tool": tool})

    def mark_end(self, call_id: str) -> bool:
        """The end mark: stamped now and sent by ``flush_marks`` (or sent now, to a sidecar that does not
        read stamps); never waits for an answer."""
        return self._mark({"op": "mark", "phase": "end", "call_id": call_id})

    def flush_marks(self) -> bool:
        """Write the marks stamped so far (``collect`` does, on the probe's thread)."""
        if not self.alive:
            return False
        try:
            with self._send_lock:
                self._write_locked(b"")
        except (OSError, RuntimeError, ValueError) as exc:
            self._died(exc)
            return False
        return True

    def collect(self, call_id: str, timeout_s: float = END_TIMEOUT_S) -> tuple[RuntimeSummary, bool]:
        """The call's events once the sidecar's ``end`` status arrived, or what came by the timeout; True
        when the sidecar answered both marks (its ``begin`` status comes before its ``end``). The marks
        still queued, this call's among them, are written first."""
        if self._stamped:
            self.flush_marks()
        with self._lock:
            signal = self._end_signals.get(call_id)
            if signal is None and self.stamped_marks:
                signal = self._end_signals[call_id] = threading.Event()
                if _has_status(self._events_by_call.get(call_id, ()), "end"):
                    signal.set()  # came before the signal was there: the reader sets only what it finds
        ended = signal is not None and self.alive and signal.wait(timeout_s)
        with self._lock:
            self._end_signals.pop(call_id, None)
            began = self._begin_signals.pop(call_id, None)
            events = tuple(self._events_by_call.pop(call_id, []))
            truncated = any(e.type == "drop" for e in events) or self._dropped > 0
        began_ok = began.is_set() if began is not None else _has_status(events, "begin")
        return RuntimeSummary(call_id=call_id, events=events, truncated=truncated), bool(ended) and began_ok

    def take_ambient(self) -> list[RuntimeEvent]:
        """Ambient events since the last take (the package keeps them all, for ever)."""
        with self._lock:
            events = list(self._ambient_events)
            self._ambient_events.clear()
            self._statuses.extend(e for e in events if e.type == "status")
        return events

    def close(self) -> None:
        self.alive = False
        with self._send_lock:
            self._closing = True
            self._send_lock.notify_all()
        if self._backlog_thread is not None:
            self._backlog_thread.join(timeout=2)  # before the package closes the pipe it may write to
        try:
            self.stop()
        except (OSError, ValueError) as exc:
            log.warning("stopping the probe sidecar", error=str(exc))
        with self._send_lock:
            self._stdin_fd = -1  # closed by stop(): a number the process may give to another file

    @property
    def last_words(self) -> str:
        return " | ".join(self._stderr_tail)

    # -- internals -------------------------------------------------------------------------------

    def _wait_status(self, matches: Any, timeout_s: float) -> RuntimeEvent:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                seen = [*self._statuses, *self._ambient_events[-MAX_AMBIENT:]]
            for event in seen:
                if event.type == "status" and matches(event):
                    return event
            process = self._process
            if process is None or process.poll() is not None:
                time.sleep(0.1)  # let its stderr arrive
                raise SidecarFailed(f"the probe sidecar exited ({self.last_words or 'no message'})")
            if time.monotonic() > deadline:
                raise SidecarFailed(f"the probe sidecar did not answer within {timeout_s:.0f} s")
            time.sleep(0.01)

    def _mark(self, payload: dict[str, Any]) -> bool:
        """A mark from the request path. Stamped, it only queues: the sidecar needs it by the time it
        attributes, not before the server acts, so the write (and the sidecar's wake-up) is left to
        ``flush_marks`` on the probe's thread, one write for the marks of a call or more."""
        if not self.stamped_marks:
            return self._send_safely(payload)
        if not self.alive:
            return False
        with self._send_lock:
            self._stamped.append(self._stamp(payload))
            if len(self._stamped) < MAX_QUEUED_MARKS:
                return True
        return self.flush_marks()  # the probe's thread is far behind: do not let them pile up

    def _stamp(self, payload: dict[str, Any]) -> dict[str, Any]:
        # Under the send lock: the stamps increase in the order the sidecar reads the lines.
        now = time.monotonic_ns()
        self._last_stamp_ns = now if now > self._last_stamp_ns else self._last_stamp_ns + 1
        return {**payload, "ts_ns": self._last_stamp_ns}

    def _send(self, payload: dict[str, Any]) -> None:
        """The package's send (every control line goes through it), after the marks queued before it."""
        if self._process is None or self._stdin_fd < 0:
            raise RuntimeError("runtime monitor is not started")
        with self._send_lock:
            if self.stamped_marks and payload.get("op") == "scope":
                payload = self._stamp(payload)
            self._write_locked(_encode(payload))

    def _write_locked(self, line: bytes) -> None:
        """Queued marks, then ``line``: written now as far as the pipe takes them, the rest left to the
        backlog thread. Never blocks."""
        if self._stdin_fd < 0:
            raise RuntimeError("the probe sidecar's stdin is closed")
        if self._stamped:
            line = b"".join(_encode(mark) for mark in self._stamped) + line
            self._stamped.clear()
        if not line:
            return
        if not self._backlog:
            try:
                written = os.write(self._stdin_fd, line)
            except BlockingIOError:
                written = 0
            line = line[written:]
        if line:
            self._backlog += line
            if len(self._backlog) > MAX_BACKLOG:
                waiting = len(self._backlog)
                self._backlog.clear()
                raise RuntimeError(f"the probe sidecar stopped reading ({waiting} bytes of marks wait)")
            self._send_lock.notify_all()

    def _write_backlog(self) -> None:
        """What the pipe did not take at once, written as the sidecar reads again (off the request path)."""
        while True:
            with self._send_lock:
                while not self._backlog and not self._closing:
                    self._send_lock.wait()
                if self._closing:
                    return
            try:
                select.select([], [self._stdin_fd], [], 0.1)
            except (OSError, ValueError):
                return
            with self._send_lock:
                if self._closing or not self._backlog:
                    continue
                try:
                    written = os.write(self._stdin_fd, self._backlog)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    self._backlog.clear()
                    self._died(exc)
                    return
                del self._backlog[:written]

    def _send_safely(self, payload: dict[str, Any]) -> bool:
        if not self.alive:
            return False
        try:
            self._send(payload)
        except (OSError, RuntimeError, ValueError) as exc:
            self._died(exc)
            return False
        return True

    def _died(self, exc: BaseException) -> None:
        if self.alive:
            self.alive = False
            log.error("the probe sidecar is gone; side effects are unknown from now on", error=str(exc))

    def _drain_stderr(self) -> None:
        process = self._process
        if process is None or process.stderr is None:
            return
        for line in process.stderr:
            text = line.rstrip()
            if text:
                self._stderr_tail.append(text[:300])
                log.info("probe sidecar", message=text[:300])


def _encode(payload: dict[str, Any]) -> bytes:
    return (json.dumps(payload, separators=(",", ":")) + "\n").encode()


def _has_status(events: Any, message: str) -> bool:
    return any(e.type == "status" and e.data.get("message") == message for e in events)
