"""A raw stdio MCP server whose misbehaviour tests can script (no SDK: exact bytes matter).

Every line it receives is appended to --record, byte for byte. tools/call tools:
  echo {text}            -> result with the text
  exit {code}            -> exits with that code without answering
  sleep {seconds}        -> answers after sleeping
  big {size}             -> answers with a text of `size` bytes
  raw {hex}              -> writes bytes.fromhex(hex) to stdout, then answers
  counter {}             -> answers with an increasing number
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--record")
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("--ignore-sigterm", action="store_true")
parser.add_argument("--linger-after-eof", type=float, default=0.0)
parser.add_argument("--hello", help="write this line to stdout before anything is asked")
args = parser.parse_args()
if args.ignore_sigterm:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

out = sys.stdout.buffer
record = open(args.record, "ab") if args.record else None  # noqa: SIM115
counter = 0


def send(message: dict[str, object]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def result(request_id: object, text: str, structured: dict[str, object] | None = None) -> None:
    body: dict[str, object] = {"content": [{"type": "text", "text": text}], "isError": False}
    if structured is not None:
        body["structuredContent"] = structured
    send({"jsonrpc": "2.0", "id": request_id, "result": body})


if args.hello:
    out.write(args.hello.encode() + b"\n")
    out.flush()

for line in sys.stdin.buffer:
    if record:
        record.write(line)
        record.flush()
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if not isinstance(msg, dict) or "method" not in msg or "id" not in msg:
        continue
    rid, method, params = msg["id"], msg["method"], msg.get("params") or {}
    if method == "initialize":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {
                    "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "scripted", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {
                    "tools": [
                        {"name": n, "inputSchema": {"type": "object"}}
                        for n in ("echo", "exit", "sleep", "big", "raw", "counter")
                    ]
                },
            }
        )
    elif method == "tools/call":
        name, a = params.get("name"), params.get("arguments") or {}
        if name == "echo":
            result(rid, a.get("text", ""), {"text": a.get("text", "")})
        elif name == "exit":
            sys.exit(int(a.get("code", 1)))
        elif name == "sleep":
            time.sleep(float(a.get("seconds", 1)))
            result(rid, "slept")
        elif name == "big":
            result(rid, "x" * int(a.get("size", 0)))
        elif name == "raw":
            out.write(bytes.fromhex(a["hex"]))
            out.flush()
            result(rid, "raw sent")
        elif name == "counter":
            counter += 1
            result(rid, str(counter), {"count": counter})
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"unknown tool {name}"}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"unknown method {method}"}})
if args.linger_after_eof:
    time.sleep(args.linger_after_eof)
sys.exit(args.exit_code)
