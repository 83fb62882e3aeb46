"""The README's Streamable HTTP example runs as the README shows, with the faults it shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.http_support import ROOT, http_proxy, sdk_server

pytestmark = [pytest.mark.slow]


def test_the_readme_http_example(tmp_path: Path) -> None:
    with (
        sdk_server(tmp_path) as server,
        http_proxy(ROOT / "examples" / "http-demo.toml", server.url, tmp_path) as proxy,
    ):
        result = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "sdk_http_client.py"), proxy.url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        code, summary = proxy.close()
    assert result.returncode == 0, result.stderr
    counts = {line[4:]: int(line[:3]) for line in result.stdout.splitlines()}
    assert sum(counts.values()) == 20
    # What the README shows, from the same seed and the same sequential client.
    assert counts == {
        "MCPError: Server returned an error response": 7,
        "MCPError: SSE stream ended without a response": 7,
        "ok": 4,
        "RemoteProtocolError: Server disconnected without sending a response.": 2,
    }
    assert code == 0
    assert "faulted requests: client received http_error 7, reset 2, stream_cut 7" in summary
