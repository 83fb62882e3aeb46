"""The span writer process (telemetry/span_writer.py): the bytes the recorder would write itself, every
span at a clean stop, at most the last moments' spans when the proxy is killed, and no writer left behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.trace import SpanKind

from mcpfault.faults import profile
from mcpfault.faults.engine import Engine
from mcpfault.proxy.core import ProxyCore
from mcpfault.proxy.observe import TelemetryObserver
from mcpfault.telemetry.fastspans import FLUSH_INTERVAL_S, PROCESS_AFTER_SPANS, SpanRecorder
from mcpfault.telemetry.tracing import read_spans
from tests.conftest import PROFILES, call, request

INIT = request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}})
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie nobody reaped has stopped running)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pid: int, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _writer_started(recorder: SpanRecorder, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while recorder.writer_pid is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _queued_items(tmp_path: Path) -> list[tuple[Any, ...]]:
    """What a traced core queues for a mix of requests: templated spans, a fault's slow path, a client's
    parent, a string id needing escapes, an error answer."""
    recorder = SpanRecorder("svc", spans_file=None, otlp_endpoint=None, soon=1)  # each span queued at its end
    queued: list[tuple[Any, ...]] = []
    recorder._enqueue = queued.append  # type: ignore[method-assign,assignment]
    engine = Engine(profile.loads('[[faults]]\nname = "boom"\ntype = "error"\ntools = ["counter"]\n'))
    core = ProxyCore(engine, observers=[TelemetryObserver(recorder, None)])
    core.from_client(INIT)
    core.from_server(b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}\n')
    for request_id in [*range(1, 40), 'a"b\\c']:
        line = call(request_id, "echo", text="x")
        if request_id == 7:
            line = request(7, "tools/call", {"name": "echo", "_meta": {"traceparent": TRACEPARENT}})
        core.from_client(line)
        core.from_server(orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": []}}) + b"\n")
    core.from_client(call(50, "counter"))
    core.from_client(request(51, "resources/read", {"uri": "file:///x"}))
    core.from_server(b'{"jsonrpc":"2.0","id":51,"error":{"code":-32601,"message":"no"}}\n')
    handle = recorder.start("plain", SpanKind.INTERNAL, None, {"k": 1, "list": [1, 2]}, 1)
    assert handle is not None
    queued.append((handle, {"more": "yes"}, [("event", 2, {"a": True})], ("why",), 3))  # as ``end`` queues
    return queued


def test_the_writer_process_writes_the_bytes_the_recorder_writes_itself(tmp_path: Path) -> None:
    items = _queued_items(tmp_path)
    files = {}
    for process in (False, True):
        path = tmp_path / f"process-{process}.jsonl"
        recorder = SpanRecorder("svc", spans_file=path, otlp_endpoint=None, writer_process=process, process_after=0)
        for item in items:
            assert recorder._enqueue(item)
        if process:
            assert _writer_started(recorder)
        recorder.shutdown()
        files[process] = path.read_bytes()
    assert files[True] == files[False]
    spans = read_spans(tmp_path / "process-True.jsonl")
    assert len(spans) == len(items)
    assert {span.attributes.get("jsonrpc.request.id") for span in spans} >= {"1", "39", 'a"b\\c', "50", "51"}


def test_a_clean_stop_flushes_every_span_and_ends_the_writer(tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    recorder = SpanRecorder("svc", spans_file=spans_file, otlp_endpoint=None, writer_process=True)
    for i in range(3000):  # several batches, some still queued at the stop
        handle = recorder.start("s", SpanKind.SERVER, None, {"i": str(i)}, 1)
        assert handle is not None
        recorder.end(handle, {}, [], None, 2)
    assert _writer_started(recorder)
    pid = recorder.writer_pid
    assert pid is not None
    recorder.shutdown()
    assert len(read_spans(spans_file)) == 3000
    assert recorder.dropped == 0
    assert not _alive(pid)


def test_without_its_process_the_recorder_writes_the_spans_itself(tmp_path: Path, caplog) -> None:
    spans_file = tmp_path / "spans.jsonl"
    recorder = SpanRecorder("svc", spans_file=spans_file, otlp_endpoint=None, writer_process=True, process_after=0)
    first = recorder.start("s", SpanKind.SERVER, None, {}, 1)
    assert first is not None
    recorder.end(first, {}, [], None, 2)
    assert _writer_started(recorder)
    pid = recorder.writer_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the writer dies: the next batch finds its pipe closed
    assert _wait_gone(pid)
    for _ in range(10):
        handle = recorder.start("s", SpanKind.SERVER, None, {}, 1)
        assert handle is not None
        recorder.end(handle, {}, [], None, 2)
    recorder.shutdown()
    assert len(read_spans(spans_file)) >= 10  # the first may have died with the writer
    assert any("span writer process gone" in r.getMessage() for r in caplog.records)


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(child) for child in (task / "children").read_text().split())
    return found


@pytest.mark.slow
def test_a_killed_proxy_loses_at_most_its_last_spans_and_leaves_no_writer(proxy_factory, tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    proxy = proxy_factory(PROFILES / "baseline.toml", extra=("--spans", str(spans_file)), events=False)
    proxy.send(INIT)
    assert proxy.read_json()["id"] == 0
    early = 600  # more than the spans a proxy writes itself before its writer process starts
    for request_id in range(1, early + 1):
        proxy.send(call(request_id, "echo", text="x"))
        assert proxy.read_json()["id"] == request_id
    time.sleep(3 * FLUSH_INTERVAL_S)  # every span so far ended more than 0.2 s before the kill
    for request_id in range(early + 1, early + 51):  # these may be lost: answered just before the kill
        proxy.send(call(request_id, "echo", text="x"))
        assert proxy.read_json()["id"] == request_id
    children = _children(proxy.proc.pid)
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children]
    assert sum(b"mcpfault.telemetry.span_writer" in command for command in commands) == 1
    proxy.proc.kill()
    proxy.proc.wait(10)
    # Its children were the server and the span writer; the writer exits at its pipe's EOF.
    for pid in children:
        assert _wait_gone(pid), f"process {pid} outlived the killed proxy"
    written = {span.attributes.get("jsonrpc.request.id") for span in read_spans(spans_file)}
    assert {str(i) for i in range(early + 1)} <= written


def test_the_writer_process_logs_as_the_proxy_does(tmp_path: Path, capfd) -> None:
    from mcpfault.telemetry import logging as log_setup
    from tests.http_support import free_port

    log_setup.configure("warning", "json")
    try:
        endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens: every export fails
        recorder = SpanRecorder("svc", spans_file=None, otlp_endpoint=endpoint, writer_process=True, process_after=0)
        handle = recorder.start("s", SpanKind.SERVER, None, {}, 1)
        assert handle is not None
        recorder.end(handle, {}, [], None, 2)
        assert _writer_started(recorder)
        recorder.shutdown()
    finally:
        log_setup.reset()
    lines = [orjson.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    assert any("spans not exported" in line["event"] and line["level"] == "warning" for line in lines), lines


def test_a_recorder_with_few_spans_writes_them_itself_and_starts_no_process(tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    recorder = SpanRecorder("svc", spans_file=spans_file, otlp_endpoint=None, writer_process=True)
    for i in range(PROCESS_AFTER_SPANS - 1):  # a short session's worth
        handle = recorder.start("s", SpanKind.SERVER, None, {"i": str(i)}, 1)
        assert handle is not None
        recorder.end(handle, {}, [], None, 2)
    recorder.shutdown()
    assert recorder.writer_pid is None  # its start-up would have cost more than it saved
    assert len(read_spans(spans_file)) == PROCESS_AFTER_SPANS - 1
