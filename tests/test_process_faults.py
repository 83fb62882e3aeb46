"""Process faults and the supervisor, against real processes: the official SDK client and server.

Every test runs its proxy with a tag in the environment that the server and its children inherit;
after the test, no process carrying the tag may be left (the orphan check reads /proc).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters, stdio_client

from mcpfault.errors import ProfileError
from mcpfault.faults import profile
from mcpfault.protocol.jsonlines import read_jsonl
from mcpfault.proxy.events import read_events, read_server_events
from tests.conftest import ROOT, ProxyProcess, call, request, write_profile
from tests.http_support import HttpProxyProcess, free_port

PROCESS_SERVER = [sys.executable, str(Path(__file__).resolve().parent / "servers" / "process_server.py")]
TAG = "MCPFAULT_TEST_ORPHAN_TAG"
LEGACY_INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "raw-test-client", "version": "0"},
}


# -- the orphan check -------------------------------------------------------------------------


def tagged_processes(tag: str) -> list[int]:
    """Pids of live processes whose environment carries ``tag`` (ours only: others' are unreadable)."""
    found = []
    needle = f"{TAG}={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle in environ.read().split(b"\0"):
                    with open(f"/proc/{entry}/stat", "rb") as stat:
                        if stat.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                            found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.fixture(autouse=True)
def orphan_tag(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG, tag)
    yield tag
    deadline = time.monotonic() + 5
    while (left := tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:  # leave the machine clean, then fail
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


# -- helpers ------------------------------------------------------------------------------------


def proxy_params(profile_path: Path, events: Path, *server_args: str) -> StdioServerParameters:
    args = ["-m", "mcpfault", "proxy", "--config", str(profile_path), "--events", str(events)]
    return StdioServerParameters(
        command=sys.executable, args=[*args, "--", *PROCESS_SERVER, *server_args], cwd=str(ROOT), env=dict(os.environ)
    )


@asynccontextmanager
async def sdk_client(params: StdioServerParameters, mode: str, timeout_s: float = 10) -> AsyncIterator[Client]:
    with open(os.devnull, "w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=timeout_s) as client:
            yield client


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def raw_proxy(tmp_path: Path, text: str, *server_args: str, legacy: bool = True) -> ProxyProcess:
    """The proxy over raw pipes in front of the SDK server, its 2025-11-25 handshake done."""
    proxy = ProxyProcess(write_profile(tmp_path, text), tmp_path, server=[*PROCESS_SERVER, *server_args])
    if legacy:
        proxy.send(request(0, "initialize", LEGACY_INIT))
        assert "result" in proxy.read_json(timeout=20)
        proxy.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    return proxy


def tool_text(answer: dict[str, Any]) -> str:
    text: str = answer["result"]["content"][0]["text"]
    return text


# -- crash and restart ------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sdk_client_through_a_crash_with_restart_and_replay(tmp_path: Path, mode: str) -> None:
    events = tmp_path / "events.jsonl"
    text = """
[server]
restart = "on-crash"
restart_delay_s = 0.2

[[faults]]
name = "kill"
type = "crash"
tools = ["whoami"]
after = 1
limit = 1
"""
    with anyio.fail_after(60):
        async with sdk_client(proxy_params(write_profile(tmp_path, text), events), mode) as client:
            first = int(text_of(await client.call_tool("whoami", {})))
            await client.call_tool("spawn_child", {})  # a grandchild: it must die with the server's group
            with pytest.raises(MCPError, match="restarted") as raised:
                await client.call_tool("whoami", {})
            assert raised.value.error.data["mcpfault"]["generation"] == 1
            second = int(text_of(await client.call_tool("whoami", {})))
            assert text_of(await client.call_tool("echo", {"text": "still here"})) == "still here"
    assert first != second
    records = read_events(events)
    calls = [r for r in records if r.get("method") == "tools/call"]
    assert [(r["tool"], r["client_received"], r["server_generation"]) for r in calls] == [
        ("whoami", "response", 0),
        ("spawn_child", "response", 0),
        ("whoami", "server_restarted", 0),
        ("whoami", "response", 1),
        ("echo", "response", 1),
    ]
    assert calls[2]["fault_type"] == "crash" and calls[2]["upstream_contacted"] is False


def test_crash_without_restart_is_a_real_server_death(tmp_path: Path) -> None:
    proxy = raw_proxy(tmp_path, '[[faults]]\ntype = "crash"\ntools = ["echo"]\nafter = 1\n')
    try:
        proxy.send(call(1, "echo", text="one"))
        assert tool_text(proxy.read_json()) == "one"
        proxy.send(call(2, "echo", text="two"))
        answer = proxy.read_json()
        assert answer["id"] == 2 and answer["error"]["data"]["mcpfault"] == {
            "reason": "upstream_exited",
            "exit_code": 137,
        }
        assert proxy.read_until_eof(timeout=5) == b""
        assert proxy.wait() == 137
    finally:
        proxy.close()


def test_crash_after_lets_the_server_act_first(tmp_path: Path) -> None:
    proxy = raw_proxy(
        tmp_path,
        '[[faults]]\ntype = "crash"\nwhen = "after"\nafter_s = 0.5\ntools = ["spawn_child"]\nafter = 1\n',
    )
    try:
        proxy.send(call(1, "spawn_child"))
        child_pid = int(tool_text(proxy.read_json()))  # the first call: no fault
        proxy.send(call(2, "spawn_child"))
        answer = proxy.read_json()  # it acted (spawned a second child); its answer is lost with it
        assert answer["id"] == 2 and answer["error"]["data"]["mcpfault"]["reason"] == "upstream_exited"
        assert proxy.wait() == 137
        assert proxy.events()[-1]["fault_mode"] == "after"
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{child_pid}") and time.monotonic() < deadline:
            time.sleep(0.05)  # the grandchildren went with the server's process group (the fixture checks)
        assert not os.path.exists(f"/proc/{child_pid}")
    finally:
        proxy.close()


def test_crash_after_kills_at_the_answer_which_is_lost_and_the_write_stands(tmp_path: Path) -> None:
    """when = "after" over stdio: the server answers, the answer is held and the server killed at once
    (not after_s later), so a write has always happened and the client always learns of a restart:
    the same outcome on every run, whatever the load."""
    from mcpfault.mock.world import World

    journal = tmp_path / "journal.jsonl"
    mock = [sys.executable, "-m", "mcpfault.mock", "--seed", "7", "--journal", str(journal)]
    text = (
        '[server]\nrestart = "on-crash"\nrestart_delay_s = 0.1\n'
        '[[faults]]\ntype = "crash"\nsignal = "SIGTERM"\nwhen = "after"\nafter_s = 60\n'
        'tools = ["open_incident"]\nlimit = 1\n'
    )
    proxy = ProxyProcess(write_profile(tmp_path, text), tmp_path, server=mock)
    try:
        proxy.send(request(0, "initialize", LEGACY_INIT))
        assert "result" in proxy.read_json(timeout=20)
        proxy.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        device = World.generate(7).device_ids()[0]
        arguments = {"device_id": device, "summary": "lost answer", "severity": "low"}
        proxy.send(call(1, "open_incident", **arguments))
        answer = proxy.read_json(timeout=20)  # far sooner than after_s: the kill came with the answer
        assert answer["id"] == 1 and answer["error"]["data"]["mcpfault"]["reason"] == "server_restarted"
        assert [row["tool"] for row in read_jsonl(journal, strict=True)] == ["open_incident"]
        proxy.send(call(2, "open_incident", **arguments))  # the client's retry: a second incident
        assert "structuredContent" in proxy.read_json(timeout=20)["result"]
        assert len(journal.read_text().splitlines()) == 2
        [event] = [e for e in proxy.events() if e.get("fault_mode") == "after"]
        assert event["client_received"] == "server_restarted" and event["upstream_contacted"] is True
    finally:
        proxy.close()


def test_supervisor_restarts_a_server_that_exits_by_itself(tmp_path: Path) -> None:
    text = '[server]\nrestart = "on-crash"\nrestart_delay_s = 0.1\nmax_restarts = 1\n'
    proxy = raw_proxy(tmp_path, text, "--exit-after-s", "3")
    try:
        proxy.send(call(1, "whoami"))
        first = int(tool_text(proxy.read_json()))
        time.sleep(4.5)
        proxy.send(call(2, "whoami"))  # held until the restarted server has the replayed handshake
        second = int(tool_text(proxy.read_json(timeout=20)))
        assert first != second
        proxy.close_stdin()
        proxy.wait()
        assert "server: generation 1, crashes exited by itself (status 3) 1, restarts 1" in proxy.stderr()
    finally:
        proxy.close()


RESTARTING_SLOWLY = """
[server]
restart = "on-crash"
restart_delay_s = 1.0
hold_s = 10

[[faults]]
type = "crash"
tools = ["whoami"]
limit = 1
"""


def crash_it(proxy: ProxyProcess) -> None:
    """The first whoami kills the server: its request learns of the restart; what follows is held."""
    proxy.send(call(1, "whoami"))
    assert proxy.read_json()["error"]["data"]["mcpfault"]["reason"] == "server_restarted"


def test_requests_during_the_restart_are_held_then_answered(tmp_path: Path) -> None:
    proxy = raw_proxy(tmp_path, RESTARTING_SLOWLY)
    try:
        crash_it(proxy)
        proxy.send(call(2, "echo", text="held"))
        started = time.monotonic()
        assert tool_text(proxy.read_json(timeout=20)) == "held"
        assert time.monotonic() - started >= 0.5  # it waited for the restart
    finally:
        proxy.close()


def test_a_held_request_the_client_cancels_never_reaches_the_restarted_server(tmp_path: Path) -> None:
    proxy = raw_proxy(tmp_path, RESTARTING_SLOWLY)
    try:
        crash_it(proxy)
        proxy.send(call(2, "echo", text="given up on"))  # held: the server is down
        proxy.send(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}\n')
        proxy.send(call(3, "echo", text="still wanted"))
        answer = proxy.read_json(timeout=20)  # the server answers in order: 2 would come first
        assert answer["id"] == 3 and tool_text(answer) == "still wanted"
    finally:
        proxy.close()


def test_without_cancelled_drops_a_cancelled_request_and_its_cancellation_only() -> None:
    from mcpfault.proxy.stdio import without_cancelled

    cancel = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s}}\n'
    lines = [call(1, "echo", text="a"), call("two", "echo", text="b"), cancel % b'"two"', cancel % b"9", call(3, "x")]
    assert without_cancelled(lines) == [lines[0], lines[3], lines[4]]  # 9 was not held: its cancellation goes on
    assert without_cancelled(lines[:2]) == lines[:2]


def test_a_held_request_times_out_when_the_server_is_not_back(tmp_path: Path) -> None:
    text = """
[server]
restart = "on-crash"
restart_delay_s = 3.0
hold_s = 0.5

[[faults]]
type = "crash"
tools = ["whoami"]
limit = 1
"""
    proxy = raw_proxy(tmp_path, text)
    try:
        proxy.send(call(1, "whoami"))
        proxy.read_json()
        proxy.send(call(2, "echo", text="too late"))
        answer = proxy.read_json(timeout=5)
        assert answer["id"] == 2 and answer["error"]["data"]["mcpfault"]["reason"] == "server_down"
        assert proxy.events()[-1]["client_received"] == "timeout"
    finally:
        proxy.close()


def test_sigterm_to_the_proxy_during_a_restart_window(tmp_path: Path) -> None:
    text = """
[server]
restart = "on-crash"
restart_delay_s = 5.0

[[faults]]
type = "crash"
tools = ["whoami"]
"""
    proxy = raw_proxy(tmp_path, text)
    try:
        proxy.send(call(1, "whoami"))
        assert proxy.read_json()["error"]["data"]["mcpfault"]["reason"] == "server_restarted"
        proxy.signal(signal.SIGTERM)
        assert proxy.wait(timeout=10) == 137  # the dead server's status: it was never restarted
    finally:
        proxy.close()


# -- stall, starve, OOM ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_stall_makes_the_sdk_call_time_out_and_the_server_answers_afterwards(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    text = '[[faults]]\ntype = "stall"\nduration_s = 3\ntools = ["echo"]\nlimit = 1\n'
    with anyio.fail_after(60):
        async with sdk_client(proxy_params(write_profile(tmp_path, text), events), "auto", timeout_s=1) as client:
            with pytest.raises(MCPError):  # the client's 1 s timeout: the stalled server answers only after 3 s
                await client.call_tool("echo", {"text": "stalled"})
            await anyio.sleep(3)
            assert text_of(await client.call_tool("echo", {"text": "after"})) == "after"
    records = read_events(events)
    stalled = next(r for r in records if r["fault_type"] == "stall")
    assert stalled["client_received"] == "cancelled"  # the client gave up (and said so) while the server was stopped
    assert [r["client_received"] for r in records if r["tool"] == "echo"][-1] == "response"


def test_cpu_starve_slows_a_cpu_bound_tool_by_about_one_over_share(tmp_path: Path) -> None:
    text = '[[faults]]\ntype = "cpu_starve"\nshare = 0.25\nduration_s = 30\ntools = ["spin"]\nafter = 2\nlimit = 1\n'
    proxy = raw_proxy(tmp_path, text)
    iterations = 3_000_000
    try:
        baseline = []
        for request_id in (1, 2):
            proxy.send(call(request_id, "spin", iterations=iterations))
            baseline.append(float(tool_text(proxy.read_json(timeout=30))))
        proxy.send(call(3, "spin", iterations=iterations))
        starved = float(tool_text(proxy.read_json(timeout=60)))
    finally:
        proxy.close()
    factor = starved / min(baseline)
    assert 2.0 <= factor <= 8.0, (baseline, starved)  # expected 4, within 2x either way


def test_an_allocating_server_is_oom_killed(tmp_path: Path) -> None:
    proxy = raw_proxy(tmp_path, '[[faults]]\ntype = "oom_kill"\nrss_mb = 200\ntools = ["allocate"]\nlimit = 1\n')
    try:
        proxy.send(call(1, "allocate", mb=20))
        assert tool_text(proxy.read_json()) == "20"  # under the limit: the watch only started
        answers = []
        for request_id in range(2, 40):
            proxy.send(call(request_id, "allocate", mb=20))
            answer = proxy.read_json(timeout=10)
            answers.append(answer)
            if "error" in answer:
                break
        assert answers[-1]["error"]["data"]["mcpfault"]["exit_code"] == 137
        assert len(answers) < 15  # killed soon after passing 200 MiB (a Python server starts at ~40)
        assert proxy.wait() == 137
    finally:
        proxy.close()


def test_a_time_triggered_crash_fires_without_a_request(tmp_path: Path) -> None:
    proxy = raw_proxy(tmp_path, '[[faults]]\ntype = "crash"\nstart_after_s = 1.0\n', legacy=False)
    try:
        assert proxy.wait(timeout=20) == 137
    finally:
        proxy.close()


# -- bad input ------------------------------------------------------------------------------------


def test_bad_process_settings_are_named() -> None:
    with pytest.raises(ProfileError) as unknown:
        profile.loads('[[faults]]\ntype = "crash"\nsignal = "SIGFOO"\n')
    assert "signal" in str(unknown.value) and "SIGKILL" in str(unknown.value)
    for share in (0, 1.5, -0.1):
        with pytest.raises(ProfileError) as bad_share:
            profile.loads(f'[[faults]]\ntype = "cpu_starve"\nshare = {share}\n')
        assert "share" in str(bad_share.value) and "(0, 1]" in str(bad_share.value)
    with pytest.raises(ProfileError) as bad_restart:
        profile.loads('[server]\nrestart = "sometimes"\n')
    assert "server.restart" in str(bad_restart.value) and "on-crash" in str(bad_restart.value)


def test_a_process_rule_behind_a_remote_upstream_is_named_at_start(tmp_path: Path) -> None:
    import subprocess

    path = write_profile(tmp_path, '[[faults]]\nname = "kill-it"\ntype = "crash"\n')
    proc = subprocess.Popen(
        [
            sys.executable,
            *("-m", "mcpfault", "proxy", "-c", str(path)),
            *("--listen", "127.0.0.1:0"),
            "--upstream",
            "http://127.0.0.1:9/mcp",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        while "serving" not in line and line:
            if "kill-it" in line:
                break
            line = proc.stderr.readline()
        assert "kill-it" in line and "process" in line, line
    finally:
        proc.terminate()
        proc.wait(10)


# -- the harness client copes as a real client does -------------------------------------------------


@pytest.mark.anyio
async def test_harness_client_reinitializes_when_a_restarted_server_forgot_the_session(tmp_path: Path) -> None:
    from mcpfault.errors import ProtocolError
    from mcpfault.harness.client import StdioClient

    text = """
[server]
restart = "on-crash"
restart_delay_s = 0.1
replay_handshake = false

[[faults]]
type = "crash"
tools = ["list_sites"]
after = 1
limit = 1
"""
    path = write_profile(tmp_path, text)
    command = [sys.executable, "-m", "mcpfault", "proxy", "-c", str(path), "--no-summary"]
    command += ["--", sys.executable, "-m", "mcpfault", "mock-server"]
    with anyio.fail_after(60):
        async with StdioClient(command, deadline_s=10) as client:
            await client.connect()
            assert await client.call_tool("list_sites", {})
            with pytest.raises(ProtocolError, match="restarted"):
                await client.call_tool("list_sites", {})
            # No replay: the new server does not know the session; the client starts a new one...
            with pytest.raises(ProtocolError, match="-32602"):  # the mock's data: "... before initialize"
                await client.call_tool("list_sites", {})
            # ... and the call after that succeeds.
            assert await client.call_tool("list_sites", {})
    assert [a.method for a in client.attempts].count("initialize") == 2


# -- behind the stdio bridge (--listen ... -- CMD) -----------------------------------------------------


@pytest.mark.anyio
async def test_sdk_http_client_through_a_crash_and_restart_behind_the_bridge(tmp_path: Path) -> None:
    from tests.http_support import HttpProxyProcess

    text = """
[server]
restart = "on-crash"
restart_delay_s = 0.2

[[faults]]
type = "crash"
tools = ["whoami"]
after = 1
limit = 1
"""
    proxy = HttpProxyProcess(write_profile(tmp_path, text), "", tmp_path, "--", *PROCESS_SERVER)
    try:
        with anyio.fail_after(60):
            async with Client(proxy.url, mode="auto", read_timeout_seconds=20) as client:
                first = int(text_of(await client.call_tool("whoami", {})))
                with pytest.raises(MCPError, match="restarted"):
                    await client.call_tool("whoami", {})
                second = int(text_of(await client.call_tool("whoami", {})))
        assert first != second
        calls = [e for e in proxy.events() if e["method"] == "tools/call"]
        assert [e["client_received"] for e in calls] == ["response", "server_restarted", "response"]
        assert [e["server_generation"] for e in calls] == [0, 0, 1]
    finally:
        proxy.close()


@pytest.mark.anyio
async def test_without_restart_the_bridge_exits_with_the_killed_servers_status(tmp_path: Path) -> None:
    from tests.http_support import HttpProxyProcess

    text = '[[faults]]\ntype = "crash"\nwhen = "after"\nafter_s = 0.2\ntools = ["echo"]\n'
    proxy = HttpProxyProcess(write_profile(tmp_path, text), "", tmp_path, "--", *PROCESS_SERVER)
    try:
        with anyio.fail_after(60):
            async with Client(proxy.url, mode="auto", read_timeout_seconds=20) as client:
                assert text_of(await client.call_tool("echo", {"text": "acted"})) == "acted"
        assert proxy.proc.wait(20) == 137
    finally:
        proxy.close()


@pytest.mark.anyio
async def test_the_proxy_starts_waits_for_and_supervises_an_http_server(tmp_path: Path) -> None:
    from tests.http_support import HttpProxyProcess, free_port

    text = """
[server]
restart = "on-crash"
restart_delay_s = 0.2

[[faults]]
type = "crash"
tools = ["whoami"]
after = 1
limit = 1
"""
    port = free_port()
    upstream = f"http://127.0.0.1:{port}/mcp"
    proxy = HttpProxyProcess(
        write_profile(tmp_path, text), upstream, tmp_path, "--", *PROCESS_SERVER, "--http", str(port)
    )
    try:
        with anyio.fail_after(90):
            async with Client(proxy.url, mode="auto", read_timeout_seconds=30) as client:
                first = int(text_of(await client.call_tool("whoami", {})))
                with pytest.raises(MCPError, match="restarted"):
                    await client.call_tool("whoami", {})
                second = int(text_of(await client.call_tool("whoami", {})))
        assert first != second
        calls = [e for e in proxy.events() if e["method"] == "tools/call"]
        assert [e["client_received"] for e in calls] == ["response", "server_restarted", "response"]
    finally:
        proxy.close()


SPIN_LONG = 60_000_000  # a few seconds of pure CPU: the request is in flight when the kill lands


# The server is killed while it spins: the request is in flight.
KILLED_WHILE_SPINNING = '[[faults]]\ntype = "crash"\nwhen = "after"\nafter_s = 0.3\ntools = ["spin"]\nlimit = 1\n'


def started_http_server(tmp_path: Path, server_table: str) -> HttpProxyProcess:
    """``--listen --upstream URL -- CMD``: the proxy starts the SDK server on Streamable HTTP itself,
    with the ``[server]`` table given and the ``KILLED_WHILE_SPINNING`` rule."""
    text = f"{server_table}\n{KILLED_WHILE_SPINNING}"
    port = free_port()
    upstream = f"http://127.0.0.1:{port}/mcp"
    return HttpProxyProcess(
        write_profile(tmp_path, text), upstream, tmp_path, "--", *PROCESS_SERVER, "--http", str(port)
    )


@pytest.mark.anyio
async def test_a_request_in_flight_when_a_started_http_server_dies_gets_the_restarted_error(tmp_path: Path) -> None:
    # hold_s: the SDK server's start takes seconds on a loaded machine.
    proxy = started_http_server(tmp_path, '[server]\nrestart = "on-crash"\nrestart_delay_s = 0.2\nhold_s = 60\n')
    try:
        with anyio.fail_after(90):
            async with Client(proxy.url, mode="auto", read_timeout_seconds=30) as client:
                first = int(text_of(await client.call_tool("whoami", {})))
                with pytest.raises(MCPError, match="restarted") as raised:  # told at the death, not a timeout
                    await client.call_tool("spin", {"iterations": SPIN_LONG})
                assert raised.value.error.data["mcpfault"] == {
                    "reason": "server_restarted",
                    "exit_code": 137,
                    "generation": 1,
                }
                second = int(text_of(await client.call_tool("whoami", {})))
        assert first != second
        calls = [e for e in proxy.events() if e["method"] == "tools/call"]
        assert [(e["tool"], e["client_received"]) for e in calls] == [
            ("whoami", "response"),
            ("spin", "server_restarted"),
            ("whoami", "response"),
        ]
        assert calls[1]["upstream_contacted"] is True  # the server had it: it may have acted
        lifecycle = [(r["event"], r.get("cause"), r.get("generation")) for r in read_server_events(proxy.events_file)]
        assert lifecycle == [
            ("server_exited", "crash", 0),
            ("server_restarted", "crash", 1),
            ("server_back", "crash", None),
        ]
    finally:
        proxy.close()


@pytest.mark.anyio
async def test_without_restart_a_started_http_servers_death_is_the_exit_error_then_its_status(tmp_path: Path) -> None:
    proxy = started_http_server(tmp_path, "")  # restart = "never"
    try:
        with anyio.fail_after(90):
            async with Client(proxy.url, mode="auto", read_timeout_seconds=30) as client:
                with pytest.raises(MCPError, match="exited") as raised:
                    await client.call_tool("spin", {"iterations": SPIN_LONG})
                assert raised.value.error.data["mcpfault"] == {"reason": "upstream_exited", "exit_code": 137}
                assert proxy.proc.wait(20) == 137  # the proxy ends with the server's status
        assert [e["client_received"] for e in proxy.events() if e["method"] == "tools/call"] == ["upstream_exited"]
    finally:
        proxy.close()


@pytest.mark.anyio
async def test_arrivals_while_a_started_http_server_is_down_are_held_then_time_out(tmp_path: Path) -> None:
    proxy = started_http_server(tmp_path, '[server]\nrestart = "on-crash"\nrestart_delay_s = 3.0\nhold_s = 0.5\n')
    try:
        with anyio.fail_after(90):
            async with Client(proxy.url, mode="auto", read_timeout_seconds=30) as client:
                with pytest.raises(MCPError, match="restarted"):
                    await client.call_tool("spin", {"iterations": SPIN_LONG})
                started = time.monotonic()
                with pytest.raises(MCPError, match=r"not back within 0\.5s") as raised:
                    await client.call_tool("echo", {"text": "too early"})
                assert time.monotonic() - started >= 0.4  # held for hold_s, then told
                assert raised.value.error.data["mcpfault"] == {"reason": "server_down", "hold_s": 0.5}
                while True:  # each try is held up to hold_s; the server is back after the delay and its start
                    try:
                        assert text_of(await client.call_tool("echo", {"text": "back"})) == "back"
                        break
                    except MCPError as exc:
                        assert exc.error.data["mcpfault"]["reason"] == "server_down"
        calls = [e for e in proxy.events() if e["method"] == "tools/call"]
        received = [e["client_received"] for e in calls]
        assert received[:2] == ["server_restarted", "timeout"] and received[-1] == "response"
        assert set(received[1:-1]) == {"timeout"} and calls[1]["upstream_contacted"] is False
        assert calls[-1]["server_generation"] == 1
    finally:
        proxy.close()


@pytest.mark.anyio
async def test_sigterm_during_a_started_http_servers_restart_window_ends_the_proxy_at_once(tmp_path: Path) -> None:
    proxy = started_http_server(tmp_path, '[server]\nrestart = "on-crash"\nrestart_delay_s = 10\n')
    try:
        with anyio.fail_after(60):
            async with Client(proxy.url, mode="auto", read_timeout_seconds=30) as client:
                with pytest.raises(MCPError, match="restarted"):
                    await client.call_tool("spin", {"iterations": SPIN_LONG})
        proxy.proc.send_signal(signal.SIGTERM)
        assert proxy.proc.wait(20) == 137  # the dead server's status: the delay was cut short, no restart
    finally:
        proxy.close()


# -- ending the proxy ---------------------------------------------------------------------------------


def test_sigterm_as_soon_as_the_control_url_is_printed_ends_the_stdio_proxy_cleanly(tmp_path: Path) -> None:
    """The line is printed once the proxy handles SIGTERM itself: the signal is forwarded to the server,
    whose status the proxy exits with, instead of killing the proxy (-15) and stranding the server."""
    import select
    import subprocess

    profile = write_profile(tmp_path, 'name = "plain"\n')
    for _ in range(3):
        command = [sys.executable, "-m", "mcpfault", "proxy", "-c", str(profile), "--control", "127.0.0.1:0"]
        proc = subprocess.Popen(
            [*command, "--no-summary", "--", *PROCESS_SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        try:
            assert proc.stderr is not None
            seen = b""
            deadline = time.monotonic() + 30
            while b"control API on" not in seen and time.monotonic() < deadline:
                if select.select([proc.stderr], [], [], 0.1)[0]:
                    seen += os.read(proc.stderr.fileno(), 65536)
            assert b"control API on" in seen, seen
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 143  # the SDK server's death by the forwarded SIGTERM, as a shell shows it
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def test_sigterm_to_the_bridge_is_forwarded_instead_of_waiting_for_a_slow_server(tmp_path: Path) -> None:
    """The SDK's stdio server takes seconds to notice its stdin's EOF; the signal that ends the proxy
    reaches it at once, so the proxy ends well within the 5 s grace it would otherwise wait."""
    proxy = HttpProxyProcess(write_profile(tmp_path, 'name = "plain"\n'), "", tmp_path, "--", *PROCESS_SERVER)
    try:
        proxy.proc.send_signal(signal.SIGTERM)
        assert proxy.proc.wait(20) == 143  # the forwarded signal's death, not the EOF the server notices late
    finally:
        proxy.close()


# -- pure: the engine's clock and the supervisor's hooks ----------------------------------------------


def test_a_time_triggered_process_rule_fires_once_when_due_and_never_on_a_call() -> None:
    from mcpfault.faults.base import Call
    from mcpfault.faults.engine import Engine

    loaded = profile.loads(
        '[[faults]]\ntype = "stall"\nstart_after_s = 2.0\n[[faults]]\ntype = "error"\nstart_after_s = 1\n'
    )
    engine = Engine(loaded)
    call_body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": {}}}
    assert not engine.decide(Call.from_body(call_body), elapsed_s=0.5).applied  # the error rule is not in force yet
    assert [a.type_name for a in engine.decide(Call.from_body(call_body), elapsed_s=1.5).applied] == ["error"]
    assert engine.next_due_s() == 2.0
    assert engine.due(1.9) == []
    fired = engine.due(2.1)
    assert [a.type_name for d in fired for a in d.applied] == ["stall"] and fired[0].process is not None
    assert engine.due(5.0) == [] and engine.next_due_s() is None


@pytest.mark.anyio
async def test_start_hooks_see_every_generation_and_no_process_outlives_the_supervisor() -> None:
    from mcpfault.faults.profile import ServerSettings
    from mcpfault.proxy.process.supervisor import Supervisor

    supervisor = Supervisor([sys.executable, "-c", "import time; time.sleep(30)"], ServerSettings(restart="always"))
    seen: list[tuple[int, int, int]] = []
    supervisor.start_hooks.append(lambda pid, pgid, generation: seen.append((pid, pgid, generation)))
    first = supervisor.start()
    assert supervisor.pid == first.pid and supervisor.generation == 0
    await supervisor.crash("SIGKILL")
    assert await first.wait() == -9
    assert supervisor.died(137, shutting_down=False) is True
    second = supervisor.start()
    assert supervisor.generation == 1 and supervisor.crashes == {"control": 1}
    assert seen == [(first.pid, first.pid, 0), (second.pid, second.pid, 1)]
    second.kill()
    assert supervisor.pid is None


def test_a_time_triggered_crash_behind_the_bridge_ends_it_with_the_servers_status(tmp_path: Path) -> None:
    from tests.http_support import HttpProxyProcess

    text = '[[faults]]\ntype = "crash"\nstart_after_s = 1.0\n'
    proxy = HttpProxyProcess(write_profile(tmp_path, text), "", tmp_path, "--", *PROCESS_SERVER)
    try:
        assert proxy.proc.wait(30) == 137
    finally:
        proxy.close()
