"""Helpers over decoded JSON values, shared by the fault that renames fields and the agent that maps them back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def keys_present(value: Any, names: Mapping[str, str]) -> set[str]:
    """Which keys of ``names`` are object keys somewhere in ``value`` (what ``rename_keys`` would rename)."""
    if isinstance(value, dict):
        found = {k for k in value if k in names}
        for v in value.values():
            found |= keys_present(v, names)
        return found
    if isinstance(value, list):
        return set().union(*(keys_present(v, names) for v in value)) if value else set()
    return set()


def rename_keys(value: Any, names: Mapping[str, str]) -> Any:
    """A copy of ``value`` with object keys renamed by ``names`` at every depth."""
    if isinstance(value, dict):
        return {names.get(k, k): rename_keys(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [rename_keys(v, names) for v in value]
    return value
