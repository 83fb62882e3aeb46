"""Log lines written while the proxy handles a request carry that request's trace and span ids,
and at --log-level debug the proxy logs each request it faults: through the real process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcpfault.telemetry.tracing import read_spans
from tests.conftest import request, write_profile

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


def tool_call(request_id: int, tool: str, flags: str = "01") -> bytes:
    meta = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-{flags}"}
    return request(request_id, "tools/call", {"name": tool, "arguments": {}, "_meta": meta})


def test_a_faulted_request_is_logged_with_its_trace_and_span(proxy_factory: Any, tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    profile = write_profile(tmp_path, '[[faults]]\nname = "boom"\ntype = "error"\ntools = ["counter"]\n')
    extra = ("--spans", str(spans_file), "--log-level", "debug", "--log-format", "json")
    proxy = proxy_factory(profile, extra=extra)
    proxy.send(tool_call(1, "echo") + tool_call(2, "counter") + tool_call(3, "counter", flags="00"))
    assert {proxy.read_json()["id"] for _ in range(3)} == {1, 2, 3}
    proxy.close_stdin()
    assert proxy.wait() == 0
    lines = [json.loads(line) for line in proxy.stderr_path.read_text().splitlines() if line.startswith("{")]
    faulted = [line for line in lines if line.get("event") == "fault injected"]
    assert [line["request_id"] for line in faulted] == [2, 3]  # one line per faulted request, none for echo
    spans = {s.attributes["jsonrpc.request.id"]: s for s in read_spans(spans_file)}
    sampled, unsampled = faulted
    assert (sampled["rule"], sampled["fault_type"], sampled["mode"]) == ("boom", "error", "protocol")
    assert sampled["tool"] == "counter" and sampled["level"] == "debug"
    assert (sampled["trace_id"], sampled["span_id"]) == (CLIENT_TRACE, spans["2"].span_id)
    # The unsampled request has no span of the proxy's: its line names the client's span instead.
    assert "3" not in spans
    assert (unsampled["trace_id"], unsampled["span_id"]) == (CLIENT_TRACE, CLIENT_SPAN)
