"""``direction = "server_to_client"`` rules: faults on the client's answer to a server's request
(sampling/createMessage here), end to end with the SDK's client and server (2025-11-25, stdio)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcpfault.errors import ProfileError
from mcpfault.faults import profile
from mcpfault.faults.engine import Engine
from mcpfault.proxy.core import ProxyCore
from mcpfault.proxy.events import MemoryEventSink, read_events
from tests.conftest import write_profile
from tests.http_support import http_proxy, sdk_server
from tests.sdk_support import SamplingModel
from tests.test_interop import SDK_SERVER, connect, proxied


@pytest.mark.parametrize(
    ("rule", "field", "says"),
    [
        ('type = "timeout"\ndirection = "server_to_client"', "methods", "names the server requests"),
        ('type = "timeout"\ndirection = "server_to_client"\nmethods = ["tools/call"]', "methods", "a client request"),
        ('type = "timeout"\nmethods = ["sampling/createMessage"]', "methods", "set direction"),
        ('type = "stale"\ndirection = "server_to_client"\nmethods = ["roots/list"]', "methods", "cannot act on"),
        ('type = "error"\ndirection = "sideways"', "direction", "server_to_client"),
    ],
)
def test_validate_names_a_rule_of_the_wrong_direction(rule: str, field: str, says: str) -> None:
    with pytest.raises(ProfileError) as caught:
        profile.loads(f"[[faults]]\n{rule}\n")
    found = [f"{p.field}: {p.message}" for p in caught.value.problems]
    assert any(p.startswith(f"{field}:") and says in p for p in found), found


RULE = """
name = "s2c"

[[faults]]
name = "answer-fault"
direction = "server_to_client"
methods = ["sampling/createMessage"]
{settings}
"""


async def _ask(tmp_path: Path, settings: str) -> tuple[str, float, SamplingModel, list[dict[str, object]]]:
    events = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, RULE.replace("{settings}", settings)), events, [*SDK_SERVER])
    model = SamplingModel()
    with anyio.fail_after(30):
        async with connect(params, "legacy", tmp_path / "stderr.txt", sampling_callback=model) as client:
            started = time.monotonic()
            result = await client.call_tool("ask_model", {"question": "ping?"})
            took = time.monotonic() - started
    text = result.content[0].text  # type: ignore[union-attr]
    return text, took, model, [e for e in read_events(events) if e["method"] == "sampling/createMessage"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_dropped_sampling_answer_looks_to_the_server_like_a_lost_client(tmp_path: Path) -> None:
    text, took, model, events = await _ask(tmp_path, 'type = "timeout"')
    assert len(model.requests) == 1  # the client's model did answer...
    assert text == "no answer from the client's model within 2 s" and took >= 2  # ...the server never heard it
    assert [(e["rule"], e["fault_mode"], e["client_received"]) for e in events] == [("answer-fault", "drop", "nothing")]


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_error_replaces_the_clients_answer(tmp_path: Path) -> None:
    text, _, model, events = await _ask(tmp_path, 'type = "error"\nmessage = "model overloaded"')
    assert len(model.requests) == 1
    assert text == "the client refused: model overloaded"
    assert [(e["fault_mode"], e["client_received"]) for e in events] == [("protocol", "error")]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_late_answer_still_arrives(tmp_path: Path) -> None:
    text, took, _, events = await _ask(tmp_path, 'type = "latency"\ndelay_s = 0.5')
    assert text == f"the model said: {SamplingModel.ANSWER}" and took >= 0.5
    assert [(e["fault_mode"], e["client_received"], e["delay_s"]) for e in events] == [("delay", "response", 0.5)]


# -- 2026-07-28: input_required results, answered by a retry carrying inputResponses ------------------


def _mrtr_core(rule: str) -> tuple[ProxyCore, MemoryEventSink]:
    sink = MemoryEventSink()
    text = f'[[faults]]\nname = "r"\ndirection = "server_to_client"\nmethods = ["sampling/createMessage"]\n{rule}\n'
    return ProxyCore(Engine(profile.loads(text)), events=sink), sink


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode() + b"\n"


ASKED = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
ANSWER = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}


def _round_trip(core: ProxyCore) -> list[Any]:
    """tools/call, the server's input_required result, the client's retry: what leaves for the server."""
    core.from_client(_line({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}))
    result = {"resultType": "input_required", "inputRequests": {"s1": ASKED}}
    core.from_server(_line({"jsonrpc": "2.0", "id": 1, "result": result}))
    retry = {"name": "t", "inputResponses": {"s1": ANSWER}}
    return core.from_client(_line({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": retry}))


def test_an_input_response_lost_replaced_or_held_on_its_way_to_the_server() -> None:
    core, sink = _mrtr_core('type = "timeout"')
    (emit,) = _round_trip(core)
    assert json.loads(emit.data)["params"]["inputResponses"] == {}  # the server gets the retry without it
    assert [(e["method"], e["request_id"], e["client_received"]) for e in sink.records[-1:]] == [
        ("sampling/createMessage", "s1", "nothing")
    ]
    core, _ = _mrtr_core('type = "error"\nmessage = "no model"')
    (emit,) = _round_trip(core)
    assert json.loads(emit.data)["params"]["inputResponses"]["s1"] == {"code": -32603, "message": "no model"}
    core, _ = _mrtr_core('type = "latency"\ndelay_s = 0.25')
    (emit,) = _round_trip(core)
    assert emit.delay_s == 0.25 and json.loads(emit.data)["params"]["inputResponses"]["s1"] == ANSWER


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_lost_input_response_makes_a_2026_server_ask_again(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    settings = 'type = "timeout"\nlimit = 1'
    params = proxied(write_profile(tmp_path, RULE.replace("{settings}", settings)), events, [*SDK_SERVER])
    model = SamplingModel()
    with anyio.fail_after(30):
        async with connect(params, "auto", tmp_path / "stderr.txt", sampling_callback=model) as client:
            assert client.protocol_version == "2026-07-28"
            result = await client.call_tool("ask_model_resolved", {"question": "ping?"})
    assert result.content[0].text == f"the model said: {SamplingModel.ANSWER}"  # type: ignore[union-attr]
    assert len(model.requests) == 2  # the first answer never reached the server: it asked again
    lost = [e for e in read_events(events) if e["method"] == "sampling/createMessage"]
    assert [(e["rule"], e["client_received"]) for e in lost] == [("answer-fault", "nothing")]


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("settings", "answer"), [('type = "timeout"', "no answer"), ('type = "latency"\ndelay_s = 0.4', "said")]
)
async def test_the_clients_answer_over_http_lost_or_held(tmp_path: Path, settings: str, answer: str) -> None:
    profile_path = write_profile(tmp_path, RULE.replace("{settings}", settings))
    model = SamplingModel()
    with sdk_server(tmp_path) as server, http_proxy(profile_path, server.url, tmp_path) as proxy:
        with anyio.fail_after(30):
            async with Client(proxy.url, mode="legacy", read_timeout_seconds=10, sampling_callback=model) as client:
                started = time.monotonic()
                result = await client.call_tool("ask_model", {"question": "ping?"})
                took = time.monotonic() - started
        events = [e for e in proxy.events() if e["method"] == "sampling/createMessage"]
    assert answer in result.content[0].text  # type: ignore[union-attr]
    assert len(model.requests) == 1 and took >= 0.4
    assert [e["rule"] for e in events] == ["answer-fault"]
