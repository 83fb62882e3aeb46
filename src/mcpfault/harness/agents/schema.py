"""Checking results against a tool's outputSchema, and working out renames between two schemas.

A rename is accepted only when it is unambiguous: a property disappeared, exactly one new property
of the same shape appeared at the same place, and no other vanished property could claim it.
Anything else is a changed contract the caller must not paper over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema

from mcpfault.errors import ContractChanged
from mcpfault.protocol.values import rename_keys

__all__ = ["find_renames", "rename_keys", "validate"]

_validators: dict[int, jsonschema.protocols.Validator] = {}


def validate(instance: Any, schema: Mapping[str, Any]) -> str | None:
    """The first way ``instance`` breaks ``schema``, or None when it conforms."""
    validator = _validators.get(id(schema))
    if validator is None:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator = _validators[id(schema)] = cls(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"{where}: {error.message}"


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
