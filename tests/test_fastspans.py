"""The proxy's light span recorder: W3C parsing, the OTLP JSON it writes, OTLP/HTTP, shutdown, drops."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.trace import SpanKind, Status, StatusCode

from mcpfault.faults.latency import Latency
from mcpfault.telemetry import names
from mcpfault.telemetry.fastspans import SpanRecorder
from mcpfault.telemetry.propagation import parse_traceparent
from mcpfault.telemetry.span_json import Filled
from mcpfault.telemetry.tracing import configure_tracing, extract_context, read_spans
from tests.otlp_support import SECRET

pytestmark = pytest.mark.usefixtures("clean_otel_env")

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"
START_NS = 1_700_000_000_000_000_000


# --- traceparent --------------------------------------------------------------------------------


def test_a_valid_traceparent_is_parsed_flags_kept():
    parent = parse_traceparent(f"00-{TRACE}-{PARENT}-03")
    assert parent is not None
    assert (parent.trace_id, parent.span_id, parent.flags) == (TRACE, PARENT, "03")


@pytest.mark.parametrize(
    "value",
    [
        None,
        42,
        "",
        TRACEPARENT.upper(),  # uppercase hex is invalid in version 00
        f"00-{TRACE.upper()}-{PARENT}-01",
        f"01-{TRACE}-{PARENT}-01",  # only version 00 is understood
        f"ff-{TRACE}-{PARENT}-01",
        f"00-{'0' * 32}-{PARENT}-01",  # all-zero ids
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{TRACE}-{PARENT}-0g",
        f"00-{TRACE[:-1]}x-{PARENT}-01",
        f"00-{TRACE}-{PARENT}-01-extra",
        f"00_{TRACE}_{PARENT}_01",
        f" {TRACEPARENT}"[:55],
    ],
)
def test_an_invalid_traceparent_is_none(value: Any):
    assert parse_traceparent(value) is None


def test_an_invalid_parent_starts_a_new_trace(tmp_path: Path):
    recorder = SpanRecorder("svc", spans_file=None, otlp_endpoint=None)
    handle = recorder.start("initialize", SpanKind.SERVER, f"00-{'0' * 32}-{PARENT}-01", {}, START_NS, tracestate="a=b")
    assert handle is not None
    assert handle.trace_id != "0" * 32 and len(handle.trace_id) == 32
    assert handle.parent_span_id is None and handle.tracestate is None
    assert parse_traceparent(handle.traceparent()) is not None
    child = recorder.start("initialize", SpanKind.SERVER, TRACEPARENT, {}, START_NS, tracestate="a=b")
    assert child is not None
    assert (child.trace_id, child.parent_span_id, child.tracestate) == (TRACE, PARENT, "a=b")
    assert child.traceparent() == f"00-{TRACE}-{child.span_id}-01"
    assert child.span_id != PARENT and int(child.span_id, 16)
    recorder.shutdown()


def test_an_unsampled_parent_gets_no_span(tmp_path: Path):
    """The default sampler is parent-based: the client's unsampled context crosses as it came."""
    spans_file = tmp_path / "spans.jsonl"
    recorder = SpanRecorder("svc", spans_file=spans_file, otlp_endpoint=None)
    assert recorder.start("ping", SpanKind.SERVER, f"00-{TRACE}-{PARENT}-00", {}, START_NS) is None
    recorder.shutdown()
    assert read_spans(spans_file) == []


# --- the file -----------------------------------------------------------------------------------


def _record(recorder: SpanRecorder, request_id: str, traceparent: str | None = TRACEPARENT) -> str:
    handle = recorder.start(
        "tools/call echo",
        SpanKind.SERVER,
        traceparent,
        {names.MCP_METHOD_NAME: "tools/call", names.JSONRPC_REQUEST_ID: request_id, "mcpfault.test.n": 3},
        START_NS,
    )
    assert handle is not None
    recorder.end(
        handle,
        {names.UPSTREAM_CONTACTED: False, names.ERROR_TYPE: "-32603"},
        [(Latency.event_name, START_NS + 5, {names.FAULT_MODE: "delay", "mcpfault.delay_s": 0.5})],
        ("error",),
        START_NS + 10,
    )
    return handle.span_id


