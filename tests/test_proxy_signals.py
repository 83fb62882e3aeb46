"""Signals to the real proxy process while requests are in flight: telemetry is flushed, the server ends.

SIGTERM (or SIGINT) to the proxy is forwarded to the server; when the server exits, every request
still waiting is answered with an error, the events file and the spans file hold one complete JSON
line per request (completed or cut short), and the proxy exits with the server's status.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from mcpfault.protocol.jsonlines import parse_jsonl
from mcpfault.proxy.events import read_events
from tests.conftest import PROFILES, ProxyProcess, call, request

pytestmark = pytest.mark.slow

INIT = request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}})
COMPLETED = 5
IN_FLIGHT = 2


def complete_jsonl(path: Path) -> list[Any]:
    """Every line must be complete JSON: a half-written line fails here."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), data[-200:]
    return parse_jsonl(data, where=str(path))


def read_spans(path: Path) -> list[dict[str, Any]]:
    return [
        span
        for batch in complete_jsonl(path)
        for resource in batch["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def server_pid(proxy: ProxyProcess) -> int:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{proxy.proc.pid}/task").iterdir():
            children = (task / "children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.02)
    raise AssertionError("the proxy started no server")


def gone(pid: int) -> bool:
    """No such process, or only its zombie (nobody may be left to reap it in a container)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def start_with_requests_in_flight(proxy: ProxyProcess) -> int:
    """Complete a handshake and COMPLETED calls, then leave IN_FLIGHT calls waiting on the server."""
    proxy.send(INIT)
    assert proxy.read_json()["id"] == 0
    for index in range(1, COMPLETED + 1):
        proxy.send(call(index, "echo", text=f"done {index}"))
        assert proxy.read_json()["id"] == index
    pid = server_pid(proxy)
    for index in range(COMPLETED + 1, COMPLETED + 1 + IN_FLIGHT):
        proxy.send(call(index, "sleep", seconds=30))
    deadline = time.monotonic() + 5
    while proxy.received().count(b'"sleep"') < 1:  # the server is busy with the first of them
        assert time.monotonic() < deadline, "the server never got the calls"
        time.sleep(0.02)
    return pid


def check_flushed(proxy: ProxyProcess, spans_path: Path, status: int) -> None:
    total = 1 + COMPLETED + IN_FLIGHT
    events = read_events(proxy.events_path)
    assert len(events) == total
    by_id = {e["request_id"]: e for e in events}
    assert sorted(by_id) == list(range(total))
    assert all(by_id[i]["client_received"] == "response" for i in range(COMPLETED + 1))
    for index in range(COMPLETED + 1, total):
        assert by_id[index]["client_received"] == "upstream_exited"
        assert by_id[index]["error_code"] == -32000
    spans = read_spans(spans_path)
    assert len(spans) == total
    assert sorted(
        int(a["value"]["stringValue"]) for s in spans for a in s["attributes"] if a["key"] == "jsonrpc.request.id"
    ) == list(range(total))
    unfinished = [s for s in spans if s["status"].get("code") == 2]
    assert len(unfinished) == IN_FLIGHT and all(s["status"]["message"] == "upstream_exited" for s in unfinished)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 128 + signal.SIGINT)])
def test_a_signal_with_requests_in_flight_flushes_events_and_spans_and_ends_the_server(
    tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    spans_path = tmp_path / "spans.jsonl"
    proxy = ProxyProcess(PROFILES / "baseline.toml", tmp_path, extra=("--spans", str(spans_path), "--no-summary"))
    try:
        pid = start_with_requests_in_flight(proxy)
        proxy.signal(signum)
        answers = parse_jsonl(proxy.read_until_eof(timeout=10))
        assert [a["id"] for a in answers] == list(range(COMPLETED + 1, COMPLETED + 1 + IN_FLIGHT))
        assert all(
            a["error"]["code"] == -32000 and f"exited with code {status}" in a["error"]["message"] for a in answers
        )
        # The scripted server exits 143 on SIGTERM; Python dies of SIGINT (130 to a shell).
        assert proxy.wait(timeout=10) == status
        assert gone(pid)
        check_flushed(proxy, spans_path, status)
    finally:
        proxy.close()


def test_sigterm_to_a_server_that_ignores_it_ends_with_the_servers_status(tmp_path: Path) -> None:
    spans_path = tmp_path / "spans.jsonl"
    proxy = ProxyProcess(
        PROFILES / "baseline.toml",
        tmp_path,
        "--ignore-sigterm",
        extra=("--spans", str(spans_path), "--no-summary", "--shutdown-timeout", "0.2"),
    )
    try:
        pid = start_with_requests_in_flight(proxy)
        proxy.signal(signal.SIGTERM)
        # Forwarded and ignored; after the grace our own SIGTERM (ignored), then SIGKILL 2 s later.
        assert proxy.wait(timeout=15) == 128 + signal.SIGKILL
        answers = parse_jsonl(proxy.read_until_eof(timeout=5))
        assert [a["id"] for a in answers] == list(range(COMPLETED + 1, COMPLETED + 1 + IN_FLIGHT))
        assert gone(pid)
        check_flushed(proxy, spans_path, 128 + signal.SIGKILL)
    finally:
        proxy.close()


def test_sigterm_to_an_idle_proxy_exits_with_the_servers_status(tmp_path: Path) -> None:
    spans_path = tmp_path / "spans.jsonl"
    proxy = ProxyProcess(PROFILES / "baseline.toml", tmp_path, extra=("--spans", str(spans_path), "--no-summary"))
    try:
        proxy.send(INIT)
        proxy.read_json()
        pid = server_pid(proxy)
        proxy.signal(signal.SIGTERM)
        assert proxy.read_until_eof(timeout=5) == b""
        assert proxy.wait(timeout=10) == 143
        assert gone(pid)
        assert [e["request_id"] for e in read_events(proxy.events_path)] == [0]
        assert len(read_spans(spans_path)) == 1
        assert os.path.getsize(spans_path) > 0
    finally:
        proxy.close()
