"""Faults on every request kind: rules with ``methods`` and per-kind globs, checked in the engine and
end to end with the official SDK client (both eras, stdio and Streamable HTTP) and server-everything."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, stdio_client

from mcpfault.errors import ProfileError
from mcpfault.faults import profile
from mcpfault.faults.base import Call
from mcpfault.faults.catalog import CATALOG
from mcpfault.faults.engine import Engine
from mcpfault.protocol import jsonrpc
from mcpfault.proxy.events import read_events
from tests.conftest import write_profile
from tests.http_support import http_proxy, sdk_server
from tests.test_interop import EVERYTHING, REQUEST_TIMEOUT, SDK_SERVER, connect, needs_npm, proxied


def body(request_id: int, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def decide(engine: Engine, request_id: int, method: str, **params: Any) -> Any:
    return engine.decide(Call.from_body(body(request_id, method, **params)))


def problems(text: str) -> list[str]:
    with pytest.raises(ProfileError) as caught:
        profile.loads(text)
    return [f"{p.field}: {p.message}" for p in caught.value.problems]


# -- the profile: methods, globs per kind, impossible combinations ---------------------------------------


def test_a_rule_acts_on_tools_call_unless_it_names_other_methods() -> None:
    loaded = profile.loads('[[faults]]\ntype = "error"\n')
    assert loaded.rules[0].methods == {"tools/call"}
    engine = Engine(loaded)
    assert decide(engine, 1, "resources/read", uri="config://devices/a").reply is None
    assert decide(engine, 2, "prompts/get", name="summarize").reply is None
    assert decide(engine, 3, "tools/call", name="echo", arguments={}).reply is not None


def test_globs_per_kind_pick_resources_prompts_and_completions() -> None:
    loaded = profile.loads(
        """
