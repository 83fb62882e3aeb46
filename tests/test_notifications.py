"""The notification fault: progress lost, doubled or reordered (the SDK client copes), cancellations
lost, list changes that did not happen; in the sans-IO core and end to end over stdio."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcpfault.errors import ProfileError
from mcpfault.faults import profile
from mcpfault.faults.engine import Engine
from mcpfault.proxy.core import ProxyCore, To
from mcpfault.proxy.events import MemoryEventSink, read_events
from tests.conftest import call, write_profile
from tests.http_support import http_proxy, sdk_server
from tests.sdk_support import Progress
from tests.test_interop import SDK_SERVER, connect, proxied


def _core(text: str) -> tuple[ProxyCore, MemoryEventSink]:
    sink = MemoryEventSink()
    return ProxyCore(Engine(profile.loads(text)), events=sink), sink


def _progress(value: int) -> bytes:
    body = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": value}}
    return json.dumps(body).encode() + b"\n"


def test_progress_duplicated_then_dropped_in_the_core() -> None:
    core, sink = _core(
        """
[[faults]]
name = "twice"
type = "notification"
mode = "duplicate"
methods = ["notifications/progress"]
limit = 1

[[faults]]
name = "lost"
type = "notification"
methods = ["notifications/progress"]
after = 1
limit = 1
"""
    )
    first, second, third = (core.from_server(_progress(n)) for n in (1, 2, 3))
    assert [(e.to, e.data) for e in first] == [(To.CLIENT, _progress(1))] * 2
    assert second == []
    assert [e.data for e in third] == [_progress(3)]
    assert [(e["rule"], e["fault_mode"], e["client_received"]) for e in sink.records] == [
        ("twice", "duplicate", "notification"),
        ("lost", "drop", "nothing"),
    ]


def test_a_lost_cancellation_never_reaches_the_server() -> None:
    core, _ = _core('[[faults]]\ntype = "notification"\nmethods = ["notifications/cancelled"]\n')
    core.from_client(call(7, "slow"))
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
    assert core.from_client(json.dumps(cancel).encode() + b"\n") == []


def test_a_false_list_change_follows_a_request() -> None:
    core, _ = _core(
        '[[faults]]\ntype = "notification"\nmode = "false"\nannounce = "notifications/prompts/list_changed"\n'
    )
    emits = core.from_client(call(1, "echo", text="x"))
    notes = [json.loads(e.data) for e in emits if e.to is To.CLIENT]
    assert notes == [{"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}]
    assert [e.to for e in emits if e.to is To.SERVER] == [To.SERVER]  # the request itself goes on


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ('mode = "duplicate"\nmethods = ["notifications/cancelled"]', "cannot act on notifications/cancelled"),
        ('mode = "false"\nmethods = ["notifications/progress"]', "cannot act on notifications/progress"),
        ('methods = ["notifications/message"]', "is not a client_to_server request"),
    ],
)
def test_validate_names_a_mode_on_the_wrong_notification(rule: str, says: str) -> None:
    with pytest.raises(ProfileError) as caught:
        profile.loads(f'[[faults]]\ntype = "notification"\n{rule}\n')
    assert any(says in p.message for p in caught.value.problems), caught.value.problems


PROGRESS_RULE = """
[[faults]]
name = "progress-fault"
type = "notification"
methods = ["notifications/progress"]
{settings}
"""


async def _countdown(tmp_path: Path, settings: str) -> tuple[list[float], str, list[dict[str, object]]]:
    tmp_path.mkdir()
    events = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, PROGRESS_RULE.replace("{settings}", settings)), events, [*SDK_SERVER])
    progress = Progress()
    with anyio.fail_after(30):
        async with connect(params, "legacy", tmp_path / "stderr.txt") as client:
            result = await client.call_tool("countdown", {"steps": 4}, progress_callback=progress)
    text = result.content[0].text  # type: ignore[union-attr]
    return progress.values(), text, [e for e in read_events(events) if e["method"] == "notifications/progress"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_sdk_client_copes_with_lost_doubled_and_reordered_progress(tmp_path: Path) -> None:
    lost, text, events = await _countdown(tmp_path / "lost", 'mode = "drop"\nafter = 1\nlimit = 1')
    assert lost == [1, 3, 4] and text == "done after 4 steps"
    assert [e["fault_mode"] for e in events] == ["drop"]
    doubled, text, _ = await _countdown(tmp_path / "doubled", 'mode = "duplicate"\nlimit = 1')
    assert doubled == [1, 1, 2, 3, 4] and text == "done after 4 steps"  # the client takes both: no dedup
    late, text, _ = await _countdown(tmp_path / "reordered", 'mode = "reorder"\ndelay_s = 0.5\nlimit = 1')
    assert sorted(late) == [1, 2, 3, 4] and late[0] != 1 and text == "done after 4 steps"


@pytest.mark.slow
@pytest.mark.anyio
async def test_progress_lost_and_doubled_in_a_streamable_http_response(tmp_path: Path) -> None:
    for settings, expected in (
        ('mode = "drop"\nafter = 1\nlimit = 1', [1, 3, 4]),
        ('mode = "duplicate"\nlimit = 1', [1, 1, 2, 3, 4]),
    ):
        directory = tmp_path / str(len(expected))
        directory.mkdir()
        profile_path = write_profile(directory, PROGRESS_RULE.replace("{settings}", settings))
        with sdk_server(directory) as server, http_proxy(profile_path, server.url, directory) as proxy:
            progress = Progress()
            with anyio.fail_after(30):
                async with Client(proxy.url, mode="legacy", read_timeout_seconds=10) as client:
                    result = await client.call_tool("countdown", {"steps": 4}, progress_callback=progress)
            faulted = [e["fault_mode"] for e in proxy.events() if e["method"] == "notifications/progress"]
        assert progress.values() == expected and result.content[0].text == "done after 4 steps"  # type: ignore[union-attr]
        assert faulted == [settings.split('"')[1]]
