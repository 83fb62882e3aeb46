"""malformed: the server acts, and its response is corrupted on the way back."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from random import Random
from typing import Any, ClassVar, Literal

from mcpfault.faults.base import (
    READS,
    SERVER_REQUESTS,
    TOOLS_CALL,
    Call,
    Delivery,
    Effect,
    FaultBase,
    Injection,
    PlanContext,
    encode,
    load_object,
    rewrite_text_json,
)

Mode = Literal["truncate", "not_json", "missing_result", "wrong_id", "wrong_type"]
ALL_MODES: tuple[Mode, ...] = ("truncate", "not_json", "missing_result", "wrong_id", "wrong_type")
# What a server that logs to stdout, or a gateway in front of one, puts on the wire.
# The lists a result carries, by request kind: tools/call, resources/read, prompts/get, then the listings.
_LISTS = ("content", "contents", "messages", "tools", "resources", "resourceTemplates", "prompts")
NOT_JSON = b"Error: upstream connection pool exhausted (worker 3), retrying\n"


@dataclass(frozen=True, slots=True)
class Malformed(FaultBase):
    type_name: ClassVar[str] = "malformed"
    MODES: ClassVar[tuple[str, ...]] = ALL_MODES
    event_name: ClassVar[str] = "mcpfault.corrupt"
    targets: ClassVar[frozenset[str]] = TOOLS_CALL | READS | SERVER_REQUESTS
    # A broken answer fails the client's attempt; a value of the wrong type matters when the task reads it.
    effect: ClassVar[Effect] = "changed_fields"

    # One is drawn per injection.
    modes: tuple[Mode, ...] = ALL_MODES

    def draws(self) -> bool:
        return True  # the mode, and where in the answer the damage goes

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        mode = self.modes[rng.randrange(len(self.modes))]
        # Drawn now so that which byte or field is hit depends only on the request sequence.
        where = rng.random()
        if mode == "wrong_type":
            return Injection(mode, response=lambda data: _wrong_type(data, where))
        corrupt = _CORRUPTIONS[mode]
        return Injection(mode, response=lambda data: Delivery(corrupt(data, where)))


def _truncate(data: bytes, where: float) -> bytes:
    body = data.rstrip(b"\r\n")
    cut = max(1, min(len(body) - 1, int(len(body) * (0.25 + where * 0.5))))
    return body[:cut] + b"\n"


def _not_json(_data: bytes, _where: float) -> bytes:
    return NOT_JSON


def _missing_result(data: bytes, _where: float) -> bytes:
    body = load_object(data)
    if body is None:
        return data
    body.pop("result", None)
    body.pop("error", None)
    return encode(body)


def _wrong_id(data: bytes, _where: float) -> bytes:
    body = load_object(data)
    if body is None:
        return data
    original = body.get("id")
    if isinstance(original, int) and not isinstance(original, bool):
        body["id"] = original + 1_000_003
    elif isinstance(original, str):
        body["id"] = original + "-stray"
    else:
        body["id"] = "mcpfault-stray-reply"
    return encode(body)


def _wrong_type(data: bytes, where: float) -> Delivery:
    """One value of another type; ``fields`` names the field it belongs to (the innermost key)."""
    body = load_object(data)
    if body is None or not isinstance(body.get("result"), dict):
        return Delivery(data)
    result = body["result"]
    structured = result.get("structuredContent")
    if isinstance(structured, dict | list) and _leaves(structured):
        mutated, path = _mutate_leaf(structured, where)
        result["structuredContent"] = mutated
        rewrite_text_json(result, mutated)
        keys = [step for step in path if isinstance(step, str)]
        fields: tuple[str, ...] = (keys[-1],) if keys else ()
    elif listed := next((key for key in _LISTS if isinstance(result.get(key), list)), None):
        # No structured result: the list the answer carries (content, a resource's contents, a prompt's
        # messages, a listing) itself becomes a string.
        result[listed] = json.dumps(result[listed])
        fields = (listed,)
    elif isinstance(completion := result.get("completion"), dict) and isinstance(completion.get("values"), list):
        completion["values"] = json.dumps(completion["values"])
        fields = ("values",)
    else:
        result["content"] = {"unexpected": True}
        fields = ("content",)
    return Delivery(encode(body), fields=fields)


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [p for k in sorted(node) for p in _leaves(node[k], (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _leaves(v, (*path, i))]
    return [path]


def _mutate_leaf(root: Any, where: float) -> tuple[Any, tuple[Any, ...]]:
    """A copy of ``root`` with one leaf of another type, and that leaf's path."""
    paths = _leaves(root)
    path = paths[min(len(paths) - 1, int(where * len(paths)))]
    copy = json.loads(json.dumps(root))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = _other_type(parent[path[-1]])
    return copy, path


def _other_type(value: Any) -> Any:
    """A value of another JSON type that a careless reader might still accept."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return [value]
    if value is None:
        return 0
    return str(value)


_CORRUPTIONS: dict[str, Callable[[bytes, float], bytes]] = {
    "truncate": _truncate,
    "not_json": _not_json,
    "missing_result": _missing_result,
    "wrong_id": _wrong_id,
}
