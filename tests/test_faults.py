"""Each fault type alone: what it does to one request and its response."""

from __future__ import annotations

import json
from random import Random
from typing import Any

import pytest

from mcpfault.faults import profile
from mcpfault.faults.base import Call, PlanContext
from mcpfault.faults.error import Error
from mcpfault.faults.latency import Latency
from mcpfault.faults.malformed import NOT_JSON, Malformed
from mcpfault.faults.schema_drift import SchemaDrift, auto_names
from mcpfault.faults.stale import Stale
from mcpfault.faults.timeout import Timeout
from mcpfault.protocol import jsonrpc

RESPONSE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 5,
    "result": {
        "content": [{"type": "text", "text": json.dumps({"status": "ok", "utilization_pct": 41.5})}],
        "structuredContent": {"status": "ok", "utilization_pct": 41.5},
        "isError": False,
    },
}


def make_call(tool: str = "get_device_status", request_id: Any = 5, **arguments: Any) -> Call:
    return Call.from_body(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    )


def ctx(**kw: Any) -> PlanContext:
    return PlanContext("rule", lambda _name: True, **kw)


def response_bytes(body: dict[str, Any] = RESPONSE) -> bytes:
    return jsonrpc.encode(body)


def test_timeout_drop_and_late() -> None:
    dropped = Timeout().plan(make_call(), Random(0), ctx())
    assert dropped.mode == "drop" and dropped.reply is None and dropped.response is not None
    assert dropped.response(response_bytes()).data is None
    late = Timeout(mode="late", delay_s=2.5).plan(make_call(), Random(0), ctx())
    delivered = late.response(response_bytes())  # type: ignore[misc]
    assert delivered.data == response_bytes() and delivered.delay_s == 2.5


def test_latency_jitter_is_seeded_and_bounded() -> None:
    fault = Latency(delay_s=0.1, jitter_s=0.5)
    delays = [fault.plan(make_call(), Random(7), ctx()).response(b"x\n").delay_s for _ in range(3)]  # type: ignore[misc]
    assert len(set(delays)) == 1 and 0.1 <= delays[0] <= 0.6


def test_error_protocol_and_tool_modes_never_contact_the_server() -> None:
    protocol = Error(code=-32001, message="boom").plan(make_call(), Random(0), ctx())
    assert protocol.reply == {"jsonrpc": "2.0", "id": 5, "error": {"code": -32001, "message": "boom"}}
    tool = Error(mode="tool").plan(make_call(), Random(0), ctx())
    assert tool.reply is not None and tool.reply["result"]["isError"] is True


@pytest.mark.parametrize("mode", ["truncate", "not_json", "missing_result", "wrong_id", "wrong_type"])
def test_malformed_modes(mode: str) -> None:
    injection = Malformed(modes=(mode,)).plan(make_call(), Random(1), ctx())  # type: ignore[arg-type]
    assert injection.mode == mode
    data = injection.response(response_bytes()).data  # type: ignore[misc]
    assert data is not None and data.endswith(b"\n")
    if mode in ("truncate", "not_json"):
        with pytest.raises(ValueError):
            json.loads(data)
        assert mode != "not_json" or data == NOT_JSON
        return
    body = json.loads(data)
    if mode == "missing_result":
        assert "result" not in body and "error" not in body and body["id"] == 5
    elif mode == "wrong_id":
        assert body["id"] != 5 and body["result"] == RESPONSE["result"]
    else:
        structured = body["result"]["structuredContent"]
        changed = [k for k in structured if type(structured[k]) is not type(RESPONSE["result"]["structuredContent"][k])]
        assert len(changed) == 1
        # The text copy tells the same (wrong) story.
        assert json.loads(body["result"]["content"][0]["text"]) == structured


def test_malformed_wrong_type_without_structured_content() -> None:
    body = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "plain"}]}}
    data = Malformed(modes=("wrong_type",)).plan(make_call(), Random(1), ctx()).response(jsonrpc.encode(body)).data  # type: ignore[misc]
    assert isinstance(json.loads(data)["result"]["content"], str)  # type: ignore[arg-type]


