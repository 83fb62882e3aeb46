"""JSON Schema from the TypedDicts that define the mock's tool inputs and results, and argument checks.

The TypedDicts are the single definition of each shape: mypy checks that `World` builds them, and the
server publishes the schemas derived here as `inputSchema` / `outputSchema`. Only what those
TypedDicts use is supported: str, int, float, bool, None, Literal, unions, list[...], nested
TypedDicts, `NotRequired[...]`, and `Annotated[T, "description"]`. Nested objects are written out in
place (no `$ref`), and every object schema has `additionalProperties: false`.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

_JSON_TYPES: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def json_schema(hint: object) -> dict[str, Any]:
    """The JSON Schema of a type hint built from the supported parts (see the module docstring)."""
    origin = get_origin(hint)
    if origin is Annotated:
        base, *extras = get_args(hint)
        schema = json_schema(base)
        descriptions = [extra for extra in extras if isinstance(extra, str)]
        if descriptions:
            schema["description"] = descriptions[0]
        return schema
    if origin is Literal:
        values = get_args(hint)
        kinds = list(dict.fromkeys(_JSON_TYPES[type(value)] for value in values))
        return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": list(values)}
    if origin is Union or origin is types.UnionType:
        members = [json_schema(arg) for arg in get_args(hint)]
        if all(member.keys() == {"type"} and isinstance(member["type"], str) for member in members):
            return {"type": [member["type"] for member in members]}
        return {"anyOf": members}
    if origin is list:
        (item,) = get_args(hint)
        return {"type": "array", "items": json_schema(item)}
    if isinstance(hint, type) and hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if isinstance(hint, type) and is_typeddict(hint):
        return _object_schema(hint)
    raise TypeError(f"no JSON Schema for {hint!r}")


def _object_schema(typed_dict: type) -> dict[str, Any]:
    total: bool = getattr(typed_dict, "__total__", True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    # include_extras keeps Annotated and NotRequired. Requiredness is read from the hint itself: with
    # `from __future__ import annotations`, Python 3.11 puts NotRequired keys in __required_keys__.
    for name, hint in get_type_hints(typed_dict, include_extras=True).items():
        origin = get_origin(hint)
        if origin is Required or (origin is not NotRequired and total):
            required.append(name)
        properties[name] = json_schema(get_args(hint)[0] if origin in (Required, NotRequired) else hint)
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _matches_type(value: object, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return False


_TYPE_NOUNS = {
    "string": "a string",
    "boolean": "a boolean (true or false)",
    "null": "null",
    "integer": "an integer",
    "number": "a number",
    "array": "an array",
    "object": "an object",
}


def _json_type_name(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def argument_problems(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    """Why `arguments` do not fit a tool's flat `inputSchema`, one sentence per problem (empty when they fit).

    Checks unknown names, missing required names, JSON types and enums: what a tool input schema here uses.
    """
    properties: Mapping[str, Any] = schema.get("properties", {})
    problems: list[str] = []
    unknown = [name for name in arguments if name not in properties]
    if unknown:
        accepted = ", ".join(properties) or "no arguments"
        names = ", ".join(repr(name) for name in unknown)
        problems.append(f"unexpected argument{'s' if len(unknown) > 1 else ''} {names} (accepted: {accepted})")
    problems.extend(
        f"missing required argument {name!r}" for name in schema.get("required", ()) if name not in arguments
    )
    for name, value in arguments.items():
        spec = properties.get(name)
        if spec is None:
            continue
        kinds = spec.get("type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds or ())
        if kinds and not any(_matches_type(value, kind) for kind in kinds):
            wanted = " or ".join(_TYPE_NOUNS.get(kind, kind) for kind in kinds)
            got = "null" if value is None else f"{_json_type_name(value)} {_json_text(value)}"
            problems.append(f"argument {name!r} must be {wanted}, got {got}")
        elif "enum" in spec and value not in spec["enum"]:
            allowed = ", ".join(_json_text(option) for option in spec["enum"])
            problems.append(f"argument {name!r} must be one of {allowed}, got {_json_text(value)}")
    return problems


def _json_text(value: object) -> str:
    """A value as the client wrote it (JSON), shortened: error messages quote what was sent."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