def test_the_file_round_trips_through_read_spans(tmp_path: Path):
    spans_file = tmp_path / "deep" / "spans.jsonl"
    recorder = SpanRecorder("mcpfault-proxy", spans_file=spans_file, otlp_endpoint=None)
    span_id = _record(recorder, "1")
    _record(recorder, "2", traceparent=None)
    recorder.shutdown()
    lines = spans_file.read_bytes().splitlines()
    assert len(lines) == 1  # one batch, one line, one write
    spans = {s.attributes[names.JSONRPC_REQUEST_ID]: s for s in read_spans(spans_file)}
    one, two = spans["1"], spans["2"]
    assert (one.trace_id, one.span_id, one.parent_span_id) == (TRACE, span_id, PARENT)
    assert one.name == "tools/call echo" and one.kind is SpanKind.SERVER and one.service_name == "mcpfault-proxy"
    assert (one.start_unix_nano, one.end_unix_nano) == (START_NS, START_NS + 10)
    assert one.attributes["mcpfault.test.n"] == 3 and one.attributes[names.UPSTREAM_CONTACTED] is False
    assert [(e.name, e.attributes) for e in one.events] == [
        (Latency.event_name, {names.FAULT_MODE: "delay", "mcpfault.delay_s": 0.5})
    ]
    assert (one.status_code, one.status_message) == (StatusCode.ERROR, "error")
    assert two.parent_span_id is None and two.trace_id != TRACE


def test_one_span_is_the_same_json_as_the_sdk_path(tmp_path: Path):
    meta = {"traceparent": TRACEPARENT, "tracestate": "v=1,w=2"}
    start_attributes = {names.MCP_METHOD_NAME: "tools/call", names.JSONRPC_REQUEST_ID: "7", names.FAULT_RULE: "r"}
    end_attributes: dict[str, Any] = {
        names.UPSTREAM_CONTACTED: True,
        "mcpfault.test.ratio": 0.25,
        names.ERROR_TYPE: "-32603",
    }
    events: list[tuple[str, int, dict[str, Any]]] = [
        (names.EVENT_UPSTREAM_SENT, START_NS + 1, {}),
        (Latency.event_name, START_NS + 2, {names.FAULT_MODE: "delay", "mcpfault.delay_s": 0.5}),
    ]

    sdk_file = tmp_path / "sdk.jsonl"
    provider = configure_tracing("mcpfault-proxy", spans_file=sdk_file)
    assert provider is not None
    span = provider.get_tracer("mcpfault.proxy", "1.2.3").start_span(
        "tools/call echo",
        context=extract_context(meta),
        kind=SpanKind.SERVER,
        attributes=start_attributes,
        start_time=START_NS,
    )
    for key, value in end_attributes.items():
        span.set_attribute(key, value)
    for name, when, attributes in events:
        span.add_event(name, attributes, timestamp=when)
    span.set_status(Status(StatusCode.ERROR, "error"))
    span.end(end_time=START_NS + 10)
    provider.shutdown()

    fast_file = tmp_path / "fast.jsonl"
    recorder = SpanRecorder("mcpfault-proxy", spans_file=fast_file, otlp_endpoint=None, scope_version="1.2.3")
    handle = recorder.start(
        "tools/call echo",
        SpanKind.SERVER,
        meta["traceparent"],
        start_attributes,
        START_NS,
        tracestate=meta["tracestate"],
    )
    assert handle is not None
    recorder.end(handle, end_attributes, events, ("error",), START_NS + 10)
    recorder.shutdown()

    sdk, fast = json.loads(sdk_file.read_bytes()), json.loads(fast_file.read_bytes())
    sdk_span = sdk["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert sdk_span["spanId"] != handle.span_id
    sdk_span["spanId"] = handle.span_id  # ids are random; all else is the same
    assert fast == sdk


# --- OTLP/HTTP ----------------------------------------------------------------------------------


def test_spans_go_to_a_real_otlp_receiver_with_the_env_headers(tmp_path: Path, monkeypatch, caplog, receiver):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer {SECRET}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "renamed")
    caplog.set_level(logging.DEBUG)
    recorder = SpanRecorder("mcpfault-proxy", spans_file=tmp_path / "s.jsonl", otlp_endpoint=receiver.base_url)
    span_id = _record(recorder, "1")
    recorder.shutdown()
    assert len(receiver.requests) == 1
    path, headers, message = receiver.requests[0]
    assert path == "/v1/traces" and headers["authorization"] == f"Bearer {SECRET}"
    assert headers["content-type"] == "application/x-protobuf"
    (span,) = receiver.spans()
    assert (span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex()) == (TRACE, span_id, PARENT)
    assert span.name == "tools/call echo" and span.kind == 2 and span.status.code == 2
    resource = {kv.key: kv.value.string_value for kv in message.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "renamed"
    assert SECRET not in caplog.text


def test_the_endpoint_comes_from_the_environment(monkeypatch, receiver):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base_url)
    recorder = SpanRecorder("svc", spans_file=None, otlp_endpoint=None)
    _record(recorder, "1")
    recorder.shutdown()
    assert [path for path, _, _ in receiver.requests] == ["/v1/traces"]