def test_stale_replays_earlier_answers_with_the_current_id() -> None:
    older = {**RESPONSE, "id": 1, "result": {**RESPONSE["result"], "structuredContent": {"v": 1}}}
    newer = {**RESPONSE, "id": 2, "result": {**RESPONSE["result"], "structuredContent": {"v": 2}}}
    history = (response_bytes(older), response_bytes(newer))
    previous = Stale().plan(make_call(request_id=9), Random(0), ctx(history=lambda _c: history))
    assert previous is not None and previous.reply is not None
    assert previous.reply["id"] == 9 and previous.reply["result"]["structuredContent"] == {"v": 2}
    oldest = Stale(pick="oldest").plan(make_call(request_id=9), Random(0), ctx(history=lambda _c: history))
    assert oldest is not None and oldest.reply is not None and oldest.reply["result"]["structuredContent"] == {"v": 1}
    assert Stale().plan(make_call(), Random(0), ctx()) is None  # nothing cached: does not fire


def test_schema_drift_rejects_old_argument_names_and_translates_new_ones() -> None:
    drift = SchemaDrift(rename_args={"device_id": "device"})
    rejected = drift.plan(make_call(device_id="d1"), Random(0), ctx())
    assert rejected is not None and rejected.reply is not None
    # As the SDK's server answers a missing argument: a tool error in pydantic's words, no hint of the new name.
    text = rejected.reply["result"]["content"][0]["text"]
    assert rejected.reply["result"]["isError"] is True
    assert text.startswith("Error executing tool get_device_status: 1 validation error for get_device_statusArguments")
    assert "\ndevice\n  Field required [type=missing" in text and "is now" not in text
    protocol = SchemaDrift(rename_args={"device_id": "device"}, reject="invalid_params")
    refused = protocol.plan(make_call(device_id="d1"), Random(0), ctx())
    assert refused is not None and refused.reply is not None
    assert refused.reply["error"]["code"] == jsonrpc.INVALID_PARAMS
    assert refused.reply["error"]["message"] == (
        "Invalid params for tool 'get_device_status': 'device' is a required property; "
        "Additional properties are not allowed ('device_id' was unexpected)"
    )
    translated = drift.plan(make_call(device="d1"), Random(0), ctx())
    assert translated is not None and translated.reply is None and translated.upstream_request is not None
    assert translated.upstream_request["params"]["arguments"] == {"device_id": "d1"}


def test_schema_drift_renames_result_fields_in_structured_and_text_content() -> None:
    drift = SchemaDrift(rename_fields={"status": "state"})
    injection = drift.plan(make_call(), Random(0), ctx())
    assert injection is not None and injection.response is not None
    body = json.loads(injection.response(response_bytes()).data)  # type: ignore[arg-type]
    assert body["result"]["structuredContent"] == {"state": "ok", "utilization_pct": 41.5}
    assert json.loads(body["result"]["content"][0]["text"]) == {"state": "ok", "utilization_pct": 41.5}


