"""schema_drift: from its Nth matching call on, the server behaves as if redeployed with new names.

``rename_args`` maps old argument names to new ones; ``"auto"`` renames every argument of each matching
tool, learnt from its ``inputSchema`` in tools/list (``device_id`` -> ``deviceId``, ``query`` ->
``query_text``), the same names for the same seed on every run. A call with an old name is answered
as the redeployed server would: ``reject = "tool_error"`` (the default) as the official SDK's server
does and MCP 2025-11-25 asks (a tool result with ``isError``, pydantic's "Field required" text), and an
old name for an optional argument is dropped as that server ignores it; ``reject = "invalid_params"``
as a server that validates at the protocol layer does (JSON-RPC -32602, JSON Schema's wording). Calls
with the new names are translated back and forwarded. ``rename_fields`` (a table, or ``"auto"`` from
each tool's ``outputSchema``) renames result fields in ``structuredContent`` and in JSON text content.
tools/list is rewritten to match (inputSchema, outputSchema). With ``notify`` the client is sent
``notifications/tools/list_changed`` when the drift happens, and ``listChanged`` is advertised.

The same redeploy reaches prompts and resources when the rule's ``methods`` name them: on
``prompts/get``, ``rename_args`` renames the prompt's arguments (``"auto"`` from its prompts/list entry,
which is rewritten to match; a missing required argument is answered -32602, as the SDK's server
does); on ``resources/read``, ``rename_fields`` renames the fields of JSON contents (``"auto"`` from the
contents' own keys).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from random import Random
from typing import Any, ClassVar, Literal

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
from mcpfault.protocol.values import keys_present, rename_keys

LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
# What a drifting server announces, by the kind of request the drift first shows on.
_LIST_CHANGED_OF = {
    "tools/call": LIST_CHANGED,
    "prompts/get": {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"},
    "resources/read": {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"},
}
AUTO = "auto"
# What ``auto`` adds to a one-word name: the renames a redeploy makes (path -> path_name, id -> id_ref).
_SUFFIXES = ("_name", "_value", "_ref", "_text")
PYDANTIC_MISSING = "https://errors.pydantic.dev/2.12/v/missing"
Renames = Mapping[str, str]


@dataclass(frozen=True)
class SchemaDrift(FaultBase):
    type_name: ClassVar[str] = "schema_drift"
    MODES: ClassVar[tuple[str, ...]] = ("rename_args", "rename_fields", "rewrite_list", "advertise")
    event_name: ClassVar[str] = "mcpfault.drift"
    effect: ClassVar[Effect] = "changed_fields"  # the old names of the result fields renamed in an answer
    # An answer changes only by the result fields renamed in it, which the event names: none named (a
    # call translated to the new names, an answer without the old ones) is the answer as sent.
    names_every_change: ClassVar[bool] = True
    targets: ClassVar[frozenset[str]] = frozenset({"tools/call", "prompts/get", "resources/read"})
    follows: ClassVar[frozenset[str]] = frozenset({"tools/list", "prompts/list"})
    persistent: ClassVar[bool] = True
    needs_tools: ClassVar[bool] = True  # schemas say which names are required, and what "auto" renames

    # Old name -> new name, or "auto": every name of the tool's schema, renamed from the seed.
    rename_args: Mapping[str, str] | Literal["auto"] | None = None
    rename_fields: Mapping[str, str] | Literal["auto"] | None = None
    # How an old argument name is answered: as the SDK's server (a tool error) or as a protocol error.
    reject: Literal["tool_error", "invalid_params"] = "tool_error"
    notify: bool = False

    def __post_init__(self) -> None:
        if not self.rename_args and not self.rename_fields:
            raise ValueError('set rename_args, rename_fields or both, e.g. { device_id = "device" } or "auto"', "type")

    def methods_allowed(self) -> frozenset[str]:
        # A prompt has arguments and no result fields; a resource has fields and no arguments.
        return frozenset(
            {"tools/call"}
            | ({"prompts/get"} if self.rename_args else set())
            | ({"resources/read"} if self.rename_fields else set())
        )

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection | None:
        announce = _LIST_CHANGED_OF.get(call.method)
        notify = (announce,) if self.notify and ctx.activating and announce is not None else ()
        if call.method == "tools/list":
            if "tools/call" not in ctx.methods:
                return None
            return Injection("rewrite_list", response=_json_step(lambda b: self._rewrite_list(b, ctx)), notify=notify)
        if call.method == "prompts/list":
            if "prompts/get" not in ctx.methods:
                return None
            return Injection("rewrite_list", response=_json_step(lambda b: self._rewrite_prompts(b, ctx)))
        if call.method == "prompts/get":
            return self._plan_prompt(call, ctx, notify)
        if call.method == "resources/read":
            step = _json_step(lambda b: self._rename_contents(b, call.target or "", ctx))
            return Injection("rename_fields", response=step, notify=notify)
        return self._plan_call(call, ctx, notify)

    def _prompt_renames(self, prompt: str, ctx: PlanContext) -> Renames:
        if self.rename_args is None or isinstance(self.rename_args, Mapping):
            return self.rename_args or {}
        names = [str(a.get("name")) for a in _prompt_arguments(ctx.prompt(prompt)) if a.get("name")]
        return auto_names(names, seed=ctx.seed, salt=f"{ctx.rule_name}:prompt:{prompt}") if names else {}

    def _plan_prompt(self, call: Call, ctx: PlanContext, notify: tuple[Mapping[str, Any], ...]) -> Injection:
        prompt = call.target or ""
        renames = self._prompt_renames(prompt, ctx)
        arguments = dict(call.arguments)
        stale = [old for old in renames if old in arguments]
        listed = ctx.prompt(prompt)
        if listed is not None:
            required = [str(a.get("name")) for a in _prompt_arguments(listed) if a.get("required")]
            missing = [renames.get(n, n) for n in required if renames.get(n, n) not in arguments]
        else:  # arguments unknown: a renamed one that was sent was needed
            missing = [renames[old] for old in stale]
        if missing:
            # The SDK's server (mcp 2.x MCPServer) answers a prompt's missing arguments at the protocol layer.
            message = f"Missing required arguments: {set(missing)}"
            reply = jsonrpc.error_response(call.request_id, jsonrpc.INVALID_PARAMS, message)
            return Injection("rename_args", reply=reply, notify=notify)
        back = {new: old for old, new in renames.items()}
        if not stale and not any(name in back for name in arguments):
            return Injection("rename_args", notify=notify)
        params = dict(call.params)
        params["arguments"] = {back.get(n, n): v for n, v in arguments.items() if n not in stale}
        return Injection("rename_args", upstream_request={**call.body, "params": params}, notify=notify)

    def _rewrite_prompts(self, body: dict[str, Any], ctx: PlanContext) -> None:
        result = body.get("result")
        prompts = result.get("prompts") if isinstance(result, dict) else None
        for prompt in prompts if isinstance(prompts, list) else []:
            if not isinstance(prompt, dict) or not ctx.matches("prompts", str(prompt.get("name"))):
                continue
            renames = self._prompt_renames(str(prompt.get("name")), ctx)
            for argument in _prompt_arguments(prompt):
                if isinstance(argument, dict) and argument.get("name") in renames:
                    argument["name"] = renames[argument["name"]]

    def _rename_contents(self, body: dict[str, Any], uri: str, ctx: PlanContext) -> tuple[str, ...]:
        renamed: set[str] = set()
        result = body.get("result")
        contents = result.get("contents") if isinstance(result, dict) else None
        for item in contents if isinstance(contents, list) else []:
            if not isinstance(item, dict) or not isinstance(item.get("text"), str):
                continue
            try:
                parsed = json.loads(item["text"])
            except ValueError:
                continue
            if not isinstance(parsed, dict | list):
                continue
            names = self.rename_fields
            if not isinstance(names, Mapping):  # auto: the contents' own field names, renamed from the seed
                names = auto_names(_keys(parsed), seed=ctx.seed, salt=f"{ctx.rule_name}:resource:{uri}")
            renamed |= keys_present(parsed, names)
            item["text"] = json.dumps(rename_keys(parsed, names))
        return tuple(sorted(renamed))

    def handshake(self, call: Call) -> ResponseStep | None:
        if not self.notify:
            return None
        return _json_step(_advertise_list_changed)

    def _plan_call(self, call: Call, ctx: PlanContext, notify: tuple[Mapping[str, Any], ...]) -> Injection:
        tool = call.target or ""
        fields = self._renames(self.rename_fields, "outputSchema", tool, ctx)
        renamed_results = _json_step(lambda b: _rename_result(b, fields)) if fields else None
        arguments = dict(call.arguments)
        renames = self._renames(self.rename_args, "inputSchema", tool, ctx)
        if renames:
            stale_names = sorted(old for old in renames if old in arguments)
            back = {new: old for old, new in renames.items()}
            missing = self._missing(tool, renames, stale_names, arguments, ctx)
            if missing or (stale_names and self.reject == "invalid_params"):
                return Injection("rename_args", reply=self._rejection(call, missing, stale_names), notify=notify)
            if stale_names or any(name in back for name in arguments):
                # Old names the redeployed server does not know are ignored by it (optional arguments).
                kept = {name: value for name, value in arguments.items() if name not in stale_names}
                params = dict(call.params)
                params["arguments"] = {back.get(name, name): value for name, value in kept.items()}
                upstream = {**call.body, "params": params}
                return Injection("rename_args", upstream_request=upstream, response=renamed_results, notify=notify)
        mode = "rename_fields" if fields else "rename_args"
        return Injection(mode, response=renamed_results, notify=notify)

    def _renames(
        self, setting: Mapping[str, str] | str | None, schema_key: str, tool: str, ctx: PlanContext
    ) -> Renames:
        if setting is None:
            return {}
        if isinstance(setting, Mapping):
            return setting
        listed = ctx.tool(tool)
        schema = listed.get(schema_key) if listed is not None else None
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        if not isinstance(properties, Mapping):
            return {}
        return auto_names([str(name) for name in properties], seed=ctx.seed, salt=f"{ctx.rule_name}:{tool}")

    def _missing(
        self, tool: str, renames: Renames, stale: list[str], arguments: Mapping[str, Any], ctx: PlanContext
    ) -> list[str]:
        """The new names the redeployed server requires and the call lacks (those it sent under old names,
        or every required one the schema names)."""
        listed = ctx.tool(tool)
        schema = listed.get("inputSchema") if listed is not None else None
        required = schema.get("required") if isinstance(schema, Mapping) else None
        if not isinstance(required, list):  # schema unknown: a renamed argument that was sent was needed
            return [renames[old] for old in stale]
        renamed_required = [renames.get(name, name) for name in required if isinstance(name, str)]
        return [name for name in renamed_required if name not in arguments]

    def _rejection(self, call: Call, missing: list[str], stale: list[str]) -> dict[str, Any]:
        tool = call.target or ""
        if self.reject == "invalid_params":
            problems = [f"{name!r} is a required property" for name in missing]
            if stale:
                unexpected = ", ".join(repr(name) for name in stale)
                verb = "was" if len(stale) == 1 else "were"
                problems.append(f"Additional properties are not allowed ({unexpected} {verb} unexpected)")
            message = f"Invalid params for tool {tool!r}: " + "; ".join(problems)
            return jsonrpc.error_response(call.request_id, jsonrpc.INVALID_PARAMS, message)
        given = dict(call.arguments)
        errors = "".join(
            f"\n{name}\n  Field required [type=missing, input_value={given!r}, input_type=dict]\n"
            f"    For further information visit {PYDANTIC_MISSING}"
            for name in missing
        )
        count = len(missing)
        plural = "s" if count != 1 else ""
        text = f"Error executing tool {tool}: {count} validation error{plural} for {tool}Arguments{errors}"
        return jsonrpc.tool_error_result(call.request_id, text, modern=call.modern)

    def _rewrite_list(self, body: dict[str, Any], ctx: PlanContext) -> None:
        result = body.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else []:
            if not isinstance(tool, dict) or not ctx.matches_tool(str(tool.get("name"))):
                continue
            name = str(tool.get("name"))
            args = self._renames(self.rename_args, "inputSchema", name, ctx)
            fields = self._renames(self.rename_fields, "outputSchema", name, ctx)
            if args and isinstance(tool.get("inputSchema"), dict):
                tool["inputSchema"] = _rename_schema(tool["inputSchema"], args)
            if fields and isinstance(tool.get("outputSchema"), dict):
                tool["outputSchema"] = _rename_schema(tool["outputSchema"], fields)


def auto_names(names: list[str], *, seed: int, salt: str) -> dict[str, str]:
    """New names for ``names``, as a redeploy renames them: snake_case <-> camelCase for compound names,
    a suffix for one-word ones; chosen by a hash of the seed, so every run (and process) agrees."""
    taken = set(names)
    renames: dict[str, str] = {}
    for name in names:
        digest = hashlib.sha256(f"{seed}:{salt}:{name}".encode()).digest()
        parts = [p for p in re.split(r"_|(?<=[a-z0-9])(?=[A-Z])", name) if p]
        if len(parts) > 1 and digest[0] % 3:
            new = (
                parts[0].lower() + "".join(p[:1].upper() + p[1:] for p in parts[1:])
                if "_" in name
                else "_".join(p.lower() for p in parts)
            )
        else:
            new = name + _SUFFIXES[digest[1] % len(_SUFFIXES)]
        while new in taken:
            new += "2"
        taken.add(new)
        renames[name] = new
    return renames


def _prompt_arguments(prompt: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    arguments = prompt.get("arguments") if prompt is not None else None
    return [a for a in arguments if isinstance(a, Mapping)] if isinstance(arguments, list) else []


def _keys(node: Any) -> list[str]:
    """Every object key at every depth, each once, in the order met."""
    found: dict[str, None] = {}
    stack = [node]
    while stack:
        current = stack.pop(0)
        if isinstance(current, dict):
            found.update(dict.fromkeys(str(k) for k in current))
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return list(found)


def _rename_result(body: dict[str, Any], names: Renames) -> tuple[str, ...]:
    """Rename the result's fields in place; the old names it renamed (the fields the client no longer finds)."""
    result = body.get("result")
    if not isinstance(result, dict) or not names:
        return ()
    renamed: set[str] = set()
    if "structuredContent" in result:
        renamed |= keys_present(result["structuredContent"], names)
        result["structuredContent"] = rename_keys(result["structuredContent"], names)
    for item in result.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            try:
                parsed = json.loads(item["text"])
            except ValueError:
                continue
            if isinstance(parsed, dict | list):
                renamed |= keys_present(parsed, names)
                item["text"] = json.dumps(rename_keys(parsed, names))
    return tuple(sorted(renamed))


def _json_step(edit: Callable[[dict[str, Any]], tuple[str, ...] | None]) -> ResponseStep:
    """A step that edits the answer's JSON in place; ``edit`` returns the result fields it changed, if any."""

    def step(data: bytes) -> Delivery:
        body = load_object(data)
        if body is None:
            return Delivery(data)
        changed = edit(body)
        return Delivery(encode(body), fields=changed or ())

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
