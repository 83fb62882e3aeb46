"""The cassette file: JSON lines, a header line first, then one line per message on the wire.

Header: ``{"cassette": FORMAT_VERSION, "command": [...], "server_info": {...}, "capabilities": {...},
"eras": [...], "protocol_versions": [...], "recorded_at": ISO-8601, "redacted_arguments": [...],
"sessions": N}``, and ``"recording": id`` when several recorders wrote it (``record --listen -- CMD``).
Message: ``{"t": seconds since the recording started, "direction": "client"|"server", "session": str,
"era": "legacy"|"modern"|"unknown", "message": {...JSON-RPC...}}`` (``"client"``: client to server), and
over HTTP ``"http": {"status": int, "headers": {...}}`` on what the status and headers came with.
``session`` marks each session the recording saw: "1", "2", ... in the order they began.
Every message is redacted before it is written (the rules of telemetry/logging, the project's one
redaction, plus the argument names given to ``--redact``, whose values are also scrubbed wherever the
server echoes them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from mcpfault.errors import UsageError
from mcpfault.protocol.jsonlines import parse_jsonl
from mcpfault.telemetry.logging import REDACTED, is_header_key, is_secret_key, redact_text

FORMAT_VERSION: Final = 1
Direction = Literal["client", "server"]


@dataclass(slots=True)
class Entry:
    """One message on the wire, as recorded."""

    t: float
    direction: Direction
    session: str
    era: str
    message: dict[str, Any]
    http: dict[str, Any] | None = None  # over HTTP: the status and the headers that matter

    def to_json(self) -> dict[str, Any]:
        row = {
            "t": round(self.t, 6),
            "direction": self.direction,
            "session": self.session,
            "era": self.era,
            "message": self.message,
        }
        if self.http is not None:
            row["http"] = self.http
        return row


@dataclass(slots=True)
class Cassette:
    header: dict[str, Any]
    entries: list[Entry] = field(default_factory=list)

    def sessions(self) -> list[str]:
        """The sessions the recording saw, in the order they began."""
        return list(dict.fromkeys(entry.session for entry in self.entries))

    def listing(self, method: str) -> list[dict[str, Any]]:
        """The items of the first recorded answer to ``method`` (tools/list: its tools), [] if none."""
        key = {
            "tools/list": "tools",
            "resources/list": "resources",
            "prompts/list": "prompts",
            "resources/templates/list": "resourceTemplates",
        }[method]
        for request, answer in exchanges(self.entries):
            if request.message.get("method") == method and answer is not None:
                result = answer.message.get("result")
                if isinstance(result, dict) and isinstance(result.get(key), list):
                    return [item for item in result[key] if isinstance(item, dict)]
        return []


def exchanges(entries: Iterable[Entry]) -> list[tuple[Entry, Entry | None]]:
    """Each client request with the server's answer to it (None: never answered), in recorded order."""
    pending: dict[tuple[str, str], int] = {}
    pairs: list[tuple[Entry, Entry | None]] = []
    for entry in entries:
        message = entry.message
        if entry.direction == "client" and "method" in message and "id" in message:
            pending[(entry.session, json.dumps(message["id"]))] = len(pairs)
            pairs.append((entry, None))
        elif entry.direction == "server" and "method" not in message and "id" in message:
            index = pending.pop((entry.session, json.dumps(message["id"])), None)
            if index is not None:
                pairs[index] = (pairs[index][0], entry)
    return pairs


def secret_values(message: Any, argument_names: Iterable[str]) -> set[str]:
    """The string values under the keys ``argument_names`` in ``message``: a server that echoes one
    back (``unknown timezone 'hunter2'``) must not write it to the cassette through its answer."""
    names = {name.strip().lower() for name in argument_names}
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                if str(key).lower() in names and isinstance(item, str) and len(item) >= 3:
                    found.add(item)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    if names:
        walk(message)
    return found


def redact_message(
    message: dict[str, Any], argument_names: Iterable[str] = (), known_secrets: Iterable[str] = ()
) -> dict[str, Any]:
    """``message`` with the project's redaction rules (telemetry/logging: secret keys, header values,
    bearer tokens and ``sk-`` keys in text) applied at every depth, and the values of every key in
    ``argument_names`` (e.g. a tool argument ``api_key`` or ``account``) replaced.

    Not ``redact_value`` itself: it replaces whatever is nested deeper than a log line needs, and a
    cassette must keep a deep schema whole to replay it."""
    names = {name.strip().lower() for name in argument_names}
    redacted: dict[str, Any] = _redact(message, names)
    secrets = sorted(known_secrets, key=len, reverse=True)
    return _scrub(redacted, secrets) if secrets else redacted


def _scrub(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, Mapping):
        return {key: _scrub(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrub(item, secrets) for item in value]
    return value


def _redact(value: Any, names: set[str]) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {key: _redact_item(key, item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact(item, names) for item in value]
    return value


def _redact_item(key: object, value: Any, names: set[str]) -> Any:
    if is_secret_key(key):
        return REDACTED
    if str(key).lower() in names and not isinstance(value, Mapping | list):
        # An argument's value; a mapping under that name is the argument's schema in a listing, kept whole.
        return REDACTED
    if is_header_key(key) and isinstance(value, Mapping):
        return dict.fromkeys(value, REDACTED)
    return _redact(value, names)


def write(path: Path, header: dict[str, Any], entries: Iterable[Entry]) -> None:
    """Write the whole cassette at once (a temporary file renamed over ``path``: never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as out:
        out.write(json.dumps(header, ensure_ascii=False) + "\n")
        for entry in entries:
            out.write(json.dumps(entry.to_json(), ensure_ascii=False) + "\n")
    partial.replace(path)


def load(path: Path) -> Cassette:
    """The cassette at ``path``; a UsageError naming the file and line for anything that is not one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(
            f"cannot read the cassette {path}: {exc.strerror or exc}; record one with "
            "'mcpfault record --out FILE -- CMD'"
        ) from exc
    try:
        rows = parse_jsonl(data, where=str(path))
    except ValueError as exc:
        raise UsageError(f"{exc}; a cassette is JSON lines") from exc
    if not rows:
        raise UsageError(f"{path} is empty: not a cassette (record one with 'mcpfault record --out FILE -- CMD')")
    header = rows[0]
    if not isinstance(header, dict) or header.get("cassette") != FORMAT_VERSION:
        raise UsageError(
            f'{path}:1: not a cassette header (expected {{"cassette": {FORMAT_VERSION}, ...}}, got {str(header)[:80]})'
        )
    entries = []
    for number, row in enumerate(rows[1:], 2):
        if (
            not isinstance(row, dict)
            or row.get("direction") not in ("client", "server")
            or not isinstance(row.get("message"), dict)
        ):
            raise UsageError(
                f"{path}:{number}: not a cassette message (needs direction client|server and a message object)"
            )
        entries.append(
            Entry(
                float(row.get("t", 0.0)),
                row["direction"],
                str(row.get("session", "1")),
                str(row.get("era", "unknown")),
                row["message"],
                row["http"] if isinstance(row.get("http"), dict) else None,
            )
        )
    return Cassette(header, entries)
