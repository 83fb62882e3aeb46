"""A minimal, fast stdio MCP server with one tool, ``echo``.

It exists so the benchmark measures transport overhead rather than server work: no SDK, no
asyncio, no validation beyond what a correct reply needs. One JSON object per line in, one per
line out, each reply written with a single ``write`` + ``flush`` so it leaves in one syscall.

Run: ``python benchmarks/echo_server.py`` (speaks on stdin/stdout, exits on EOF).
"""

from __future__ import annotations

import json
import sys
from typing import Any

PROTOCOL_VERSION = "2025-11-25"
SERVER_INFO = {"name": "mcpfault-bench-echo", "version": "1.0.0"}

ECHO_TOOL: dict[str, Any] = {
    "name": "echo",
    "description": "Return the given text unchanged.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    "outputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
}

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


def _result(msg_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def _error(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def _call_tool(msg_id: Any, params: Any) -> dict[str, Any]:
    if not isinstance(params, dict) or params.get("name") != "echo":
        name = params.get("name") if isinstance(params, dict) else None
        return _error(msg_id, INVALID_PARAMS, f"Unknown tool: {name!r}")
    arguments = params.get("arguments")
    text = arguments.get("text") if isinstance(arguments, dict) else None
    if not isinstance(text, str):
        # A tool-level failure, reported in the result so an agent can see and correct it.
        return _result(
            msg_id,
            {"content": [{"type": "text", "text": "argument 'text' must be a string"}], "isError": True},
        )
    return _result(
        msg_id,
        {"content": [{"type": "text", "text": text}], "structuredContent": {"text": text}, "isError": False},
    )


def handle(message: Any) -> dict[str, Any] | None:
    """Return the reply to one decoded message, or None when none is due."""
    if not isinstance(message, dict):
        return _error(None, INVALID_REQUEST, "Invalid Request: expected a JSON object")
    method = message.get("method")
    if "id" not in message:
        # Notifications (and anything else without an id) never get a reply.
        return None
    msg_id = message["id"]
    if not isinstance(method, str):
        # A response from the client (e.g. to a server request we never send): nothing to say.
        return None
    if method == "tools/call":
        return _call_tool(msg_id, message.get("params"))
    if method == "initialize":
        return _result(
            msg_id,
            {"protocolVersion": PROTOCOL_VERSION, "capabilities": {"tools": {}}, "serverInfo": SERVER_INFO},
        )
    if method == "tools/list":
        return _result(msg_id, {"tools": [ECHO_TOOL]})
    if method == "ping":
        return _result(msg_id, {})
    return _error(msg_id, METHOD_NOT_FOUND, f"Method not found: {method}")


def main() -> int:
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    # Compact separators: fewer bytes for every transport under test to copy.
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    for line in stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            reply: dict[str, Any] | None = _error(None, PARSE_ERROR, "Parse error")
        else:
            reply = handle(message)
        if reply is None:
            continue
        try:
            stdout.write(dumps(reply).encode("utf-8") + b"\n")
            stdout.flush()
        except BrokenPipeError:
            return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
