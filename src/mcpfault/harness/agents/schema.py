"""Checking results against a tool's outputSchema, and working out renames between two schemas.

A rename is accepted only when it is unambiguous: a property disappeared, exactly one new property
of the same shape appeared at the same place, and no other vanished property could claim it.
Anything else is a changed contract the caller must not paper over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import jsonschema

from mcpfault.errors import ContractChanged
from mcpfault.protocol.values import rename_keys

__all__ = ["find_renames", "rename_keys", "validate"]

_validators: dict[int, jsonschema.protocols.Validator] = {}


def validate(instance: Any, schema: Mapping[str, Any]) -> str | None:
    """The first way ``instance`` breaks ``schema``, or None when it conforms."""
    if _surely_conforms(instance, schema):
        return None
    validator = _validators.get(id(schema))
    if validator is None:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator = _validators[id(schema)] = cls(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"{where}: {error.message}"


# What `_surely_conforms` reads (the keywords of the mock's schemas), and those that assert nothing.
_CHECKED: Final = frozenset({"type", "properties", "required", "additionalProperties", "items", "enum"})
_NOTES: Final = frozenset({"description", "title", "default", "examples", "$comment"})
_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
    "integer": (int,),  # and not bool, below; an integral float is jsonschema's to judge
    "number": (int, float),
}


def _surely_conforms(instance: Any, schema: Any) -> bool:
    """True only when ``instance`` conforms to ``schema`` for certain; False when it may not.

    A result is checked against its outputSchema on every call, and jsonschema spends ~0.2 ms of CPU
    on each (a validator object per subschema it descends into). This reads the few keywords the
    mock's schemas use; anything else (another keyword, `$schema`, `$ref`, a float where an integer
    is asked for, an enum value of another type) answers False, and jsonschema decides, with its message.
    """
    if schema is True:
        return True
    if not isinstance(schema, dict) or not schema.keys() <= _CHECKED | _NOTES:
        return False
    if "type" in schema and not _of_type(instance, schema["type"]):
        return False
    if "enum" in schema:
        options = schema["enum"]
        if not isinstance(options, list) or not isinstance(instance, str | bool | int | None):
            return False
        if not any(type(option) is type(instance) and option == instance for option in options):
            return False
    if isinstance(instance, dict) and not _object_conforms(instance, schema):
        return False
    if isinstance(instance, list) and "items" in schema:
        items = schema["items"]
        if items is False:
            return not instance
        return all(_surely_conforms(item, items) for item in instance)
    return True


def _of_type(instance: Any, wanted: Any) -> bool:
    names = [wanted] if isinstance(wanted, str) else wanted
    if not isinstance(names, list):
        return False
    for name in names:
        types = _TYPES.get(name) if isinstance(name, str) else None
        if types is not None and isinstance(instance, types):
            if isinstance(instance, bool) and name in ("integer", "number"):
                continue
            return True
    return False


def _object_conforms(instance: dict[str, Any], schema: dict[str, Any]) -> bool:
    required = schema.get("required", [])
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    if not isinstance(required, list) or not isinstance(properties, dict):
        return False
    if any(name not in instance for name in required):
        return False
    for name, value in instance.items():
        if name in properties:
            if not _surely_conforms(value, properties[name]):
                return False
        elif not _surely_conforms(value, extra):
            return False
    return True


def find_renames(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, str]:
    """Old property name -> new name, at any depth; raises ContractChanged when a change is not a clean rename."""
    mapping: dict[str, str] = {}
    _walk(old, new, mapping)
    return mapping


def _walk(old: Any, new: Any, mapping: dict[str, str]) -> None:
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return
    old_props, new_props = old.get("properties"), new.get("properties")
    if isinstance(old_props, Mapping) and isinstance(new_props, Mapping):
        removed = [k for k in old_props if k not in new_props]
        added = [k for k in new_props if k not in old_props]
        pairs = {}
        for name in removed:
            candidates = [a for a in added if _same_shape(old_props[name], new_props[a])]
            if len(candidates) != 1:
                raise ContractChanged(
                    f"property {name!r} is gone and {len(candidates)} new properties could replace it "
                    f"({', '.join(sorted(added)) or 'none'})"
                )
            rivals = [r for r in removed if _same_shape(old_props[r], new_props[candidates[0]])]
            if len(rivals) != 1:
                raise ContractChanged(f"{candidates[0]!r} could replace any of {sorted(rivals)}")
            if mapping.get(name, candidates[0]) != candidates[0]:
                raise ContractChanged(f"{name!r} is renamed to two different names")
            mapping[name] = pairs[name] = candidates[0]
        for name in old_props:
            counterpart = name if name in new_props else pairs.get(name)
            if counterpart is not None:
                _walk(old_props[name], new_props[counterpart], mapping)
    if "items" in old and "items" in new:
        _walk(old["items"], new["items"], mapping)


def _same_shape(a: Any, b: Any) -> bool:
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return bool(a == b)
    keys = ("type", "enum", "format", "const")
    if any(a.get(k) != b.get(k) for k in keys):
        return False
    if isinstance(a.get("items"), Mapping) and isinstance(b.get("items"), Mapping):
        return _same_shape(a["items"], b["items"])
    return True