def test_a_bad_endpoint_is_refused():
    with pytest.raises(ValueError, match="not an http"):
        SpanRecorder("svc", spans_file=None, otlp_endpoint=f"grpc://user:{SECRET}@collector:4317")


# --- shutdown and the bounded queue -------------------------------------------------------------


def test_shutdown_flushes_every_span_and_joins_the_writer(tmp_path: Path):
    spans_file = tmp_path / "spans.jsonl"
    recorder = SpanRecorder("svc", spans_file=spans_file, otlp_endpoint=None)
    for i in range(1500):  # several batches, some still queued at shutdown
        _record(recorder, str(i))
    thread = recorder._thread
    assert thread is not None
    recorder.shutdown()
    assert not thread.is_alive()
    assert len(read_spans(spans_file)) == 1500
    assert recorder.dropped == 0


def test_a_full_queue_drops_counts_and_warns_once(tmp_path: Path, caplog):
    spans_file = tmp_path / "spans.jsonl"
    recorder = SpanRecorder("svc", spans_file=spans_file, otlp_endpoint=None, max_queue=10)
    recorder._thread = object()  # type: ignore[assignment]  # a writer that never drains
    for i in range(25):
        _record(recorder, str(i))
    assert recorder.dropped == 15
    assert sum("span queue full" in r.getMessage() for r in caplog.records) == 1
    recorder._thread = None
    recorder.shutdown()  # no writer ran: shutdown drains the queue itself
    assert len(read_spans(spans_file)) == 10


