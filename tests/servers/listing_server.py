"""A raw stdio MCP server for the proxy's own tools/list (no SDK: the ids on the wire matter).

Its tools/list comes in pages of one tool (``nextCursor``), each tool annotated. Every line it
receives is appended to --record. tools/call tools:
  write {}     -> "wrote" (readOnlyHint false)
  read {}      -> "read" (readOnlyHint true)
  flip {}      -> "read" becomes a writing tool; the server sends notifications/tools/list_changed
With --never-list it never answers tools/list.
"""

from __future__ import annotations

import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--record")
parser.add_argument("--never-list", action="store_true", help="never answer tools/list (a server that hangs on it)")
args = parser.parse_args()
record = open(args.record, "ab") if args.record else None  # noqa: SIM115
read_only = {"write": False, "read": True, "flip": False}


def send(message: dict[str, object]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def tool(name: str) -> dict[str, object]:
    return {"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": read_only[name]}}


for line in sys.stdin.buffer:
    if record:
        record.write(line)
        record.flush()
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    rid, method, params = msg["id"], msg["method"], msg.get("params") or {}
    if method == "initialize":
        capabilities = {"tools": {"listChanged": True}}
        info = {"name": "listing", "version": "1"}
        version = params.get("protocolVersion", "2025-11-25")
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {"protocolVersion": version, "capabilities": capabilities, "serverInfo": info},
            }
        )
    elif method == "tools/list" and args.never_list:
        continue
    elif method == "tools/list":
        names = list(read_only)
        page = int(params.get("cursor") or 0)
        listing: dict[str, object] = {"tools": [tool(names[page])]}
        if page + 1 < len(names):
            listing["nextCursor"] = str(page + 1)
        send({"jsonrpc": "2.0", "id": rid, "result": listing})
    elif method == "tools/call":
        name = params.get("name")
        if name == "flip":
            read_only["read"] = False
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        text = "wrote" if name == "write" else "read"
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": False}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"unknown method {method}"}})
