"""Server-sent events, as the HTTP transport needs them: cut a stream into events as bytes arrive,
keep each event's exact bytes (so an untouched event crosses byte for byte), and write new ones.

Follows the WHATWG event-stream rules: lines end in CRLF, LF or CR; a blank line ends an event;
``data`` lines join with LF; one space after the colon is dropped; lines starting with ``:`` are
comments. Sans-IO, like the core.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_LINE_END = re.compile(rb"\r\n|\r|\n")


class Event(NamedTuple):
    raw: bytes  # the event's bytes, its closing blank line included
    data: bytes | None  # the joined data lines; None when they are empty or absent (a priming id, a comment, a retry)
    event_id: bytes | None
    event_type: bytes | None


class EventSplitter:
    """Feed chunks, get whole events. Bounded: an event larger than ``max_event_bytes`` is an error."""

    def __init__(self, max_event_bytes: int = 64 * 1024 * 1024) -> None:
        self._buffer = bytearray()
        self._scan_from = 0  # where the next line starts in the buffer
        self._event_start = 0
        self._data: list[bytes] = []
        self._has_data = False
        self._event_id: bytes | None = None
        self._event_type: bytes | None = None
        self._max_event_bytes = max_event_bytes

    def feed(self, chunk: bytes) -> list[Event]:
        self._buffer += chunk
        events: list[Event] = []
        buffer = self._buffer
        position = self._scan_from
        while True:
            match = _LINE_END.search(buffer, position)
            if match is None:
                break
            if match.group() == b"\r" and match.end() == len(buffer):
                break  # a CR at the very end may be the first half of a CRLF still on its way
            line = bytes(buffer[position : match.start()])
            position = match.end()
            if line:
                self._field(line)
                continue
            raw = bytes(buffer[self._event_start : position])
            if self._has_data or self._event_id is not None or self._event_type is not None or raw.strip():
                # An event whose data is empty dispatches nothing (WHATWG); servers send one with just an
                # ``id`` to prime a stream for Last-Event-ID, and it is framing, not a message.
                data = b"\n".join(self._data) if self._has_data else None
                data = data or None
                events.append(Event(raw, data, self._event_id, self._event_type))
            self._event_start = position
            self._data, self._has_data, self._event_id, self._event_type = [], False, None, None
        if self._event_start:
            del buffer[: self._event_start]
            position -= self._event_start
            self._event_start = 0
        self._scan_from = position
        if len(buffer) > self._max_event_bytes:
            raise ValueError(f"an SSE event is larger than {self._max_event_bytes} bytes")
        return events

    def pending(self) -> bytes:
        """Bytes of an event that has not ended (what a stream closed mid-event leaves)."""
        return bytes(self._buffer)

    def _field(self, line: bytes) -> None:
        if line.startswith(b":"):
            return
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._has_data = True
        elif name == b"id":
            self._event_id = value
        elif name == b"event":
            self._event_type = value


def encode(data: bytes, *, event_id: bytes | None = None, event_type: bytes | None = b"message") -> bytes:
    """One event carrying ``data`` (a JSON-RPC message)."""
    parts = []
    if event_type is not None:
        parts.append(b"event: " + event_type + b"\n")
    if event_id is not None:
        parts.append(b"id: " + event_id + b"\n")
    for line in _LINE_END.split(data):
        parts.append(b"data: " + line + b"\n")
    parts.append(b"\n")
    return b"".join(parts)
