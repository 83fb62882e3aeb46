"""A stdio MCP server behind the HTTP proxy (``mcpfault proxy --listen ... -- SERVER_COMMAND``): the
mcp SDK's HTTP client, both eras, against the SDK's stdio server in a real subprocess."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError

from tests.conftest import write_profile
from tests.http_support import SDK_SERVER, HttpProxyProcess, modern_call, sse_messages

pytestmark = [pytest.mark.slow]

BASELINE = 'name = "baseline"\nseed = 1\n'
PROXY = [sys.executable, "-m", "mcpfault", "proxy"]


class BridgeProcess(HttpProxyProcess):
    def __init__(self, tmp_path: Path, rules: str = "", *server_args: str) -> None:
        profile = write_profile(tmp_path, BASELINE + rules)
        super().__init__(profile, "", tmp_path, "--", sys.executable, str(SDK_SERVER), *server_args)


@pytest.fixture
def bridge(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BridgeProcess]:
    rules = getattr(request, "param", "")
    proxy = BridgeProcess(tmp_path, rules)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sdk_http_client_reaches_a_stdio_server(bridge: BridgeProcess, mode: str) -> None:
    seen: list[float] = []

    class OnProgress:
        async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

    on_progress = OnProgress()

    with anyio.fail_after(30):
        async with Client(bridge.url, mode=mode, read_timeout_seconds=10) as client:
            tools = await client.list_tools()
            echoed = await client.call_tool("echo", {"text": "over http, then stdio"})
            counted = await client.call_tool("countdown", {"steps": 3}, progress_callback=on_progress)
    assert {"echo", "countdown"} <= {t.name for t in tools.tools}
    assert echoed.content[0].text == "over http, then stdio"  # type: ignore[union-attr]
    assert counted.content[0].text == "done after 3 steps"  # type: ignore[union-attr]
    assert seen == [1, 2, 3]
    era = "legacy" if mode == "legacy" else "modern"
    calls = [e for e in bridge.events() if e["method"] == "tools/call"]
    assert [(e["era"], e["client_received"]) for e in calls] == [(era, "response")] * 2


def test_concurrent_clients_with_the_same_ids_get_their_own_answers(bridge: BridgeProcess) -> None:
    texts = [f"client-{i}" for i in range(8)]
    answers: dict[str, Any] = {}

    def one(text: str) -> None:
        body, headers = modern_call(1, "echo", {"text": text})  # every client uses id 1
        answers[text] = httpx2.post(bridge.url, json=body, headers=headers, timeout=10)

    import threading

    threads = [threading.Thread(target=one, args=(t,)) for t in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    for text in texts:
        message = sse_messages(answers[text].text)[-1]
        assert message["id"] == 1
        assert message["result"]["content"][0]["text"] == text


@pytest.mark.anyio
@pytest.mark.parametrize("bridge", ['[[faults]]\ntype = "error"\ntools = ["add"]\n'], indirect=True)
async def test_faults_act_in_front_of_a_stdio_server(bridge: BridgeProcess) -> None:
    with anyio.fail_after(30):
        async with Client(bridge.url, mode="auto", read_timeout_seconds=10) as client:
            with pytest.raises(MCPError):
                await client.call_tool("add", {"a": 1, "b": 2})
            assert (await client.call_tool("echo", {"text": "fine"})).is_error is False
    faulted = [e for e in bridge.events() if e["fault_type"]]
    assert [(e["tool"], e["client_received"]) for e in faulted] == [("add", "error")]


def test_server_exit_mid_request_answers_and_the_proxy_exits_with_its_status(tmp_path: Path) -> None:
    proxy = BridgeProcess(tmp_path)
    try:
        warm, warm_headers = modern_call(3, "echo", {"text": "booted"})  # the timing below is not a cold start
        assert httpx2.post(proxy.url, json=warm, headers=warm_headers, timeout=30).status_code == 200
        body, headers = modern_call(4, "crash", {"code": 3})
        answer = httpx2.post(proxy.url, json=body, headers=headers, timeout=10)
        message = sse_messages(answer.text)[-1]
        proxy.proc.wait(10)
    finally:
        code, stderr = proxy.close()
    assert message["id"] == 4 and message["error"]["code"] == -32000
    assert "exited with code 3" in message["error"]["message"]
    assert code == 3, stderr


def test_sigterm_stops_the_server_and_flushes_events(tmp_path: Path) -> None:
    proxy = BridgeProcess(tmp_path)
    body, headers = modern_call(1, "echo", {"text": "before the signal"})
    assert httpx2.post(proxy.url, json=body, headers=headers, timeout=10).status_code == 200
    proxy.proc.send_signal(signal.SIGTERM)
    try:
        code = proxy.proc.wait(15)
    except subprocess.TimeoutExpired:
        proxy.proc.kill()
        raise
    _, stderr = proxy.close()
    assert code in (0, 143, -15 + 256), stderr
    assert [e["method"] for e in proxy.events()] == ["tools/call"]
    assert "requests 1" in stderr  # the summary was printed


def test_a_server_command_that_cannot_start_is_exit_127(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, BASELINE)
    result = subprocess.run(
        [*PROXY, "--config", str(profile), "--listen", "127.0.0.1:0", "--", str(tmp_path / "no-such-server")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 127
    assert "cannot start the MCP server" in result.stderr and "was not found" in result.stderr


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    profile = write_profile(tmp_path, BASELINE)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [*PROXY, "--config", str(profile), "--listen", f"127.0.0.1:{port}", "--", sys.executable, str(SDK_SERVER)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 2, result.stderr
    assert f"--listen 127.0.0.1:{port}: cannot listen" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.anyio
async def test_clients_of_both_eras_share_one_listen(bridge: BridgeProcess) -> None:
    # One stdio server would stick to its first client's era: a 2025-11-25 client after a 2026-07-28 one
    # was refused, and an auto client after a legacy one was downgraded.
    order = ("auto", "legacy", "auto", "legacy")
    with anyio.fail_after(60):
        for mode in order:
            async with Client(bridge.url, mode=mode, read_timeout_seconds=10) as client:
                echoed = await client.call_tool("echo", {"text": mode})
            assert echoed.content[0].text == mode  # type: ignore[union-attr]
    calls = [e for e in bridge.events() if e["method"] == "tools/call"]
    expected = {"auto": ("modern", "2026-07-28"), "legacy": ("legacy", "2025-11-25")}
    assert [(e["era"], e["protocol_version"]) for e in calls] == [expected[m] for m in order]