# --- templates ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_line", "answer"),
    [
        # a new trace; an answer
        (
            b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}',
            b'{"jsonrpc":"2.0","id":7,"result":{"content":[]}}',
        ),
        # the client's sampled parent; a string id that needs escaping; a tool error
        (
            b'{"jsonrpc":"2.0","id":"a\\"b","method":"tools/call","params":{"name":"echo","_meta":{"traceparent":"'
            + TRACEPARENT.encode()
            + b'"}}}',
            b'{"jsonrpc":"2.0","id":"a\\"b","result":{"content":[],"isError":true}}',
        ),
        # an error on a method with no target
        (
            b'{"jsonrpc":"2.0","id":8,"method":"resources/read","params":{"uri":"x://y"}}',
            b'{"jsonrpc":"2.0","id":8,"error":{"code":-32603,"message":"boom"}}',
        ),
    ],
)
def test_a_templated_span_is_the_same_json_as_the_slow_path(tmp_path: Path, request_line: bytes, answer: bytes):
    from mcpfault.faults import profile
    from mcpfault.faults.engine import Engine
    from mcpfault.proxy.core import ProxyCore
    from mcpfault.proxy.observe import TelemetryObserver
    from mcpfault.proxy.span_endings import PlainEnding, plain_finished
    from mcpfault.telemetry.fastspans import root_handle
    from mcpfault.telemetry.span_json import json_span

    recorder = SpanRecorder("svc", spans_file=tmp_path / "s.jsonl", otlp_endpoint=None, soon=1)
    queued: list[tuple[Any, ...]] = []
    recorder._enqueue = queued.append  # type: ignore[method-assign,assignment]  # keep each span's item to build it twice
    fast = TelemetryObserver(recorder, None)
    slow = TelemetryObserver(recorder, None, annotate=lambda outcome: ({}, []))  # an annotation: the slow path
    slow._spans._clock = fast._spans._clock  # one clock: each observer takes its own offset to Unix time
    core = ProxyCore(Engine(profile.loads("")), observers=[fast])
    answered: list[tuple[Any, Any]] = []  # what the core hands the observer: the request and its raw answer
    answer_plain = fast.answered_plain

    def keep_and_answer(pending: Any, answer: Any) -> None:
        answered.append((pending, answer))
        answer_plain(pending, answer)

    fast.answered_plain = keep_and_answer  # type: ignore[method-assign]
    for _ in range(2):  # the second span of a kind comes from the template the first made
        core.from_client(request_line + b"\n")
        core.from_server(answer + b"\n")
    assert len(queued) == 2
    for item, (pending, raw) in zip(queued, answered, strict=True):
        if len(item) == 2:  # a root as it was drawn: its span made whole on the writer's thread
            build, fields = item
            kept = PlainEnding(*fields)
            assert kept.root is not None
            start_ns = fast._clock.unix_ns(kept.started)
            handle = root_handle(kept.root, "", SpanKind.SERVER.value + 1, fast._from_client, start_ns)
            assert isinstance(build(fields), Filled)  # then the same as plain's, below
            assert build(fields) == fast._spans.plain(handle, kept)
        else:
            handle, _build, kept = item
        outcome = plain_finished(pending, raw)  # a plain request's Finished, from its raw answer
        filled = fast._spans.ending(handle, outcome)
        assert isinstance(filled, Filled)
        templated = filled.json()
        assert fast._spans.plain(handle, kept) == filled  # the shortcut from what the queue kept: the same
        again = fast._spans.ending(handle, fast._spans._finished_of(kept))  # and when its template is gone
        assert isinstance(again, Filled)
        assert again.json() == templated
        ending = slow._spans.ending(handle, outcome)
        assert not isinstance(ending, bytes | Filled)
        attributes, events, error, end_ns, name = ending
        assert name is not None
        handle.name = name
        assert templated == orjson.dumps(json_span(handle, attributes, events, error, end_ns))


