"""A third-party Streamable HTTP server through the HTTP proxy: ``@modelcontextprotocol/server-everything``
from npm (TypeScript SDK, 2025-11-25), in HTTP mode on 127.0.0.1, with the mcp SDK's client: progress
streamed, the server's sampling request crossing to the client and its answer back, log notifications,
and faults injected on the way."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, MCPError

from tests.conftest import write_profile
from tests.http_support import free_port, http_proxy, stop, wait_for_port
from tests.sdk_support import LogRecorder, Progress, SamplingModel, everything_tour

NPM_DIR = Path(__file__).resolve().parent / "npm"
EVERYTHING_JS = NPM_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
LOOPBACK = NPM_DIR / "loopback.cjs"

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(
        not EVERYTHING_JS.exists() or shutil.which("node") is None,
        reason="server-everything is not installed: run 'npm ci --prefix tests/npm' (needs node and npm)",
    ),
]


@pytest.fixture(scope="module")
def everything() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        ["node", "-r", str(LOOPBACK), str(EVERYTHING_JS), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


async def test_everything_over_http_through_the_proxy(everything: str, tmp_path: Path) -> None:
    model = SamplingModel()
    logs = LogRecorder()
    profile = write_profile(tmp_path, 'name = "baseline"\nseed = 1\n')
    with http_proxy(profile, everything, tmp_path) as proxy:
        with anyio.fail_after(40):
            async with Client(
                proxy.url, mode="legacy", read_timeout_seconds=15, sampling_callback=model, logging_callback=logs
            ) as client:
                # Simulated logging: log notifications come on the server's own GET stream, relayed.
                tour = await everything_tour(client, "over http", logs, log_timeout=10)
        events = proxy.events()
        _, stderr = proxy.close()
    # server-everything primes every stream with an event of an id and empty data: framing, not a message.
    assert "unparsable" not in stderr and "size_bytes" not in stderr, stderr
    assert {"echo", "trigger-long-running-operation", "trigger-sampling-request"} <= {t.name for t in tour.tools}
    assert tour.echo.content[0].text == "Echo: over http"  # type: ignore[union-attr]
    assert tour.long_op.content[0].text.startswith("Long running operation completed")  # type: ignore[union-attr]
    progress = tour.progress
    assert progress.values() == [1.0, 2.0, 3.0, 4.0]
    assert tour.answered_after - progress.updates[0].elapsed > 0.4  # streamed while the tool ran, not buffered
    assert len(model.prompts) == 1 and "ping" in model.prompts[0].text
    assert "sampled-answer-42" in tour.sampled.content[0].text  # type: ignore[union-attr]
    assert tour.structured.structured_content and tour.structured.structured_content["conditions"]
    tools = [e["tool"] for e in events if e["method"] == "tools/call"]
    assert logs.messages
    assert tools == [
        "echo",
        "trigger-long-running-operation",
        "trigger-sampling-request",
        "toggle-simulated-logging",
        "toggle-simulated-logging",
        "get-structured-content",
    ]
    assert all(e["client_received"] == "response" and e["era"] == "legacy" for e in events)


async def test_everything_over_http_with_faults(everything: str, tmp_path: Path) -> None:
    rules = (
        '[[faults]]\ntype = "error"\ntools = ["echo"]\nlimit = 1\n'
        '[[faults]]\ntype = "stream_cut"\nafter_events = 2\ntools = ["trigger-long-running-operation"]\n'
        '[[faults]]\ntype = "http_status"\nstatus = 429\nretry_after_s = 1\ntools = ["get-sum"]\n'
    )
    profile = write_profile(tmp_path, 'name = "faults"\nseed = 3\n' + rules)
    with http_proxy(profile, everything, tmp_path) as proxy:
        with anyio.fail_after(40):
            async with Client(proxy.url, mode="legacy", read_timeout_seconds=15) as client:
                with pytest.raises(MCPError):
                    await client.call_tool("echo", {"message": "first"})
                second = await client.call_tool("echo", {"message": "second"})
                # server-everything numbers its events (an event store): the client resumes the cut
                # stream with GET and Last-Event-ID, and the answer comes after all.
                progress = Progress()
                resumed = await client.call_tool(
                    "trigger-long-running-operation", {"duration": 1, "steps": 4}, progress_callback=progress
                )
                with pytest.raises(MCPError):
                    await client.call_tool("get-sum", {"a": 1, "b": 2})
        events = proxy.events()
    assert second.content[0].text == "Echo: second"  # type: ignore[union-attr]
    assert progress.values() == [1.0, 2.0, 3.0, 4.0]
    assert resumed.content[0].text.startswith("Long running operation completed")  # type: ignore[union-attr]
    faults = [(e["tool"], e["fault_type"], e["client_received"]) for e in events if e["fault_type"]]
    assert faults == [
        ("echo", "error", "error"),
        ("trigger-long-running-operation", "stream_cut", "stream_cut"),
        ("get-sum", "http_status", "http_error"),
    ]
