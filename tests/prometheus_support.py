"""A real Prometheus and a real Pushgateway (Debian's ``prometheus`` and ``prometheus-pushgateway``
packages) for the metrics tests: start-up, readiness, shutdown, and the HTTP API."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tests.http_support import stop

PROMETHEUS = Path("/usr/bin/prometheus")
PUSHGATEWAY = Path("/usr/bin/prometheus-pushgateway")


def http_get(url: str, headers: dict[str, str] | None = None, timeout: float = 5.0) -> tuple[int, dict[str, str], str]:
    """GET ``url``: (status, headers, text), an HTTP error status included rather than raised."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers.items()), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read().decode()


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """Wait until ``url`` answers 200; fail at once if ``proc`` exits, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 0.1) + 1):
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited with {proc.returncode} before becoming ready")
        with contextlib.suppress(OSError):
            if http_get(url, timeout=1.0)[0] == 200:
                return
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready within {timeout_s}s")


@contextlib.contextmanager
def _daemon(args: list[str], port: int, log: Path | None) -> Iterator[str]:
    """Run ``args`` (a server listening on 127.0.0.1:``port``, stdout and stderr to ``log`` or nowhere),
    wait for its ``/-/ready``, yield its base URL; stop it when the block ends."""
    with contextlib.ExitStack() as stack:
        out: IO[bytes] | int = stack.enter_context(log.open("wb")) if log is not None else subprocess.DEVNULL
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        stack.callback(stop, proc, 10.0)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url + "/-/ready", proc)
        yield url


@contextlib.contextmanager
def pushgateway(port: int, log: Path | None = None) -> Iterator[str]:
    """A ready Pushgateway on 127.0.0.1:``port`` without persistence; yields its base URL."""
    with _daemon([str(PUSHGATEWAY), f"--web.listen-address=127.0.0.1:{port}", "--persistence.file="], port, log) as url:
        yield url


@contextlib.contextmanager
def prometheus(
    port: int, config: Path, tsdb: Path, log: Path | None = None, *, exemplars: bool = False
) -> Iterator[str]:
    """A ready Prometheus on 127.0.0.1:``port`` with ``config``, storing into ``tsdb`` (and exemplars
    too if asked); yields its base URL."""
    args = [
        str(PROMETHEUS),
        f"--config.file={config}",
        f"--storage.tsdb.path={tsdb}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    if exemplars:
        args.append("--enable-feature=exemplar-storage")
    with _daemon(args, port, log) as url:
        yield url


def api_get(api: str, path: str, **params: str) -> dict[str, Any]:
    """GET ``{api}/{path}?{params}`` of Prometheus's HTTP API (``api`` ends in ``/api/v1``); asserts
    that it succeeded and returns the decoded answer."""
    status, _, body = http_get(f"{api}/{path}?{urllib.parse.urlencode(params, doseq=True)}")
    answer: dict[str, Any] = json.loads(body)
    assert status == 200 and answer["status"] == "success", f"{path} {params}: {status} {body[:500]}"
    return answer
