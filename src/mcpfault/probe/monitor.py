"""mcpfz_probe's ``SidecarRuntimeMonitor``, wrapped for a proxy's request path.

The package's monitor is thread-based and blocking: ``begin_call`` waits for the sidecar's ``begin``
status (measured here: 0.2-0.7 ms a call with either backend, so the proxy keeps it, on the path,
because a window must be open before the request reaches the server), and ``end_call`` sends the
end mark and then waits for the ``end`` status (0.5-1 ms with eBPF, up to its timeout when the
sidecar is stuck). A proxy cannot wait there: the client's answer would wait with it, and the next
call's begin mark would have to queue behind it. So the wrapper splits ``end_call`` into
``mark_end`` (send now, on the path) and ``collect`` (wait, on the probe's own thread), using the
monitor's own reader, buckets and end signals (pinned: mcpfz-probe 0.1.3). It also drains the
sidecar's stderr (the monitor pipes it and never reads it: a chatty sidecar would block), keeps
ambient events bounded, and reports a dead sidecar instead of raising on the path.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import structlog
from mcpfz_probe import RuntimeEvent, RuntimeSummary, SidecarRuntimeMonitor

from mcpfault.errors import MCPFaultError

log = structlog.get_logger("mcpfault.probe")

READY_TIMEOUT_S = 120.0  # bpftrace compiles and attaches ~50 probes: seconds on a busy machine
SCOPE_TIMEOUT_S = 10.0
BEGIN_TIMEOUT_S = 2.0  # the package's own default
END_TIMEOUT_S = 5.0
MAX_AMBIENT = 10_000


class SidecarFailed(MCPFaultError, RuntimeError):
    """The sidecar exited or stopped reading; its last words in the message."""


class ProbeMonitor(SidecarRuntimeMonitor):  # type: ignore[misc]
    def __init__(self, command: list[str]) -> None:
        super().__init__(command)
        self.alive = False
        self._stderr_tail: deque[str] = deque(maxlen=5)
        self._stderr_thread: threading.Thread | None = None
        self._statuses: deque[RuntimeEvent] = deque(maxlen=256)  # ambient statuses already taken

    def start_and_wait(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Start the sidecar and wait for its ``ready`` status (its fields); SidecarFailed if it never comes."""
        self.start()
        self._stderr_thread = threading.Thread(target=self._drain_stderr, name="mcpfault-probe-stderr", daemon=True)
        self._stderr_thread.start()
        ready = self._wait_status(lambda e: e.data.get("message") == "ready", timeout_s)
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
        """Open a call window; True when the sidecar confirmed it in time."""
        if not self.alive:
            return False
        try:
            self.begin_call(call_id, tool, timeout=timeout_s)
        except (OSError, RuntimeError, ValueError) as exc:
            self._died(exc)
            return False
        with self._lock:
            signal = self._begin_signals.get(call_id)
            return signal is not None and signal.is_set()

    def mark_end(self, call_id: str) -> bool:
        """Send the end mark now, without waiting for the sidecar's answer."""
        return self._send_safely({"op": "mark", "phase": "end", "call_id": call_id})

    def collect(self, call_id: str, timeout_s: float = END_TIMEOUT_S) -> tuple[RuntimeSummary, bool]:
        """The call's events once the sidecar's ``end`` status arrived (True), or what came by the timeout (False)."""
        with self._lock:
            signal = self._end_signals.get(call_id)
        confirmed = signal is not None and self.alive and signal.wait(timeout_s)
        with self._lock:
            self._end_signals.pop(call_id, None)
            self._begin_signals.pop(call_id, None)
            events = tuple(self._events_by_call.pop(call_id, []))
            truncated = any(e.type == "drop" for e in events) or self._dropped > 0
        return RuntimeSummary(call_id=call_id, events=events, truncated=truncated), bool(confirmed)

    def take_ambient(self) -> list[RuntimeEvent]:
        """Ambient events since the last take (the package keeps them all, for ever)."""
        with self._lock:
            events = list(self._ambient_events)
            self._ambient_events.clear()
            self._statuses.extend(e for e in events if e.type == "status")
        return events

    def close(self) -> None:
        self.alive = False
        try:
            self.stop()
        except (OSError, ValueError) as exc:
            log.warning("stopping the probe sidecar", error=str(exc))

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
