"""Talking to a live proxy's control API over real HTTP, with every header in the test's hands."""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CONTROL_LINE = re.compile(rb"control API on (http://\S+)")
SERVING_LINE = re.compile(rb"serving (\S+) ->")


def api(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> tuple[int, dict[str, str], Any]:
    """(status, headers, parsed JSON body) of one request to the control API at ``url``."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        payload = response.read()
        return response.status, dict(response.getheaders()), json.loads(payload) if payload else None
    finally:
        connection.close()


def wait_for(stderr_fd: int, pattern: re.Pattern[bytes], seen: bytearray, timeout: float = 15.0) -> str:
    """Read a process's stderr until ``pattern`` shows up; its first group."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pattern.search(seen)
        if found:
            return found.group(1).decode()
        ready, _, _ = select.select([stderr_fd], [], [], 0.1)
        if ready:
            chunk = os.read(stderr_fd, 65536)
            if not chunk:
                break
            seen += chunk
    raise RuntimeError(f"not seen in time ({pattern.pattern!r}): {bytes(seen).decode(errors='replace')}")


class ControlledHttpProxy:
    """`mcpfault proxy --listen 127.0.0.1:0 --control 127.0.0.1:0 -- SERVER`: ``url`` and ``control``."""

    def __init__(
        self,
        profile: Path,
        tmp_path: Path,
        server: list[str],
        *extra: str,
        env: dict[str, str] | None = None,
        upstream: str | None = None,
    ) -> None:
        self.events_file = tmp_path / f"events-{time.monotonic_ns()}.jsonl"
        command = [
            sys.executable,
            "-m",
            "mcpfault",
            "proxy",
            "--config",
            str(profile),
            "--listen",
            "127.0.0.1:0",
            "--control",
            "127.0.0.1:0",
            "--events",
            str(self.events_file),
            *extra,
            *(["--upstream", upstream] if upstream else ["--", *server]),
        ]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}
        )
        assert self.proc.stderr is not None
        self.stderr = bytearray()
        self.control = wait_for(self.proc.stderr.fileno(), CONTROL_LINE, self.stderr)
        self.url = wait_for(self.proc.stderr.fileno(), SERVING_LINE, self.stderr)

    def close(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        assert self.proc.stderr is not None
        self.stderr += self.proc.stderr.read()
        self.proc.stderr.close()
        return self.proc.returncode
