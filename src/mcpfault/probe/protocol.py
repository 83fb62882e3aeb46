"""mcpfz-probe's sidecar protocol (NDJSON both ways), and which call window an event belongs to.

ControlLine lines, to the sidecar's stdin::

    {"op":"scope","pgid":N,"generation":G}
    {"op":"mark","phase":"begin","call_id":"...","tool":"..."}
    {"op":"mark","phase":"end","call_id":"..."}
    {"op":"shutdown"}

Lines from its stdout: status messages (``{"type":"status","message":"ready"|"scope"|"begin"|"end"|
"parse_error"|"unknown_phase",...}``) and events (``{"type":"exec","bucket":"startup|call|ambient",
"call_id":...,"pid":...,"comm":...,"ts_ns":...,<the type's fields>}``). mcpfz_probe's
``SidecarRuntimeMonitor`` waits on the ``begin`` and ``end`` statuses of a call, and files every line
with a ``call_id`` under that call, every other line as ambient.

Attribution is by time: an event belongs to every window open when it happened. One window: the
event is that call's (bucket ``call``). Several (overlapping calls): it is ambient and ``ambiguous``,
with the ids of the calls it may belong to in ``candidates`` (an addition of ours; readers of the
protocol ignore keys they do not know). Before the first mark after a scope, events are ``startup``.
"""

from __future__ import annotations

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


def parse_control(line: str) -> ControlLine:
    try:
        raw = json.loads(line)
    except ValueError as exc:
        raise ControlLineError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("op") not in _CONTROL_OPS:
        raise ControlLineError(f"not a control message: give op one of {', '.join(_CONTROL_OPS)}")
    op = raw["op"]
    if op == "scope":
        pgid, generation = raw.get("pgid"), raw.get("generation", 0)
        if not isinstance(pgid, int) or isinstance(pgid, bool) or pgid <= 0 or not _is_int(generation):
            raise ControlLineError("scope needs a positive integer pgid and an integer generation")
        return ControlLine("scope", pgid=pgid, generation=generation)
    if op == "mark":
        call_id, tool = raw.get("call_id"), raw.get("tool")
        if call_id is not None and not isinstance(call_id, str):
            raise ControlLineError("mark: call_id must be a string")
        tool = tool if isinstance(tool, str) else None
        return ControlLine("mark", phase=str(raw.get("phase")), call_id=call_id, tool=tool)
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
class CallWindows:
    """The open call windows of one sidecar, on the monotonic clock (the kernel's ``nsecs``)."""

    scoped: bool = False
    marked: bool = False  # a mark arrived since the last scope: no longer start-up
    generation: int = 0
    _windows: dict[str, _WireWindow] = field(default_factory=dict)

    def scope(self, generation: int) -> None:
        self.scoped, self.marked, self.generation = True, False, generation

    def begin(self, call_id: str, tool: str | None, now_ns: int) -> None:
        self.marked = True
        self._windows[call_id] = _WireWindow(call_id, tool, now_ns)

    def end(self, call_id: str | None, now_ns: int) -> str | None:
        """Stop the window growing; events up to ``now_ns`` still belong to it. Its id (None: unknown call)."""
        self.marked = True
        if call_id is None:  # an end without an id ends the newest window, as mcpfz-probe's sidecar does
            open_ = [w for w in self._windows.values() if w.end_ns is None]
            call_id = open_[-1].call_id if open_ else None
        window = self._windows.get(call_id) if call_id is not None else None
        if window is None:
            return None
        window.end_ns = now_ns
        return call_id

    def close(self, call_id: str) -> str | None:
        """The backend has delivered everything up to the end mark: the window is gone. Its tool."""
        window = self._windows.pop(call_id, None)
        return window.tool if window is not None else None

    def tool(self, call_id: str) -> str | None:
        window = self._windows.get(call_id)
        return window.tool if window is not None else None

    def attribute(self, event: dict[str, Any], at_ns: int) -> dict[str, Any]:
        """``event`` with its bucket (and call_id, or candidates when calls overlapped) filled in."""
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
            event["bucket"] = BUCKET_AMBIENT if self.marked else BUCKET_STARTUP
        return event


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
