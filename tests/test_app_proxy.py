"""The application layer's proxy (app/proxy.py), built and run in this process from a ``ProxyConfig``, no
command line: over stdio in front of the real mock server (raw JSON-RPC lines on pipes of the test), and
over Streamable HTTP in front of the SDK's server (``upstream``); and the configurations it refuses.

The proxy runs on the test's main thread (it handles SIGINT and SIGTERM there, as a process does); the
client is a thread beside it, bounded by timeouts."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcpfault.app import proxy as app_proxy
from mcpfault.app import ready
from mcpfault.errors import UsageError
from mcpfault.protocol.jsonlines import read_jsonl
from tests.conftest import write_profile
from tests.http_support import SdkHttpServer, modern_call, sdk_server

MOCK = (sys.executable, "-m", "mcpfault.mock")
TIMEOUT_S = 60.0
PROFILE = """name = "app-proxy"
seed = 1

[[faults]]
name = "sites-down"
type = "error"
mode = "tool"
message = "sites unavailable"
tools = ["list_sites"]
probability = 1.0
"""


class Heard(app_proxy.Announcements):
    """What the proxy announced, kept for the test to read."""

    def __init__(self) -> None:
        self.said: list[tuple[str, Any]] = []
        self.ended: app_proxy.Ended | None = None

    def metrics(self, url: str) -> None:
        self.said.append(("metrics", url))

    def control(self, url: str) -> None:
        self.said.append(("control", url))

    def serving(self, url: str, upstream: str, profile: str) -> None:
        self.said.append(("serving", (url, upstream, profile)))

    def summary(self, ended: app_proxy.Ended) -> None:
        self.ended = ended


def _client_beside(work: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    """``work`` on a thread (the proxy has the main thread); what it raised, for the test to re-raise."""
    failures: list[BaseException] = []

    def guarded() -> None:
        try:
            work()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=guarded, daemon=True)
    thread.start()
    return thread, failures


def _read_line(fd: int, buffer: bytearray) -> dict[str, Any]:
    while b"\n" not in buffer:
        readable, _, _ = select.select([fd], [], [], TIMEOUT_S)
        assert readable, "the proxy never answered"
        chunk = os.read(fd, 65536)
        assert chunk, "the proxy closed its stdout before answering"
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    message: dict[str, Any] = json.loads(line)
    return message


def _lines(events_file: Path) -> list[dict[str, Any]]:
    """Every line of an events file: the launch's start and stop lines with the requests'."""
    return read_jsonl(events_file, strict=True)


def _request(request_id: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode() + b"\n"


@pytest.mark.slow
def test_a_stdio_proxy_relays_injects_and_records_from_its_configuration(tmp_path: Path) -> None:
    to_proxy, client_out = os.pipe()
    client_in, from_proxy = os.pipe()
    record_path = tmp_path / "ready.json"
    config = app_proxy.ProxyConfig(
        profile=str(write_profile(tmp_path, PROFILE)),
        command=MOCK,
        events=tmp_path / "events.jsonl",
        ready_file=record_path,
        stdin_fd=to_proxy,
        stdout_fd=from_proxy,
    )
    answers: dict[int, dict[str, Any]] = {}
    records: list[ready.Readiness] = []
    finished = threading.Event()

    def client() -> None:
        try:
            records.append(ready.wait_for(record_path, exited=finished.is_set, timeout_s=TIMEOUT_S))
            hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            os.write(client_out, _request(1, "initialize", hello))
            os.write(client_out, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            os.write(client_out, _request(2, "tools/call", {"name": "list_sites", "arguments": {}}))
            os.write(client_out, _request(3, "tools/call", {"name": "get_site", "arguments": {"site_id": "nowhere"}}))
            buffer = bytearray()
            while len(answers) < 3:
                message = _read_line(client_in, buffer)
                answers[message["id"]] = message
        finally:
            os.close(client_out)  # the client leaves: the proxy ends with the server's status

    heard = Heard()
    thread, failures = _client_beside(client)
    try:
        status = app_proxy.run(config, heard)
    finally:
        finished.set()
        thread.join(TIMEOUT_S)
        for fd in (to_proxy, client_in, from_proxy):
            os.close(fd)
    if failures:
        raise failures[0]
    assert status == 0
    assert answers[2]["result"]["isError"] is True  # the rule's answer, in the server's place
    assert "sites unavailable" in json.dumps(answers[2]["result"])
    assert "error" not in answers[3]  # what no rule matches crosses to the server and back
    [record] = records
    assert (record.pid, record.transport, record.profile, record.generation) == (os.getpid(), "stdio", "app-proxy", 0)
    assert not record_path.exists()  # removed at exit: a proxy that no longer serves says nothing
    events = _lines(tmp_path / "events.jsonl")
    assert events[0]["event"] == "proxy_started" and events[0]["transport"] == "stdio"
    calls = [e for e in events if e.get("method") == "tools/call"]
    assert [(e["tool"], e["fault_type"], e["upstream_contacted"]) for e in calls] == [
        ("list_sites", "error", False),
        ("get_site", None, True),
    ]
    assert events[-1]["event"] == "proxy_stopped" and events[-1]["exit_code"] == 0
    assert heard.ended is not None and heard.ended.status == 0
    assert heard.ended.supervisor is not None and heard.ended.supervisor.generation == 0
    assert sum(heard.ended.stats.requests.values()) == 3


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SdkHttpServer]:
    with sdk_server(tmp_path_factory.mktemp("app-proxy-upstream"), json_response=True) as server:
        yield server


@pytest.mark.slow
def test_an_http_proxy_in_front_of_an_upstream_serves_until_a_signal(upstream: SdkHttpServer, tmp_path: Path) -> None:
    record_path = tmp_path / "ready.json"
    config = app_proxy.ProxyConfig(
        profile=str(write_profile(tmp_path, 'name = "plain"\nseed = 1\n')),
        listen="127.0.0.1:0",
        upstream=upstream.url,
        events=tmp_path / "events.jsonl",
        ready_file=record_path,
        control="127.0.0.1:0",
    )
    records: list[ready.Readiness] = []
    answers: list[httpx2.Response] = []
    finished = threading.Event()

    def client() -> None:
        record = ready.wait_for(record_path, exited=finished.is_set, timeout_s=TIMEOUT_S)
        records.append(record)
        try:
            assert record.listen is not None
            body, headers = modern_call(7, "add", {"a": 2, "b": 40})
            with httpx2.Client(timeout=TIMEOUT_S) as http:
                answers.append(http.post(record.listen, json=body, headers=headers))
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # the proxy's own handler takes it: it serves until one

    heard = Heard()
    thread, failures = _client_beside(client)
    try:
        status = app_proxy.run(config, heard)
    finally:
        finished.set()
        thread.join(TIMEOUT_S)
    if failures:
        raise failures[0]
    assert status == 0
    [answer] = answers
    assert answer.status_code == 200 and answer.json()["result"]["content"][0]["text"] == "42"
    [record] = records
    assert (record.transport, record.generation) == ("http", None)  # the proxy did not start this server
    assert ("control", record.control) in heard.said
    assert ("serving", (record.listen, upstream.url, "plain")) in heard.said
    assert not record_path.exists()
    events = _lines(tmp_path / "events.jsonl")
    assert events[0]["event"] == "proxy_started" and events[0]["transport"] == "http"
    assert [e["tool"] for e in events if e.get("method") == "tools/call"] == ["add"]
    assert events[-1]["exit_code"] == 0 and events[-1]["ended_by"] == "signal SIGTERM"
    assert heard.ended is not None and heard.ended.supervisor is None


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({}, "no server command; put it after '--'"),
        ({"command": MOCK, "shutdown_timeout_s": -1.0}, "--shutdown-timeout -1.0 is negative"),
        ({"dry_run": True}, "--dry-run needs the server command"),
        ({"upstream": "http://127.0.0.1:1/mcp"}, "--upstream needs --listen"),
        ({"listen": "127.0.0.1:0"}, "--listen needs --upstream URL"),
        ({"listen": "127.0.0.1:0", "upstream": "ftp://127.0.0.1/mcp"}, "is not an http(s) URL with a host"),
        ({"listen": "127.0.0.1:0", "upstream": "http://127.0.0.1:1/mcp", "hold_s": -1.0}, "--hold -1.0 is negative"),
        ({"listen": "127.0.0.1:0", "upstream": "http://127.0.0.1:1/mcp", "max_body_bytes": 0}, "--max-body-bytes 0"),
        ({"listen": "0.0.0.0:0", "upstream": "http://127.0.0.1:1/mcp"}, "set MCPFAULT_PROXY_TOKEN"),
        ({"listen": "127.0.0.1:0", "upstream": "http://127.0.0.1:1/mcp", "probe": "ebpf"}, "--probe watches"),
    ],
)
def test_a_bad_configuration_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], said: str
) -> None:
    monkeypatch.delenv(app_proxy.PROXY_TOKEN_VARIABLE, raising=False)
    config = app_proxy.ProxyConfig(profile="baseline", events=tmp_path / "events.jsonl", **options)
    with pytest.raises(UsageError, match=re.escape(said)) as caught:
        config.check()
    with pytest.raises(UsageError) as again:
        app_proxy.run(config)
    assert str(again.value) == str(caught.value)
    assert not (tmp_path / "events.jsonl").exists()  # refused before the profile was read or a file opened


def test_a_failed_build_closes_what_it_had_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/metrics listens, then the control API's wide address without a token is refused: the metrics
    listener is closed again, and the events file has its start line and no more."""
    monkeypatch.delenv("MCPFAULT_CONTROL_TOKEN", raising=False)
    config = app_proxy.ProxyConfig(
        profile="baseline",
        command=MOCK,
        events=tmp_path / "events.jsonl",
        metrics_addr="127.0.0.1:0",
        control="0.0.0.0:0",
    )
    heard = Heard()
    with pytest.raises(UsageError, match="MCPFAULT_CONTROL_TOKEN"):
        app_proxy.build(config, heard)
    [(kind, url)] = heard.said
    assert kind == "metrics"
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S):
        pass
    assert [e["event"] for e in _lines(tmp_path / "events.jsonl")] == ["proxy_started"]


def test_a_dry_run_is_run_not_built() -> None:
    with pytest.raises(ValueError, match="a dry run builds no proxy"):
        app_proxy.build(app_proxy.ProxyConfig(profile="baseline", command=MOCK, dry_run=True))
