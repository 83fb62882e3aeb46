"""``export_run``: span files replayed to a real OTLP/HTTP receiver that decodes protobuf."""

from __future__ import annotations

import base64
import email.utils
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.trace import Link, SpanKind

from mcpfault.telemetry.export import ExportError, ExportSummary, _retry_after_s, export_run, otlp_json_to_protobuf
from mcpfault.telemetry.tracing import configure_tracing, read_spans
from tests.http_support import free_port
from tests.otlp_support import Answer, OtlpReceiver, accepted, emit_request_spans

SECRET = "s3cr3t-t0ken-do-not-leak"
pytestmark = pytest.mark.usefixtures("clean_otel_env")


@pytest.fixture
def scripted() -> Iterator[Any]:
    """Makes OTLP receivers answering from a script of (status, headers, body); the last one repeats."""
    made: list[OtlpReceiver] = []

    def make(*script: Answer) -> OtlpReceiver:
        made.append(OtlpReceiver(script=script))
        return made[-1]

    try:
        yield make
    finally:
        for r in made:
            r.close()


OK = accepted()


def write_run(run_dir: Path, sessions: int = 2, flushes: int = 2) -> None:
    """A run directory as the harness lays it out: per session, client and proxy span files."""
    for session in range(sessions):
        for role in ("client", "proxy"):
            provider = configure_tracing(f"mcpfault-{role}", spans_file=run_dir / f"s{session}" / f"{role}-spans.jsonl")
            assert provider is not None
            try:
                for _ in range(flushes):
                    emit_request_spans(provider)
                    provider.force_flush()  # one line per flush
            finally:
                provider.shutdown()


def span_key(span: Any) -> tuple[Any, ...]:
    return (span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex() or None, span.name)


# --- round trip --------------------------------------------------------------------------------


def test_round_trip_ids_names_parents_links(tmp_path: Path, receiver: OtlpReceiver) -> None:
    run_dir = tmp_path / "run"
    write_run(run_dir)
    # A span with a link, and one in a nested folder named like the server's file.
    provider = configure_tracing("mcpfault-server", spans_file=run_dir / "s0" / "deep" / "server-spans.jsonl")
    assert provider is not None
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("first") as first:
        pass
    with tracer.start_as_current_span("linked", links=[Link(first.get_span_context(), {"why": "retry of"})]):
        pass
    provider.shutdown()
    (run_dir / "records.jsonl").write_text('{"not": "spans"}\n')  # other files are left alone

    expected = [view for path in sorted(run_dir.rglob("*spans.jsonl")) for view in read_spans(path)]
    summary = export_run(run_dir, receiver.base_url)

    assert summary == ExportSummary(
        endpoint=receiver.base_url + "/v1/traces", files=5, spans=len(expected), batches=5, failures=0
    )
    assert summary.ok
    assert {path for path, _, _ in receiver.requests} == {"/v1/traces"}
    assert all(h["content-type"] == "application/x-protobuf" for _, h, _ in receiver.requests)
    got = receiver.spans()
    assert sorted(span_key(s) for s in got) == sorted(
        (v.trace_id, v.span_id, v.parent_span_id, v.name) for v in expected
    )
    by_id = {s.span_id.hex(): s for s in got}
    for view in expected:
        span = by_id[view.span_id]
        assert span.kind - 1 == view.kind.value  # OTLP's enum is the API's shifted by one
        assert span.start_time_unix_nano == view.start_unix_nano
        assert span.end_time_unix_nano == view.end_unix_nano
        assert [e.name for e in span.events] == [e.name for e in view.events]
    linked = next(s for s in got if s.name == "linked")
    assert [(link.trace_id, link.span_id) for link in linked.links] == [
        (first.get_span_context().trace_id.to_bytes(16, "big"), first.get_span_context().span_id.to_bytes(8, "big"))
    ]
    assert receiver.service_names() == {"mcpfault-client", "mcpfault-proxy", "mcpfault-server"}


