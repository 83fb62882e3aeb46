"""The mock server's write journal as evidence: which writes reached the server, per task.

The journal (``mock/journal.py``) holds one line per state change, appended before the answer in one
``write``, so it survives the server being killed, SIGKILL included. Server spans do not: the mock
exports them in batches, and a process killed without its stop handler loses the ones not yet
written. So the judge counts writes from the journal first and treats the server's spans as the
second source: they may show fewer writes than the journal where a server generation died
uncleanly, never more. Pure functions over data.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mcpfault.analysis.judge import mentions

# The workflow whose writes create objects (a duplicate is a second object), and the tool it calls.
CREATING_WRITES = {"open_incident": "open_incident"}
# Signals the mock handles: it writes its state and flushes its spans before it exits.
_HANDLED = frozenset({signal.SIGTERM, signal.SIGINT})


def read_journal(path: Path) -> list[dict[str, Any]] | None:
    """The journal's entries; None when there is no journal. A torn last line (killed mid-write) is dropped."""
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return None
    entries = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            if number == len(lines):
                break  # the last write was cut by the kill: that write is not in the server's state either
            raise ValueError(f"{path}, line {number}: not JSON; the journal is damaged") from None
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def created_by_tag(entries: Iterable[Mapping[str, Any]], tool: str, tag: str) -> int:
    """How many ``tool`` writes in the journal carry ``tag`` (as the tasks write it into their arguments)."""
    return sum(
        1
        for entry in entries
        if entry.get("tool") == tool and mentions(json.dumps(entry.get("arguments", {}), ensure_ascii=False), tag)
    )


def duplicates_by_task(entries: Sequence[Mapping[str, Any]], tasks: Iterable[tuple[int, str, str]]) -> dict[int, int]:
    """(task index, workflow, tag) -> the extra objects the task created, from the journal."""
    duplicates = {}
    for index, workflow, tag in tasks:
        tool = CREATING_WRITES.get(workflow)
        duplicates[index] = max(0, created_by_tag(entries, tool, tag) - 1) if tool is not None else 0
    return duplicates


def spans_may_be_lost(server_events: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a server generation died without its stop handler (SIGKILL, a segfault): its unflushed
    spans are gone, so the server's spans may show fewer writes than the journal."""
    for event in server_events:
        if event.get("event") != "server_exited":
            continue
        status = event.get("exit_status")
        if not isinstance(status, int) or status == 0:
            continue
        number = -status if status < 0 else status - 128  # a signal as the process's status, or a shell's
        if number > 0 and number not in _HANDLED:
            return True
    return False