def test_spans_that_end_alike_share_one_template(tmp_path: Path):
    # The request id goes in a slot: a template per kind of ending, not per request.
    from mcpfault.faults import profile
    from mcpfault.faults.engine import Engine
    from mcpfault.proxy.core import ProxyCore
    from mcpfault.proxy.observe import TelemetryObserver

    recorder = SpanRecorder("svc", spans_file=tmp_path / "s.jsonl", otlp_endpoint=None, soon=1)
    queued: list[tuple[Any, ...]] = []
    recorder._enqueue = queued.append  # type: ignore[method-assign,assignment]
    observer = TelemetryObserver(recorder, None)
    core = ProxyCore(Engine(profile.loads("")), observers=[observer])
    for request_id in range(1, 6):
        core.from_client(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo"}}\n' % request_id)
        core.from_server(b'{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}\n' % request_id)
    assert all(len(item) == 2 for item in queued)  # roots as they were drawn: built (build, ending) alone
    spans = [orjson.loads(build(ending).json()) for build, ending in queued]
    assert len(observer._spans._plain_templates) == 1
    request_ids = [
        attribute["value"]["stringValue"]
        for span in spans
        for attribute in span["attributes"]
        if attribute["key"] == "jsonrpc.request.id"
    ]
    assert request_ids == ["1", "2", "3", "4", "5"]


def test_a_request_whose_span_the_full_queue_drops_is_still_counted(tmp_path: Path):
    # The histograms of a plain request are observed as its span is built; a dropped span is never
    # built, so its request is counted on the spot instead (its exemplar is not the lost span's trace).
    from mcpfault.faults import profile
    from mcpfault.faults.engine import Engine
    from mcpfault.proxy.core import ProxyCore
    from mcpfault.proxy.observe import TelemetryObserver
    from mcpfault.telemetry.metrics import ProxyMetrics

    recorder = SpanRecorder("svc", spans_file=tmp_path / "s.jsonl", otlp_endpoint=None, max_queue=3)
    recorder._thread = object()  # type: ignore[assignment]  # a writer that never drains
    metrics = ProxyMetrics("stdio", fault_types=(), fault_modes=())
    core = ProxyCore(Engine(profile.loads("")), observers=[TelemetryObserver(recorder, metrics)])
    for request_id in range(1, 9):
        core.from_client(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo"}}\n' % request_id)
        core.from_server(b'{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}\n' % request_id)
    assert recorder.dropped == 5
    registry = metrics.registry
    assert registry.get_sample_value("mcpfault_requests_in_flight", {"transport": "stdio"}) == 0
    counted = {"method": "tools/call", "fault_type": "none", "transport": "stdio"}
    assert registry.get_sample_value("mcpfault_requests_total", counted) == 5  # the three queued: when built
    recorder._thread = None
    recorder.shutdown()  # builds the three queued spans, which observe their requests
    assert registry.get_sample_value("mcpfault_requests_total", counted) == 8
    duration = {"method": "tools/call", "transport": "stdio"}
    assert registry.get_sample_value("mcpfault_request_duration_seconds_count", duration) == 8
    assert registry.get_sample_value("mcpfault_proxy_added_seconds_count", {"transport": "stdio"}) == 8
    assert len(read_spans(tmp_path / "s.jsonl")) == 3


def test_plain_endings_wait_for_a_few_then_go_together_and_never_longer_than_a_wake(tmp_path: Path):
    # A lean observer's plain requests end through end_root_soon: their fields are read SOON at a
    # time on the relay's thread, and what is left by the writer's thread at its next wake.
    from mcpfault.faults import profile
    from mcpfault.faults.engine import Engine
    from mcpfault.proxy.core import ProxyCore
    from mcpfault.proxy.observe import TelemetryObserver
    from mcpfault.telemetry.fastspans import FLUSH_INTERVAL_S, SOON

    spans_file = tmp_path / "s.jsonl"
    recorder = SpanRecorder("svc", spans_file=spans_file, otlp_endpoint=None)
    queued: list[tuple[Any, ...]] = []
    enqueue = recorder._enqueue

    def keep(item: tuple[Any, ...]) -> bool:
        queued.append(item)
        return enqueue(item)

    recorder._enqueue = keep  # type: ignore[method-assign]
    start_writer = recorder._start_writer
    recorder._start_writer = lambda: None  # type: ignore[method-assign]  # no wake yet: only the count decides
    core = ProxyCore(Engine(profile.loads("")), observers=[TelemetryObserver(recorder, None)])

    def answered(request_id: int) -> None:
        core.from_client(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo"}}\n' % request_id)
        core.from_server(b'{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}\n' % request_id)

    for request_id in range(1, SOON):
        answered(request_id)
    assert queued == []  # not yet: they wait for a few more
    answered(SOON)
    assert len(queued) == SOON  # together, on this thread
    recorder._start_writer = start_writer  # type: ignore[method-assign]
    answered(SOON + 1)
    deadline = time.monotonic() + 10 * FLUSH_INTERVAL_S
    while len(read_spans(spans_file)) < SOON + 1 and time.monotonic() < deadline:
        time.sleep(FLUSH_INTERVAL_S / 4)  # the writer's wake takes the one left, with no more traffic
    assert len(read_spans(spans_file)) == SOON + 1
    answered(SOON + 2)
    recorder.shutdown()  # a clean stop takes what waits too
    assert len(read_spans(spans_file)) == SOON + 2
