"""Every ``OTEL_*`` variable the observability reference (docs/reference/observability.md) lists, one test each: honoured as the specification
says, or refused out loud at start. Real receivers (tests/otlp_support.py), the real proxy process."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased
from opentelemetry.trace import SpanKind

from mcpfault.telemetry import otel_env
from mcpfault.telemetry.export import ExportError, ExportTally, OtlpSender
from mcpfault.telemetry.fastspans import SpanRecorder
from mcpfault.telemetry.otel_env import OtelConfigError
from mcpfault.telemetry.tracing import configure_tracing, read_spans
from tests.conftest import PROFILES, request
from tests.otlp_support import OtlpReceiver, emit_request_spans

pytestmark = pytest.mark.usefixtures("clean_otel_env")

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"
START_NS = 1_700_000_000_000_000_000
GRPC_ENDPOINT = ("--otlp-endpoint", "http://127.0.0.1:4317")


def settings(**env: str) -> otel_env.OtelSettings:
    return otel_env.read(None, env)


def record_one(recorder: SpanRecorder, traceparent: str | None = None) -> Any:
    handle = recorder.start("ping", SpanKind.SERVER, traceparent, {}, START_NS)
    if handle is not None:
        recorder.end(handle, {}, [], None, START_NS + 1)
    return handle


# --- the endpoint, in both forms --------------------------------------------------------------


def test_endpoint_traces_form_verbatim_generic_form_gets_the_path() -> None:
    generic = "OTEL_EXPORTER_OTLP_ENDPOINT"
    assert otel_env.traces_url(None, {generic: "http://c:4318"}) == "http://c:4318/v1/traces"
    both = {generic: "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/custom"}
    assert otel_env.traces_url(None, both) == "http://t:4318/custom"
    assert otel_env.traces_url("http://x:1", both) == "http://x:1/v1/traces"
    assert otel_env.traces_url(None, {}) is None
    with pytest.raises(OtelConfigError, match="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT 'collector:4317' is not an http"):
        otel_env.traces_url(None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4317"})


# --- OTEL_SDK_DISABLED --------------------------------------------------------------------------


def test_sdk_disabled_turns_the_proxys_spans_off_with_one_warning(
    proxy_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "TRUE")
    spans_file = tmp_path / "spans.jsonl"
    proxy = proxy_factory(PROFILES / "baseline.toml", extra=("--spans", str(spans_file)))
    ping = request(1, "ping", {"_meta": {"traceparent": f"00-{TRACE}-{PARENT}-01"}})
    proxy.send(ping)
    assert proxy.read_json()["id"] == 1
    proxy.close_stdin()
    assert proxy.wait() == 0
    assert not spans_file.exists() or read_spans(spans_file) == []
    # No span: the request crossed byte for byte, the client's context untouched.
    assert proxy.received() == ping
    warnings = [line for line in proxy.stderr_path.read_text().splitlines() if "OTEL_SDK_DISABLED" in line]
    assert len(warnings) == 1, warnings


@pytest.mark.parametrize("value", ["false", "", "1", "yes"])
def test_sdk_disabled_only_for_true(value: str) -> None:
    assert not settings(OTEL_SDK_DISABLED=value).disabled  # the specification: only "true" disables


# --- OTEL_TRACES_SAMPLER / _ARG -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("sampler", "root", "sampled_parent", "unsampled_parent"),
    [
        ("always_on", True, True, True),
        ("always_off", False, False, False),
        ("parentbased_always_on", True, True, False),
        ("parentbased_always_off", False, True, False),
        ("traceidratio", True, True, True),  # ratio 1 by default
        ("parentbased_traceidratio", True, True, False),
    ],
)
def test_each_sampler(tmp_path: Path, sampler: str, root: bool, sampled_parent: bool, unsampled_parent: bool) -> None:
    spans_file = tmp_path / "spans.jsonl"
    recorder = SpanRecorder("svc", spans_file=spans_file, settings=settings(OTEL_TRACES_SAMPLER=sampler))
    root_span = record_one(recorder)
    child_of_sampled = record_one(recorder, f"00-{TRACE}-{PARENT}-01")
    child_of_unsampled = record_one(recorder, f"00-{TRACE}-{PARENT}-00")
    recorder.shutdown()
    recorded = {s.span_id for s in read_spans(spans_file)} if spans_file.exists() else set()
    for handle, expected in (
        (root_span, root),
        (child_of_sampled, sampled_parent),
        (child_of_unsampled, unsampled_parent),
    ):
        assert (handle is not None and handle.span_id in recorded) is expected
        if handle is not None:  # what goes upstream says the same
            assert handle.traceparent().endswith("-01" if expected else "-00")


def test_a_ratio_samples_the_trace_ids_the_sdk_samples(tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    env = settings(OTEL_TRACES_SAMPLER="traceidratio", OTEL_TRACES_SAMPLER_ARG="0.25")
    recorder = SpanRecorder("svc", spans_file=spans_file, settings=env)
    handles = [record_one(recorder) for _ in range(400)]
    recorder.shutdown()
    recorded = {s.span_id for s in read_spans(spans_file)}
    sdk = TraceIdRatioBased(0.25)
    for handle in handles:
        decision = sdk.should_sample(None, int(handle.trace_id, 16), "ping").decision is Decision.RECORD_AND_SAMPLE
        assert (handle.span_id in recorded) is decision
    assert 40 < len(recorded) < 160  # about a quarter


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER='jaeger_remote' is not supported"),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"}, "ratio from 0 to 1"),
        ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"}, "ratio from 0 to 1"),
    ],
)
def test_unsupported_samplers_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(OtelConfigError, match=message):
        otel_env.read(None, env)


def test_the_sdk_path_uses_the_same_sampler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    provider = configure_tracing("svc", spans_file=tmp_path / "s.jsonl")
    assert isinstance(provider, TracerProvider)
    emit_request_spans(provider)
    provider.shutdown()
    assert not (tmp_path / "s.jsonl").exists() or read_spans(tmp_path / "s.jsonl") == []


def test_the_proxy_follows_the_clients_sampled_flag(proxy_factory: Any, tmp_path: Path) -> None:
    """The default sampler (parentbased_always_on) through the real proxy: a sampled client context
    gets a span and the proxy's span as the upstream parent; an unsampled one gets no span and
    crosses byte for byte."""
    spans_file = tmp_path / "spans.jsonl"
    proxy = proxy_factory(PROFILES / "baseline.toml", extra=("--spans", str(spans_file)))
    sampled = request(1, "ping", {"_meta": {"traceparent": f"00-{TRACE}-{PARENT}-01"}})
    unsampled = request(2, "ping", {"_meta": {"traceparent": f"00-{TRACE}-{PARENT}-00"}})
    proxy.send(sampled + unsampled)
    assert {proxy.read_json()["id"] for _ in range(2)} == {1, 2}
    proxy.close_stdin()
    assert proxy.wait() == 0
    [span] = read_spans(spans_file)
    assert span.attributes["jsonrpc.request.id"] == "1" and span.parent_span_id == PARENT
    first, second = proxy.received().splitlines(keepends=True)
    assert json.loads(first)["params"]["_meta"]["traceparent"] == f"00-{TRACE}-{span.span_id}-01"
    assert second == unsampled


# --- the exporter: protocol, compression, timeout, headers, TLS -------------------------------------


@pytest.mark.parametrize("form", ["OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_TRACES_"])
def test_protocol_http_json_and_gzip_in_either_form(tmp_path: Path, receiver: OtlpReceiver, form: str) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url, form + "PROTOCOL": "http/json"}
    env[form + "COMPRESSION"] = "gzip"
    recorder = SpanRecorder("svc", spans_file=None, settings=settings(**env))
    handle = record_one(recorder, f"00-{TRACE}-{PARENT}-01")
    recorder.shutdown()
    [(path, headers, _)] = receiver.requests
    assert path == "/v1/traces"
    assert headers["content-type"] == "application/json" and headers["content-encoding"] == "gzip"
    [span] = receiver.spans()
    assert span.span_id.hex() == handle.span_id and span.trace_id.hex() == TRACE


def test_the_traces_form_wins_over_the_generic_one() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500",
    }
    export = settings(**env).export
    assert export is not None and export.protocol == "http/json" and export.timeout_s == 2.5


def test_the_sdk_path_sends_json_too(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    provider = configure_tracing("svc", otlp_endpoint=receiver.base_url)
    assert provider is not None
    emit_request_spans(provider)
    provider.shutdown()
    assert receiver.requests[0][1]["content-type"] == "application/json"
    assert len(receiver.spans()) == 2


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "gRPC is not supported"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/thrift", "use http/protobuf .* or http/json"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "deflate", "use gzip or none"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "soon", "in milliseconds"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "0", "in milliseconds"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem", "no such file"),
        ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", __file__, "go together"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "not-a-pair", "not name=value"),
        ("OTEL_TRACES_EXPORTER", "zipkin", "not supported"),
        ("OTEL_PROPAGATORS", "b3", "tracecontext"),
    ],
)
def test_values_that_cannot_be_honoured_are_refused(variable: str, value: str, message: str) -> None:
    with pytest.raises(OtelConfigError, match=message):
        settings(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", **{variable: value})


def test_the_proxy_refuses_at_start_naming_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcpfault",
            "proxy",
            "-c",
            str(PROFILES / "baseline.toml"),
            *GRPC_ENDPOINT,
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='grpc' is not supported" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_timeout_bounds_each_export() -> None:
    released = threading.Event()  # the server holds each export until the test lets it go
    waited_out = threading.Event()  # ... or until 30 s have passed

    class Stalling(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if not released.wait(30):
                waited_out.set()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with _serve(Stalling) as port:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_TIMEOUT": "200"}
        export = settings(**env).export
        assert export is not None and export.timeout_s == 0.2
        sender = OtlpSender(export, max_attempts=1, max_retry_wait_s=0)
        try:
            with pytest.raises(ExportError, match="cannot reach"):
                sender.send(b"", 0, ExportTally(export.shown))
            assert not waited_out.is_set()  # it gave up on its own timeout, while the server still held it
        finally:
            released.set()


def test_traces_exporter_none_and_propagators_none() -> None:
    quiet = settings(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318", OTEL_TRACES_EXPORTER="none", OTEL_PROPAGATORS="none")
    assert quiet.export is None and quiet.propagate is False
    explicit = otel_env.read("http://127.0.0.1:4318", {"OTEL_TRACES_EXPORTER": "none"})
    assert explicit.export is not None  # --otlp-endpoint is asked for explicitly: it wins
    assert settings(OTEL_PROPAGATORS="tracecontext,baggage").propagate


def test_variables_of_no_concern_are_named_not_refused() -> None:
    ignored = dict(settings(OTEL_METRICS_EXPORTER="otlp", OTEL_BSP_SCHEDULE_DELAY="100", OTEL_MADE_UP="1").ignored)
    assert set(ignored) == {"OTEL_METRICS_EXPORTER", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_MADE_UP"}
    assert "Prometheus" in ignored["OTEL_METRICS_EXPORTER"]
    assert ignored["OTEL_MADE_UP"] == "not a variable mcpfault knows"


# --- TLS: the CA bundle and the client certificate -----------------------------------------------


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}-key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key)),
            *("-out", str(cert), "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class _Accept(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> Any:
    import contextlib

    @contextlib.contextmanager
    def running() -> Iterator[int]:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield int(server.server_address[1])
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)

    return running()


def test_certificate_and_client_certificate(tmp_path: Path) -> None:
    server_cert, server_key = _self_signed(tmp_path, "server")
    client_cert, client_key = _self_signed(tmp_path, "client")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(server_cert, server_key)
    tls.verify_mode = ssl.CERT_REQUIRED  # mutual TLS: the collector checks the client too
    tls.load_verify_locations(client_cert)
    with _serve(_Accept, tls) as port:
        url = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"https://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_TIMEOUT": "5000"}

        def send(**env: str) -> None:
            export = settings(**url, **env).export
            assert export is not None
            OtlpSender(export, max_attempts=1, max_retry_wait_s=0).send(b"", 0, ExportTally(export.shown))

        with pytest.raises(ExportError, match="CERTIFICATE_VERIFY_FAILED"):
            send()  # the system's CAs do not know this collector
        with pytest.raises(ExportError):
            send(OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=str(server_cert))  # no client certificate: refused
        send(
            OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=str(server_cert),
            OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE=str(client_cert),
            OTEL_EXPORTER_OTLP_CLIENT_KEY=str(client_key),
        )


def test_traces_export_honours_the_exporter_variables(
    tmp_path: Path, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mcpfault traces export`` reads the same settings: the traces URL verbatim, JSON, gzip."""
    recorder = SpanRecorder("svc", spans_file=tmp_path / "run" / "proxy-spans.jsonl", settings=settings())
    handle = record_one(recorder, f"00-{TRACE}-{PARENT}-01")
    recorder.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.base_url + "/custom/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    done = subprocess.run(
        [sys.executable, "-m", "mcpfault", "traces", "export", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    [(path, headers, _)] = receiver.requests
    assert path == "/custom/traces"
    assert headers["content-type"] == "application/json" and headers["content-encoding"] == "gzip"
    assert [s.span_id.hex() for s in receiver.spans()] == [handle.span_id]
