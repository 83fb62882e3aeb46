"""mcpfz-probe's sidecar protocol (NDJSON both ways), and which call window an event belongs to.

ControlLine lines, to the sidecar's stdin::

    {"op":"scope","pgid":N,"generation":G,"ts_ns":T}
    {"op":"mark","phase":"begin","call_id":"...","tool":"...","ts_ns":T}
    {"op":"mark","phase":"end","call_id":"...","ts_ns":T}
    {"op":"shutdown"}

``ts_ns`` (our addition, optional) is when the line's moment happened, on CLOCK_MONOTONIC, the clock
the kernel stamps events with (bpftrace's ``nsecs``; ``time.monotonic_ns()`` in Python). A line
without it is stamped when the sidecar reads it, as mcpfz-probe's own sidecar does. The stamps of
successive lines must increase (a sender stamps and writes under one lock); a line stamped no later
than the one before it is taken 1 ns after it, so that windows stay in the order they were sent.

Lines from its stdout: status messages (``{"type":"status","message":"ready"|"scope"|"begin"|"end"|
"parse_error"|"unknown_phase",...}``) and events (``{"type":"exec","bucket":"startup|call|ambient",
"call_id":...,"pid":...,"comm":...,"ts_ns":...,<the type's fields>}``). mcpfz_probe's
``SidecarRuntimeMonitor`` waits on the ``begin`` and ``end`` statuses of a call, and files every line
with a ``call_id`` under that call, every other line as ambient. The ``ready`` status says
``"mark_clock":"CLOCK_MONOTONIC"``: this sidecar attributes by the marks' stamps, so a sender need not
wait for ``begin`` before the call goes ahead.

Attribution is by time: an event belongs to every window open when it happened (begin <= t <= end,
both ends included). One window: the event is that call's (bucket ``call``). Several (overlapping
calls): it is ambient and ``ambiguous``, with the ids of the calls it may belong to in ``candidates``
(an addition of ours; readers of the protocol ignore keys they do not know). After a scope and before
the first mark that follows it, events are ``startup``. Because a mark may be read after the events it
precedes, an event is held until a control line stamped at or after it has been read (no earlier
mark can come after that), and attributed then; the ``end`` status of a call follows every event of
its window.
"""

from __future__ import annotations

import heapq
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcpfault.errors import MCPFaultError
from mcpfault.telemetry.logging import REDACTED, is_secret_key, redact_text
from mcpfault.telemetry.otel_env import redact_userinfo

# Event types the backends emit, with the fields each carries (mcpfz_probe.policy reads these).
EVENT_TYPES = (
    "exec",  # argv (argv[0] is the executable's path), path
    "process_spawn",  # syscall (fork, vfork, clone, clone3)
    "connect",  # proto (tcp for connect, udp for sendto), dst "host:port"
    "bind",  # dst
    "listen",  # fd, backlog
    "file_open",  # path, flags "O_WRONLY|O_CREAT"
    "file_delete",  # path
    "file_rename",  # path (the new name), from
    "file_mkdir",  # path
    "file_symlink",  # path (the link), target
    "file_link",  # path (the new link), target
    "chmod",  # path, mode (octal text)
    "ptrace",  # request, target_pid
)
DROP = "drop"  # count, reason: events the backend lost
STATUS = "status"

# Words that make an argument's name (``--db-password``, ``GITHUB_TOKEN=``, ``PGPASSWORD=``) a secret's,
# besides the keys the log redaction knows (telemetry.logging.is_secret_key).
_WORDS = re.compile(r"(\s+)")
_AUTH_SCHEMES = frozenset({"basic", "bearer", "digest", "token", "negotiate"})
_SECRET_WORDS = ("password", "passwd", "secret", "token", "apikey", "api_key", "private_key", "credential")

BUCKET_STARTUP = "startup"
BUCKET_CALL = "call"
BUCKET_AMBIENT = "ambient"

_CONTROL_OPS = ("scope", "mark", "shutdown")
MARK_CLOCK = "CLOCK_MONOTONIC"  # in the ready status: marks' ts_ns are read on this clock
MAX_HELD = 100_000  # events waiting for a later mark; beyond, the oldest is dropped (and reported)
MAX_ERAS = 8  # scopes remembered, for events read late


class ControlLineError(MCPFaultError, ValueError):
    """A control line the sidecar cannot act on; answered with a ``parse_error`` status."""


@dataclass(frozen=True, slots=True)
class ControlLine:
    op: str  # scope, mark, shutdown
    phase: str | None = None  # mark: begin or end
    call_id: str | None = None
    tool: str | None = None
    pgid: int = 0
    generation: int = 0
    ts_ns: int | None = None  # CLOCK_MONOTONIC; None: the sidecar stamps the line when it reads it


