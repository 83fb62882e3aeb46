"""The Streamable HTTP reference's example (docs/reference/http.md) runs as the page shows, with the faults it shows."""

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
    # What the page shows, from the same seed and the same sequential client.
    assert counts == {
        "MCPError: Server returned an error response": 7,
        "MCPError: SSE stream ended without a response": 7,
        "ok": 4,
        "RemoteProtocolError: Server disconnected without sending a response.": 2,
    }
    assert code == 0
    assert "faulted requests: client received http_error 7, reset 2, stream_cut 7" in summary


def test_the_ci_tutorial_example_passes_and_explains_a_failure(tmp_path: Path) -> None:
    """examples/ci is what docs/tutorials/ci-pytest.md walks through: it passes as shipped, and an agent
    that hides the failure (the one-line change the tutorial warns about) fails with the fault named."""
    shipped = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "examples" / "ci")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    assert "3 passed" in shipped.stdout
    source = (ROOT / "examples" / "ci" / "test_my_agent.py").read_text()
    hiding = source.replace("if result.is_error:", "if False:")
    assert hiding != source
    (tmp_path / "test_hiding_agent.py").write_text(hiding)
    broken = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_hiding_agent.py"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "1 failed, 2 passed" in broken.stdout
    assert "mcpfault: faults injected" in broken.stdout
    assert "error/tool rule=sites-fail tools/call list_sites" in broken.stdout
