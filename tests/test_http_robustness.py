"""The HTTP proxy against what peers can send, through the real process: generated request bodies
(random bytes, invalid UTF-8, batches, ids of every JSON type, unicode line separators, huge
integers), trace context in ``_meta``, metrics labelled by transport, and SIGTERM with spans."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpfault.protocol import jsonrpc
from mcpfault.protocol.jsonrpc import MessageKind
from tests.conftest import write_profile
from tests.http_support import HttpProxyProcess, free_port, http_proxy, serve_in_thread, server_url

pytestmark = [pytest.mark.slow]

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class _EchoUpstream(BaseHTTPRequestHandler):
    """Answers a JSON-RPC request with its own body inside ``result`` (exact bytes), anything else 202."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.bodies.append(data)  # type: ignore[attr-defined]  # before answering: the test reads it then
        message = jsonrpc.parse(data)
        if message.kind is MessageKind.REQUEST:
            raw_id = json.dumps(message.body["id"]).encode() if message.body else b"null"
            body = b'{"jsonrpc":"2.0","id":' + raw_id + b',"result":{"seen":' + str(len(data)).encode() + b"}}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            body = b""
            self.send_response(202)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def echo_upstream() -> Iterator[ThreadingHTTPServer]:
    with serve_in_thread(_EchoUpstream) as server:
        server.bodies = []  # type: ignore[attr-defined]
        yield server


@pytest.fixture(scope="module")
def fuzz_proxy(
    echo_upstream: ThreadingHTTPServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HttpProxyProcess]:
    tmp = tmp_path_factory.mktemp("http-fuzz")
    profile = write_profile(
        tmp, 'name = "fuzz"\nseed = 5\n[[faults]]\ntype = "error"\nprobability = 0.3\ntools = ["e*"]\n'
    )
    url = server_url(echo_upstream, "/mcp")
    with http_proxy(profile, url, tmp, "--no-propagate") as proxy:
        yield proxy


ids = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=12),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)
texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(["\u2028", "\u2029", "a\nb"])
messages = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "id": ids, "method": st.sampled_from(["tools/call", "tools/list", "ping"])},
    optional={
        "params": st.fixed_dictionaries(
            {
                "name": st.sampled_from(["echo", "add"]),
                "arguments": st.dictionaries(st.text(max_size=5), texts, max_size=3),
            }
        )
    },
)
bodies = st.one_of(
    messages.map(lambda m: json.dumps(m, ensure_ascii=False).encode()),
    st.lists(messages, min_size=1, max_size=3).map(lambda b: json.dumps(b).encode()),  # batches
    st.binary(max_size=200),  # random bytes, invalid UTF-8 included
    st.sampled_from(
        [b"", b"{", b"null", b"[]", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}} trailing']
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_any_body_gets_an_answer_and_untouched_requests_cross_intact(
    fuzz_proxy: HttpProxyProcess, echo_upstream: ThreadingHTTPServer, body: bytes
) -> None:
    before = len(fuzz_proxy.events())
    echo_upstream.bodies.clear()  # type: ignore[attr-defined]
    answer = httpx2.post(fuzz_proxy.url, content=body, headers=HEADERS, timeout=10)
    assert fuzz_proxy.proc.poll() is None  # never crashes
    assert answer.status_code in (200, 202), (answer.status_code, answer.text)
    message = jsonrpc.parse(body)
    events = fuzz_proxy.events()[before:]
    if message.kind is MessageKind.REQUEST:
        assert len(events) == 1  # one event per request the engine saw
        if events[0]["fault_type"] is None:
            assert echo_upstream.bodies == [body]  # type: ignore[attr-defined]  # forwarded byte for byte
            assert answer.json()["result"] == {"seen": len(body)}
        else:
            assert echo_upstream.bodies == []  # type: ignore[attr-defined]  # the error fault answered
            assert answer.json()["error"]["code"] == -32603
    else:
        assert events == []
        assert echo_upstream.bodies == [body]  # type: ignore[attr-defined]  # relayed, never faulted


def test_trace_context_in_meta_parents_the_proxy_span_and_goes_upstream(
    echo_upstream: ThreadingHTTPServer, tmp_path: Path, clean_otel_env: None
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    profile = write_profile(tmp_path, 'name = "b"\nseed = 1\n')
    url = server_url(echo_upstream, "/mcp")
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "x", "arguments": {}, "_meta": {"traceparent": f"00-{trace_id}-{parent}-01"}},
    }
    echo_upstream.bodies.clear()  # type: ignore[attr-defined]
    with http_proxy(profile, url, tmp_path, "--spans", str(spans_file)) as proxy:
        assert httpx2.post(proxy.url, json=body, headers=HEADERS, timeout=10).status_code == 200
    from mcpfault.telemetry.tracing import read_spans

    (span,) = [s for s in read_spans(spans_file) if s.attributes.get("mcp.method.name") == "tools/call"]
    assert span.trace_id == trace_id and span.parent_span_id == parent
    forwarded = json.loads(echo_upstream.bodies[-1])  # type: ignore[attr-defined]
    assert forwarded["params"]["_meta"]["traceparent"] == f"00-{trace_id}-{span.span_id}-01"


def test_metrics_are_labelled_http(echo_upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    port = free_port()
    profile = write_profile(tmp_path, 'name = "b"\nseed = 1\n')
    url = server_url(echo_upstream, "/mcp")
    with http_proxy(profile, url, tmp_path, "--metrics-addr", f"127.0.0.1:{port}") as proxy:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": {}}}
        httpx2.post(proxy.url, json=body, headers=HEADERS, timeout=10)
        text = httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert 'transport="http"' in text
    assert 'transport="stdio"' not in text


def test_sigterm_flushes_events_and_spans(
    echo_upstream: ThreadingHTTPServer, tmp_path: Path, clean_otel_env: None
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    profile = write_profile(tmp_path, 'name = "b"\nseed = 1\n')
    url = server_url(echo_upstream, "/mcp")
    proxy = HttpProxyProcess(profile, url, tmp_path, "--spans", str(spans_file))
    try:
        for i in range(5):
            body = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "x", "arguments": {}}}
            assert httpx2.post(proxy.url, json=body, headers=HEADERS, timeout=10).status_code == 200
        proxy.proc.send_signal(signal.SIGTERM)
        code = proxy.proc.wait(15)
    finally:
        _, stderr = proxy.close()
    assert code == 0, stderr
    assert len(proxy.events()) == 5
    from mcpfault.telemetry.tracing import read_spans

    assert len([s for s in read_spans(spans_file) if s.attributes.get("mcp.method.name") == "tools/call"]) == 5
    assert "requests 5" in stderr
