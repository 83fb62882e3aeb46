"""The proxy's spans and metrics, from a real proxy process, in real wire formats."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from mcpfault.telemetry.tracing import read_spans
from tests.conftest import PROFILES, call, request, write_profile
from tests.http_support import free_port
from tests.prometheus_support import PROMETHEUS, api_get, prometheus

pytestmark = pytest.mark.slow
INIT = request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}})
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


def traced_call(request_id: int, tool: str, **arguments: object) -> bytes:
    params = {"name": tool, "arguments": arguments, "_meta": {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}}
    return request(request_id, "tools/call", params)


def test_one_span_per_request_parented_by_the_client_and_propagated_upstream(proxy_factory, tmp_path):
    spans_file = tmp_path / "spans.jsonl"
    profile = write_profile(tmp_path, '[[faults]]\nname = "boom"\ntype = "error"\ntools = ["counter"]\n')
    proxy = proxy_factory(profile, extra=("--spans", str(spans_file)))
    proxy.send(INIT + traced_call(1, "echo", text="hi") + traced_call(2, "counter"))
    answers = {a["id"]: a for a in (proxy.read_json() for _ in range(3))}
    assert answers[2]["error"]["code"] == -32603
    proxy.close_stdin()
    assert proxy.wait() == 0
    spans = {s.attributes["jsonrpc.request.id"]: s for s in read_spans(spans_file)}
    assert set(spans) == {"0", "1", "2"}
    echo, boom = spans["1"], spans["2"]
    assert echo.name == "tools/call echo" and echo.kind.name == "SERVER"
    assert (echo.trace_id, echo.parent_span_id) == (CLIENT_TRACE, CLIENT_SPAN)
    assert echo.attributes["mcp.method.name"] == "tools/call" and echo.attributes["gen_ai.tool.name"] == "echo"
    assert echo.attributes["gen_ai.operation.name"] == "execute_tool"
    assert echo.attributes["network.transport"] == "pipe"
    assert echo.attributes["mcpfault.upstream.contacted"] is True
    assert [e.name for e in echo.events] == ["upstream.sent", "upstream.received"]
    assert boom.attributes["mcpfault.fault.type"] == "error" and boom.attributes["mcpfault.fault.rule"] == "boom"
    assert boom.attributes["error.type"] == "-32603" and boom.status_code.name == "ERROR"
    assert boom.attributes["mcpfault.upstream.contacted"] is False
    # Upstream, the echo request now carries the proxy's span as parent; the faulted one never left.
    received = [json.loads(line) for line in proxy.received().splitlines()]
    upstream_parent = received[1]["params"]["_meta"]["traceparent"]
    assert upstream_parent == f"00-{CLIENT_TRACE}-{echo.span_id}-01"
    assert len(received) == 2


def test_client_spans_put_the_leg_upstream_between_the_proxy_span_and_the_server(proxy_factory, tmp_path):
    spans_file = tmp_path / "spans.jsonl"
    profile = write_profile(tmp_path, '[[faults]]\nname = "boom"\ntype = "error"\ntools = ["counter"]\n')
    proxy = proxy_factory(profile, extra=("--spans", str(spans_file), "--client-spans"))
    proxy.send(INIT + traced_call(1, "echo", text="hi") + traced_call(2, "counter"))
    for _ in range(3):
        proxy.read_json()
    proxy.close_stdin()
    assert proxy.wait() == 0
    spans = read_spans(spans_file)
    server = {s.attributes["jsonrpc.request.id"]: s for s in spans if s.kind.name == "SERVER"}
    client = {s.attributes["jsonrpc.request.id"]: s for s in spans if s.kind.name == "CLIENT"}
    assert set(server) == {"0", "1", "2"}
    assert set(client) == {"0", "1"}  # the faulted request never went upstream: no leg
    echo, leg = server["1"], client["1"]
    assert (echo.trace_id, echo.parent_span_id) == (CLIENT_TRACE, CLIENT_SPAN)
    assert (leg.trace_id, leg.parent_span_id) == (CLIENT_TRACE, echo.span_id)
    assert leg.name == "tools/call echo" and leg.attributes["gen_ai.tool.name"] == "echo"
    assert leg.attributes["network.transport"] == "pipe" and leg.status_code.name == "UNSET"
    assert echo.start_unix_nano <= leg.start_unix_nano <= leg.end_unix_nano <= echo.end_unix_nano
    # Upstream, the request names the CLIENT span as its parent.
    received = [json.loads(line) for line in proxy.received().splitlines()]
    assert received[1]["params"]["_meta"]["traceparent"] == f"00-{CLIENT_TRACE}-{leg.span_id}-01"


def test_no_propagate_keeps_requests_byte_for_byte(proxy_factory, tmp_path):
    spans_file = tmp_path / "spans.jsonl"
    proxy = proxy_factory(PROFILES / "baseline.toml", extra=("--spans", str(spans_file), "--no-propagate"))
    sent = INIT + traced_call(1, "echo", text="hi") + call(2, "echo", text="plain")
    proxy.send(sent)
    for _ in range(3):
        proxy.read_json()
    proxy.close_stdin()
    assert proxy.wait() == 0
    assert proxy.received() == sent
    assert len(read_spans(spans_file)) == 3


def test_spans_over_otlp_http_protobuf(proxy_factory, tmp_path, receiver):
    proxy = proxy_factory(PROFILES / "baseline.toml", extra=("--otlp-endpoint", receiver.base_url))
    proxy.send(INIT + traced_call(1, "echo", text="hi"))
    proxy.read_json()
    proxy.read_json()
    proxy.close_stdin()
    assert proxy.wait() == 0
    deadline = time.monotonic() + 10
    while len(receiver.spans()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    names = sorted(span.name for span in receiver.spans())
    assert names == ["initialize", "tools/call echo"]


def test_server_spans_nest_under_the_proxy_span(tmp_path):
    """The official SDK server, with tracing on, parents its SERVER span on what the proxy injected."""
    import anyio
    from mcp import Client, StdioServerParameters

    proxy_spans, server_spans = tmp_path / "proxy.jsonl", tmp_path / "server.jsonl"
    server = Path(__file__).parent / "interop_servers" / "traced_server.py"
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "mcpfault",
            "proxy",
            "-c",
            str(PROFILES / "baseline.toml"),
            "--spans",
            str(proxy_spans),
            "--no-summary",
            "--",
            sys.executable,
            str(server),
        ],
        env={**os.environ, "SPANS_FILE": str(server_spans)},
    )

    async def session() -> None:
        with anyio.fail_after(30):
            async with Client(params, mode="legacy") as client:
                await client.call_tool("echo", {"text": "nested"})

    anyio.run(session)
    deadline = time.monotonic() + 10
    while not (server_spans.exists() and any(s.name.startswith("tools/call") for s in read_spans(server_spans))):
        assert time.monotonic() < deadline, "the server wrote no tools/call span"
        time.sleep(0.05)
    proxy_call = next(s for s in read_spans(proxy_spans) if s.name == "tools/call echo")
    server_call = next(s for s in read_spans(server_spans) if s.name.startswith("tools/call"))
    assert server_call.trace_id == proxy_call.trace_id
    assert server_call.parent_span_id == proxy_call.span_id


def test_metrics_endpoint_counts_requests_and_faults_with_exemplars(proxy_factory, tmp_path):
    port = free_port()
    profile = write_profile(tmp_path, '[[faults]]\ntype = "error"\ntools = ["counter"]\n')
    proxy = proxy_factory(profile, extra=("--metrics-addr", f"127.0.0.1:{port}", "--no-propagate"))
    proxy.send(INIT + traced_call(1, "echo", text="hi") + traced_call(2, "counter"))
    for _ in range(3):
        proxy.read_json()
    metrics_request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    with urllib.request.urlopen(metrics_request, timeout=5) as response:
        body = response.read().decode()
    proxy.close_stdin()
    assert proxy.wait() == 0
    assert 'mcpfault_requests_total{fault_type="error",method="tools/call",transport="stdio"} 1.0' in body
    assert 'mcpfault_faults_injected_total{fault_type="error",mode="protocol"} 1.0' in body
    assert f'trace_id="{CLIENT_TRACE}"' in body  # exemplars link the series to the client's trace
    assert "mcpfault_proxy_added_seconds_bucket" in body


def test_with_spans_the_histograms_count_every_plain_request_with_its_span_as_exemplar(proxy_factory, tmp_path):
    # With spans on, a request no rule touches is observed by the histograms on the span writer's
    # thread, as its span is built: every one is counted all the same, a moment later.
    port = free_port()
    spans_file = tmp_path / "spans.jsonl"
    proxy = proxy_factory(extra=("--metrics-addr", f"127.0.0.1:{port}", "--spans", str(spans_file)))
    proxy.send(INIT + b"".join(traced_call(i, "echo", text="hi") for i in range(1, 6)))
    for _ in range(6):
        proxy.read_json()
    metrics_request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    expected = 'mcpfault_requests_total{fault_type="none",method="tools/call",transport="stdio"} 5.0'
    deadline = time.monotonic() + 10
    body = ""
    while expected not in body and time.monotonic() < deadline:
        time.sleep(0.1)
        with urllib.request.urlopen(metrics_request, timeout=5) as response:
            body = response.read().decode()
    in_flight = [line for line in body.splitlines() if line.startswith("mcpfault_requests_in_flight")]
    proxy.close_stdin()
    assert proxy.wait() == 0
    assert expected in body, body
    assert in_flight == ['mcpfault_requests_in_flight{transport="stdio"} 0.0']
    assert 'mcpfault_request_duration_seconds_count{method="tools/call",transport="stdio"} 5.0' in body
    assert f'trace_id="{CLIENT_TRACE}"' in body  # the proxy's span is in the client's trace


def test_metrics_on_a_wide_address_need_a_token(tmp_path):
    import subprocess

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcpfault",
            "proxy",
            "-c",
            str(PROFILES / "baseline.toml"),
            "--metrics-addr",
            "0.0.0.0:9",
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "MCPFAULT_METRICS_TOKEN"},
    )
    assert done.returncode == 2
    assert "--metrics-addr 0.0.0.0:9" in done.stderr and "token" in done.stderr


def test_traces_export_sends_a_past_runs_spans_to_a_collector(proxy_factory, tmp_path, receiver):
    import subprocess

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    proxy = proxy_factory(PROFILES / "baseline.toml", extra=("--spans", str(run_dir / "proxy-spans.jsonl")))
    proxy.send(INIT + traced_call(1, "echo", text="offline"))
    proxy.read_json()
    proxy.read_json()
    proxy.close_stdin()
    assert proxy.wait() == 0
    done = subprocess.run(
        [sys.executable, "-m", "mcpfault", "traces", "export", str(run_dir), "--otlp-endpoint", receiver.base_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "exported 2 spans" in done.stderr
    exported = {span.name: span for span in receiver.spans()}
    assert set(exported) == {"initialize", "tools/call echo"}
    assert exported["tools/call echo"].trace_id.hex() == CLIENT_TRACE


@pytest.mark.skipif(not PROMETHEUS.exists(), reason="make test installs Debian's prometheus")
def test_a_real_prometheus_scrapes_the_proxy(proxy_factory, tmp_path):
    metrics_port = free_port()
    profile = write_profile(tmp_path, '[[faults]]\ntype = "error"\ntools = ["counter"]\n')
    proxy = proxy_factory(profile, extra=("--metrics-addr", f"127.0.0.1:{metrics_port}"))
    proxy.send(INIT + traced_call(1, "echo", text="hi") + traced_call(2, "counter"))
    for _ in range(3):
        proxy.read_json()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: proxy\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    try:
        with prometheus(free_port(), config, tmp_path / "tsdb", exemplars=True) as base:
            api = base + "/api/v1"
            series: dict[str, float] = {}
            exemplars: list = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                result = api_get(
                    api, "query", query="sum by (fault_type) (mcpfault_requests_total{method='tools/call'})"
                )
                series = {r["metric"]["fault_type"]: float(r["value"][1]) for r in result["data"]["result"]}
                now = time.time()
                exemplars = api_get(
                    api, "query_exemplars", query="mcpfault_requests_total", start=str(now - 300), end=str(now + 60)
                )["data"]
                if series == {"none": 1.0, "error": 1.0} and exemplars:
                    break
                time.sleep(0.25)
            assert series == {"none": 1.0, "error": 1.0}
            trace_ids = {e["labels"]["trace_id"] for group in exemplars for e in group["exemplars"]}
            assert trace_ids == {CLIENT_TRACE}  # untraced proxy: exemplars point at the client's trace
    finally:
        proxy.close_stdin()
        proxy.wait()


def test_server_to_client_requests_get_spans_too(proxy_factory, tmp_path):
    spans_file = tmp_path / "spans.jsonl"
    proxy = proxy_factory(PROFILES / "baseline.toml", extra=("--spans", str(spans_file)))
    sampling = request("srv-1", "sampling/createMessage", {"messages": [], "maxTokens": 5})
    proxy.send(INIT + call(1, "raw", hex=sampling.hex()))
    proxy.read_json()
    assert json.loads(proxy.read_line())["method"] == "sampling/createMessage"  # relayed as is
    proxy.read_json()
    proxy.send(b'{"jsonrpc":"2.0","id":"srv-1","result":{"role":"assistant","content":{"type":"text","text":"ok"}}}\n')
    proxy.close_stdin()
    assert proxy.wait() == 0
    spans = [s for s in read_spans(spans_file) if s.attributes["mcpfault.direction"] == "server_to_client"]
    assert [s.name for s in spans] == ["sampling/createMessage"]
    assert spans[0].attributes["mcpfault.client.received"] == "response"
    assert spans[0].attributes["jsonrpc.request.id"] == "srv-1"
