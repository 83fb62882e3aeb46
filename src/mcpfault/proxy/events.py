"""Event records: one JSON line per request the engine saw, flushed as it is written."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Protocol


class EventSink(Protocol):
    def write(self, record: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlEventSink:
    """Appends one line per record and flushes it: a killed proxy loses at most the line in progress."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("w", encoding="utf-8")
        self._lock = threading.Lock()  # the side-effect probe writes from its own thread

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        self._file.close()


class MemoryEventSink:
    """Keeps records in a list; for tests and for embedding the proxy in a harness."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: Mapping[str, Any]) -> None:
        self.records.append(dict(record))

    def close(self) -> None:
        pass
