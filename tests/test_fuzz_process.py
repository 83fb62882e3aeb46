"""Property-based fuzzing of the real proxy process in front of a real server process, both directions.

Each example starts ``mcpfault proxy`` (an error rule and a latency rule, events and spans to files)
in front of ``servers/fuzz_server.py``, which plays a generated script: lines before it is asked,
junk between answers, a partial line at exit, a generated exit status. The client side sends a
generated mix of requests (ids of every JSON type, duplicates, U+2028/U+2029 inside strings, now
and then a 16 MiB line), notifications, batches, invalid UTF-8, random bytes and a partial line at
EOF, all in one pipelined write, then closes stdin. Invariants:

- the proxy never crashes: it exits with the server's status;
- client to server: every line arrives in order, byte for byte, except the requests the error rule
  answered (never forwarded) and, with propagation on, requests that gained ``_meta.traceparent``
  (and nothing else);
- server to client: every line the server wrote arrives byte for byte, in order, except that the
  answers the latency rule holds back may come later; the proxy adds exactly its error answers;
- exactly one event line per client request the engine saw, and exactly one span per request seen
  (client requests and the server's own requests); every injected traceparent names one of them.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mcpfault.protocol import jsonrpc
from mcpfault.protocol.jsonrpc import MessageKind
from mcpfault.proxy.events import read_events
from tests.conftest import ProxyProcess, write_profile

pytestmark = pytest.mark.slow

FUZZ_SERVER = Path(__file__).resolve().parent / "servers" / "fuzz_server.py"
PROFILE = """
name = "fuzz"
seed = 11

[[faults]]
name = "boom"
type = "error"
tools = ["fail_*"]
message = "fuzz-injected"

