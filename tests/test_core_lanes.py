"""The core's lanes (``lane_from_client``/``lane_from_server``): what they take ends exactly as the
full path (``from_client``/``from_server``) would end it, and what they refuse they leave untouched."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import generate_latest

from mcpfault.control.controller import Controller
from mcpfault.faults import profile
from mcpfault.faults.catalog import CATALOG
from mcpfault.faults.engine import Engine
from mcpfault.faults.live import LiveRules
from mcpfault.proxy.core import ProxyCore, To
from mcpfault.proxy.events import MemoryEventSink
from mcpfault.proxy.observe import TelemetryObserver, fault_label_sets
from mcpfault.telemetry.fastspans import SpanRecorder
from mcpfault.telemetry.metrics import ProxyMetrics
from tests.conftest import call, request


def answer(request_id: Any, **result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode() + b"\n"


def error(request_id: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no"}}).encode() + b"\n"


INITIALIZE = request(
    0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
)
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
MODERN = b'{"jsonrpc":"2.0","id":"m1","method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}\n'

# (direction, line): a session with what the lanes take and what they must leave to the full path.
CONVERSATION: list[tuple[To, bytes]] = [
    (To.SERVER, INITIALIZE),
    (To.CLIENT, answer(0, protocolVersion="2025-11-25", capabilities={}, serverInfo={"name": "s", "version": "1"})),
    (To.SERVER, INITIALIZED),
    (To.SERVER, request(1, "tools/list")),
    (To.CLIENT, answer(1, tools=[])),
    (To.SERVER, call(2, "echo", text="a")),
    (To.SERVER, call("2", "echo", text="b")),  # the same digits as a string: another request
    (To.SERVER, call(2, "echo", text="c")),  # an id reused while the first is in flight
    (To.CLIENT, answer("2", text="b")),
    (To.CLIENT, answer(2, text="a")),
    (To.CLIENT, answer(2, text="c")),
    (To.SERVER, call(3.0, "echo")),  # a float id: the standard library reads it
    (To.CLIENT, answer(3.0)),
    (To.SERVER, request(4, "resources/read", {"uri": "file:///x"})),
    (To.CLIENT, error(4)),
    (To.CLIENT, answer(99)),  # an answer to nothing
    (To.SERVER, b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n'),
    (To.CLIENT, b'{"jsonrpc":"2.0","id":"s1","method":"roots/list"}\n'),  # the server asks
    (To.SERVER, b'{"jsonrpc":"2.0","id":"s1","result":{"roots":[]}}\n'),
    (To.SERVER, MODERN),
    (To.CLIENT, answer("m1")),
    (To.SERVER, b"not json\n"),
    (To.SERVER, call(5, "echo")),  # left in flight
]


def run(core: ProxyCore, *, lanes: bool) -> tuple[list[list[bytes]], int]:
    """Each line's output as the stdio transport produces it, and how many lines a lane took."""
    taken = 0
    out: list[list[bytes]] = []
    for to, line in CONVERSATION:
        if lanes:
            lane = core.lane_from_client if to is To.SERVER else core.lane_from_server
            passed = lane(line)
            if passed is not None:
                taken += 1
                out.append([passed])
                core.end_passed()  # as the transport does once it has written the line
                continue
        handle = core.from_client if to is To.SERVER else core.from_server
        out.append([emit.data for emit in handle(line)])
    return out, taken


def stats(core: ProxyCore) -> dict[str, Any]:
    return {
        "requests": dict(core.stats.requests),
        "modern": core.stats.modern_requests,
        "opaque": dict(core.stats.opaque),
        "in_flight": core.in_flight,
        "era": (core.era.era, core.era.protocol_version),
    }


def test_untraced_lanes_end_each_line_as_the_full_path_does() -> None:
    with_lanes, without = ProxyCore(Engine(profile.loads(""))), ProxyCore(Engine(profile.loads("")))
    assert with_lanes.has_lanes
    out, taken = run(with_lanes, lanes=True)
    expected, _ = run(without, lanes=False)
    assert out == expected
    assert stats(with_lanes) == stats(without)
    assert stats(with_lanes)["in_flight"] == 1 and stats(with_lanes)["modern"] == 1
    # tools/list, five calls with plain ids (one of 2026-07-28) and resources/read; the answers to all
    # but the last call, still in flight. The float id takes the full path both ways.
    assert taken == 13