def test_schema_drift_rewrites_tools_list_and_notifies_once() -> None:
    drift = SchemaDrift(rename_args={"device_id": "device"}, rename_fields={"status": "state"}, notify=True)
    listing = {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {
            "tools": [
                {
                    "name": "get_device_status",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"device_id": {"type": "string"}},
                        "required": ["device_id"],
                    },
                    "outputSchema": {
                        "type": "object",
                        "properties": {"status": {"type": "string"}},
                        "required": ["status"],
                    },
                },
                {"name": "other", "inputSchema": {"type": "object", "properties": {"device_id": {}}}},
            ]
        },
    }
    list_call = Call.from_body({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    only_status = PlanContext("r", lambda name: name == "get_device_status")
    injection = drift.plan(list_call, Random(0), only_status)
    assert injection is not None and injection.notify == ()
    tools = json.loads(injection.response(jsonrpc.encode(listing)).data)["result"]["tools"]  # type: ignore[arg-type, misc]
    assert tools[0]["inputSchema"]["properties"] == {"device": {"type": "string"}}
    assert tools[0]["inputSchema"]["required"] == ["device"]
    assert tools[0]["outputSchema"]["required"] == ["state"]
    assert tools[1]["inputSchema"]["properties"] == {"device_id": {}}  # not matched by the rule's tools
    first = drift.plan(make_call(device="x"), Random(0), ctx(activating=True))
    assert first is not None and [n["method"] for n in first.notify] == ["notifications/tools/list_changed"]
    handshake = drift.handshake(Call.from_body({"jsonrpc": "2.0", "id": 0, "method": "initialize"}))
    assert handshake is not None
    answer = json.loads(handshake(jsonrpc.encode({"jsonrpc": "2.0", "id": 0, "result": {"capabilities": {}}})).data)  # type: ignore[arg-type]
    assert answer["result"]["capabilities"]["tools"]["listChanged"] is True


def test_schema_drift_needs_a_rename() -> None:
    with pytest.raises(ValueError):
        SchemaDrift()


LISTED = {
    "name": "get_device_status",
    "inputSchema": {
        "type": "object",
        "properties": {"device_id": {"type": "string"}, "verbose": {"type": "boolean"}},
        "required": ["device_id"],
    },
    "outputSchema": {"type": "object", "properties": {"status": {"type": "string"}, "utilization_pct": {}}},
}


def test_schema_drift_auto_learns_names_from_tools_list_and_keeps_them_per_seed() -> None:
    drift = SchemaDrift(rename_args="auto", rename_fields="auto")
    seen = ctx(tool=lambda name: LISTED if name == "get_device_status" else None, seed=3)
    renames = auto_names(["device_id", "verbose"], seed=3, salt="rule:get_device_status")
    assert renames == auto_names(["device_id", "verbose"], seed=3, salt="rule:get_device_status")  # same seed
    assert set(renames) == {"device_id", "verbose"} and all(old != new for old, new in renames.items())
    others = [auto_names(["device_id", "verbose"], seed=s, salt="rule:get_device_status") for s in range(8)]
    assert len({tuple(o.values()) for o in others}) > 1  # another seed, other names
    rejected = drift.plan(make_call(device_id="d1"), Random(0), seen)
    assert rejected is not None and rejected.reply is not None and rejected.reply["result"]["isError"] is True
    assert f"\n{renames['device_id']}\n  Field required" in rejected.reply["result"]["content"][0]["text"]
    translated = drift.plan(make_call(**{renames["device_id"]: "d1"}), Random(0), seen)
    assert translated is not None and translated.upstream_request is not None
    assert translated.upstream_request["params"]["arguments"] == {"device_id": "d1"}
    # An old name of an optional argument is ignored, as the redeployed server ignores it.
    both: dict[str, Any] = {renames["device_id"]: "d1", "verbose": True}
    ignored = drift.plan(make_call(**both), Random(0), seen)
    assert ignored is not None and ignored.upstream_request is not None
    assert ignored.upstream_request["params"]["arguments"] == {"device_id": "d1"}
    # Unknown tools (not listed yet) are left alone.
    assert drift.plan(make_call("other", device_id="x"), Random(0), seen).reply is None  # type: ignore[union-attr]


def test_rules_on_read_only_tools_match_by_annotations_from_tools_list() -> None:
    from mcpfault.faults.engine import Engine

    text = (
        '[[faults]]\nname = "reads"\ntype = "error"\nread_only = true\n'
        '[[faults]]\nname = "writes"\ntype = "timeout"\nread_only = false\n'
    )
    engine = Engine(profile.loads(text))
    assert engine.decide(make_call("get")).applied == ()  # nothing listed yet: annotations unknown
    listing = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "tools": [
                {"name": "get", "annotations": {"readOnlyHint": True}},
                {"name": "put", "annotations": {"readOnlyHint": False}},
                {"name": "plain"},  # readOnlyHint defaults to false: it may write
            ]
        },
    }
    list_call = Call.from_body({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    engine.observe_response(list_call, jsonrpc.encode(listing), listing)
    assert [a.rule for a in engine.decide(make_call("get")).applied] == ["reads"]
    assert [a.rule for a in engine.decide(make_call("put")).applied] == ["writes"]
    assert [a.rule for a in engine.decide(make_call("plain")).applied] == ["writes"]
