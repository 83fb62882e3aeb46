"""The mock server's resources (device configurations, incidents) and its prompt ``incident_summary``:
in process through a Session, line by line (notifications follow the answer), and with the SDK client."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters, stdio_client

from mcpfault.mock import World
from mcpfault.mock.resources import compliant, config_uri, device_config
from mcpfault.mock.session import Session
from mcpfault.protocol.jsonlines import parse_jsonl
from tests.test_mock_server import ENVELOPE, INITIALIZE, SEED, _ask, _error, _legacy, _result


def _line(session: Session, request_id: int, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """What the server writes for one request line: the answer, then any notifications."""
    request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    written = session.handle_line(json.dumps(request).encode() + b"\n")
    assert written is not None
    return parse_jsonl(written)


def _config(result: dict[str, Any]) -> dict[str, Any]:
    (content,) = result["contents"]
    assert content["mimeType"] == "application/json"
    parsed: dict[str, Any] = json.loads(content["text"])
    return parsed


def test_configs_are_listed_read_and_follow_the_maintenance_flag() -> None:
    session = _legacy()
    world = session.world
    device = world.device_ids()[0]
    listed = [r["uri"] for r in _result(_ask(session, "resources/list"))["resources"]]
    assert config_uri(device) in listed
    templates = _result(_ask(session, "resources/templates/list"))["resourceTemplates"]
    assert {t["uriTemplate"] for t in templates} == {
        "netops://devices/{device_id}/config",
        "netops://incidents/{incident_id}",
    }
    before = _config(_result(_ask(session, "resources/read", {"uri": config_uri(device)})))
    assert before["as_of"] == world.revision and before["admin_state"] == "in_service"
    _ask(
        session,
        "tools/call",
        {"name": "set_maintenance", "arguments": {"device_id": device, "enabled": True, "reason": "r"}},
    )
    after = _config(_result(_ask(session, "resources/read", {"uri": config_uri(device)})))
    assert after["as_of"] == before["as_of"] + 1
    assert (after["admin_state"], after["maintenance_reason"]) == ("maintenance", "r")
    missing = _error(_ask(session, "resources/read", {"uri": "netops://devices/nosuch/config"}))
    assert missing["code"] == -32602 and missing["data"] == {"uri": "netops://devices/nosuch/config"}


def test_configs_are_deterministic_and_some_are_not_compliant() -> None:
    world, again = World.generate(SEED), World.generate(SEED)
    configs = [device_config(world, d) for d in world.device_ids()]
    assert configs == [device_config(again, d) for d in again.device_ids()]
    verdicts = [compliant(c) for c in configs]
    assert any(verdicts) and not all(verdicts)


def test_subscribers_hear_of_updates_and_listers_of_a_changed_list() -> None:
    session = _legacy()
    device = session.world.device_ids()[0]
    (answer,) = _line(session, 2, "resources/subscribe", {"uri": config_uri(device)})
    assert answer["result"] == {}
    arguments = {"device_id": device, "enabled": True, "reason": "audit"}
    lines = _line(session, 3, "tools/call", {"name": "set_maintenance", "arguments": arguments})
    assert [m.get("method") for m in lines] == [None, "notifications/resources/updated"]
    assert lines[1]["params"] == {"uri": config_uri(device)}
    assert len(_line(session, 4, "tools/call", {"name": "set_maintenance", "arguments": arguments})) == 1  # no change
    incident = {"device_id": device, "summary": "s", "severity": "low"}
    assert len(_line(session, 5, "tools/call", {"name": "open_incident", "arguments": incident})) == 1  # not listed yet
    _line(session, 6, "resources/list", {})
    lines = _line(session, 7, "tools/call", {"name": "open_incident", "arguments": incident})
    assert [m.get("method") for m in lines] == [None, "notifications/resources/list_changed"]
    _line(session, 8, "resources/unsubscribe", {"uri": config_uri(device)})
    arguments["enabled"] = False
    assert len(_line(session, 9, "tools/call", {"name": "set_maintenance", "arguments": arguments})) == 1
    assert "error" in _line(session, 10, "resources/subscribe", {"uri": "netops://nothing"})[0]


def test_the_incident_summary_prompt() -> None:
    session = _legacy()
    device = session.world.device_ids()[1]
    (prompt,) = _result(_ask(session, "prompts/list"))["prompts"]
    assert prompt["name"] == "incident_summary"
    assert [(a["name"], a.get("required", False)) for a in prompt["arguments"]] == [
        ("device_id", True),
        ("incident_id", False),
    ]
    got = _result(_ask(session, "prompts/get", {"name": "incident_summary", "arguments": {"device_id": device}}))
    text = got["messages"][0]["content"]["text"]
    assert device in text and f"revision {session.world.revision}" in text
    assert _error(_ask(session, "prompts/get", {"name": "incident_summary", "arguments": {}}))["code"] == -32602
    assert _error(_ask(session, "prompts/get", {"name": "other"}))["code"] == -32602


def test_modern_reads_carry_the_cache_fields() -> None:
    session = Session(World.generate(SEED))
    device = session.world.device_ids()[0]
    result = _result(_ask(session, "resources/read", {"uri": config_uri(device), "_meta": dict(ENVELOPE)}))
    assert (result["resultType"], result["ttlMs"], result["cacheScope"]) == ("complete", 0, "private")
    assert INITIALIZE  # the legacy handshake is the other era's (tests/test_mock_server.py)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_client_reads_configs_and_gets_the_prompt(mode: str) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcpfault.mock", "--seed", str(SEED)])
    device = World.generate(SEED).device_ids()[0]
    with anyio.fail_after(30):
        async with Client(stdio_client(params), mode=mode, read_timeout_seconds=10) as client:
            uris = [str(r.uri) for r in (await client.list_resources()).resources]
            assert config_uri(device) in uris
            read = await client.read_resource(config_uri(device))
            assert json.loads(read.contents[0].text)["device_id"] == device  # type: ignore[union-attr]
            prompt = await client.get_prompt("incident_summary", {"device_id": device})
            assert device in prompt.messages[0].content.text  # type: ignore[union-attr]
            with pytest.raises(MCPError) as caught:
                await client.read_resource("netops://devices/nosuch/config")
            assert caught.value.error.code == -32602
