"""Event records: one JSON line per request the engine saw, flushed as it is written.

A file is appended to, never truncated: a client such as Claude Desktop relaunches its servers (and
with them the proxy) often, and each launch's records stay. Each launch first writes one start line
(``"event": "proxy_started"``, with the pid, profile, seed and transport), so the runs in one file can
be told apart, and ends with one stop line (``"event": "proxy_stopped"``, with the exit status and
why it ended) once everything else is flushed: a launch without one was killed. ``read_events``
returns the request records only. A supervised server's deaths,
restarts and downtime are lines of their own (``SERVER_EVENTS``; ``read_server_events``).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol

from mcpfault.protocol.jsonlines import dumps_line, read_jsonl
from mcpfault.telemetry import names

START_EVENT = "proxy_started"
# Each launch's last line, written after every other record of it has been flushed: a launch without
# one was killed (SIGKILL, OOM) or crashed, and may have lost the records of requests in flight.
STOP_EVENT = "proxy_stopped"
# The supervised server's lifecycle names live with the other telemetry names, where the analysis
# (which imports no transport) reads them too.
SERVER_EXITED = names.SERVER_EXITED
SERVER_RESTARTED = names.SERVER_RESTARTED
SERVER_BACK = names.SERVER_BACK
SERVER_EVENTS = (SERVER_EXITED, SERVER_RESTARTED, SERVER_BACK)
OWN_EXIT = names.OWN_EXIT

# The wall clock of every record's ``time``: the default of ``ProxyCore(wall_clock=...)``, which a test
# replaces with a fixed one. A partial, not a function of ours: one call fewer per record.
utc_now: Callable[[], datetime] = functools.partial(datetime.now, UTC)


class EventSink(Protocol):
    def write(self, record: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlEventSink:
    """Appends one line per record and flushes it: a killed proxy loses at most the line in progress."""

    def __init__(self, path: Path, *, start: Mapping[str, Any] | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        if start is not None:
            self.write(start_record(start))

    def write(self, record: Mapping[str, Any]) -> None:
        line = dumps_line(record, separators=(",", ":"), ensure_ascii=False, default=str) + "\n"
        with self._lock:  # the control API writes from the event loop while a reader thread writes requests
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def start_record(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The line that marks one launch of the proxy in an events file."""
    return {
        "time": utc_now().isoformat(timespec="milliseconds"),
        "event": START_EVENT,
        "pid": os.getpid(),
        **facts,
    }


def stop_record(
    exit_code: int | None, ended_by: str | None, *, requests: int, faults: int, client_write_failed: bool
) -> dict[str, Any]:
    """The line that closes one launch: its exit status (None: it ended in an error of its own), why
    it ended, and how many requests and faults it saw."""
    return {
        "time": utc_now().isoformat(timespec="milliseconds"),
        "event": STOP_EVENT,
        "pid": os.getpid(),
        "exit_code": exit_code,
        "ended_by": (ended_by or f"the proxy stopped (status {exit_code})")
        if exit_code is not None
        else "an error in the proxy (see its stderr)",
        "requests": requests,
        "faults_injected": faults,
        "client_write_failed": client_write_failed,
    }


def read_events(path: Path) -> list[dict[str, Any]]:
    """The request records of an events file, every launch's, without the start lines."""
    return [row for row in read_jsonl(path) if isinstance(row, dict) and "event" not in row]


def read_server_events(path: Path) -> list[dict[str, Any]]:
    """The supervised server's lifecycle records of an events file, every launch's, in order."""
    return [row for row in read_jsonl(path) if isinstance(row, dict) and row.get("event") in SERVER_EVENTS]


class MemoryEventSink:
    """Keeps records in a list; for tests and for embedding the proxy in a harness."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: Mapping[str, Any]) -> None:
        self.records.append(dict(record))

    def close(self) -> None:
        pass
