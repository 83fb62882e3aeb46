"""Shared helpers: run the real proxy as a subprocess and talk to it with raw bytes."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpfault.proxy.events import read_events
from mcpfault.telemetry.current_span import CURRENT_SPAN
from tests.otlp_support import OtlpReceiver


@pytest.fixture(autouse=True)
def _no_span_from_an_earlier_test() -> Iterator[None]:
    """The span recorder leaves its last span's ids for the log lines that follow in the thread (until
    the next span starts): a test that records spans in-process must not lend them to the next test."""
    token = CURRENT_SPAN.set(None)
    yield
    CURRENT_SPAN.reset(token)


ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
SCRIPTED_SERVER = Path(__file__).resolve().parent / "servers" / "scripted_server.py"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


OTEL_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_BSP_SCHEDULE_DELAY",
)


@pytest.fixture
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's or CI's own OTEL_* settings must not steer telemetry tests."""
    for var in OTEL_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """A real OTLP/HTTP receiver accepting every export (see tests/otlp_support.py)."""
    r = OtlpReceiver()
    try:
        yield r
    finally:
        r.close()


def request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode() + b"\n"


def call(request_id: Any, tool: str, **arguments: Any) -> bytes:
    return request(request_id, "tools/call", {"name": tool, "arguments": arguments})


class ProxyProcess:
    """`mcpfault proxy` in front of the scripted server, driven over raw pipes."""

    def __init__(
        self,
        profile: Path | str,
        tmp_path: Path,
        *server_args: str,
        events: bool = True,
        extra: tuple[str, ...] = (),
        server: list[str] | None = None,
    ) -> None:
        self.record = tmp_path / "server-received.bin"
        self.events_path = tmp_path / "events.jsonl"
        self.stderr_path = tmp_path / "proxy-stderr.txt"
        server_cmd = server or [sys.executable, str(SCRIPTED_SERVER), "--record", str(self.record), *server_args]
        cmd = [sys.executable, "-m", "mcpfault", "proxy", "--config", str(profile), *extra]
        if events:
            cmd += ["--events", str(self.events_path)]
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [*cmd, "--", *server_cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
        )
        self._buffer = b""

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def _fill(self, deadline: float) -> bool:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no output from the proxy in time; got so far: {self._buffer[:200]!r}")
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            raise TimeoutError(f"no output from the proxy in time; got so far: {self._buffer[:200]!r}")
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return False
        self._buffer += chunk
        return True

    def read_line(self, timeout: float = 10.0) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if not self._fill(deadline):
                raise EOFError(f"EOF before a full line; partial: {self._buffer[:200]!r}")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def read_json(self, timeout: float = 10.0) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self.read_line(timeout))
        return message

    def read_until_eof(self, timeout: float = 10.0) -> bytes:
        deadline = time.monotonic() + timeout
        while self._fill(deadline):
            pass
        data, self._buffer = self._buffer, b""
        return data

    def wait(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout=timeout)

    def signal(self, signum: signal.Signals) -> None:
        self.proc.send_signal(signum)

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.events_path)

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def received(self) -> bytes:
        return self.record.read_bytes() if self.record.exists() else b""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


@pytest.fixture
def proxy_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[ProxyProcess] = []

    def start(profile: Path | str = PROFILES / "baseline.toml", *server_args: str, **kw: Any) -> ProxyProcess:
        directory = tmp_path / f"p{len(started)}"
        directory.mkdir()
        proxy = ProxyProcess(profile, directory, *server_args, **kw)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.close()


def write_profile(tmp_path: Path, text: str, name: str = "profile.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path
