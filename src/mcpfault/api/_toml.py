"""A profile given as a mapping, written as TOML (the proxy reads profile files only).

Profiles hold few shapes: top-level scalars, a ``[server]`` table, ``[[faults]]`` tables of scalars,
lists and small inline tables. The text is checked by reading it back: what was written is what was given.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dumps(document: Mapping[str, Any]) -> str:
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in document.items():
        if isinstance(value, Mapping):
            tables.append((key, value))
        elif isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
            tables.extend((f"[{key}]", item) for item in value)
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for header, table in tables:
        lines.append("")
        lines.append(f"[[{_key(header[1:-1])}]]" if header.startswith("[") else f"[{_key(header)}]")
        lines.extend(f"{_key(key)} = {_value(value)}" for key, value in table.items())
    text = "\n".join(lines) + "\n"
    if tomllib.loads(text) != _plain(document):
        raise ValueError("the profile cannot be written as TOML exactly (a None, or a value TOML has no form for)")
    return text


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise ValueError(f"profile key {key!r} is not a string")
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"{value!r} ({type(value).__name__}) has no TOML form; use strings, numbers, booleans, lists")


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