def without_context(line: bytes) -> Any:
    try:
        body = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line
    meta = body.get("params", {}).get("_meta", {}) if isinstance(body, dict) else {}
    if isinstance(meta, dict) and meta.pop("traceparent", None) is not None and not meta:
        del body["params"]["_meta"]
    return body


def normalized(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Spans without what differs from run to run: ids and times."""
    drop = {"traceId", "spanId", "parentSpanId", "startTimeUnixNano", "endTimeUnixNano"}
    result = []
    for span in spans:
        kept = {key: value for key, value in span.items() if key not in drop}
        kept["events"] = [{k: v for k, v in e.items() if k != "timeUnixNano"} for e in span.get("events", [])]
        result.append(kept)
    return sorted(result, key=lambda span: json.dumps(span, sort_keys=True))


def traced(tmp_path: Path, name: str) -> tuple[ProxyCore, list[tuple[Any, ...]], SpanRecorder]:
    # soon=1: each span queued as its answer ends (the default waits for a few: end_root_soon).
    recorder = SpanRecorder("svc", spans_file=tmp_path / f"{name}.jsonl", otlp_endpoint=None, soon=1)
    queued: list[tuple[Any, ...]] = []
    recorder._enqueue = queued.append  # type: ignore[method-assign,assignment]  # build the spans here
    return ProxyCore(Engine(profile.loads("")), observers=[TelemetryObserver(recorder, None)]), queued, recorder


def built(recorder: SpanRecorder, queued: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    line = recorder.otlp_json_line(queued)
    return [span for rs in orjson.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


def test_traced_lanes_record_the_same_spans_and_send_the_same_context(tmp_path: Path) -> None:
    with_lanes, queued_lanes, recorder_lanes = traced(tmp_path, "lanes")
    without, queued_full, recorder_full = traced(tmp_path, "full")
    assert with_lanes.has_lanes
    out, taken = run(with_lanes, lanes=True)
    expected, _ = run(without, lanes=False)
    assert taken == 13
    assert stats(with_lanes) == stats(without)
    for got, want in zip(out, expected, strict=True):
        # Each proxy sends its own ids upstream: the same lines once traceparent is set aside.
        assert [without_context(x) for x in got] == [without_context(x) for x in want]
    lanes_spans, full_spans = built(recorder_lanes, queued_lanes), built(recorder_full, queued_full)
    assert len(lanes_spans) == len(full_spans) == 9  # eight requests answered, and the server's roots/list
    assert normalized(lanes_spans) == normalized(full_spans)
    # What went upstream carries the span's context, as on the full path.
    sent = orjson.loads(out[5][0])
    assert sent["params"]["_meta"]["traceparent"].split("-")[1] in {span["traceId"] for span in lanes_spans}


def counted(metrics: ProxyMetrics) -> list[str]:
    """The metrics' counters and histogram counts (their sums are times)."""
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if re.match(r"\w+(_total|_count)\{", line)]


def test_metrics_alone_take_the_lanes_and_count_as_the_full_path_does() -> None:
    types, modes = fault_label_sets(CATALOG)
    cores, metrics = [], []
    for _ in range(2):
        metrics.append(ProxyMetrics("stdio", fault_types=types, fault_modes=modes))
        cores.append(ProxyCore(Engine(profile.loads("")), observers=[TelemetryObserver(None, metrics[-1])]))
    with_lanes, without = cores
    assert with_lanes.has_lanes
    out, taken = run(with_lanes, lanes=True)
    expected, _ = run(without, lanes=False)
    assert taken == 13
    assert out == expected  # no span: nothing is put into the requests
    assert stats(with_lanes) == stats(without)
    assert counted(metrics[0]) == counted(metrics[1])
    assert any('method="tools/call"' in line for line in counted(metrics[0]))