[[faults]]
type = "error"
methods = ["resources/read", "prompts/get", "completion/complete", "prompts/list"]
resources = ["config://devices/*"]
prompts = ["summ*"]
"""
    )
    engine = Engine(loaded)
    assert decide(engine, 1, "resources/read", uri="config://devices/a").reply is not None
    assert decide(engine, 2, "resources/read", uri="status://fleet").reply is None
    assert decide(engine, 3, "prompts/get", name="summarize").reply is not None
    assert decide(engine, 4, "prompts/get", name="other").reply is None
    assert decide(engine, 5, "completion/complete", ref={"type": "ref/prompt", "name": "summarize"}).reply
    assert decide(engine, 6, "completion/complete", ref={"type": "ref/resource", "uri": "status://x"}).reply is None
    assert decide(engine, 7, "prompts/list").reply is not None  # a listing names nothing: globs do not apply
    assert decide(engine, 8, "tools/call", name="summarize", arguments={}).reply is None


@pytest.mark.parametrize(
    ("rule", "field", "says"),
    [
        ('type = "error"\nmode = "tool"\nmethods = ["resources/read"]', "methods", "cannot act on resources/read"),
        ('type = "error"\nmethods = ["resources/red"]', "methods", "did you mean 'resources/read'"),
        ('type = "error"\nresources = ["config://*"]', "resources", "add one to methods"),
        ('type = "error"\nmethods = ["resources/read"]\nprompts = ["x"]', "prompts", "has none of them"),
        ('type = "error"\nmethods = ["prompts/get"]\nread_only = true', "read_only", "has no tools/call"),
        ('type = "schema_drift"\nrename_args = { a = "b" }\nmethods = ["resources/read"]', "methods", "prompts/get"),
        ('type = "schema_drift"\nrename_fields = { a = "b" }\nmethods = ["prompts/get"]', "methods", "resources/read"),
        ('type = "crash"\nmethods = ["resources/read"]', "methods", "it takes: tools/call"),
        ('type = "error"\nmethods = []', "methods", "non-empty list"),
    ],
)
def test_validate_names_an_impossible_combination(rule: str, field: str, says: str) -> None:
    found = problems(f"[[faults]]\n{rule}\n")
    assert any(p.startswith(f"{field}:") and says in p for p in found), found


def test_the_read_faults_take_every_read_and_drift_takes_prompts_and_resources() -> None:
    reads = {"resources/read", "resources/list", "resources/templates/list", "prompts/get", "prompts/list"}
    reads |= {"completion/complete", "tools/list"}
    for name in ("timeout", "latency", "error", "malformed", "stale"):
        fault_type = CATALOG.get(name)
        assert fault_type is not None and reads | {"tools/call"} <= fault_type.targets, name
    drift = CATALOG.get("schema_drift")
    assert drift is not None and {"tools/call", "prompts/get", "resources/read"} == drift.targets


def test_validate_and_faults_commands_show_methods(tmp_path: Path) -> None:
    from mcpfault.cli import main

    bad = write_profile(tmp_path, '[[faults]]\ntype = "error"\nmode = "tool"\nmethods = ["prompts/get"]\n')
    assert main(["validate", str(bad)]) != 0
    good = write_profile(tmp_path, '[[faults]]\ntype = "stale"\nmethods = ["resources/read"]\n', "good.toml")
    assert main(["validate", str(good)]) == 0


def test_faults_command_lists_the_methods_each_type_takes(capsys: pytest.CaptureFixture[str]) -> None:
    from mcpfault.cli import main

    assert main(["faults"]) == 0
    out = capsys.readouterr().out
    stale = out.split("\nstale")[1].split("\n")[1]
    assert stale.strip().startswith("methods: tools/call, completion/complete") and "resources/read" in stale
    assert "methods: tools/call, prompts/get, resources/read (and follows prompts/list, tools/list)" in out


# -- the engine on reads: stale, drift, malformed -------------------------------------------------------------


def _answer(request_id: int, result: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    message = {"jsonrpc": "2.0", "id": request_id, "result": result}
    return jsonrpc.encode(message), message


def test_stale_replays_an_earlier_read_of_the_same_uri_only() -> None:
    engine = Engine(profile.loads('[[faults]]\ntype = "stale"\nmethods = ["resources/read"]\nafter = 1\n'))
    first = Call.from_body(body(1, "resources/read", uri="config://devices/a"))
    assert engine.decide(first).reply is None  # nothing cached yet: through
    data, message = _answer(1, {"contents": [{"uri": "config://devices/a", "text": '{"revision": 1}'}]})
    engine.observe_response(first, data, message)
    other = Call.from_body(body(2, "resources/read", uri="config://devices/b"))
    assert engine.decide(other).reply is None  # another URI: nothing cached for it
    again = engine.decide(Call.from_body(body(3, "resources/read", uri="config://devices/a")))
    assert again.reply is not None and again.reply["id"] == 3
    assert again.reply["result"]["contents"][0]["text"] == '{"revision": 1}'


def test_drift_renames_prompt_arguments_and_resource_fields() -> None:
    engine = Engine(
        profile.loads(
            """
