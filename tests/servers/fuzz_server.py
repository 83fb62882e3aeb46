"""A stdio server that plays a script of raw output lines, for fuzzing the real proxy process.

Usage: fuzz_server.py SCRIPT.json. The script (hex-encoded bytes throughout):
  hello     lines written before anything is read
  after     {"N": [lines]}: written right after the answer to the N-th line received (0-based)
  tail      bytes written at the end, after stdin's EOF (a partial line, say)
  exit_code the status to exit with
  record    where every line received is appended byte for byte
  sent      where every byte written to stdout is appended, as written

Every line that is a JSON object with "method" and "id" is answered at once with
{"jsonrpc":"2.0","id":<its id>,"result":{"n":N,"tool":<params.name>}}.
"""

from __future__ import annotations

import json
import sys

script = json.loads(open(sys.argv[1], encoding="utf-8").read())  # noqa: SIM115
out = sys.stdout.buffer
record = open(script["record"], "ab")  # noqa: SIM115
sent = open(script["sent"], "ab")  # noqa: SIM115


def write(data: bytes) -> None:
    sent.write(data)
    sent.flush()
    out.write(data)
    out.flush()


for line in script["hello"]:
    write(bytes.fromhex(line))

for index, line in enumerate(sys.stdin.buffer):
    record.write(line)
    record.flush()
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        message = None
    if isinstance(message, dict) and "method" in message and "id" in message:
        params = message.get("params")
        tool = params.get("name") if isinstance(params, dict) else None
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"n": index, "tool": tool}}
        write(json.dumps(answer).encode() + b"\n")
    for extra in script["after"].get(str(index), []):
        write(bytes.fromhex(extra))

write(bytes.fromhex(script["tail"]))
sys.exit(script["exit_code"])