[[faults]]
name = "slow"
type = "latency"
tools = ["slow_*"]
delay_s = 0.05
"""
BIG = 16 * 1024 * 1024
CLIENT_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

# -- what the client sends ---------------------------------------------------------------------------

ids = st.one_of(
    st.integers(-5, 5),  # small: duplicates are likely
    st.integers(-(2**80), 2**80),  # beyond 64 bits: orjson refuses them, the standard library takes over
    st.sampled_from([None, 1.0, 2.5, -0.0, 1e300, 1e-7, "", "1", "a\u2028b", "\u00e9\u2029"]),
    st.text(max_size=5),
)
texts = st.text(
    alphabet=st.sampled_from(["a", "\u2028", "\u2029", '"', "\\", "\n", "\u00e9", "\U0001f600"]), max_size=8
)


@st.composite
def client_request(draw: st.DrawFn) -> bytes:
    params: dict[str, Any] = {"name": draw(st.sampled_from(["echo", "fail_a", "slow_a"])), "arguments": {}}
    params["arguments"]["t"] = draw(texts)
    if draw(st.booleans()):
        params["_meta"] = {"traceparent": CLIENT_TRACEPARENT, "progressToken": 1}
    body = {"jsonrpc": "2.0", "id": draw(ids), "method": "tools/call", "params": params}
    separators = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    return json.dumps(body, ensure_ascii=draw(st.booleans()), separators=separators).encode() + b"\n"


def _one_line(data: bytes) -> bytes:
    return data.replace(b"\n", b"") + b"\n"


client_junk = st.one_of(
    st.binary(max_size=30).map(_one_line),
    st.sampled_from(
        [
            b"\xff\xfe\x00 not utf-8\n",
            b"\xc3\x28\n",
            b"\n",
            b'[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}]\n',
            b"42\n",
            b'"a string"\n',
            b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
            b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"t":"\xe2\x80\xa8\xe2\x80\xa9"}}\n',
            b'{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{"name":"echo"}}\n',
            b'{"jsonrpc":"2.0","id":{"x":1},"method":"tools/call","params":{"name":"echo"}}\n',
            b'{"jsonrpc":"2.0","id":"srv-0","result":{}}\n',  # an answer to the server's own request
            b'{"jsonrpc":"2.0","id":"srv-1","error":{"code":-1,"message":"no"}}\n',
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"never-sent"}}\n',
        ]
    ),
)
client_lines = st.lists(st.one_of(client_request(), client_request(), client_junk), max_size=25)
partial = st.sampled_from([b"", b"", b'{"partial":', b"\xff tail without newline"])

# -- what the server writes unasked ------------------------------------------------------------------

server_junk = st.one_of(
    st.binary(max_size=30).map(_one_line),
    st.sampled_from(
        [
            b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}\n',
            b'{"jsonrpc":"2.0","id":"srv-0","method":"sampling/createMessage","params":{}}\n',
            b'{"jsonrpc":"2.0","id":"srv-1","method":"roots/list"}\n',
            b"\xc3\x28 bad utf-8 from the server\n",
            b'[{"jsonrpc":"2.0","method":"notifications/message"}]\n',
            b'{"jsonrpc":"2.0","id":true,"result":{}}\n',
            b'{"jsonrpc":"2.0","id":[1],"result":{}}\n',
            b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"t":"\xe2\x80\xa8"}}\n',
        ]
    ),
)


@st.composite
def sessions(draw: st.DrawFn) -> dict[str, Any]:
    lines = draw(client_lines)
    after = draw(st.dictionaries(st.integers(0, max(0, len(lines) - 1)), st.lists(server_junk, max_size=3), max_size=4))
    return {
        "client": lines,
        # Now and then a 16 MiB line: (where in the client's stream, the server writes one after its hello).
        # Kept as flags: 16 MiB in the example would make every report unreadable.
        "big_request_at": draw(st.one_of(st.none(), st.none(), st.none(), st.none(), st.integers(0, len(lines)))),
        "big_server_line": draw(st.integers(0, 7)) == 0,
        "partial": draw(partial),
        "hello": draw(st.lists(server_junk, max_size=3)),
        "after": after,
        "tail": draw(st.sampled_from([b"", b'{"jsonrpc":"2.0","method":"notifications/message"', b"\xff"])),
        "exit_code": draw(st.integers(0, 5)),
        "propagate": draw(st.booleans()),
    }


# -- the oracle --------------------------------------------------------------------------------------


def split_lines(data: bytes) -> list[bytes]:
    """Newline-terminated lines, and the partial one after the last newline, if any."""
    lines = [line + b"\n" for line in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def body_of(line: bytes) -> dict[str, Any] | None:
    message = jsonrpc.parse(line)
    return message.body if message.kind is MessageKind.REQUEST else None


def without_traceparent(body: dict[str, Any], had_meta: bool) -> dict[str, Any]:
    params = dict(body["params"])
    meta = dict(params.get("_meta") or {})
    meta.pop("traceparent", None)
    if meta or had_meta:
        params["_meta"] = meta
    else:
        params.pop("_meta", None)
    return {**body, "params": params}


def tool_of(body: dict[str, Any]) -> Any:
    params = body.get("params")
    return params.get("name") if isinstance(params, dict) else None


def read_jsonl(path: Path) -> list[Any]:
    # Not splitlines(): it also splits at U+2028 and U+2029, which JSON carries raw inside strings.
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line] if path.exists() else []


def read_spans(path: Path) -> list[dict[str, Any]]:
    spans = []
    for line in read_jsonl(path):
        for resource in line["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                spans += scope["spans"]
    return spans


def check_client_to_server(client: list[bytes], received: bytes, propagate: bool) -> set[str]:
    """Returns the span ids named by the injected traceparents."""
    expected = [line for line in client if not ((b := body_of(line)) and str(tool_of(b)).startswith("fail_"))]
    arrived = split_lines(received)
    assert len(arrived) == len(expected), (len(arrived), len(expected))
    injected: set[str] = set()
    for sent, got in zip(expected, arrived, strict=True):
        body = body_of(sent)
        if body is None or not propagate or not isinstance(body.get("params"), dict):
            assert got == sent  # left alone: the very same bytes
            continue
        forwarded = json.loads(got)  # both sides through the same decoder
        original = json.loads(sent)
        traceparent = forwarded["params"]["_meta"]["traceparent"]
        had_meta = "_meta" in original["params"]
        if had_meta:  # the client's trace goes on, with the proxy's span as the parent
            assert traceparent[3:35] == CLIENT_TRACEPARENT[3:35] and traceparent != CLIENT_TRACEPARENT
        injected.add(traceparent[36:52])
        assert without_traceparent(forwarded, had_meta) == without_traceparent(original, had_meta)
        assert got.endswith(b"\n") and got.count(b"\n") == 1
    return injected


def _error_message(line: bytes) -> Any:
    error = (jsonrpc.parse(line).body or {}).get("error")
    return error.get("message") if isinstance(error, dict) else None


def check_server_to_client(client: list[bytes], sent: bytes, output: bytes, tail: bytes) -> None:
    received = split_lines(output)
    # The proxy ends the server's partial line when it has more to say; a bare tail at the end is the
    # partial line left as it was (the server may also have written the same bytes as a whole line).
    if tail and received[-1:] != [tail] and tail + b"\n" in received:
        received[len(received) - 1 - received[::-1].index(tail + b"\n")] = tail
    ours = [line for line in received if _error_message(line) == "fuzz-injected"]
    failing = [b["id"] for line in client if (b := body_of(line)) and str(tool_of(b)).startswith("fail_")]
    assert [json.loads(line)["id"] for line in ours] == failing
    relayed = [line for line in received if line not in ours]
    written = split_lines(sent)
    assert sorted(relayed) == sorted(written)  # every byte the server wrote, and nothing else

    def held_back(line: bytes) -> bool:
        body = jsonrpc.parse(line).body
        result = body.get("result") if body else None
        return isinstance(result, dict) and str(result.get("tool")).startswith("slow_")

    assert [line for line in relayed if not held_back(line)] == [line for line in written if not held_back(line)]


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(session=sessions())
@example(  # the server writes a whole line of the same bytes as its partial last line
    session={
        "client": [],
        "big_request_at": None,
        "big_server_line": False,
        "partial": b"",
        "hello": [b"\xff\n"],
        "after": {},
        "tail": b"\xff",
        "exit_code": 0,
        "propagate": False,
    }
)
def test_the_real_proxy_keeps_its_invariants_under_fuzzing(
    session: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    client: list[bytes] = list(session["client"])
    hello: list[bytes] = list(session["hello"])
    if session["big_request_at"] is not None:
        arguments = {"t": "y\u2028" * (BIG // 4)}  # 16 MiB of UTF-8
        body = {
            "jsonrpc": "2.0",
            "id": "big",
            "method": "tools/call",
            "params": {"name": "echo", "arguments": arguments},
        }
        client.insert(session["big_request_at"], json.dumps(body, ensure_ascii=False).encode() + b"\n")
    if session["big_server_line"]:
        hello.append(b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"' + b"z" * BIG + b'"}}\n')
    directory = tmp_path_factory.mktemp("fuzz")
    profile = write_profile(directory, PROFILE)
    script = {
        "hello": [line.hex() for line in hello],
        "after": {str(k): [line.hex() for line in v] for k, v in session["after"].items()},
        "tail": session["tail"].hex(),
        "exit_code": session["exit_code"],
        "record": str(directory / "server-received.bin"),
        "sent": str(directory / "server-sent.bin"),
    }
    (directory / "script.json").write_text(json.dumps(script))
    spans_path = directory / "spans.jsonl"
    extra = ("--spans", str(spans_path), "--no-summary", *(() if session["propagate"] else ("--no-propagate",)))
    proxy = ProxyProcess(
        profile, directory, extra=extra, server=[sys.executable, str(FUZZ_SERVER), str(directory / "script.json")]
    )
    try:
        stream = b"".join(client) + session["partial"]
        if session["partial"]:
            client = [*client, session["partial"]]

        def write() -> None:
            proxy.send(stream)
            proxy.close_stdin()

        writer = threading.Thread(target=write, daemon=True)  # the proxy pushes back while we read
        writer.start()
        output = proxy.read_until_eof(timeout=20)
        writer.join(10)
        assert proxy.wait(timeout=10) == session["exit_code"], proxy.stderr()
        assert "Traceback" not in proxy.stderr() and "internal error" not in proxy.stderr(), proxy.stderr()

        injected = check_client_to_server(client, proxy.received(), session["propagate"])
        check_server_to_client(client, (directory / "server-sent.bin").read_bytes(), output, session["tail"])

        requests = [b for line in client if (b := body_of(line))]
        events = read_events(proxy.events_path)
        assert len(events) == len(requests)
        assert sorted(e["rule"] or "" for e in events) == sorted(
            {"fail_a": "boom", "slow_a": "slow"}.get(tool_of(b), "") for b in requests
        )
        assert all(e["client_received"] in ("response", "error") for e in events), events
        written = split_lines((directory / "server-sent.bin").read_bytes())
        server_requests = [line for line in written if body_of(line) is not None]
        spans = read_spans(spans_path)
        assert len(spans) == len(requests) + len(server_requests)
        assert injected <= {span["spanId"] for span in spans}
    finally:
        proxy.close()
