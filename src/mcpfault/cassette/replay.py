"""``mcpfault replay FILE.cassette``: an MCP server on stdio that answers from a cassette.

Each request is matched (cassette/matching.py) to a recorded one; its recorded answer goes back with the
live request's id, after the notifications and server-to-client requests the server sent while it was
pending (progress notifications carry the live request's progress token), and is followed by what the
server sent after it while nothing was pending (a list_changed notification, a log message). A miss is a
JSON-RPC error that names the closest recorded request, never a silent wrong answer.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final, Literal

from mcpfault.cassette.format import Cassette, load
from mcpfault.cassette.matching import Book, Matcher, Miss, Recorded

Timing = Literal["recorded", "none"]
TIMINGS: Final = ("recorded", "none")
UNMATCHED_CODE: Final = -32602  # invalid params: the request is well-formed but nothing recorded answers it


def recorded_requests(cassette: Cassette) -> list[Recorded]:
    """The cassette's client requests in order, each with its answer and what the server sent meanwhile."""
    recorded: list[Recorded] = []
    pending: dict[tuple[str, str], Recorded] = {}
    last_pending: dict[str, Recorded] = {}
    for entry in cassette.entries:
        message = entry.message
        if entry.direction == "client":
            if "method" in message and "id" in message:
                item = Recorded(entry, None, [])
                recorded.append(item)
                pending[(entry.session, json.dumps(message["id"]))] = item
                last_pending[entry.session] = item
            continue
        if "method" in message:  # a notification or a server-to-client request
            owner = last_pending.get(entry.session)
            if owner is not None:
                (owner.between if owner.answer is None else owner.after).append(entry)
        elif "id" in message:
            item_or_none = pending.pop((entry.session, json.dumps(message["id"])), None)
            if item_or_none is not None:
                item_or_none.answer = entry
    return recorded


def _progress_token(message: dict[str, Any]) -> Any:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


def answer(book: Book, message: dict[str, Any], send: Callable[[dict[str, Any]], None], timing: Timing) -> None:
    """Answer one live request (``message``) through ``send``."""
    method = str(message.get("method"))
    try:
        item = book.match(method, message.get("params"))
    except Miss as miss:
        send(
            {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": UNMATCHED_CODE, "message": f"mcpfault replay: {miss}", "data": {"method": method}},
            }
        )
        return
    token = _progress_token(message)
    clock = item.request.t
    for entry in item.between:
        _wait(entry.t - clock, timing)
        clock = entry.t
        sent = copy.deepcopy(entry.message)
        if (
            sent.get("method") == "notifications/progress"
            and token is not None
            and isinstance(sent.get("params"), dict)
        ):
            sent["params"]["progressToken"] = token
        send(sent)
    if item.answer is None:
        send(
            {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {
                    "code": UNMATCHED_CODE,
                    "message": f"mcpfault replay: the recorded {method} request was never answered by the server",
                },
            }
        )
        return
    _wait(item.answer.t - clock, timing)
    reply = {key: value for key, value in item.answer.message.items() if key != "id"}
    send({"jsonrpc": "2.0", "id": message["id"], **reply})
    clock = item.answer.t
    for entry in item.after:
        _wait(entry.t - clock, timing)
        clock = entry.t
        send(copy.deepcopy(entry.message))


def _wait(seconds: float, timing: Timing) -> None:
    if timing == "recorded" and seconds > 0:
        time.sleep(seconds)


def serve_stdio(
    path: Path, matcher: Matcher, timing: Timing, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None
) -> int:
    """Serve ``path`` on stdio until the client closes stdin; 0."""
    book = Book(recorded_requests(load(path)), matcher)
    source = stdin if stdin is not None else sys.stdin.buffer
    sink = stdout if stdout is not None else sys.stdout.buffer

    def send(message: dict[str, Any]) -> None:
        sink.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")
        sink.flush()

    for line in iter(source.readline, b""):
        try:
            message = json.loads(line)
        except ValueError:
            send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error: not JSON"}})
            continue
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            continue  # a notification, or the client's answer to a replayed server-to-client request
        if message["method"] == "ping":
            send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
            continue
        answer(book, message, send, timing)
    return 0
