"""The proxy's own share of each request (``Finished.added_s``, the ``mcpfault_proxy_added_seconds``
metric) is timed from that request's own answer, on every way a request can end.

The core's clock starts at 1000 s here, as a monotonic clock does on a machine that has been up a
while: a share read off the wrong timestamp shows up as ~1000 s, not as a plausible small number.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcpfault.faults import profile
from mcpfault.faults.base import HTTP, Call
from mcpfault.faults.engine import Decision, Engine
from mcpfault.proxy.core import Finished, ProxyCore
from mcpfault.telemetry.names import Received
from tests.conftest import call
from tests.http_support import free_port, http_proxy, modern_call, serve_in_thread, server_url

START = 1000.0


class Observer:
    """A request observer that keeps every ``Finished`` it is given."""

    def __init__(self) -> None:
        self.outcomes: list[Finished] = []

    def started(self, call: Call, decision: Decision, started: float, *, from_server: bool = False) -> Any:
        return None

    def propagate(self, token: Any, meta: dict[str, Any]) -> bool:
        return False

    def finished(self, token: Any, outcome: Finished) -> None:
        self.outcomes.append(outcome)

    def upstream_exited(self, exit_code: int) -> None:
        pass


def observed_core(rules: str = "", *, http: bool = False) -> tuple[ProxyCore, Observer, list[float]]:
    ticks = [START]
    observer = Observer()
    engine = Engine(profile.loads(rules), transport=HTTP) if http else Engine(profile.loads(rules))
    return ProxyCore(engine, observers=[observer], clock=lambda: ticks[0]), observer, ticks


def answer(request_id: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"ok": True}}).encode() + b"\n"


def test_each_answer_is_timed_from_its_own_arrival() -> None:
    core, observer, ticks = observed_core()
    core.from_client(call(1, "echo"))
    core.from_client(call(2, "echo"))
    ticks[0] += 0.5
    core.from_server(answer(2))
    ticks[0] += 0.25
    core.from_server(answer(1))
    assert [o.added_s for o in observer.outcomes] == [0.0, 0.0]
    assert [o.finished - o.started for o in observer.outcomes] == [0.5, 0.75]


@pytest.mark.parametrize("received", ["http_error", "error"])
def test_ends_reported_as_the_answer_arrives_count_only_the_proxys_share(received: Received) -> None:
    """``http_error`` (a status relayed) and ``error`` (an answer the proxy could not use, a 502)."""
    core, observer, ticks = observed_core(http=True)
    core.from_client(call(7, "echo"))
    ticks[0] += 2.0  # the upstream's round trip: not the proxy's
    assert core.end(7, received, reply=b"{}" if received == "error" else None, error_code=-32000)
    [outcome] = observer.outcomes
    assert outcome.received == received
    assert outcome.added_s is not None and 0.0 <= outcome.added_s < 0.01


@pytest.mark.parametrize("received", ["nothing", "cancelled", "stream_cut", "reset", "upstream_exited"])
def test_ends_without_an_answer_are_not_timed(received: Received) -> None:
    """No answer crossed the proxy (a sessionless stream lost, the client left, a cut, a reset, the
    server broke off): there is no share to report, and certainly not the raw clock."""
    core, observer, ticks = observed_core(http=True)
    core.from_server(answer(99))  # another request's line, as the old per-core timestamp would have kept
    core.from_client(call(3, "echo"))
    ticks[0] += 1.0
    assert core.end(3, received)
    [outcome] = observer.outcomes
    assert outcome.received == received
    assert outcome.added_s is None


def test_an_unreachable_upstream_is_not_timed() -> None:
    core, observer, _ = observed_core(http=True)
    core.from_client(call(4, "echo"))
    assert core.end(4, "upstream_unreachable", reply=b"{}", error_code=-32000, upstream_contacted=False)
    assert observer.outcomes[0].added_s is None


def test_an_answer_the_proxy_makes_itself_is_all_the_proxys() -> None:
    rules = '[[faults]]\ntype = "error"\nmode = "protocol"\n'
    core, observer, _ = observed_core(rules)
    core.from_client(call(5, "echo"))
    [outcome] = observer.outcomes
    assert outcome.upstream_contacted is False and outcome.added_s == 0.0


def test_a_server_request_is_timed_from_the_clients_answer() -> None:
    core, observer, ticks = observed_core()
    request = json.dumps({"jsonrpc": "2.0", "id": "s1", "method": "roots/list"}).encode() + b"\n"
    core.from_server(request)
    ticks[0] += 3.0  # the client thinking: not the proxy's share
    core.from_client(answer("s1"))
    [outcome] = observer.outcomes
    assert outcome.added_s == 0.0


def test_end_of_a_request_not_in_flight_records_nothing() -> None:
    core, observer, _ = observed_core(http=True)
    assert not core.end(42, "http_error")
    assert not core.end(None, "nothing")
    assert observer.outcomes == []


# --- the real process: a 502 and a bad answer must not put the clock into the metric ----------------


class _FailingUpstream(BaseHTTPRequestHandler):
    """Answers every POST with 502 (plain text) or, for ``"html"`` in the body, a 200 text/html page."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if b"html" in body:
            status, content_type, data = 200, "text/html", b"<html>oops</html>"
        else:
            status, content_type, data = 502, "text/plain", b"bad gateway\n"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def failing_upstream() -> Iterator[ThreadingHTTPServer]:
    with serve_in_thread(_FailingUpstream) as server:
        yield server


def _added_seconds(metrics_url: str) -> tuple[float, float]:
    deadline = time.monotonic() + 5
    while True:
        try:
            with urllib.request.urlopen(metrics_url, timeout=2) as response:
                text = response.read().decode()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    count = re.search(r'^mcpfault_proxy_added_seconds_count\{transport="http"\} (\S+)$', text, re.M)
    total = re.search(r'^mcpfault_proxy_added_seconds_sum\{transport="http"\} (\S+)$', text, re.M)
    assert count and total, text
    return float(count.group(1)), float(total.group(1))


def test_a_502_and_a_bad_answer_put_the_proxys_share_in_the_metric(
    failing_upstream: ThreadingHTTPServer, tmp_path: Path
) -> None:
    rules = tmp_path / "none.toml"
    rules.write_text('name = "none"\nseed = 1\n')
    port = free_port()
    url = server_url(failing_upstream, "/mcp")
    with (
        http_proxy(rules, url, tmp_path, "--metrics-addr", f"127.0.0.1:{port}") as proxy,
        httpx2.Client(timeout=10) as client,
    ):
        body, headers = modern_call(1, "echo", {"text": "status"})
        assert client.post(proxy.url, json=body, headers=headers).status_code == 502
        body, headers = modern_call(2, "echo", {"text": "html"})
        assert client.post(proxy.url, json=body, headers=headers).status_code == 502
        count, total = _added_seconds(f"http://127.0.0.1:{port}/metrics")
        events = proxy.events()
    assert [e["client_received"] for e in events] == ["http_error", "error"]
    assert count == 2
    assert 0 <= total < 0.5, f"the proxy's share of two failed requests was {total} s: a clock, not a duration"
