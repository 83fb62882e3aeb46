"""The telemetry building blocks against real wire formats.

OTLP/HTTP protobuf to a real HTTP receiver decoded with opentelemetry-proto, OTLP JSON lines read
back, W3C trace context, the Prometheus exposition over HTTP, and (when installed) a real
Pushgateway and a real Prometheus scraping our endpoint and storing its exemplars.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict, MessageToJson
from opentelemetry import baggage, trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from mcpfault.faults.latency import Latency
from mcpfault.telemetry import names
from mcpfault.telemetry.metrics import (
    HarnessMetrics,
    ProxyMetrics,
    normalize_method,
    parse_metrics_addr,
    start_metrics_server,
)
from mcpfault.telemetry.tracing import (
    OtlpJsonLinesExporter,
    SpanEvent,
    SpanView,
    configure_tracing,
    encode_otlp_json,
    extract_context,
    inject_context,
    read_spans,
    span_name,
)
from tests.http_support import free_port
from tests.otlp_support import SECRET, OtlpReceiver, emit_request_spans
from tests.prometheus_support import PROMETHEUS, PUSHGATEWAY, http_get, prometheus, pushgateway

FAULT_TYPES = ("timeout", "latency", "error", "malformed", "schema_drift", "stale")
FAULT_MODES = ("drop", "late", "delay", "protocol", "tool", "truncate", "previous")

pytestmark = pytest.mark.usefixtures("clean_otel_env")


# --- helpers ---------------------------------------------------------------------------------------


def finished_spans() -> tuple[ReadableSpan, ...]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    emit_request_spans(provider)
    provider.shutdown()
    return memory.get_finished_spans()


# --- span names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "target", "expected"),
    [
        ("tools/call", "get_device_status", "tools/call get_device_status"),
        ("prompts/get", "summarize", "prompts/get summarize"),
        ("initialize", None, "initialize"),
        ("tools/list", "", "tools/list"),
    ],
)
def test_span_name(method: str, target: str | None, expected: str) -> None:
    assert span_name(method, target) == expected


# --- configure_tracing ---------------------------------------------------------------------------


def test_no_destination_means_no_provider() -> None:
    assert configure_tracing("mcpfault") is None


def test_env_endpoint_alone_gives_a_provider(monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver) -> None:
    # A base endpoint in OTEL_EXPORTER_OTLP_ENDPOINT: the SDK appends /v1/traces, as the spec says.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base_url)
    provider = configure_tracing("mcpfault")
    assert provider is not None
    try:
        emit_request_spans(provider)
    finally:
        provider.shutdown()
    assert [path for path, _, _ in receiver.requests] == ["/v1/traces"]


def test_bad_otlp_endpoint_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"not an http\(s\) URL.*http://127\.0\.0\.1:4318"):
        configure_tracing("mcpfault", otlp_endpoint="localhost:4318")
    with pytest.raises(ValueError, match="not an http") as info:
        configure_tracing("mcpfault", otlp_endpoint=f"grpc://user:{SECRET}@collector:4317")
    assert SECRET not in str(info.value)


def test_otlp_http_protobuf_to_a_real_receiver(receiver: OtlpReceiver) -> None:
    provider = configure_tracing("mcpfault-proxy", otlp_endpoint=receiver.base_url)
    assert provider is not None
    try:
        trace_id, parent_id, child_id = emit_request_spans(provider)
    finally:
        provider.shutdown()  # flushes the batch processor

    assert receiver.requests, "no OTLP request reached the receiver"
    path, headers, request = receiver.requests[0]
    assert path == "/v1/traces"  # appended to the base endpoint
    assert headers["content-type"] == "application/x-protobuf"
    resource = {kv.key: kv.value.string_value for kv in request.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "mcpfault-proxy"

    by_id = {span.span_id.hex(): span for span in receiver.spans()}
    assert set(by_id) == {parent_id, child_id}
    child = by_id[child_id]
    assert child.trace_id.hex() == trace_id
    assert child.parent_span_id.hex() == parent_id
    assert child.name == "tools/call get_device_status"
    assert child.kind == child.SPAN_KIND_SERVER
    assert by_id[parent_id].kind == child.SPAN_KIND_CLIENT
    attrs = {kv.key: kv.value for kv in child.attributes}
    assert attrs[names.MCP_METHOD_NAME].string_value == "tools/call"
    assert attrs[names.SERVER_PORT].int_value == 8080
    assert attrs[names.UPSTREAM_CONTACTED].bool_value is True
    assert [e.name for e in child.events] == [names.EVENT_UPSTREAM_SENT, Latency.event_name]
    assert child.status.code == child.status.STATUS_CODE_ERROR
    assert child.status.message == "internal error"


def test_full_traces_url_is_kept_and_explicit_endpoint_beats_env(monkeypatch: pytest.MonkeyPatch) -> None:
    wanted, ignored = OtlpReceiver(), OtlpReceiver()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ignored.base_url + "/v1/traces")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ignored.base_url)
        provider = configure_tracing("mcpfault", otlp_endpoint=wanted.base_url + "/v1/traces/")
        assert provider is not None
        try:
            emit_request_spans(provider)
        finally:
            provider.shutdown()
        assert [path for path, _, _ in wanted.requests] == ["/v1/traces"]
        assert ignored.requests == []
    finally:
        wanted.close()
        ignored.close()


def test_service_name_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def service(**kwargs: Any) -> Any:
        provider = configure_tracing("default-name", spans_file=tmp_path / "s.jsonl", **kwargs)
        assert provider is not None
        provider.shutdown()
        return provider.resource.attributes

    assert service()["service.name"] == "default-name"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci,service.name=from-attrs")
    assert service()["service.name"] == "from-attrs"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    attributes = service()
    assert attributes["service.name"] == "from-env"
    assert attributes["deployment.environment"] == "ci"
    attributes = service(resource_attributes={"service.name": "explicit", "deployment.environment": "prod"})
    assert attributes["service.name"] == "explicit"
    assert attributes["deployment.environment"] == "prod"


def test_otlp_headers_are_sent_but_never_recorded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer {SECRET},x-tenant=t1")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci")
    failing = OtlpReceiver(status=500)  # failed exports log: the log must not carry the header either
    spans_file = tmp_path / "spans.jsonl"
    caplog.set_level(logging.DEBUG)
    try:
        for endpoint in (receiver.base_url, failing.base_url):
            provider = configure_tracing("mcpfault", spans_file=spans_file, otlp_endpoint=endpoint)
            assert provider is not None
            try:
                emit_request_spans(provider)
            finally:
                provider.shutdown()
        assert failing.requests, "the failing receiver was never contacted"
    finally:
        failing.close()

    # The header did its job on the wire...
    assert receiver.requests[0][1]["authorization"] == f"Bearer {SECRET}"
    # ...and went nowhere else: not the span file, not the exported data, not a log line.
    assert SECRET not in spans_file.read_text()
    assert SECRET not in json.dumps([MessageToDict(req) for _, _, req in receiver.requests])
    assert SECRET not in caplog.text
    assert len(read_spans(spans_file)) == 4


# --- OTLP JSON lines -----------------------------------------------------------------------------


def test_json_lines_round_trip_through_read_spans(tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    provider = configure_tracing("mcpfault-proxy", spans_file=spans_file)
    assert provider is not None
    try:
        trace_id, parent_id, child_id = emit_request_spans(provider)
        provider.force_flush()
        other_trace, _, _ = emit_request_spans(provider)
        provider.force_flush()
    finally:
        provider.shutdown()

    lines = spans_file.read_bytes().splitlines()
    assert len(lines) == 2  # one line per export batch
    first = json.loads(lines[0])
    raw_span = first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(raw_span["traceId"]) == 32 and int(raw_span["traceId"], 16)  # hex, as OTLP JSON says
    assert isinstance(raw_span["kind"], int)

    spans = read_spans(spans_file)
    assert len(spans) == 4
    assert {s.trace_id for s in spans} == {trace_id, other_trace}
    by_id = {s.span_id: s for s in spans}
    parent, child = by_id[parent_id], by_id[child_id]
    assert parent.parent_span_id is None
    assert parent.kind is SpanKind.CLIENT
    assert child == SpanView(
        trace_id=trace_id,
        span_id=child_id,
        parent_span_id=parent_id,
        name="tools/call get_device_status",
        kind=SpanKind.SERVER,
        start_unix_nano=child.start_unix_nano,
        end_unix_nano=child.end_unix_nano,
        attributes={
            names.MCP_METHOD_NAME: "tools/call",
            names.GEN_AI_TOOL_NAME: "get_device_status",
            names.GEN_AI_OPERATION_NAME: "execute_tool",
            names.JSONRPC_REQUEST_ID: "7",
            names.NETWORK_TRANSPORT: "pipe",
            names.SERVER_PORT: 8080,
            names.UPSTREAM_CONTACTED: True,
            names.FAULT_RULE: 2,
            "mcpfault.test.ratio": 0.25,
            "mcpfault.test.list": ("a", "b"),
            names.ERROR_TYPE: "-32603",
        },
        events=(
            SpanEvent(names.EVENT_UPSTREAM_SENT, {"bytes": 120}),
            SpanEvent(Latency.event_name, {"delay_s": 0.5}),
        ),
        status_code=StatusCode.ERROR,
        status_message="internal error",
        service_name="mcpfault-proxy",
    )
    assert parent.start_unix_nano <= child.start_unix_nano <= child.end_unix_nano <= parent.end_unix_nano
    assert child.duration_s >= 0
    for name, attributes in child.events:  # events unpack as (name, attributes) pairs
        assert isinstance(name, str) and isinstance(attributes, dict)


def varied_spans() -> tuple[ReadableSpan, ...]:
    """Spans exercising every corner of the OTLP JSON mapping: links, remote parents, limits, odd values."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "svc"}, schema_url="https://opentelemetry.io/schemas/1.30.0"),
        span_limits=SpanLimits(max_span_attributes=12, max_events=2, max_links=1),
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    remote = extract_context(
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "v=1,w=2"}
    )
    tracer = provider.get_tracer("mcpfault.proxy", "1.2.3", schema_url="https://example.org/s")
    link = trace.Link(trace.get_current_span(remote).get_span_context(), {"why": "retry-of"})
    extra = trace.Link(trace.get_current_span(remote).get_span_context())
    with tracer.start_as_current_span("", context=remote, kind=SpanKind.SERVER, links=[link, extra]) as span:
        span.set_attributes(
            {
                "dropped-by-limit-1": 1,  # the SDK drops the oldest attributes past the limit
                "dropped-by-limit-2": 2,
                "s": "",
                "b": False,
                "i": 0,
                "neg": -(2**63),
                "f": 1.0,
                "nan": float("nan"),
                "inf": float("-inf"),
                "u": "é✓",
                "ints": [1, 2],
                "bools": [True, False],
                "floats": [0.5],
                "strs": ["a", ""],
            }
        )
        span.add_event("dropped-by-limit")  # the oldest events go too
        span.add_event("")
        span.add_event("e2", {"k": "v"})
        span.set_status(Status(StatusCode.OK))
    provider.get_tracer("other-scope").start_span("internal").end()
    provider.shutdown()
    return memory.get_finished_spans()