REFUSED = {
    "a handshake request": (To.SERVER, INITIALIZE),
    "a notification": (To.SERVER, INITIALIZED),
    "a float id": (To.SERVER, call(7.0, "echo")),
    "a null id": (To.SERVER, call(None, "echo")),
    "the client's answer to a server's request": (To.SERVER, b'{"jsonrpc":"2.0","id":"s","result":{}}\n'),
    "a line that is not JSON": (To.SERVER, b"{nope\n"),
    "a line nested too deeply": (
        To.SERVER,
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}}\n",
    ),
    "a server's request": (To.CLIENT, b'{"jsonrpc":"2.0","id":"s","method":"roots/list"}\n'),
    "an answer to nothing in flight": (To.CLIENT, answer(123)),
    "a 2026 input_required result": (To.CLIENT, answer(8, resultType="input_required", inputRequests={})),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_a_lane_refuses_it_leaves_untouched(case: str) -> None:
    core = ProxyCore(Engine(profile.loads("")))
    for to, line in [*CONVERSATION[:3], (To.SERVER, call(8, "echo"))]:  # after the handshake; 8 in flight
        (core.from_client if to is To.SERVER else core.from_server)(line)
    before = stats(core)
    to, line = REFUSED[case]
    lane = core.lane_from_client if to is To.SERVER else core.lane_from_server
    assert lane(line) is None
    assert stats(core) == before


def test_nothing_before_the_era_is_known_nor_what_a_rule_or_an_event_sink_wants() -> None:
    fresh = ProxyCore(Engine(profile.loads("")))
    assert fresh.lane_from_client(call(1, "echo")) is None  # before any handshake: the era is learnt
    rules = ProxyCore(Engine(profile.loads('[[faults]]\ntype = "error"\ntools = ["echo"]\nprobability = 1.0\n')))
    rules.from_client(INITIALIZE)
    assert rules.lane_from_client(call(1, "echo")) is None  # a rule may act on tools/call
    assert rules.lane_from_client(request(2, "tools/list")) is not None  # no rule can act on tools/list
    sink = MemoryEventSink()
    recorded = ProxyCore(Engine(profile.loads("")), events=sink)
    recorded.from_client(INITIALIZE)
    assert recorded.lane_from_client(call(1, "echo")) is not None
    assert recorded.lane_from_server(answer(1)) is None  # the events file records each request
    [emit] = recorded.from_server(answer(1))
    assert emit.to is To.CLIENT and sink.records[-1]["client_received"] == "response"


def test_a_rule_added_at_run_time_turns_the_lane_off_for_what_it_can_act_on() -> None:
    loaded = profile.loads("")
    live = LiveRules.of(loaded)
    core = ProxyCore(Engine(loaded, live=live))
    controller = Controller(live, transport="stdio", counters=core.engine.counters, stats=core.stats)
    core.from_client(INITIALIZE)
    assert core.lane_from_client(call(1, "echo")) is not None
    controller.add({"type": "error", "name": "boom", "probability": 1.0, "code": -32603})
    assert core.lane_from_client(call(2, "echo")) is None
    assert core.lane_from_server(answer(1)) is not None  # what was let through ends as it began
    [emit] = core.from_client(call(2, "echo"))
    assert emit.to is To.CLIENT and b"-32603" in emit.data  # the rule's error, straight back


def test_an_answer_let_through_ends_its_span_once_written(tmp_path: Path) -> None:
    core, queued, recorder = traced(tmp_path, "later")
    core.from_client(INITIALIZE)
    core.from_server(CONVERSATION[1][1])
    assert len(queued) == 1
    upstream = core.lane_from_client(call(1, "echo"))
    assert upstream is not None and b"traceparent" in upstream
    assert core.lane_from_server(answer(1)) == answer(1)
    assert len(queued) == 1 and core.in_flight == 0  # done with, its span not yet ended
    core.end_passed()
    core.end_passed()  # nothing twice
    [_, span] = built(recorder, queued)
    assert span["name"] == "tools/call echo" and int(span["endTimeUnixNano"]) > int(span["startTimeUnixNano"])