[[faults]]
type = "schema_drift"
methods = ["prompts/get", "resources/read"]
rename_args = { device = "device_name" }
rename_fields = { ntp_server = "ntpServer" }
"""
        )
    )
    listing = Call.from_body(body(1, "prompts/list"))
    listed = {"prompts": [{"name": "summarize", "arguments": [{"name": "device", "required": True}]}]}
    data, message = _answer(1, listed)
    engine.observe_response(listing, data, message)
    old = decide(engine, 2, "prompts/get", name="summarize", arguments={"device": "r1"})
    assert old.reply is not None and old.reply["error"]["code"] == jsonrpc.INVALID_PARAMS
    assert "device_name" in old.reply["error"]["message"]
    new = decide(engine, 3, "prompts/get", name="summarize", arguments={"device_name": "r1"})
    assert new.reply is None and new.upstream_request["params"]["arguments"] == {"device": "r1"}
    rewritten = decide(engine, 4, "prompts/list").deliver(data)
    assert rewritten.data is not None and b'"device_name"' in rewritten.data
    read = decide(engine, 5, "resources/read", uri="config://devices/a")
    text = json.dumps({"device": "a", "ntp_server": "10.0.0.1"})
    served, _ = _answer(5, {"contents": [{"uri": "config://devices/a", "text": text}]})
    delivered = read.deliver(served).data
    assert delivered is not None
    content = json.loads(json.loads(delivered)["result"]["contents"][0]["text"])
    assert content == {"device": "a", "ntpServer": "10.0.0.1"}


def test_malformed_wrong_type_breaks_a_read_result() -> None:
    engine = Engine(
        profile.loads('[[faults]]\ntype = "malformed"\nmodes = ["wrong_type"]\nmethods = ["resources/read"]')
    )
    decision = decide(engine, 1, "resources/read", uri="status://fleet")
    served, _ = _answer(1, {"contents": [{"uri": "status://fleet", "text": "up"}]})
    delivered = decision.deliver(served).data
    assert delivered is not None and isinstance(json.loads(delivered)["result"]["contents"], str)


# -- end to end: the official SDK client, both eras, stdio and Streamable HTTP ---------------------------------------

READS_PROFILE = """
name = "reads"
seed = 7

[[faults]]
name = "fleet-down"
type = "error"
methods = ["resources/read"]
resources = ["status://*"]
code = -32002
message = "Resource unavailable"

[[faults]]
name = "old-config"
type = "stale"
methods = ["resources/read"]
resources = ["config://devices/*"]
after = 1

[[faults]]
name = "renamed-prompt"
type = "schema_drift"
methods = ["prompts/get"]
rename_args = { device = "device_name" }

[[faults]]
name = "slow-listing"
type = "latency"
methods = ["prompts/list"]
delay_s = 0.3
"""


async def _read_through_faults(client: Client) -> dict[str, Any]:
    """Every fault of READS_PROFILE seen by the client; what it saw."""
    seen: dict[str, Any] = {}
    with pytest.raises(MCPError) as caught:
        await client.read_resource("status://fleet")
    seen["fleet_error"] = caught.value.error.code
    first = await client.read_resource("config://devices/r1")
    second = await client.read_resource("config://devices/r1")
    seen["revisions"] = [json.loads(r.contents[0].text)["revision"] for r in (first, second)]  # type: ignore[union-attr]
    with pytest.raises(MCPError) as caught:
        await client.get_prompt("summarize", {"device": "r1"})
    seen["old_argument_error"] = caught.value.error.code
    started = anyio.current_time()
    listed = await client.list_prompts()
    seen["listing_delay_s"] = anyio.current_time() - started
    seen["arguments"] = [a.name for a in listed.prompts[0].arguments or []]
    prompt = await client.get_prompt("summarize", {"device_name": "r1"})
    seen["prompt_text"] = prompt.messages[0].content.text  # type: ignore[union-attr]
    return seen


def _check(seen: dict[str, Any], events: list[dict[str, Any]]) -> None:
    assert seen["fleet_error"] == -32002
    assert seen["revisions"] == [1, 1]  # the second read replays the first: the server is at revision 2
    assert seen["old_argument_error"] == jsonrpc.INVALID_PARAMS
    assert seen["listing_delay_s"] >= 0.3
    assert seen["arguments"] == ["device_name", "severity"]
    assert seen["prompt_text"] == "Summarize the minor incident on r1."
    fired = [
        (e["method"], rule, e["upstream_contacted"])
        for e in events
        for rule in ([f["rule"] for f in e["faults"]] if "faults" in e else [e["rule"]])
        if rule
    ]
    assert ("resources/read", "fleet-down", False) in fired
    assert ("resources/read", "old-config", False) in fired  # stale answers without the server
    assert ("prompts/get", "renamed-prompt", False) in fired  # rejected as the redeployed server would
    assert ("prompts/get", "renamed-prompt", True) in fired  # translated back and forwarded
    assert ("prompts/list", "slow-listing", True) in fired


pytestmark_slow = pytest.mark.slow


@pytestmark_slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sdk_client_reads_resources_and_gets_prompts_through_faults_over_stdio(tmp_path: Path, mode: str) -> None:
    events = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, READS_PROFILE), events, [*SDK_SERVER])
    with anyio.fail_after(30):
        async with connect(params, mode, tmp_path / "stderr.txt") as client:
            seen = await _read_through_faults(client)
    _check(seen, read_events(events))


@asynccontextmanager
async def _http_client(url: str, mode: str) -> AsyncIterator[Client]:
    async with Client(url, mode=mode, read_timeout_seconds=10) as client:
        yield client


@pytestmark_slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sdk_client_reads_resources_and_gets_prompts_through_faults_over_http(tmp_path: Path, mode: str) -> None:
    profile_path = write_profile(tmp_path, READS_PROFILE)
    with sdk_server(tmp_path) as server, http_proxy(profile_path, server.url, tmp_path) as proxy:
        with anyio.fail_after(30):
            async with _http_client(proxy.url, mode) as client:
                seen = await _read_through_faults(client)
        _check(seen, proxy.events())


EVERYTHING_READS = """
name = "everything-reads"