def test_lines_are_batched_within_limits(tmp_path: Path, scripted: Any) -> None:
    write_run(tmp_path, sessions=1, flushes=3)  # 2 files x 3 lines x 2 spans
    whole = scripted(OK)
    assert export_run(tmp_path, whole.base_url).batches == 2  # one per file
    one_line_each = scripted(OK)
    summary = export_run(tmp_path, one_line_each.base_url, max_batch_spans=3)
    assert (summary.batches, summary.spans) == (6, 12)  # a batch holds whole lines only
    assert len(one_line_each.spans()) == 12
    tiny = scripted(OK)
    assert export_run(tmp_path, tiny.base_url, max_batch_bytes=1).batches == 6  # a larger line still goes alone


def test_headers_from_the_environment_are_sent_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripted: Any
) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer {SECRET},x-tenant=t1")
    good = scripted(OK)
    summary = export_run(tmp_path, good.base_url)
    assert {h["authorization"] for _, h, _ in good.requests} == {f"Bearer {SECRET}"}
    assert {h["x-tenant"] for _, h, _ in good.requests} == {"t1"}
    assert SECRET not in repr(summary) + summary.describe()

    # A receiver that echoes the header in its refusal: the message still must not carry it.
    refusing = scripted((401, {"Content-Type": "text/plain"}, f"bad token: Bearer {SECRET}".encode()))
    with pytest.raises(ExportError, match=r"401 Unauthorized.*OTEL_EXPORTER_OTLP_HEADERS") as info:
        export_run(tmp_path, refusing.base_url)
    assert SECRET not in str(info.value)
    assert refusing.base_url in str(info.value)

    # The signal's own variable replaces the generic one, as in the SDK.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-only=traces")
    only = scripted(OK)
    export_run(tmp_path, only.base_url)
    assert "authorization" not in only.requests[0][1]
    assert only.requests[0][1]["x-only"] == "traces"


# --- retries and errors ------------------------------------------------------------------------


def test_503_once_with_retry_after_then_200(tmp_path: Path, scripted: Any) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    r = scripted((503, {"Retry-After": "0"}, b"busy"), OK)
    waits: list[float] = []
    summary = export_run(tmp_path, r.base_url, sleep=waits.append)
    assert waits == [0.0]  # Retry-After honoured
    assert summary.retries == 1 and summary.failures == 0 and summary.batches == 2
    assert len(r.requests) == 3  # the first batch twice, then the second file's
    assert r.requests[0][2] == r.requests[1][2]  # the retry resent the same batch
    assert summary.spans == 4 == len({s.span_id for s in r.spans()})


def test_retry_after_zero_retries_at_once(tmp_path: Path, scripted: Any) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    r = scripted((429, {"Retry-After": "0"}, b""), OK)
    naps: list[float] = []
    assert export_run(tmp_path, r.base_url, sleep=naps.append).retries == 1
    assert naps == [0.0]  # the server said now: no backoff of our own on top


def test_retries_are_bounded_and_waits_capped(tmp_path: Path, scripted: Any) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    r = scripted((429, {"Retry-After": "3600"}, b"slow down"))
    waits: list[float] = []
    with pytest.raises(ExportError, match=r"still answered 429 Too Many Requests after 3 attempts") as info:
        export_run(tmp_path, r.base_url, max_attempts=3, max_retry_wait_s=2.5, sleep=waits.append)
    assert waits == [2.5, 2.5]
    assert len(r.requests) == 3
    assert info.value.summary is not None and info.value.summary.batches == 0


def test_backoff_without_retry_after(tmp_path: Path, scripted: Any) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    r = scripted((503, {}, b""), (503, {}, b""), OK)
    waits: list[float] = []
    assert export_run(tmp_path, r.base_url, sleep=waits.append).retries == 2
    assert waits == [0.5, 1.0]


def test_retry_after_forms() -> None:
    assert _retry_after_s("7") == 7.0
    assert _retry_after_s(" 0 ") == 0.0
    assert _retry_after_s(None) is None
    assert _retry_after_s("soon") is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < (_retry_after_s(later) or 0) <= 30
    assert _retry_after_s(email.utils.formatdate(time.time() - 30, usegmt=True)) == 0.0


def test_unreachable_endpoint_names_it(tmp_path: Path) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    naps: list[float] = []
    with pytest.raises(ExportError, match=rf"cannot reach OTLP endpoint {url}/v1/traces: .*refused"):
        export_run(tmp_path, url, sleep=naps.append)
    assert naps == []  # no pointless retries against a closed port