def test_otlp_json_is_the_protobuf_mapping_with_hex_ids() -> None:
    for spans in (finished_spans(), varied_spans()):
        ours = json.loads(encode_otlp_json(spans))
        reference = json.loads(MessageToJson(encode_spans(spans), indent=None, use_integers_for_enums=True))
        for rs in reference["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    for obj in (span, *span.get("links", ())):
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if key in obj:
                                obj[key] = base64.b64decode(obj[key]).hex()
        assert ours == reference
    assert encode_otlp_json([]) == b"{}\n"


def test_read_spans_reads_every_attribute_type(tmp_path: Path) -> None:
    path = tmp_path / "varied.jsonl"
    path.write_bytes(encode_otlp_json(varied_spans()))
    server = next(s for s in read_spans(path) if s.kind is SpanKind.SERVER)
    assert server.parent_span_id == "b7ad6b7169203331" and server.trace_id == "0af7651916cd43dd8448eb211c80319c"
    attrs = server.attributes
    assert (attrs["s"], attrs["b"], attrs["i"], attrs["neg"], attrs["f"], attrs["u"]) == (
        "",
        False,
        0,
        -(2**63),
        1.0,
        "é✓",
    )
    assert math.isnan(attrs["nan"]) and attrs["inf"] == float("-inf")  # type: ignore[arg-type]
    assert (attrs["ints"], attrs["bools"], attrs["strs"]) == ((1, 2), (True, False), ("a", ""))
    assert [e.name for e in server.events] == ["", "e2"]
    assert server.status_code is StatusCode.OK
    assert server.service_name == "svc"


def test_read_spans_also_reads_plain_protobuf_json(tmp_path: Path) -> None:
    # What MessageToJson writes (base64 ids, enum names): a collector or another tool may write it.
    spans = finished_spans()
    path = tmp_path / "plain.jsonl"
    path.write_text(MessageToJson(encode_spans(spans), indent=None) + "\n")
    views = read_spans(path)
    assert {v.span_id for v in views} == {format(s.context.span_id, "016x") for s in spans}
    assert {v.kind for v in views} == {SpanKind.CLIENT, SpanKind.SERVER}
    assert {v.status_code for v in views} == {StatusCode.UNSET, StatusCode.ERROR}


def test_read_spans_skips_torn_and_bad_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = encode_otlp_json(finished_spans())
    path = tmp_path / "spans.jsonl"
    path.write_bytes(good + b'{"not": "otlp"}\n' + b"garbage\n" + good + good[: len(good) // 2])
    with caplog.at_level(logging.WARNING):
        spans = read_spans(path)
    assert len(spans) == 4  # both whole batches, nothing from the three bad lines
    assert f"{path}:2" in caplog.text and f"{path}:3" in caplog.text
    assert ":5" not in caplog.text  # the torn tail is expected after a crash: no warning


def test_exporter_appends_after_a_torn_line(tmp_path: Path) -> None:
    good = encode_otlp_json(finished_spans())
    path = tmp_path / "spans.jsonl"
    path.write_bytes(good + good[:40])  # a writer died mid-line
    exporter = OtlpJsonLinesExporter(path)
    try:
        exporter.export(finished_spans())
    finally:
        exporter.shutdown()
    assert len(read_spans(path)) == 4
    assert exporter.export(finished_spans()).name == "FAILURE"  # after shutdown, and no exception


def test_two_writers_on_one_file_keep_lines_whole(tmp_path: Path) -> None:
    # Several processes of one run may share a span file; lines far above a stdio buffer must not interleave.
    path = tmp_path / "shared.jsonl"
    batch = finished_spans() * 40  # one line of ~60 kB
    writers = [OtlpJsonLinesExporter(path), OtlpJsonLinesExporter(path)]

    def write(exporter: OtlpJsonLinesExporter) -> None:
        for _ in range(20):
            exporter.export(batch)

    threads = [threading.Thread(target=write, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for w in writers:
        w.shutdown()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 40 and len(lines[0]) > 50_000
    assert len(read_spans(path)) == 40 * len(batch)


# --- W3C trace context in params._meta -----------------------------------------------------------


def test_traceparent_inject_extract_round_trip() -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("mcpfault.test")
    with tracer.start_as_current_span("attempt", kind=SpanKind.CLIENT) as span:
        ctx = baggage.set_baggage("mcpfault.task", "t-1")
        meta = inject_context({"io.modelcontextprotocol/protocolVersion": "2026-07-28"}, ctx)
        sent = span.get_span_context()
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"  # existing keys kept
    # Flags: sampled, plus W3C level 2's "random trace id" bit the SDK sets.
    assert meta["traceparent"] == f"00-{sent.trace_id:032x}-{sent.span_id:016x}-{sent.trace_flags:02x}"
    assert meta["baggage"] == "mcpfault.task=t-1"

    got = extract_context(meta)
    received = trace.get_current_span(got).get_span_context()
    assert (received.trace_id, received.span_id, received.is_remote) == (sent.trace_id, sent.span_id, True)
    assert baggage.get_baggage("mcpfault.task", got) == "t-1"

    child = tracer.start_span("tools/call x", context=got, kind=SpanKind.SERVER)
    child.end()
    assert isinstance(child, ReadableSpan)
    assert child.parent is not None and child.parent.span_id == sent.span_id
    provider.shutdown()


def test_tracestate_round_trips() -> None:
    meta = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "vendor=abc"}
    out = inject_context({}, extract_context(meta))
    assert out == meta


def test_inject_without_a_span_leaves_the_peers_traceparent() -> None:
    meta = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert inject_context(dict(meta), Context()) == meta


@pytest.mark.parametrize(
    "meta",
    [
        None,
        {},
        {"traceparent": "garbage"},
        {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},  # all-zero trace id
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"},  # all-zero span id
        {"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},  # forbidden version
        {"traceparent": "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"},  # upper case
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" + "x" * 10_000},
        {"traceparent": 42},
        {"traceparent": None},
        {"traceparent": ["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]},
        {"traceparent": {"nested": True}, "tracestate": 7, "baggage": b"\xff"},
        {1: "x", "baggage": "=;;=,%%%"},
        ["traceparent"],
    ],
)
def test_malformed_trace_context_gives_an_empty_context(meta: Any) -> None:
    ctx = extract_context(meta)
    assert not trace.get_current_span(ctx).get_span_context().is_valid


def test_extract_never_inherits_the_callers_context() -> None:
    provider = TracerProvider()
    with provider.get_tracer("t").start_as_current_span("unrelated"):
        ctx = extract_context({})
    assert not trace.get_current_span(ctx).get_span_context().is_valid
    provider.shutdown()


# --- metrics ---------------------------------------------------------------------------------------


def make_proxy_metrics() -> ProxyMetrics:
    return ProxyMetrics("stdio", fault_types=FAULT_TYPES, fault_modes=FAULT_MODES)


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_openmetrics_exposition_over_http_carries_exemplars() -> None:
    metrics = make_proxy_metrics()
    metrics.observe_request("tools/call", "latency", 0.75, 0.000_04, TRACE_ID)
    metrics.observe_request("tools/list", None, 0.003, 0.000_02, None)
    metrics.fault_injected("latency", "delay", TRACE_ID)
    metrics.request_started()
    metrics.upstream_exited()
    server, thread = start_metrics_server("127.0.0.1:0", metrics.registry)
    try:
        status, headers, body = http_get(server.url, {"Accept": "application/openmetrics-text;version=1.0.0"})
        assert status == 200
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert body.rstrip().endswith("# EOF")
        exemplar = f'# {{trace_id="{TRACE_ID}"}}'
        lines = body.splitlines()
        assert any(
            line.startswith('mcpfault_requests_total{fault_type="latency",method="tools/call",transport="stdio"} 1.0')
            and exemplar in line
            for line in lines
        )
        assert any(
            line.startswith(
                'mcpfault_request_duration_seconds_bucket{le="1.0",method="tools/call",transport="stdio"} 1.0'
            )
            and exemplar in line
            for line in lines
        )
        assert any(line.startswith("mcpfault_proxy_added_seconds_bucket") and exemplar in line for line in lines)
        assert any(
            line.startswith('mcpfault_faults_injected_total{fault_type="latency",mode="delay"}') for line in lines
        )
        assert 'mcpfault_requests_in_flight{transport="stdio"} 1.0' in lines
        assert 'mcpfault_upstream_exits_total{transport="stdio"} 1.0' in lines
        assert 'mcpfault_requests_total{fault_type="none",method="tools/list",transport="stdio"} 1.0' in lines

        status, headers, body = http_get(server.url)  # no Accept: the classic text format, no exemplars
        assert status == 200
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert "trace_id" not in body and "mcpfault_requests_total{" in body

        assert http_get(server.url.replace("/metrics", "/other"))[0] == 404
    finally:
        server.shutdown()
    assert not thread.is_alive()
    with socket.socket() as s:  # nothing listens on the port any more (TIME_WAIT aside)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", server.port))
        s.listen()


def test_label_values_stay_in_fixed_sets() -> None:
    metrics = make_proxy_metrics()
    hostile = ["evil/method", "x" * 5000, "notifications/made_up", "tools/call\n", "", "TOOLS/CALL"]
    for i, method in enumerate([*hostile, "tools/call", "notifications/cancelled"]):
        metrics.observe_request(method, f"fault-{i}", 0.01, 0.0001, None)
    metrics.observe_request("tools/call", None, 0.01, None, None)
    metrics.fault_injected("made_up", "weird", None)
    metrics.fault_injected("timeout", "drop", None)

    labels: dict[str, set[tuple[tuple[str, str], ...]]] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            labels.setdefault(family.name, set()).add(
                tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            )
    methods = {dict(ls)["method"] for ls in labels["mcpfault_requests"]}
    fault_types = {dict(ls)["fault_type"] for ls in labels["mcpfault_requests"]}
    assert methods == {"_OTHER", "tools/call", "notifications/cancelled"}
    assert fault_types == {"_OTHER", "none"}
    assert {dict(ls)["mode"] for ls in labels["mcpfault_faults_injected"]} == {"_OTHER", "drop"}
    assert normalize_method("server/discover") == "server/discover"
    assert len(metrics._request_children) <= 3 * 2  # the child cache is bounded by the label sets


def test_unknown_transport_is_refused() -> None:
    with pytest.raises(ValueError, match="stdio, http"):
        ProxyMetrics("grpc", fault_types=(), fault_modes=())


@pytest.mark.parametrize(
    ("addr", "why"),
    [
        ("", "no port"),
        ("127.0.0.1:", "no port"),
        ("127.0.0.1:http", "not a number"),
        ("127.0.0.1:-1", "not a number"),
        ("127.0.0.1:70000", "above 65535"),
        ("::1:9464", "needs brackets"),
        ("[::1:9464", "unclosed"),
        ("http://127.0.0.1:9464", "without a scheme"),
        ("127.0.0.1:9464/metrics", "not a number"),
        ("my host:9464", "not a host name"),
    ],
)
def test_bad_metrics_addr_is_a_clear_error(addr: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as info:
        start_metrics_server(addr, HarnessMetrics().registry)
    message = str(info.value)
    assert "--metrics-addr" in message and "127.0.0.1:9464" in message  # what, where, what to do


@pytest.mark.parametrize(
    ("addr", "parsed"),
    [
        (":9464", ("127.0.0.1", 9464)),
        ("9464", ("127.0.0.1", 9464)),  # the one rule of every listener: a bare port is loopback
        ("localhost:0", ("localhost", 0)),
        ("[::1]:9464", ("::1", 9464)),
    ],
)
def test_metrics_addr_parsing(addr: str, parsed: tuple[str, int]) -> None:
    assert parse_metrics_addr(addr) == parsed


def test_ipv6_loopback_serves() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        server, _ = start_metrics_server("[::1]:0", HarnessMetrics().registry)
    except OSError as exc:
        pytest.skip(f"cannot bind ::1 here: {exc}")
    try:
        assert http_get(server.url)[0] == 200
    finally:
        server.shutdown()


def test_non_loopback_needs_a_token_and_the_token_is_enforced() -> None:
    registry = HarnessMetrics().registry
    with pytest.raises(ValueError, match=r"beyond loopback.*MCPFAULT_METRICS_TOKEN"):
        start_metrics_server("0.0.0.0:0", registry)
    with pytest.raises(ValueError, match=r"beyond loopback.*MCPFAULT_METRICS_TOKEN"):
        start_metrics_server("example.org:0", registry)

    server, thread = start_metrics_server("0.0.0.0:0", registry, token="tok-123")
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        status, headers, body = http_get(url)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer") and "mcpfault_" not in body
        assert http_get(url, {"Authorization": "Bearer wrong"})[0] == 401
        assert http_get(url, {"Authorization": "tok-123"})[0] == 401
        status, _, body = http_get(url, {"Authorization": "Bearer tok-123"})
        assert status == 200 and "mcpfault_task_outcomes_total" in body
    finally:
        server.shutdown()
    assert not thread.is_alive()


def test_token_is_enforced_on_loopback_too() -> None:
    with start_metrics_server("127.0.0.1:0", HarnessMetrics().registry, token="tok")[0] as server:
        assert http_get(server.url)[0] == 401
        assert http_get(server.url, {"Authorization": "Bearer tok"})[0] == 200


def test_busy_port_is_a_clear_error() -> None:
    with (
        start_metrics_server("127.0.0.1:0", HarnessMetrics().registry)[0] as server,
        pytest.raises(OSError, match="choose another port"),
    ):
        start_metrics_server(f"127.0.0.1:{server.port}", HarnessMetrics().registry)


def test_bad_pushgateway_url() -> None:
    with pytest.raises(ValueError, match="Pushgateway URL"):
        HarnessMetrics().push("ftp://gateway", "job")


@pytest.mark.slow
@pytest.mark.skipif(
    not PUSHGATEWAY.exists(), reason=f"{PUSHGATEWAY} is not installed (apt-get install prometheus-pushgateway)"
)
def test_push_to_a_real_pushgateway(tmp_path: Path) -> None:
    metrics = HarnessMetrics()
    metrics.record_outcome("latency-heavy", "scripted", "success", TRACE_ID)
    metrics.record_outcome("latency-heavy", "scripted", "success")
    metrics.record_outcome("latency-heavy", "scripted", "failed_silent")
    metrics.observe_recovery("latency", 1.5, TRACE_ID)
    metrics.add_retries("latency-heavy", "scripted", 3)
    metrics.add_duplicates("latency-heavy", "scripted")
    metrics.add_silent_failures("latency-heavy", "scripted")

    with pushgateway(free_port(), tmp_path / "pushgateway.log") as base:
        metrics.push(base, "mcpfault-bench", {"run": "r1"})
        status, _, body = http_get(base + "/metrics")
        assert status == 200
        common = 'agent="scripted",instance="",job="mcpfault-bench"'
        assert f'mcpfault_task_outcomes_total{{{common},outcome="success",profile="latency-heavy",run="r1"}} 2' in body
        assert f'mcpfault_task_retries_total{{{common},profile="latency-heavy",run="r1"}} 3' in body
        assert (
            'mcpfault_task_recovery_seconds_bucket{fault_type="latency",instance="",job="mcpfault-bench",run="r1",le="2"} 1'
            in body
        )
        assert f'mcpfault_silent_failures_total{{{common},profile="latency-heavy",run="r1"}} 1' in body


@pytest.mark.slow
@pytest.mark.skipif(not PROMETHEUS.exists(), reason=f"{PROMETHEUS} is not installed (apt-get install prometheus)")
def test_real_prometheus_scrapes_series_and_exemplars(tmp_path: Path) -> None:
    metrics = make_proxy_metrics()
    metrics.observe_request("tools/call", "timeout", 2.5, 0.000_05, TRACE_ID)
    server, _ = start_metrics_server("127.0.0.1:0", metrics.registry)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: mcpfault\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{server.port}']\n"
    )
    try:
        with prometheus(free_port(), config, tmp_path / "tsdb", tmp_path / "prometheus.log", exemplars=True) as base:
            api = base + "/api/v1"
            series: list[Any] = []
            exemplars: list[Any] = []
            deadline = time.monotonic() + 20
            for _ in range(200):
                if time.monotonic() > deadline:
                    break
                if not series:
                    _, _, body = http_get(f"{api}/query?query=mcpfault_requests_total")
                    series = json.loads(body)["data"]["result"]
                if series:
                    now = time.time()
                    query = urllib.parse.urlencode(
                        {"query": "mcpfault_requests_total", "start": now - 600, "end": now + 60}
                    )
                    _, _, body = http_get(f"{api}/query_exemplars?{query}")
                    exemplars = json.loads(body)["data"] or []
                    if exemplars:
                        break
                time.sleep(0.2)
            assert series, (
                f"Prometheus never stored mcpfault_requests_total; log:\n{(tmp_path / 'prometheus.log').read_text()[-3000:]}"
            )
            assert series[0]["metric"]["method"] == "tools/call"
            assert series[0]["metric"]["fault_type"] == "timeout"
            assert series[0]["value"][1] == "1"
            assert exemplars, "Prometheus stored no exemplar for mcpfault_requests_total"
            stored = [e["labels"]["trace_id"] for group in exemplars for e in group["exemplars"]]
            assert TRACE_ID in stored
    finally:
        server.shutdown()
