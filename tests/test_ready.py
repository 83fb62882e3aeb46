"""The readiness record (``--ready-file``): what it says, when it is there, and the launchers that read it."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcpfault.app import ready
from mcpfault.app.argv import mcpfault_argv
from mcpfault.control.client import Control

MOCK = [sys.executable, "-m", "mcpfault.mock"]


def test_a_record_is_written_whole_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "ready.json"
    record = ready.Readiness(pid=7, transport="http", profile="error", listen="http://127.0.0.1:1/mcp", generation=2)
    ready.write(path, record)
    assert ready.read(path) == record
    assert json.loads(path.read_text())["format"] == ready.FORMAT
    assert [p.name for p in tmp_path.iterdir()] == ["ready.json"]  # no temporary file left beside it
    assert ready.read(tmp_path / "absent.json") is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("serving http://x", "not JSON"),
        ('{"format": "other/1", "pid": 1, "transport": "http"}', "not a readiness record"),
        ('{"format": "mcpfault.ready/1", "transport": "http"}', "without its pid"),
    ],
)
def test_what_is_not_a_record_is_named(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "ready.json"
    path.write_text(text)
    with pytest.raises(ready.ReadyFileError, match=said) as caught:
        ready.read(path)
    assert str(path) in str(caught.value)


def test_waiting_stops_when_the_proxy_exits_or_time_runs_out(tmp_path: Path) -> None:
    path = tmp_path / "ready.json"
    with pytest.raises(ready.ReadyFileError, match="exited before it was ready"):
        ready.wait_for(path, exited=lambda: True, timeout_s=60)
    naps: list[float] = []
    with pytest.raises(ready.ReadyFileError, match="not ready after 0 s"):
        ready.wait_for(path, exited=lambda: False, timeout_s=0, sleep=naps.append)


def _wait_until(predicate: object, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.slow
def test_the_stdio_proxy_says_where_its_control_api_is_and_each_restart(tmp_path: Path) -> None:
    path = tmp_path / "ready.json"
    ready.write(path, ready.Readiness(pid=1, transport="stdio", profile="old"))  # an earlier run's: not this one
    command = mcpfault_argv("proxy", "--config", "baseline", "--control", "127.0.0.1:0", "--no-summary")
    command += ["--metrics-addr", "127.0.0.1:0", "--ready-file", str(path), "--", *MOCK]
    proxy = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = ready.wait_for(path, exited=lambda: proxy.poll() is not None, timeout_s=60, pid=proxy.pid)
        assert (first.pid, first.transport, first.profile, first.generation) == (proxy.pid, "stdio", "baseline", 0)
        assert first.listen is None
        assert first.control is not None and first.metrics is not None and first.metrics.endswith("/metrics")
        Control(first.control).restart()
        _wait_until(lambda: (ready.read(path) or first).generation == 1, "the record never said generation 1")
        assert ready.read(path) == dataclasses.replace(first, generation=1)
        proxy.send_signal(signal.SIGTERM)
        proxy.communicate(timeout=30)
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
    assert not path.exists()  # a proxy that no longer serves leaves no record saying it does


@pytest.mark.slow
def test_the_http_proxy_says_its_endpoint_and_the_api_reads_it(tmp_path: Path) -> None:
    from mcpfault.api import Proxy

    with Proxy(MOCK, profile="baseline", transport="http", control=True, workdir=tmp_path) as proxy:
        record = ready.read(tmp_path / "ready.json")
        assert record is not None and record.transport == "http" and record.generation == 0
        assert proxy.url == record.listen and proxy.url is not None and proxy.url.endswith("/mcp")
        assert proxy.control_url == record.control
        assert proxy.control is not None and proxy.control.status()["transport"] == "http"


@pytest.mark.slow
def test_a_proxy_that_cannot_start_is_reported_with_its_own_words(tmp_path: Path) -> None:
    from mcpfault.api import Proxy, ProxyError

    with pytest.raises(ProxyError, match="exited before it was ready") as caught:
        Proxy(MOCK, profile="baseline", transport="http", probe=f"fake:{tmp_path / 'absent.json'}").start()
    assert "it said" in str(caught.value) and "absent.json" in str(caught.value)


def test_the_bench_launchers_read_the_record_not_the_log() -> None:
    """No launcher of ours parses the proxy's human lines: they may change; the record is the contract."""
    src = Path(__file__).resolve().parents[1] / "src" / "mcpfault"
    announcements = ("control API on", "serving ", "metrics at")
    parsing = [
        f"{path.relative_to(src).as_posix()}:{number}"
        for path in src.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "re.compile(" in line and any(said in line for said in announcements)
    ]
    assert parsing == [], parsing