def test_credentials_in_the_endpoint_are_never_shown(tmp_path: Path) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    with pytest.raises(ExportError) as info:
        export_run(tmp_path, f"http://user:{SECRET}@127.0.0.1:{free_port()}")
    assert SECRET not in str(info.value) and "//***@127.0.0.1" in str(info.value)


def test_wrong_path_is_a_clear_error(tmp_path: Path, scripted: Any) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    r = scripted((404, {}, b"404 page not found"))
    with pytest.raises(ExportError, match=r"404 Not Found \(404 page not found\).*OTLP/HTTP receiver"):
        export_run(tmp_path, r.base_url)


def test_rejected_batches_are_counted_and_the_rest_sent(tmp_path: Path, scripted: Any) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    r = scripted((400, {"Content-Type": "text/plain"}, b"invalid span"), OK)
    summary = export_run(tmp_path, r.base_url)
    assert (summary.failures, summary.failed_spans, summary.batches, summary.spans) == (1, 2, 1, 2)
    assert summary.errors == ("400 Bad Request (invalid span)",)
    assert not summary.ok
    assert "1 batches (2 spans) rejected" in summary.describe()


def test_partial_success_is_reported(tmp_path: Path, scripted: Any) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    answer = ExportTraceServiceResponse()
    answer.partial_success.rejected_spans = 1
    answer.partial_success.error_message = "span too old"
    r = scripted((200, {"Content-Type": "application/x-protobuf"}, answer.SerializeToString()), OK)
    summary = export_run(tmp_path, r.base_url)
    assert (summary.rejected_spans, summary.spans) == (1, 3)
    assert summary.errors == ("partial success: 1 spans rejected (span too old)",)


# --- input -------------------------------------------------------------------------------------


def test_no_span_files_is_a_clear_error(tmp_path: Path, receiver: OtlpReceiver) -> None:
    (tmp_path / "records.jsonl").write_text("{}\n")
    with pytest.raises(ExportError, match=r"no span files \(\*spans\.jsonl\) under .*tracing on"):
        export_run(tmp_path, receiver.base_url)
    with pytest.raises(ExportError, match="does not exist or is not a directory"):
        export_run(tmp_path / "missing", receiver.base_url)
    assert receiver.requests == []


def test_bad_endpoint_is_a_value_error(tmp_path: Path) -> None:
    write_run(tmp_path, sessions=1, flushes=1)
    with pytest.raises(ValueError, match=r"not an http\(s\) URL"):
        export_run(tmp_path, "localhost:4318")


def test_torn_and_bad_lines_are_skipped(tmp_path: Path, receiver: OtlpReceiver) -> None:
    write_run(tmp_path, sessions=1, flushes=2)
    path = tmp_path / "s0" / "client-spans.jsonl"
    good = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(good[0] + b"not json\n" + b'{"resourceSpans": 3}\n' + good[1] + good[0][:40])
    summary = export_run(tmp_path, receiver.base_url)
    assert summary.skipped_lines == 3
    assert summary.spans == 8


def test_base64_ids_are_accepted_too() -> None:
    trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    request = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {"traceId": trace_id, "spanId": span_id, "parentSpanId": "", "name": "hex", "kind": 3},
                            {
                                "traceId": base64.b64encode(bytes.fromhex(trace_id)).decode(),
                                "spanId": base64.b64encode(bytes.fromhex(span_id)).decode(),
                                "name": "b64",
                                "kind": "SPAN_KIND_SERVER",
                            },
                        ]
                    }
                ]
            }
        ]
    }
    message = otlp_json_to_protobuf(json.loads(json.dumps(request)))
    hex_span, b64_span = message.resource_spans[0].scope_spans[0].spans
    assert hex_span.trace_id.hex() == b64_span.trace_id.hex() == trace_id
    assert hex_span.span_id.hex() == b64_span.span_id.hex() == span_id
    assert hex_span.parent_span_id == b""
    assert (hex_span.kind, b64_span.kind) == (SpanKind.CLIENT.value + 1, SpanKind.SERVER.value + 1)
    with pytest.raises(ValueError, match="neither hex nor base64"):
        otlp_json_to_protobuf({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz" * 16}]}]}]})