def parse_control(line: str) -> ControlLine:
    try:
        raw = json.loads(line)
    except ValueError as exc:
        raise ControlLineError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("op") not in _CONTROL_OPS:
        raise ControlLineError(f"not a control message: give op one of {', '.join(_CONTROL_OPS)}")
    op = raw["op"]
    ts_ns = raw.get("ts_ns")
    if ts_ns is not None and (not _is_int(ts_ns) or ts_ns < 0):
        raise ControlLineError(f"{op}: ts_ns must be a non-negative integer (CLOCK_MONOTONIC nanoseconds)")
    if op == "scope":
        pgid, generation = raw.get("pgid"), raw.get("generation", 0)
        if not isinstance(pgid, int) or isinstance(pgid, bool) or pgid <= 0 or not _is_int(generation):
            raise ControlLineError("scope needs a positive integer pgid and an integer generation")
        return ControlLine("scope", pgid=pgid, generation=generation, ts_ns=ts_ns)
    if op == "mark":
        call_id, tool = raw.get("call_id"), raw.get("tool")
        if call_id is not None and not isinstance(call_id, str):
            raise ControlLineError("mark: call_id must be a string")
        tool = tool if isinstance(tool, str) else None
        return ControlLine("mark", phase=str(raw.get("phase")), call_id=call_id, tool=tool, ts_ns=ts_ns)
    return ControlLine("shutdown")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def encode(message: Mapping[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n"


def status(message: str, bucket: str, call_id: str | None = None, **fields: Any) -> dict[str, Any]:
    line: dict[str, Any] = {"type": STATUS, "message": message, "bucket": bucket, **fields}
    if call_id is not None:
        line["call_id"] = call_id
    line["ts_ns"] = time.time_ns()
    return line


@dataclass(slots=True)
class _WireWindow:
    call_id: str
    tool: str | None
    begin_ns: int
    end_ns: int | None = None  # set by the end mark; the window closes when the backend has caught up


@dataclass(slots=True)
class _Era:
    """From a scope on: events are start-up until the first mark after it."""

    begin_ns: int
    first_mark_ns: int | None = None


@dataclass(slots=True)
class CallWindows:
    """The call windows of one sidecar on CLOCK_MONOTONIC, and the events waiting for their marks.

    Every method returns the events it let go, attributed, oldest first: the caller writes them.
    An event waits while it is later than every control line read so far (a mark stamped before it
    may still be on its way); the next line stamped at or after it lets it go. ``finish`` lets all go.
    """

    max_held: int = MAX_HELD
    generation: int = 0
    dropped: int = 0  # events let go unattributed because too many waited (reported as a drop)
    _windows: dict[str, _WireWindow] = field(default_factory=dict)
    _eras: list[_Era] = field(default_factory=lambda: [_Era(-1)])
    _held: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # a heap: (at_ns, seq, event)
    _seq: int = 0
    _watermark: int = -1  # the stamp of the last control line: no later line is stamped before it
    _finished: bool = False

    @property
    def watermark(self) -> int:
        """The moment of the last control line (after any clamping): nothing can still be marked before it."""
        return self._watermark

    def stamp(self, ts_ns: int) -> int:
        """A control line's moment: its stamp, or 1 ns after the previous line's if it is not later."""
        at_ns = ts_ns if ts_ns > self._watermark else self._watermark + 1
        self._watermark = at_ns
        return at_ns

    def scope(self, generation: int, ts_ns: int) -> list[dict[str, Any]]:
        at_ns = self.stamp(ts_ns)
        self.generation = generation
        self._eras = [*self._eras[-(MAX_ERAS - 1) :], _Era(at_ns)]
        return self._release(at_ns)

    def begin(self, call_id: str, tool: str | None, ts_ns: int) -> list[dict[str, Any]]:
        at_ns = self._mark(ts_ns)
        self._windows[call_id] = _WireWindow(call_id, tool, at_ns)
        return self._release(at_ns)

    def end(self, call_id: str | None, ts_ns: int) -> tuple[str | None, list[dict[str, Any]]]:
        """Stop the window growing (events up to the end mark still belong to it): its id (None: an
        unknown call), and the events let go."""
        at_ns = self._mark(ts_ns)
        if call_id is None:  # an end without an id ends the newest window, as mcpfz-probe's sidecar does
            open_ = [w for w in self._windows.values() if w.end_ns is None]
            call_id = open_[-1].call_id if open_ else None
        window = self._windows.get(call_id) if call_id is not None else None
        if window is not None:
            window.end_ns = at_ns
        return (call_id if window is not None else None), self._release(at_ns)

    def event(self, event: dict[str, Any], at_ns: int) -> list[dict[str, Any]]:
        """An event that happened at ``at_ns``: attributed now if no mark before it can still come, else held."""
        if self._finished or at_ns <= self._watermark:
            return [self.attribute(event, at_ns)]
        self._seq += 1
        heapq.heappush(self._held, (at_ns, self._seq, event))
        if len(self._held) <= self.max_held:
            return []
        # The sender has stopped marking: the oldest held event cannot wait for ever, and attributing
        # it now could put it in a window whose end mark is still to come. It goes, counted as lost.
        heapq.heappop(self._held)
        self.dropped += 1
        return []

    def finish(self) -> list[dict[str, Any]]:
        """No control line will come any more: every held event goes, attributed by the windows known."""
        self._finished = True
        return self._release(None)

    def close(self, call_id: str) -> str | None:
        """The backend has delivered everything up to the end mark: the window is gone. Its tool."""
        window = self._windows.pop(call_id, None)
        return window.tool if window is not None else None

    def tool(self, call_id: str) -> str | None:
        window = self._windows.get(call_id)
        return window.tool if window is not None else None

    def take_dropped(self) -> int:
        dropped, self.dropped = self.dropped, 0
        return dropped

    def attribute(self, event: dict[str, Any], at_ns: int) -> dict[str, Any]:
        """``event`` with its bucket (and call_id, or candidates when calls overlapped) filled in, by the
        windows as they are known now (the caller makes sure no mark before ``at_ns`` is still to come)."""
        hits = [
            w.call_id for w in self._windows.values() if w.begin_ns <= at_ns and (w.end_ns is None or at_ns <= w.end_ns)
        ]
        if len(hits) == 1:
            event["bucket"] = BUCKET_CALL
            event["call_id"] = hits[0]
        elif hits:
            event["bucket"] = BUCKET_AMBIENT
            event["ambiguous"] = True
            event["candidates"] = hits
        else:
            era = next((e for e in reversed(self._eras) if e.begin_ns <= at_ns), self._eras[0])
            startup = era.first_mark_ns is None or at_ns < era.first_mark_ns
            event["bucket"] = BUCKET_STARTUP if startup else BUCKET_AMBIENT
        return event

    def _mark(self, ts_ns: int) -> int:
        at_ns = self.stamp(ts_ns)
        era = self._eras[-1]
        if era.first_mark_ns is None:
            era.first_mark_ns = at_ns
        return at_ns

    def _release(self, up_to_ns: int | None) -> list[dict[str, Any]]:
        released = []
        while self._held and (up_to_ns is None or self._held[0][0] <= up_to_ns):
            at_ns, _seq, event = heapq.heappop(self._held)
            released.append(self.attribute(event, at_ns))
        return released


# -- secrets in exec events ----------------------------------------------------------------------


def _secret_name(name: str) -> bool:
    bare = name.lstrip("-").strip()
    lowered = bare.lower().replace("-", "_")
    return bool(bare) and (is_secret_key(bare) or any(word in lowered for word in _SECRET_WORDS))


def redact_argv(argv: Sequence[object]) -> list[str]:
    """An exec's argv fit for spans, events and logs: secrets replaced by ``[redacted]``.

    Each argument is read word by word (a shell's ``-c`` script is one argument of many words). What
    goes: the value of ``--password=x`` / ``TOKEN=x`` (any name the log redaction or ``_SECRET_WORDS``
    calls secret, as a flag or an environment-style assignment), the word after such a flag
    (``--api-key x``), the rest of a header (``Authorization: Basic x``), a bearer token or an ``sk-``
    key anywhere, and a URL's ``user:password@``. argv[0], the program, stays as it is.
    """
    redacted: list[str] = [str(argv[0])] if argv else []
    hide_next = False
    for item in argv[1:]:
        words = _WORDS.split(redact_userinfo(redact_text(str(item))))
        header = False
        for index, word in enumerate(words):
            if not word or word.isspace():
                continue
            if hide_next:
                if header and word.lower() in _AUTH_SCHEMES:
                    header = False  # "Authorization: Basic x": the scheme stays, its credentials go
                    continue
                words[index], hide_next, header = REDACTED, False, False
                continue
            name, equals, _value = word.partition("=")
            if equals and _secret_name(name):
                words[index] = f"{name}={REDACTED}"
            elif word.endswith(":") and _secret_name(word[:-1]):
                hide_next = header = True
            elif word.startswith("-") and _secret_name(word):
                hide_next = True
        redacted.append("".join(words))
    return redacted
