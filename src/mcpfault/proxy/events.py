"""Event records: one JSON line per request the engine saw, flushed as it is written.

A file is appended to, never truncated: a client such as Claude Desktop relaunches its servers (and
with them the proxy) often, and each launch's records stay. Each launch first writes one start line
(``"event": "proxy_started"``, with the pid, profile, seed and transport), so the runs in one file can
be told apart; ``read_events`` returns the request records only. A supervised server's deaths,
restarts and downtime are lines of their own (``SERVER_EVENTS``; ``read_server_events``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol

from mcpfault.protocol.jsonlines import dumps_line, read_jsonl

START_EVENT = "proxy_started"
# The supervised server's lifecycle (proxy/supervisor.py's ServerEvents): a death, a new generation
# started, and the first answer after a restart (with the downtime since the death).
SERVER_EXITED = "server_exited"
SERVER_RESTARTED = "server_restarted"
SERVER_BACK = "server_back"
SERVER_EVENTS = (SERVER_EXITED, SERVER_RESTARTED, SERVER_BACK)
OWN_EXIT = "none"  # the cause of a death no fault caused (also the fault_type label of crashes_total)


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
        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "event": START_EVENT,
        "pid": os.getpid(),
        **facts,
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
