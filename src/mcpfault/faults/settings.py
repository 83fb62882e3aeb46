"""Decode a fault's own TOML keys into its frozen settings dataclass, collecting every problem.

A field's type hint says what TOML may hold; ``metadata`` adds bounds (``min``, ``max``). Field
names carry their units (``delay_s``), so a profile reads without a manual.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, get_args, get_origin

Report = Callable[[str, str], None]  # (field, message)


def bounded(default: Any, *, min: float | None = None, max: float | None = None) -> Any:
    """A dataclass field with numeric bounds that validation enforces."""
    return dataclasses.field(default=default, metadata={"min": min, "max": max})


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or nothing when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def decode(cls: type[Any], table: Mapping[str, Any], report: Report, *, rule_keys: Iterable[str] = ()) -> Any | None:
    """Build ``cls`` from ``table``; unknown keys and bad values are reported, never raised.

    ``rule_keys`` are the keys every rule takes besides the type's own, named in the message for an
    unknown key so a misspelt ``probablity`` is not read as "probability is not allowed here"."""
    rule_keys = tuple(rule_keys)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    values: dict[str, Any] = {}
    ok = True
    for key, raw in table.items():
        if key not in fields:
            own = ", ".join(sorted(fields)) or "none"
            hint = did_you_mean(key, [*fields, *rule_keys])
            every = f"; every rule also takes: {', '.join(rule_keys)}" if rule_keys else ""
            report(key, f"unknown key{hint}; type {cls.type_name!r} takes: {own}{every}")
            ok = False
            continue
        field = fields[key]
        value, problem = _coerce(hints[key], raw)
        if problem is None:
            problem = _check_bounds(value, field.metadata)
        if problem is not None:
            report(key, problem)
            ok = False
        else:
            values[key] = value
    for name, field in fields.items():
        missing = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if missing and name not in table:
            report(name, f"is required for type {cls.type_name!r}")
            ok = False
    if not ok:
        return None
    try:
        instance = cls(**values)
    except ValueError as exc:  # cross-field checks in __post_init__
        report(str(exc.args[1]) if len(exc.args) > 1 else "settings", str(exc.args[0]))
        return None
    return instance


def describe(hint: Any, quote: Callable[[Any], str] = repr) -> str:
    """What a field may hold, in words; ``quote`` writes the allowed literals (``toml_value`` for a listing)."""
    origin = get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(quote(a) for a in get_args(hint))
    if origin is tuple:
        inner = describe(get_args(hint)[0], quote)
        return f"a list, each {inner}" if inner.startswith("one of") else f"a list of {inner}"
    if origin in (Mapping, dict) or origin is typing.Mapping:
        return "a table of string to string"
    if origin in (types.UnionType, typing.Union):
        return " or ".join(describe(a, quote) for a in get_args(hint) if a is not type(None))
    names = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}
    return names.get(hint, str(hint))


def toml_value(value: Any) -> str:
    """``value`` as it is written in a profile (TOML), for listings people copy from."""
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return str(value)


def _coerce(hint: Any, raw: Any) -> tuple[Any, str | None]:
    origin = get_origin(hint)
    wrong = f"got {_show(raw)}; expected {describe(hint)}"
    if origin in (types.UnionType, typing.Union):
        for arm in get_args(hint):
            if arm is type(None):
                continue
            value, problem = _coerce(arm, raw)
            if problem is None:
                return value, None
        return None, wrong
    if origin is Literal:
        return (raw, None) if raw in get_args(hint) and isinstance(raw, str) else (None, wrong)
    if origin is tuple:
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not raw:
            return None, f"got {_show(raw)}; expected a non-empty list of {describe(get_args(hint)[0])}"
        items = []
        for index, item in enumerate(raw):
            value, problem = _coerce(get_args(hint)[0], item)
            if problem is not None:
                return None, f"item {index}: {problem}"
            items.append(value)
        return tuple(items), None
    if origin is Mapping or origin is dict:
        if not isinstance(raw, dict) or not raw:
            return None, f'got {_show(raw)}; expected a non-empty table like {{ old_name = "new_name" }}'
        for k, v in raw.items():
            if not isinstance(v, str) or not v:
                return None, f"{k!r} = {_show(v)}; expected a non-empty string"
        return types.MappingProxyType(dict(raw)), None
    if hint is float:
        ok = isinstance(raw, int | float) and not isinstance(raw, bool)
        if ok and not math.isfinite(raw):  # TOML's nan and inf: no bound check refuses them (nan < 0 is false)
            return None, f"got {raw}; expected a finite number"
        return (float(raw), None) if ok else (None, wrong)
    if hint is int:
        ok = isinstance(raw, int) and not isinstance(raw, bool)
        return (raw, None) if ok else (None, wrong)
    if hint is bool:
        return (raw, None) if isinstance(raw, bool) else (None, wrong)
    if hint is str:
        return (raw, None) if isinstance(raw, str) else (None, wrong)
    raise TypeError(f"settings field type {hint!r} is not supported")


def _check_bounds(value: Any, metadata: Mapping[str, Any]) -> str | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    low, high = metadata.get("min"), metadata.get("max")
    if low is not None and value < low:
        return f"{value} is below the minimum {low}" + ("; use a value >= 0" if low == 0 else "")
    if high is not None and value > high:
        return f"{value} is above the maximum {high}"
    return None


def _show(raw: Any) -> str:
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "table"}
    name = kind.get(type(raw), type(raw).__name__)
    text = repr(raw)
    return f"{name} {text if len(text) <= 40 else text[:37] + '...'}"
