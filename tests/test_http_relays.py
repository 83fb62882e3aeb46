"""The HTTP benchmark's yardsticks: ``benchmarks/http_relay.py`` as it is (stdlib, threaded) and with
``--uvloop`` (the fast relay the proxy's HTTP targets are taken against) relay what the echo server
answers, over one keep-alive connection, and stop on SIGTERM with status 0; ``benchmarks/http_profile.py``
runs in both eras."""

from __future__ import annotations

import http.client
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
LISTENING = re.compile(rb"listening on http://127\.0\.0\.1:(\d+)")


def start(command: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = LISTENING.search(line)
    assert found, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else b"")
    return proc, int(found.group(1))


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def echo_port() -> Iterator[int]:
    proc, port = start([sys.executable, str(BENCHMARKS / "http_echo_server.py"), "0"])
    yield port
    assert stop(proc) == 0


def conversation(port: int) -> list[tuple[int, bytes]]:
    """initialize, then calls, a DELETE and a call on the ended session, on one keep-alive connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
    connection.request("POST", "/mcp", json.dumps(init), headers)
    answer = connection.getresponse()
    answer.read()
    session = answer.getheader("Mcp-Session-Id")
    assert answer.status == 200 and session
    headers["Mcp-Session-Id"] = session
    seen = []
    for msg_id in range(2, 12):
        call = {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call"}
        call["params"] = {"name": "echo", "arguments": {"text": "x" * msg_id * 50}}
        connection.request("POST", "/mcp", json.dumps(call), headers)
        answer = connection.getresponse()
        seen.append((answer.status, answer.read()))
    connection.request("DELETE", "/mcp", headers=headers)
    answer = connection.getresponse()
    seen.append((answer.status, answer.read()))
    connection.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 99, "method": "ping"}), headers)
    answer = connection.getresponse()
    seen.append((answer.status, answer.read()))
    connection.close()
    return seen


@pytest.mark.parametrize("flags", [[], ["--uvloop"]])
def test_a_relay_answers_as_the_server_does(echo_port: int, flags: list[str]) -> None:
    direct = conversation(echo_port)
    relay, relay_port = start(
        [sys.executable, str(BENCHMARKS / "http_relay.py"), *flags, "0", f"http://127.0.0.1:{echo_port}"]
    )
    try:
        relayed = conversation(relay_port)
    finally:
        code = stop(relay)
    assert relayed == direct and code == 0
    assert [status for status, _ in direct] == [200] * 11 + [404]  # ten calls, the DELETE, then the lost session


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--era", "legacy", "--cprofile"], ["--era", "modern", "--spans", "--metrics"]])
def test_the_http_profile_runs_in_both_eras(flags: list[str]) -> None:
    """``benchmarks/http_profile.py`` (the proxy's CPU per request, by part): a functional check only."""
    small = ["--clients", "2", "--calls", "20", "--rounds", "1", "--warmup", "5"]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "http_profile.py"), *small, *flags],
        capture_output=True,
        timeout=120,
        cwd=BENCHMARKS.parent,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    out = done.stdout.decode()
    assert f"era {flags[1]}: proxy CPU" in out
    if "--cprofile" in flags:
        assert "parser callbacks" in out and "core, engine, sessions" in out
