"""A deliberately unsafe stdio MCP server (official SDK), for ``mcpfault audit``'s tests ONLY.

Each tool's annotations tell one lie, or the truth, about what it does to files in the current
directory (the audit's work directory), so that the audit fails it in each way:

- ``append_note`` claims idempotentHint but appends a line each call: not idempotent.
- ``peek_notes`` claims readOnlyHint but writes an access log: lying.
- ``upsert_setting`` sets a key in settings.json; the same call twice leaves the same file: retry-safe.
- ``open_ticket`` appends a ticket, unless its ``idempotency_key`` was seen: retry-safe only with a key.
- ``export_report`` claims destructiveHint false, and writes to $AUDIT_OUTSIDE_DIR: flagged.
- ``wipe_notes`` is destructive (annotated so): the audit calls it only with --confirm-destructive.
- ``impossible`` takes an integer at least 5 and at most 1: its schema cannot be satisfied.
- ``list_notes`` reads everything and writes nothing: the state probe (the resource ``notes://all`` too).

``--http PORT`` serves Streamable HTTP on 127.0.0.1 instead of stdio.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import Field

server = MCPServer("audit-unsafe")

NOTES = Path("notes.txt")
SETTINGS = Path("settings.json")
TICKETS = Path("tickets.jsonl")
ACCESS_LOG = Path("access.log")


def _tickets() -> list[dict[str, Any]]:
    if not TICKETS.exists():
        return []
    return [json.loads(line) for line in TICKETS.read_text(encoding="utf-8").splitlines() if line]


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False))
def list_notes() -> dict[str, Any]:
    """Everything the server keeps: the notes, the settings and the tickets."""
    return {
        "notes": NOTES.read_text(encoding="utf-8").splitlines() if NOTES.exists() else [],
        "settings": json.loads(SETTINGS.read_text(encoding="utf-8")) if SETTINGS.exists() else {},
        "tickets": _tickets(),
    }


@server.resource("notes://all", mime_type="application/json")
def all_notes() -> str:
    """The same as list_notes, as a resource: a state probe for --state-resource."""
    return json.dumps(list_notes(), sort_keys=True)


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def append_note(text: str) -> str:
    """Adds a note. Claims to be idempotent; appends a line on every call."""
    with NOTES.open("a", encoding="utf-8") as handle:
        handle.write(text.replace("\n", " ") + "\n")
    return "noted"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def peek_notes() -> str:
    """Counts the notes. Claims to be read-only; writes an access log."""
    with ACCESS_LOG.open("a", encoding="utf-8") as handle:
        handle.write("peeked\n")
    return f"{len(NOTES.read_text(encoding='utf-8').splitlines()) if NOTES.exists() else 0} notes"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def upsert_setting(key: str, value: str) -> str:
    """Sets one setting: the same call twice leaves the same file."""
    settings = json.loads(SETTINGS.read_text(encoding="utf-8")) if SETTINGS.exists() else {}
    settings[key] = value
    SETTINGS.write_text(json.dumps(settings, sort_keys=True), encoding="utf-8")
    return "set"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def open_ticket(title: str, idempotency_key: str | None = None) -> str:
    """Opens a ticket; a second call with the same idempotency_key opens none."""
    if idempotency_key is not None and any(t.get("key") == idempotency_key for t in _tickets()):
        return "already open"
    with TICKETS.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"title": title, "key": idempotency_key}) + "\n")
    return "opened"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def export_report() -> str:
    """Writes a report where $AUDIT_OUTSIDE_DIR says: outside the work directory."""
    target = Path(os.environ.get("AUDIT_OUTSIDE_DIR", ".")) / "report.txt"
    target.write_text("report\n", encoding="utf-8")
    return "exported"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def wipe_notes() -> str:
    """Deletes every note."""
    NOTES.unlink(missing_ok=True)
    return "wiped"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def impossible(count: Annotated[int, Field(ge=5, le=1)]) -> str:
    """No integer is at least 5 and at most 1."""
    return str(count)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args()
    if args.http is None:
        server.run()
    else:
        server.run(transport="streamable-http", host="127.0.0.1", port=args.http)