[[faults]]
name = "lost-read"
type = "timeout"
methods = ["resources/read"]
resources = ["demo://resource/static/document/arch*"]

[[faults]]
name = "broken-prompt"
type = "error"
methods = ["prompts/get"]
prompts = ["simple-prompt"]
message = "prompt store offline"

[[faults]]
name = "renamed-args"
type = "schema_drift"
methods = ["prompts/get"]
prompts = ["args-*"]
rename_args = { city = "town" }

[[faults]]
name = "garbled-templates"
type = "malformed"
modes = ["wrong_type"]
methods = ["resources/templates/list"]
"""


@pytestmark_slow
@needs_npm
@pytest.mark.anyio
async def test_server_everything_resources_and_prompts_through_faults(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, EVERYTHING_READS), events, EVERYTHING)
    with anyio.fail_after(60), open(tmp_path / "stderr.txt", "w") as errlog:
        # A short read timeout: the lost answer shows as the SDK's timeout, everything else is quick.
        async with Client(stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=3) as client:
            uris = [str(r.uri) for r in (await client.list_resources()).resources]
            static = next(u for u in uris if u.endswith("/architecture.md"))
            with pytest.raises(MCPError) as lost:
                await client.read_resource(static)  # the answer is lost: the client times out
            assert lost.value.error.code == REQUEST_TIMEOUT
            other = next(u for u in uris if u.endswith("/features.md"))
            assert (await client.read_resource(other)).contents  # another URI: untouched
            with pytest.raises(MCPError) as caught:
                await client.get_prompt("simple-prompt")
            assert "prompt store offline" in caught.value.error.message
            with pytest.raises(MCPError) as renamed:  # the drift starts here: the old name is refused
                await client.get_prompt("args-prompt", {"city": "Paris"})
            assert renamed.value.error.code == jsonrpc.INVALID_PARAMS
            listed = {p.name: [a.name for a in p.arguments or []] for p in (await client.list_prompts()).prompts}
            assert listed["args-prompt"] == ["town", "state"]  # the drift's listing
            prompt = await client.get_prompt("args-prompt", {"town": "Paris"})
            assert "Paris" in json.dumps(prompt.model_dump(mode="json"))  # translated back: the server got city
            with pytest.raises(Exception):  # noqa: B017 - the SDK's validation error, whatever its class
                await client.list_resource_templates()
    fired = {(e["method"], e["rule"]) for e in read_events(events) if e["rule"]}
    assert {("prompts/get", "broken-prompt"), ("resources/templates/list", "garbled-templates")} <= fired
    assert ("prompts/get", "renamed-args") in fired
    assert ("resources/read", "lost-read") in fired
