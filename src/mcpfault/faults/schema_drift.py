"""schema_drift: from its Nth matching call on, the server behaves as if redeployed with new names.

``rename_args`` maps old argument names to new ones: calls with the old names are rejected with
-32602, as the redeployed server would; calls with the new names are translated back and forwarded.
``rename_fields`` maps old result field names to new ones in ``structuredContent`` and in JSON text
content. tools/list is rewritten to match (inputSchema, outputSchema). With ``notify`` the client is
sent ``notifications/tools/list_changed`` when the drift happens, and ``listChanged`` is advertised.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from random import Random
from typing import Any, ClassVar

from mcpfault.faults.base import (
    Call,
    Delivery,
    Effect,
    FaultBase,
    Injection,
    PlanContext,
    ResponseStep,
    encode,
    load_object,
)
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.values import rename_keys
from mcpfault.telemetry import names

LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


@dataclass(frozen=True)
class SchemaDrift(FaultBase):
    type_name: ClassVar[str] = "schema_drift"
    MODES: ClassVar[tuple[str, ...]] = ("rename_args", "rename_fields", "rewrite_list", "advertise")
    event_name: ClassVar[str] = names.EVENT_DRIFT
    effect: ClassVar[Effect] = "renamed_fields"
    targets: ClassVar[frozenset[str]] = frozenset({"tools/call"})
    follows: ClassVar[frozenset[str]] = frozenset({"tools/list"})
    persistent: ClassVar[bool] = True

    # Old name -> new name.
    rename_args: Mapping[str, str] | None = None
    rename_fields: Mapping[str, str] | None = None
    notify: bool = False

    def __post_init__(self) -> None:
        if not self.rename_args and not self.rename_fields:
            raise ValueError('set rename_args, rename_fields or both, e.g. { device_id = "device" }', "type")

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection | None:
        notify = (LIST_CHANGED,) if self.notify and ctx.activating else ()
        if call.method == "tools/list":
            return Injection("rewrite_list", response=_json_step(lambda b: self._rewrite_list(b, ctx)), notify=notify)
        return self._plan_call(call, notify)

    def handshake(self, call: Call) -> ResponseStep | None:
        if not self.notify:
            return None
        return _json_step(_advertise_list_changed)

    def _plan_call(self, call: Call, notify: tuple[Mapping[str, Any], ...]) -> Injection:
        renamed_results = _json_step(self._rename_result) if self.rename_fields else None
        arguments = dict(call.arguments)
        if self.rename_args:
            stale_names = sorted(old for old in self.rename_args if old in arguments)
            if stale_names:
                expected = ", ".join(f"{old!r} is now {self.rename_args[old]!r}" for old in stale_names)
                message = f"Invalid params for tool {call.target!r}: unexpected argument(s) ({expected})"
                reply = jsonrpc.error_response(call.request_id, jsonrpc.INVALID_PARAMS, message)
                return Injection("rename_args", reply=reply, notify=notify)
            back = {new: old for old, new in self.rename_args.items()}
            if any(name in back for name in arguments):
                params = dict(call.params)
                params["arguments"] = {back.get(name, name): value for name, value in arguments.items()}
                upstream = {**call.body, "params": params}
                return Injection("rename_args", upstream_request=upstream, response=renamed_results, notify=notify)
        mode = "rename_fields" if self.rename_fields else "rename_args"
        return Injection(mode, response=renamed_results, notify=notify)

    def _rename_result(self, body: dict[str, Any]) -> None:
        result = body.get("result")
        if not isinstance(result, dict) or not self.rename_fields:
            return
        if "structuredContent" in result:
            result["structuredContent"] = rename_keys(result["structuredContent"], self.rename_fields)
        for item in result.get("content") or []:
            if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
                try:
                    parsed = json.loads(item["text"])
                except ValueError:
                    continue
                if isinstance(parsed, dict | list):
                    item["text"] = json.dumps(rename_keys(parsed, self.rename_fields))

    def _rewrite_list(self, body: dict[str, Any], ctx: PlanContext) -> None:
        result = body.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else []:
            if not isinstance(tool, dict) or not ctx.matches_tool(str(tool.get("name"))):
                continue
            if self.rename_args and isinstance(tool.get("inputSchema"), dict):
                tool["inputSchema"] = _rename_schema(tool["inputSchema"], self.rename_args)
            if self.rename_fields and isinstance(tool.get("outputSchema"), dict):
                tool["outputSchema"] = _rename_schema(tool["outputSchema"], self.rename_fields)


def _json_step(edit: Callable[[dict[str, Any]], None]) -> ResponseStep:
    def step(data: bytes) -> Delivery:
        body = load_object(data)
        if body is None:
            return Delivery(data)
        edit(body)
        return Delivery(encode(body))

    return step


def _advertise_list_changed(body: dict[str, Any]) -> None:
    result = body.get("result")
    if not isinstance(result, dict):
        return
    capabilities = result.setdefault("capabilities", {})
    if isinstance(capabilities, dict):
        tools = capabilities.setdefault("tools", {})
        if isinstance(tools, dict):
            tools["listChanged"] = True


def _rename_schema(schema: Any, names: Mapping[str, str]) -> Any:
    """Rename properties (and their `required` entries) at every depth of a JSON Schema."""
    if isinstance(schema, list):
        return [_rename_schema(s, names) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {names.get(k, k): _rename_schema(v, names) for k, v in value.items()}
        elif key == "required" and isinstance(value, list):
            out[key] = [names.get(v, v) if isinstance(v, str) else v for v in value]
        else:
            out[key] = _rename_schema(value, names)
    return out
