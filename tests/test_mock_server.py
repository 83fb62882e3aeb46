"""The mock MCP server: protocol rules in process, then the real subprocess driven by the SDK client in both eras."""

from __future__ import annotations

import inspect
import json
import pathlib
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from mcpfault.mock import World
from mcpfault.mock.session import CAPABILITIES, INSTRUCTIONS, Session
from mcpfault.protocol.jsonlines import parse_jsonl

SEED = 7
TIMEOUT = 30.0
READS = {"get_site", "list_sites", "list_devices", "get_device_status", "get_interface_metrics"}
WRITES = {"set_maintenance", "open_incident"}
ERAS = [("legacy", "2025-11-25"), ("auto", "2026-07-28")]
SERVER_INFO = {"name": "mcpfault-mock", "version": "0.1.0"}
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
}
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# ---- in process: a Session answers request objects ------------------------------------------------


def _ask(session: Session, method: str, params: dict[str, Any] | None = None, request_id: Any = 1) -> dict[str, Any]:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        request["params"] = params
    response = session.handle(request)
    assert response["jsonrpc"] == "2.0" and response["id"] == request_id
    return response


def _result(response: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in response, response
    result: dict[str, Any] = response["result"]
    return result


def _error(response: dict[str, Any]) -> dict[str, Any]:
    assert "result" not in response, response
    error: dict[str, Any] = response["error"]
    return error


def _legacy(world: World | None = None) -> Session:
    session = Session(world or World.generate(SEED))
    assert _result(_ask(session, "initialize", INITIALIZE))["protocolVersion"] == "2025-11-25"
    return session


def _modern_params(params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**(params or {}), "_meta": dict(ENVELOPE)}


def _call(session: Session, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    return _ask(session, "tools/call", {"name": name, "arguments": arguments or {}})


def test_initialize_answers_like_the_sdk_server() -> None:
    session = Session(World.generate(SEED))
    assert _result(_ask(session, "initialize", INITIALIZE)) == {
        "protocolVersion": "2025-11-25",
        "capabilities": CAPABILITIES,
        "serverInfo": SERVER_INFO,
        "instructions": INSTRUCTIONS,
    }


@pytest.mark.parametrize(
    ("proposed", "answered"),
    [
        ("2024-11-05", "2024-11-05"),
        ("2025-06-18", "2025-06-18"),
        ("1999-01-01", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),  # initialize does not exist at 2026 versions
    ],
)
def test_initialize_negotiates_the_version(proposed: str, answered: str) -> None:
    result = _result(_ask(Session(World.generate(SEED)), "initialize", {**INITIALIZE, "protocolVersion": proposed}))
    assert result["protocolVersion"] == answered


def test_legacy_session_rules() -> None:
    session = Session(World.generate(SEED))
    assert _result(_ask(session, "ping")) == {}  # allowed before initialize
    early = _error(_ask(session, "tools/list"))
    assert early["code"] == -32602 and "initialize" in early["data"]
    assert _error(_ask(session, "initialize", {"protocolVersion": "2025-11-25"}))["code"] == -32602
    assert _result(_ask(session, "initialize", INITIALIZE))["protocolVersion"] == "2025-11-25"
    assert len(_result(_ask(session, "tools/list"))["tools"]) == 7
    assert _error(_ask(session, "nosuch/method")) == {
        "code": -32601,
        "message": "Method not found",
        "data": "nosuch/method",
    }
    assert _error(_ask(session, "server/discover"))["code"] == -32601
    # A 2026 envelope on a 2025 connection is refused, as the SDK server does.
    assert _error(_ask(session, "tools/list", _modern_params()))["code"] == -32600
    assert [p["name"] for p in _result(_ask(session, "prompts/list"))["prompts"]] == ["incident_summary"]
    listed = _result(_ask(session, "resources/list"))["resources"]
    assert len(listed) == len(session.world.device_ids()) + len(session.world.incidents())


def test_server_discover() -> None:
    session = Session(World.generate(SEED))
    assert _result(_ask(session, "server/discover", _modern_params())) == {
        "supportedVersions": ["2026-07-28"],
        "capabilities": CAPABILITIES,
        "instructions": INSTRUCTIONS,
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
    }


def test_modern_results_are_complete_and_lists_carry_cache_hints() -> None:
    session = Session(World.generate(SEED))
    listing = _result(_ask(session, "tools/list", _modern_params()))  # no discover needed: stateless
    assert len(listing["tools"]) == 7
    assert (listing["resultType"], listing["ttlMs"], listing["cacheScope"]) == ("complete", 0, "private")
    assert listing["_meta"] == {"io.modelcontextprotocol/serverInfo": SERVER_INFO}
    called = _result(_ask(session, "tools/call", _modern_params({"name": "list_sites", "arguments": {}})))
    assert called["resultType"] == "complete" and called["isError"] is False
    assert "ttlMs" not in called
    failed = _result(_ask(session, "tools/call", _modern_params({"name": "get_site", "arguments": {"site_id": "x"}})))
    assert failed["resultType"] == "complete" and failed["isError"] is True


@pytest.mark.parametrize(
    ("method", "params", "code", "fragment"),
    [
        ("tools/list", {}, -32602, "params._meta must be an object"),
        ("tools/list", None, -32602, "params._meta must be an object"),
        ("ping", {}, -32602, "params._meta must be an object"),
        (
            "tools/list",
            {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
            -32602,
            "missing the required envelope key(s): io.modelcontextprotocol/clientCapabilities",
        ),
        (
            "tools/list",
            {"_meta": {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": 5}},
            -32602,
            "must be a string",
        ),
        ("ping", _modern_params(), -32601, "Method not found"),  # removed in 2026-07-28
        ("initialize", {**INITIALIZE, "_meta": ENVELOPE}, -32022, "initialize handshake is not accepted"),
    ],
)
def test_modern_request_rules(method: str, params: dict[str, Any] | None, code: int, fragment: str) -> None:
    session = Session(World.generate(SEED))
    _result(_ask(session, "server/discover", _modern_params()))
    error = _error(_ask(session, method, params, request_id="r"))
    assert error["code"] == code
    assert fragment in error["message"]


@pytest.mark.parametrize("version", ["2030-01-01", "2025-11-25"])
def test_unsupported_version_in_the_envelope(version: str) -> None:
    session = Session(World.generate(SEED))
    meta = {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": version}
    for method in ("server/discover", "tools/list"):
        error = _error(_ask(session, method, {"_meta": meta}))
        assert error == {
            "code": -32022,
            "message": "Unsupported protocol version",
            "data": {"supported": ["2026-07-28"], "requested": version},
        }


def _object_schemas(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            yield schema
        for value in schema.values():
            yield from _object_schemas(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _object_schemas(value)


def test_tool_listing() -> None:
    tools = {tool["name"]: tool for tool in _result(_ask(_legacy(), "tools/list"))["tools"]}
    assert list(tools) == [
        "list_sites",
        "get_site",
        "list_devices",
        "get_device_status",
        "get_interface_metrics",
        "set_maintenance",
        "open_incident",
    ]
    for name, tool in tools.items():
        assert set(tool) == {"name", "title", "description", "inputSchema", "outputSchema", "annotations"}
        assert tool["title"] and tool["description"]
        assert tool["annotations"] == {
            "readOnlyHint": name in READS,
            "idempotentHint": name != "open_incident",
            "destructiveHint": False,
            "openWorldHint": False,
        }
        for schema in (tool["inputSchema"], tool["outputSchema"]):
            jsonschema.Draft202012Validator.check_schema(schema)
            assert "$ref" not in json.dumps(schema)  # nested shapes are written out in place
        for obj in _object_schemas(tool["outputSchema"]):
            assert obj["additionalProperties"] is False
            assert obj["required"] == list(obj["properties"])  # every result field is always present
        assert tool["inputSchema"]["additionalProperties"] is False
        assert tool["outputSchema"]["properties"]["as_of"]["type"] == "integer"

    assert tools["list_sites"]["inputSchema"] == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    incident_input = tools["open_incident"]["inputSchema"]
    assert incident_input["required"] == ["device_id", "summary", "severity"]
    assert incident_input["properties"]["severity"]["enum"] == ["critical", "high", "medium", "low"]
    assert incident_input["properties"]["idempotency_key"]["type"] == ["string", "null"]
    assert tools["set_maintenance"]["inputSchema"]["properties"]["enabled"]["type"] == "boolean"
    interface = tools["get_interface_metrics"]["outputSchema"]["properties"]["interfaces"]["items"]["properties"]
    assert interface["latency_ms"]["type"] == ["number", "null"]
    assert interface["oper_status"] == {"type": "string", "enum": ["up", "down"]}
    status = tools["get_device_status"]["outputSchema"]["properties"]
    assert status["role"]["enum"] == ["core", "edge", "access", "firewall"]
    assert status["maintenance"]["properties"]["reason"]["type"] == ["string", "null"]
    assert tools["open_incident"]["outputSchema"]["properties"]["status"]["enum"] == ["open"]


@pytest.mark.parametrize("seed", [0, 1, SEED, 42])
def test_every_result_validates_against_its_output_schema(seed: int) -> None:
    """Every read on every site and device, and the write paths, checked against the listed outputSchema."""
    session = _legacy(World.generate(seed))
    truth = World.generate(seed)  # the same calls on a twin give the expected answers
    schemas = {tool["name"]: tool["outputSchema"] for tool in _result(_ask(session, "tools/list"))["tools"]}
    checked: set[str] = set()

    def check(name: str, arguments: dict[str, Any], expected: Any) -> dict[str, Any]:
        result = _result(_call(session, name, arguments))
        assert result["isError"] is False, result
        structured: dict[str, Any] = result["structuredContent"]
        jsonschema.validate(structured, schemas[name], cls=jsonschema.Draft202012Validator)
        assert result["content"] == [{"type": "text", "text": json.dumps(structured, indent=2, ensure_ascii=False)}]
        assert structured == expected
        checked.add(name)
        return structured

    check("list_sites", {}, truth.list_sites())
    for site_id in truth.site_ids():
        check("get_site", {"site_id": site_id}, truth.get_site(site_id))
        check("list_devices", {"site_id": site_id}, truth.list_devices(site_id))
    for device_id in truth.device_ids():
        check("get_device_status", {"device_id": device_id}, truth.get_device_status(device_id))
        check("get_interface_metrics", {"device_id": device_id}, truth.get_interface_metrics(device_id))
    device_id = truth.device_ids()[-1]
    for enabled, reason in [(True, "optics swap"), (True, "optics swap"), (False, ""), (False, "ignored")]:
        expected = truth.set_maintenance(device_id, enabled, reason)
        check("set_maintenance", {"device_id": device_id, "enabled": enabled, "reason": reason}, expected)
    summary = "ünïcode \u2013 errors"  # non-ASCII stays as is in the text content, as the SDK server sent it
    for key in [None, "k-1", "k-1"]:
        arguments: dict[str, Any] = {"device_id": device_id, "summary": summary, "severity": "medium"}
        if key is not None:
            arguments["idempotency_key"] = key
        check("open_incident", arguments, truth.open_incident(device_id, summary, "medium", key))
    check(
        "open_incident",
        {"device_id": device_id, "summary": "s", "severity": "low", "idempotency_key": None},
        truth.open_incident(device_id, "s", "low", None),
    )
    check("get_device_status", {"device_id": device_id}, truth.get_device_status(device_id))
    check("get_site", {"site_id": truth.site_ids()[-1]}, truth.get_site(truth.site_ids()[-1]))
    assert checked == READS | WRITES
    assert session.world.final_state() == truth.final_state()


@pytest.mark.parametrize(
    ("name", "arguments", "fragments"),
    [
        ("get_site", {}, ["missing required argument 'site_id'"]),
        ("get_site", {"site": "ams3"}, ["unexpected argument 'site'", "accepted: site_id", "'site_id'"]),
        ("get_site", {"site_id": 5}, ["argument 'site_id' must be a string, got integer 5"]),
        ("get_site", {"site_id": None}, ["argument 'site_id' must be a string, got null"]),
        ("list_sites", {"verbose": True}, ["unexpected argument 'verbose'", "accepted: no arguments"]),
        ("set_maintenance", {"device_id": "d", "enabled": "true", "reason": "r"}, ["'enabled' must be a boolean"]),
        ("set_maintenance", {"device_id": "d", "enabled": 1, "reason": "r"}, ["'enabled' must be a boolean"]),
        ("set_maintenance", {"device": "d", "enabled": True, "reason": "r"}, ["'device'", "'device_id'"]),
        ("open_incident", {"device_id": "d", "summary": "s", "severity": "meh"}, ["'severity' must be one of"]),
        (
            "open_incident",
            {"device_id": "d", "summary": "s", "severity": "low", "idempotency_key": 7},
            ["'idempotency_key' must be a string or null"],
        ),
    ],
)
def test_invalid_arguments_are_invalid_params(name: str, arguments: dict[str, Any], fragments: list[str]) -> None:
    session = _legacy()
    error = _error(_call(session, name, arguments))
    assert error["code"] == -32602
    assert error["message"].startswith(f"Invalid arguments for tool {name!r}: ")
    for fragment in fragments:
        assert fragment in error["message"]
    assert session.world.writes == 0


def test_malformed_tool_calls_are_invalid_params() -> None:
    session = _legacy()
    unknown = _error(_call(session, "nosuch"))
    assert unknown["code"] == -32602 and "'nosuch'" in unknown["message"] and "list_sites" in unknown["message"]
    assert _error(_ask(session, "tools/call", {"arguments": {}}))["code"] == -32602
    assert _error(_ask(session, "tools/call", {"name": "get_site", "arguments": [1]}))["code"] == -32602
    assert _error(_ask(session, "tools/call", [1]))["code"] == -32602  # type: ignore[arg-type]
    # Missing arguments read as none, as the SDK server did.
    assert _result(_ask(session, "tools/call", {"name": "list_sites"}))["isError"] is False


def test_world_refusals_are_tool_errors() -> None:
    session = _legacy()
    device_id = session.world.device_ids()[0]
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("get_site", {"site_id": "atlantis9"}, "Unknown site_id 'atlantis9'"),
        ("get_device_status", {"device_id": "x"}, "Unknown device_id 'x'"),
        ("open_incident", {"device_id": device_id, "summary": "  ", "severity": "low"}, "summary must not be empty"),
        ("set_maintenance", {"device_id": device_id, "enabled": True, "reason": ""}, "reason must not be empty"),
    ]
    for name, arguments, fragment in cases:
        result = _result(_call(session, name, arguments))
        assert result["isError"] is True
        assert "structuredContent" not in result
        [text] = result["content"]
        assert text["type"] == "text"
        assert text["text"].startswith(f"Error executing tool {name}: ")
        assert fragment in text["text"]
    assert session.world.writes == 0


def test_lines_that_ask_for_no_answer(capsys: pytest.CaptureFixture[str]) -> None:
    session = _legacy()
    for line in [
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}\n',
        b'{"jsonrpc":"2.0","id":9,"result":{}}\n',
        b"\n",
    ]:
        assert session.handle_line(line) is None
    assert capsys.readouterr().err == ""
    assert session.handle_line(b"this is not json\n") is None
    assert session.handle_line(b"[1, 2]\n") is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("mcpfault-mock: ignored an input line: ") for line in err)


def test_request_ids_are_echoed() -> None:
    session = _legacy()
    for request_id in ["abc", 0, 2**40, 1.5]:
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}).encode() + b"\n"
        response = session.handle_line(line)
        assert response is not None and response.endswith(b"\n") and response.count(b"\n") == 1
        assert json.loads(response) == {"jsonrpc": "2.0", "id": request_id, "result": {}}
    null_id = session.handle_line(b'{"jsonrpc":"2.0","id":null,"method":"ping"}\n')
    assert null_id is not None and json.loads(null_id)["error"]["code"] == -32600


# ---- the real server: a subprocess, with the official SDK client ---------------------------------


def _server_args(state: pathlib.Path) -> list[str]:
    return ["-m", "mcpfault.mock", "--seed", str(SEED), "--state", str(state)]


def _structured(result: CallToolResult) -> dict[str, Any]:
    """The structured answer, after checking the text content carries the same JSON."""
    assert result.is_error is False, result.content
    assert result.structured_content is not None
    assert len(result.content) == 1
    text = result.content[0]
    assert isinstance(text, TextContent)
    assert json.loads(text.text) == result.structured_content
    structured: dict[str, Any] = result.structured_content
    assert isinstance(structured["as_of"], int)
    return structured


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_tools_over_stdio(mode: str, version: str, tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state.json"
    world = World.generate(SEED)  # the ground truth the server should agree with
    params = StdioServerParameters(command=sys.executable, args=_server_args(state))
    with anyio.fail_after(TIMEOUT):
        async with Client(params, mode=mode) as client:
            assert client.protocol_version == version

            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == READS | WRITES
            for name, tool in tools.items():
                assert tool.input_schema["type"] == "object"
                assert tool.output_schema is not None
                assert "as_of" in tool.output_schema["properties"]
                assert tool.output_schema.get("additionalProperties") is False
                hints = tool.annotations
                assert hints is not None
                assert hints.destructive_hint is False
                assert hints.open_world_hint is False
                assert hints.read_only_hint is (name in READS)
                assert hints.idempotent_hint is (name != "open_incident")
            assert tools["open_incident"].input_schema["required"] == ["device_id", "summary", "severity"]
            severity = tools["open_incident"].input_schema["properties"]["severity"]
            assert severity["enum"] == ["critical", "high", "medium", "low"]

            # The SDK client validates every structured answer against the outputSchema it listed.
            sites = _structured(await client.call_tool("list_sites", {}))
            assert [s["site_id"] for s in sites["sites"]] == world.site_ids()
            assert sites == world.list_sites()
            site_id = world.site_ids()[0]
            assert _structured(await client.call_tool("get_site", {"site_id": site_id})) == world.get_site(site_id)
            devices = _structured(await client.call_tool("list_devices", {"site_id": site_id}))
            assert devices == world.list_devices(site_id)
            device_id = devices["devices"][0]["device_id"]
            status = _structured(await client.call_tool("get_device_status", {"device_id": device_id}))
            assert status == world.get_device_status(device_id)
            metrics = _structured(await client.call_tool("get_interface_metrics", {"device_id": device_id}))
            assert metrics == world.get_interface_metrics(device_id)

            start = sites["as_of"]
            maint = _structured(
                await client.call_tool("set_maintenance", {"device_id": device_id, "enabled": True, "reason": "swap"})
            )
            assert maint == {
                "as_of": start + 1,
                "device_id": device_id,
                "enabled": True,
                "reason": "swap",
                "changed": True,
            }
            repeat = _structured(
                await client.call_tool("set_maintenance", {"device_id": device_id, "enabled": True, "reason": "swap"})
            )
            assert repeat["changed"] is False and repeat["as_of"] == start + 1

            args = {"device_id": device_id, "summary": "uplink errors", "severity": "high"}
            first = _structured(await client.call_tool("open_incident", args))
            second = _structured(await client.call_tool("open_incident", args))
            assert first["created"] and second["created"]
            assert first["incident_id"] != second["incident_id"]
            keyed = {**args, "idempotency_key": "retry-1"}
            third = _structured(await client.call_tool("open_incident", keyed))
            again = _structured(await client.call_tool("open_incident", keyed))
            assert again == {**third, "created": False}
            assert again["as_of"] == start + 4

            after = _structured(await client.call_tool("get_device_status", {"device_id": device_id}))
            assert after["maintenance"] == {"enabled": True, "reason": "swap"}
            new_ids = [first["incident_id"], second["incident_id"], third["incident_id"]]
            assert after["open_incident_ids"][-3:] == new_ids

    # The client closed stdin; the server wrote its state on the way out.
    recorded = json.loads(state.read_text())
    assert recorded["revision"] == start + 4
    assert recorded["writes"] == 6
    assert recorded["state_changes"] == 4
    assert [i["incident_id"] for i in recorded["incidents"]][-3:] == new_ids
    assert recorded["incidents"][-1]["idempotency_key"] == "retry-1"
    assert recorded["maintenance"][device_id]["enabled"] is True
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left no temp file behind


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_errors_over_stdio(mode: str, version: str, tmp_path: pathlib.Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=_server_args(tmp_path / "state.json"))
    with anyio.fail_after(TIMEOUT):
        async with Client(params, mode=mode) as client:
            assert client.protocol_version == version
            # Requests the world refuses: tool results with isError.
            for tool, args, id_ in [
                ("get_device_status", {"device_id": "atlantis9-core01"}, "atlantis9-core01"),
                ("get_interface_metrics", {"device_id": "x"}, "x"),
                ("open_incident", {"device_id": "x", "summary": "s", "severity": "low"}, "x"),
                ("list_devices", {"site_id": "atlantis9"}, "atlantis9"),
                ("get_site", {"site_id": "atlantis9"}, "atlantis9"),
            ]:
                result = await client.call_tool(tool, args)
                assert result.is_error is True
                assert result.structured_content is None
                text = result.content[0]
                assert isinstance(text, TextContent)
                assert repr(id_) in text.text
                assert "list_sites" in text.text or "list_devices" in text.text
            # Arguments that do not fit the inputSchema, and unknown tools: JSON-RPC -32602.
            device_id = World.generate(SEED).device_ids()[0]
            for tool, args, fragment in [
                ("open_incident", {"device_id": device_id, "summary": "s", "severity": "meh"}, "'severity'"),
                ("get_device_status", {"device": device_id}, "unexpected argument 'device'"),
                ("get_device_status", {}, "missing required argument 'device_id'"),
                ("set_maintenance", {"device_id": device_id, "enabled": "yes", "reason": "r"}, "'enabled'"),
                ("nosuch", {}, "Unknown tool: 'nosuch'"),
            ]:
                with pytest.raises(MCPError) as raised:
                    await client.call_tool(tool, args)
                assert raised.value.code == -32602
                assert fragment in raised.value.message


class _RawServer:
    """The server as a bare subprocess speaking newline-delimited JSON-RPC (2025-11-25)."""

    def __init__(self, state: pathlib.Path, *python_options: str, args: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *python_options, *(args or _server_args(state))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT)
        assert ready, f"no answer within {TIMEOUT}s"
        response: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return response

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        response = self.receive()
        assert response["id"] == self._next_id
        return response

    def initialize(self) -> None:
        assert self.request("initialize", INITIALIZE)["result"]["protocolVersion"] == "2025-11-25"
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments})

    def wait(self) -> int:
        try:
            return self.proc.wait(TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()


@pytest.mark.slow
def test_wire_shape_of_a_tool_result(tmp_path: pathlib.Path) -> None:
    server = _RawServer(tmp_path / "state.json")
    try:
        server.initialize()
        device_id = World.generate(SEED).device_ids()[0]
        response = server.call("get_device_status", {"device_id": device_id})
        result = response["result"]
        assert set(result) == {"content", "structuredContent", "isError"}
        assert result["isError"] is False
        # The object itself, not {"result": {...}}.
        assert result["structuredContent"]["device_id"] == device_id
        assert result["content"][0]["type"] == "text"
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    finally:
        assert server.proc.stdin is not None
        server.proc.stdin.close()
        assert server.wait() == 0


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_writes_state(sig: signal.Signals, tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state.json"
    server = _RawServer(state)
    try:
        server.initialize()
        device_id = World.generate(SEED).device_ids()[0]
        opened = server.call("open_incident", {"device_id": device_id, "summary": "s", "severity": "low"})
        incident_id = opened["result"]["structuredContent"]["incident_id"]
        assert not state.exists()
        # stdin stays open: only the signal can end the server, which is blocked reading it.
        server.proc.send_signal(sig)
    finally:
        rc = server.wait()
    assert rc == 0
    recorded = json.loads(state.read_text())
    assert recorded["incidents"][-1]["incident_id"] == incident_id
    assert recorded["writes"] == 1


@pytest.mark.slow
def test_signal_in_a_burst_leaves_whole_answers_and_a_consistent_state(tmp_path: pathlib.Path) -> None:
    """SIGTERM while requests are being handled: every answer sent is whole, and the state matches them."""
    state = tmp_path / "state.json"
    server = _RawServer(state)
    try:
        server.initialize()
        device_id = World.generate(SEED).device_ids()[0]
        burst = b"".join(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 100 + n,
                    "method": "tools/call",
                    "params": {
                        "name": "open_incident",
                        "arguments": {"device_id": device_id, "summary": f"burst {n}", "severity": "low"},
                    },
                }
            ).encode()
            + b"\n"
            for n in range(300)
        )
        assert server.proc.stdin is not None and server.proc.stdout is not None
        server.proc.stdin.write(burst)
        server.proc.stdin.flush()
        server.receive()  # handling has begun
        server.proc.send_signal(signal.SIGTERM)
        answered = 1 + sum(1 for answer in parse_jsonl(server.proc.stdout.read()) if answer["result"])
    finally:
        rc = server.wait()
    assert rc == 0
    recorded = json.loads(state.read_text())
    # The call being handled when the signal came was finished and answered; none after it was started.
    assert recorded["writes"] == answered
    assert recorded["writes"] == recorded["state_changes"] == recorded["revision"] - 1 < 300
    assert len([i for i in recorded["incidents"] if i["summary"].startswith("burst ")]) == recorded["writes"]


@pytest.mark.slow
def test_eof_answers_everything_then_writes_state(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "nested" / "state.json"
    server = _RawServer(state)
    server.initialize()
    device_id = World.generate(SEED).device_ids()[0]
    server.call("set_maintenance", {"device_id": device_id, "enabled": True, "reason": "r"})
    for n in range(5):  # sent, then stdin closes before any is answered
        server.send({"jsonrpc": "2.0", "id": f"late-{n}", "method": "tools/call", "params": {"name": "list_sites"}})
    assert server.proc.stdin is not None and server.proc.stdout is not None
    server.proc.stdin.close()
    late = parse_jsonl(server.proc.stdout.read())
    assert [r["id"] for r in late] == [f"late-{n}" for n in range(5)]
    assert server.wait() == 0
    recorded = json.loads(state.read_text())
    assert recorded["maintenance"][device_id] == {"enabled": True, "reason": "r", "since_revision": 2}


@pytest.mark.slow
def test_a_closed_stdout_ends_the_server_cleanly(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state.json"
    server = _RawServer(state)
    server.initialize()
    assert server.proc.stdout is not None and server.proc.stdin is not None
    server.proc.stdout.close()
    server.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "list_sites"}})
    assert server.proc.wait(TIMEOUT) == 0  # not 120 (a failed flush at exit) nor a traceback
    assert server.proc.stderr is not None and b"Traceback" not in server.proc.stderr.read()
    assert json.loads(state.read_text())["writes"] == 0
    server.proc.stdin.close()
    server.proc.stderr.close()


@pytest.mark.slow
def test_start_path_loads_neither_the_sdk_nor_pydantic_and_is_quick(tmp_path: pathlib.Path) -> None:
    started = time.perf_counter()
    server = _RawServer(tmp_path / "state.json", "-X", "importtime")
    try:
        server.initialize()
        first_answer = time.perf_counter() - started
        assert server.call("list_sites", {})["result"]["isError"] is False
    finally:
        assert server.proc.stdin is not None and server.proc.stderr is not None
        server.proc.stdin.close()
        stderr = server.proc.stderr.read().decode()
        assert server.wait() == 0
    # importtime lines: "import time: <self> | <cumulative> | <indented module name>"
    modules = {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines()}
    assert "mcpfault.mock.server" in modules
    heavy = {"mcp", "mcp_types", "pydantic", "pydantic_core", "anyio", "opentelemetry"}  # untraced: no OTel either
    assert sorted(m for m in modules if m.split(".")[0] in heavy) == []
    # A loose bound (it is ~0.06 s here; the SDK server took ~0.65 s): the point is no SDK-sized start.
    assert first_answer < 2.0


@pytest.mark.slow
def test_traced_start_loads_no_opentelemetry_nor_the_logging_set_up(tmp_path: pathlib.Path) -> None:
    # The bench starts a traced mock per session: the SDK's import (~75 ms of CPU) was most of its cost.
    from mcpfault.telemetry.tracing import read_spans

    spans = tmp_path / "server-spans.jsonl"
    args = ["-m", "mcpfault.mock", "--seed", str(SEED), "--state", str(tmp_path / "state.json"), "--spans", str(spans)]
    server = _RawServer(tmp_path / "state.json", "-X", "importtime", args=args)
    try:
        server.initialize()
        assert server.call("list_sites", {})["result"]["isError"] is False
    finally:
        assert server.proc.stdin is not None and server.proc.stderr is not None
        server.proc.stdin.close()
        stderr = server.proc.stderr.read().decode()
        assert server.wait() == 0
    modules = {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines()}
    assert "mcpfault.telemetry.fastspans" in modules
    # opentelemetry.sdk.version is a string (the resource's telemetry.sdk.version), not the SDK.
    loaded = sorted(m for m in modules if m.split(".")[0] in {"opentelemetry", "structlog", "rich"})
    assert loaded == ["opentelemetry", "opentelemetry.sdk", "opentelemetry.sdk.version"]
    assert {"logging", "shutil"}.isdisjoint(modules)  # both only for a message or a --help nobody asked for
    assert [s.name for s in read_spans(spans)] == ["initialize", "tools/call list_sites"]


@pytest.mark.slow
def test_help_does_not_need_a_server() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcpfault.mock", "--help"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    assert "--seed" in done.stdout and "--state" in done.stdout


def test_package_serve_keeps_the_cli_signature() -> None:
    import mcpfault.mock
    import mcpfault.mock.server

    expected = inspect.signature(mcpfault.mock.server.serve)
    assert inspect.signature(mcpfault.mock.serve) == expected
    assert list(expected.parameters) == ["seed", "state_path", "spans_path", "otlp_endpoint", "journal_path"]


@pytest.mark.slow
def test_world_imports_without_the_sdk() -> None:
    code = "import sys, mcpfault.mock; mcpfault.mock.World.generate(1); assert 'mcp' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT)


# ---- traced: a SERVER span per request, state changes as span events -------------------------------

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def _traced(tmp_path: pathlib.Path) -> tuple[_RawServer, pathlib.Path]:
    spans = tmp_path / "server-spans.jsonl"
    state = tmp_path / "state.json"
    args = ["-m", "mcpfault", "mock-server", "--seed", str(SEED), "--state", str(state), "--spans", str(spans)]
    return _RawServer(state, args=args), spans


def _with_parent(arguments: dict[str, Any], name: str) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "_meta": {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}}


