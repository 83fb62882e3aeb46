"""The mock server's write journal: every state change on disk before its answer, replayed on start.

The world lives in memory, so without this a server restart (the crash_restart profile) would forget
every write, and the kernel would see no file write per call for the side-effect probe to attribute.
With ``--journal FILE`` each tools/call that changed state appends one JSON line (the tool, its
arguments, the revision after it) to FILE before the response is written, and a server starting on
an existing journal replays it through the same tools: same seed, same calls in the same order, same
state, revision and incident ids (the world is deterministic).

Only state changes are journaled: a repeat that changes nothing (an idempotent set_maintenance, an
idempotency key seen before) writes no line, so the probe sees the server act exactly when the judge
counts a change. The write log of a replayed world therefore lacks an earlier generation's no-op writes.

Each append opens the file (O_APPEND), writes the line in one ``write`` and closes it: the open is the
per-call side effect the probe sees, and the line is in the kernel once the call returns, so it survives
the process being killed (SIGKILL included; it is not fsynced, so not a machine crash).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

from mcpfault.errors import MCPFaultError
from mcpfault.protocol.jsonlines import dumps_line

JOURNAL_VERSION: Final = 1
_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)

# (tool name, arguments) -> the revision after the call; the session's tools/call, minus the protocol.
ApplyCall = Callable[[str, Mapping[str, Any]], int]


class JournalError(MCPFaultError):
    """A journal that cannot be replayed onto this world (another seed, a line that is not a write)."""


class Journal:
    """One file of state-changing tool calls, one JSON object a line."""

    def __init__(self, path: pathlib.Path, seed: int) -> None:
        self.path: Final = path
        self._seed = seed
        self.replayed = 0

    def append(self, tool: str, arguments: Mapping[str, Any], revision: int) -> None:
        """Record one state change; raises OSError if it cannot be written (the call then fails)."""
        line = dumps_line(
            {"v": JOURNAL_VERSION, "seed": self._seed, "tool": tool, "arguments": arguments, "revision": revision},
            separators=(",", ":"),
            ensure_ascii=False,
        )
        data = (line + "\n").encode("utf-8")
        fd = os.open(self.path, _FLAGS, 0o600)
        try:
            # One write of a short line to an O_APPEND file: it lands whole, after every earlier line.
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(f"short write to {self.path} ({written} of {len(data)} bytes)")
        finally:
            os.close(fd)

    def replay(self, apply: ApplyCall) -> int:
        """Re-run every journaled call through ``apply``; the number replayed (0 without a journal).

        A torn last line (the process killed mid-write) is skipped with a note on stderr; any other
        line that does not fit raises JournalError naming the file and line.
        """
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise JournalError(f"{self.path}: cannot read the journal ({exc.strerror})") from None
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            where = f"{self.path}, line {number}"
            try:
                entry = json.loads(raw)
            except ValueError:
                if number == len(lines):
                    print(f"mcpfault-mock: {where}: a torn last line, skipped", file=sys.stderr, flush=True)
                    break
                raise JournalError(f"{where}: not JSON; move the journal aside to start from a fresh world") from None
            tool, arguments, revision = _fields(entry, where)
            if entry.get("seed") != self._seed:
                raise JournalError(
                    f"{where}: written for seed {entry.get('seed')!r}, this world has seed {self._seed}; "
                    "give the same --seed, or another --journal file"
                )
            replayed = apply(tool, arguments)
            if replayed != revision:
                raise JournalError(
                    f"{where}: {tool} gave revision {replayed} on replay, the journal says {revision}; "
                    "the journal does not belong to this world"
                )
            self.replayed += 1
        return self.replayed


def _fields(entry: Any, where: str) -> tuple[str, dict[str, Any], int]:
    if not isinstance(entry, dict) or entry.get("v") != JOURNAL_VERSION:
        raise JournalError(f"{where}: not a version {JOURNAL_VERSION} journal entry")
    tool, arguments, revision = entry.get("tool"), entry.get("arguments"), entry.get("revision")
    if not isinstance(tool, str) or not isinstance(arguments, dict) or not isinstance(revision, int):
        raise JournalError(f"{where}: an entry needs 'tool' (a string), 'arguments' (an object), 'revision' (an int)")
    return tool, arguments, revision