@pytest.mark.slow
def test_spans_a_server_span_per_request_and_a_state_change_per_write(tmp_path: pathlib.Path) -> None:
    from mcpfault.telemetry import names
    from mcpfault.telemetry import names as span_names
    from mcpfault.telemetry.tracing import read_spans

    server, spans_path = _traced(tmp_path)
    device_id = World.generate(SEED).device_ids()[0]
    incident = {"device_id": device_id, "summary": "s", "severity": "low", "idempotency_key": "k1"}
    try:
        server.initialize()
        opened = server.request("tools/call", _with_parent(incident, "open_incident"))
        server.request("tools/call", _with_parent(incident, "open_incident"))  # the same key: nothing new
        maintenance = {"device_id": device_id, "enabled": True, "reason": "r"}
        server.request("tools/call", _with_parent(maintenance, "set_maintenance"))
        server.request("tools/call", _with_parent({"device_id": "nope"}, "get_device_status"))  # isError
        server.request("tools/call", _with_parent({}, "no_such_tool"))  # -32602
    finally:
        assert server.proc.stdin is not None
        server.proc.stdin.close()  # EOF: the server flushes its spans before it exits
        assert server.wait() == 0
    spans = read_spans(spans_path)
    assert [s.name for s in spans] == [
        "initialize",
        "tools/call open_incident",
        "tools/call open_incident",
        "tools/call set_maintenance",
        "tools/call get_device_status",
        "tools/call no_such_tool",
    ]
    assert all(s.kind.name == "SERVER" and s.service_name == span_names.MOCK_SERVICE for s in spans)
    assert spans[0].parent_span_id is None and spans[0].events == ()  # no traceparent: a trace of its own
    for span in spans[1:]:
        assert (span.trace_id, span.parent_span_id) == (TRACE_ID, PARENT_ID)
        assert span.attributes[names.MCP_METHOD_NAME] == "tools/call"
        assert span.attributes[names.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert [s.attributes[names.JSONRPC_REQUEST_ID] for s in spans] == ["1", "2", "3", "4", "5", "6"]
    created, repeated, maintained = (only_event(s) for s in spans[1:4])
    incident_id = opened["result"]["structuredContent"]["incident_id"]
    assert created == {
        span_names.STATE_OP: "open_incident",
        span_names.STATE_REVISION: 2,
        span_names.STATE_CHANGED: True,
        span_names.STATE_DEVICE_ID: device_id,
        span_names.STATE_INCIDENT_ID: incident_id,
    }
    assert repeated[span_names.STATE_CHANGED] is False and repeated[span_names.STATE_INCIDENT_ID] == incident_id
    assert maintained[span_names.STATE_REVISION] == 3 and maintained[span_names.STATE_MAINTENANCE_ENABLED] is True
    assert spans[4].attributes[names.ERROR_TYPE] == "tool_error" and spans[4].status_code.name == "ERROR"
    assert spans[5].attributes[names.ERROR_TYPE] == "-32602" and "Unknown tool" in spans[5].status_message
    assert all(names.ERROR_TYPE not in s.attributes for s in spans[:4])


def only_event(span: Any) -> dict[str, Any]:
    from mcpfault.telemetry import names as span_names

    assert len(span.events) == 1 and span.events[0].name == span_names.EVENT_STATE_CHANGE
    return dict(span.events[0].attributes)


@pytest.mark.slow
def test_spans_are_flushed_when_a_signal_ends_the_server(tmp_path: pathlib.Path) -> None:
    from mcpfault.telemetry.tracing import read_spans

    server, spans_path = _traced(tmp_path)
    try:
        server.initialize()
        device_id = World.generate(SEED).device_ids()[0]
        server.request("tools/call", _with_parent({"device_id": device_id}, "get_device_status"))
        server.proc.send_signal(signal.SIGTERM)  # stdin still open: only the signal ends it
    finally:
        assert server.wait() == 0
    assert [s.name for s in read_spans(spans_path)] == ["initialize", "tools/call get_device_status"]


@pytest.mark.slow
def test_spans_file_that_cannot_be_opened_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "mcpfault", "mock-server", "--spans", str(not_a_directory / "s.jsonl")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2
    assert "mcpfault-mock: cannot trace:" in done.stderr and "Traceback" not in done.stderr
