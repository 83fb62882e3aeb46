"""Profiles: TOML documents of ``name``, ``seed`` and ``[[faults]]`` rules.

A rule is read in two steps (as Toxiproxy decodes a toxic): first its generic keys (``type``,
``name``, ``tools``, ``probability``, ``after``, ``limit``), then its type's own settings. Every
problem is collected, each naming file, rule, field and what is allowed.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpfault.errors import Problem, ProfileError
from mcpfault.faults import settings
from mcpfault.faults.base import Fault
from mcpfault.faults.catalog import CATALOG, Catalog

GENERIC_KEYS = ("type", "name", "tools", "probability", "after", "limit")
TOP_LEVEL_KEYS = ("name", "seed", "description", "faults", "probe")  # [probe]: read by probe/policy.py
# MCP tool names are 1-128 of [A-Za-z0-9_.-]; globs add * ? [ ] !
_GLOB_CHARS = re.compile(r"^[A-Za-z0-9_.\-/*?\[\]!]+$")


@dataclass(frozen=True)
class Rule:
    index: int
    name: str
    type_name: str
    fault: Fault
    tools: tuple[str, ...] = ("*",)
    probability: float = 1.0
    after: int = 0  # matching calls let through before the rule may fire
    limit: int | None = None  # at most this many injections; None: no limit
    matches_tool: Callable[[str], bool] = field(default=lambda _name: True, compare=False, repr=False)


@dataclass(frozen=True)
class Profile:
    name: str
    seed: int
    rules: tuple[Rule, ...]
    source: str = "<memory>"
    description: str = ""


def load(path: str | Path, catalog: Catalog = CATALOG) -> Profile:
    """Read and validate a profile file; raise ProfileError listing every problem."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ProfileError([Problem(str(path), None, "file", "does not exist; check the path")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError([Problem(str(path), None, "file", f"cannot be read: {exc}")]) from None
    return loads(text, source=str(path), catalog=catalog)


def loads(text: str, source: str = "<memory>", catalog: Catalog = CATALOG) -> Profile:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError([Problem(source, None, "toml", f"is not valid TOML: {exc}")]) from None
    return from_mapping(document, source=source, catalog=catalog)


def from_mapping(document: Mapping[str, Any], source: str = "<memory>", catalog: Catalog = CATALOG) -> Profile:
    problems: list[Problem] = []

    def top(field_name: str, message: str) -> None:
        problems.append(Problem(source, None, field_name, message))

    for key in document:
        if key not in TOP_LEVEL_KEYS:
            top(key, f"unknown top-level key; allowed: {', '.join(TOP_LEVEL_KEYS)}")
    name = document.get("name", Path(source).stem)
    if not isinstance(name, str) or not name:
        top("name", f"got {name!r}; expected a non-empty string")
        name = Path(source).stem
    seed = document.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        top("seed", f"got {seed!r}; expected an integer")
        seed = 0
    description = document.get("description", "")
    if not isinstance(description, str):
        top("description", f"got {description!r}; expected a string")
        description = ""
    raw_rules = document.get("faults", [])
    if not isinstance(raw_rules, list):
        top("faults", "expected an array of tables: write each rule under [[faults]]")
        raw_rules = []

    rules: list[Rule] = []
    seen_names: dict[str, int] = {}
    for index, raw in enumerate(raw_rules):
        rule = _rule(index, raw, source, catalog, problems)
        if rule is None:
            continue
        if rule.name in seen_names:
            problems.append(
                Problem(
                    source,
                    index,
                    "name",
                    f"{rule.name!r} is already the name of faults[{seen_names[rule.name]}]; rule names must be unique",
                    rule.name,
                )
            )
        seen_names[rule.name] = index
        rules.append(rule)
    if problems:
        raise ProfileError(problems)
    return Profile(name=name, seed=seed, rules=tuple(rules), source=source, description=description)


def _rule(index: int, raw: Any, source: str, catalog: Catalog, problems: list[Problem]) -> Rule | None:
    if not isinstance(raw, dict):
        problems.append(Problem(source, index, "*", "expected a table; write the rule under [[faults]]"))
        return None
    label = raw.get("name") if isinstance(raw.get("name"), str) else None
    count = len(problems)

    def report(field_name: str, message: str) -> None:
        problems.append(Problem(source, index, field_name, message, label))

    type_name = raw.get("type")
    fault_type = catalog.get(type_name) if isinstance(type_name, str) else None
    if type_name is None:
        report("type", f"is required; one of: {', '.join(catalog.names())}")
    elif fault_type is None:
        report("type", f"unknown fault type {type_name!r}; one of: {', '.join(catalog.names())}")

    name = raw.get("name", f"{type_name}-{index}")
    if not isinstance(name, str) or not name:
        report("name", f"got {name!r}; expected a non-empty string")
    tools = _tools(raw.get("tools", ["*"]), report)
    probability = raw.get("probability", 1.0)
    if not isinstance(probability, int | float) or isinstance(probability, bool):
        report("probability", f"got {probability!r}; expected a number from 0 to 1")
    elif not 0.0 <= probability <= 1.0:
        report("probability", f"{probability} is outside [0, 1]; use a number from 0 to 1")
    after = _count(raw.get("after", 0), "after", report, allow_none=False)
    limit = _count(raw.get("limit"), "limit", report, allow_none=True)

    fault = None
    if fault_type is not None:
        own = {k: v for k, v in raw.items() if k not in GENERIC_KEYS}
        fault = settings.decode(fault_type, own, report)
    if len(problems) > count or fault is None:
        return None
    return Rule(
        index=index,
        name=str(name),
        type_name=str(type_name),
        fault=fault,
        tools=tools,
        probability=float(probability),
        after=int(after or 0),
        limit=limit,
        matches_tool=_matcher(tools),
    )


def _tools(raw: Any, report: Callable[[str, str], None]) -> tuple[str, ...]:
    patterns = [raw] if isinstance(raw, str) else raw
    if not isinstance(patterns, list) or not patterns:
        report("tools", f'got {raw!r}; expected a glob or a non-empty list of globs, e.g. ["get_*"]')
        return ("*",)
    good: list[str] = []
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            report("tools", f"got {pattern!r}; expected a non-empty glob string")
        elif not _GLOB_CHARS.match(pattern):
            report("tools", f"bad glob {pattern!r}: tool names use A-Z a-z 0-9 _ . - and globs add * ? [ ] !")
        elif pattern.count("[") != pattern.count("]") or re.search(r"\[[^\]]*\[", pattern):
            report("tools", f"bad glob {pattern!r}: unbalanced [ ]; a set looks like get_[abc]*")
        else:
            good.append(pattern)
    return tuple(good)


def _count(raw: Any, field_name: str, report: Callable[[str, str], None], *, allow_none: bool) -> int | None:
    if raw is None and allow_none:
        return None
    if not isinstance(raw, int) or isinstance(raw, bool):
        report(field_name, f"got {raw!r}; expected a whole number >= 0")
        return None
    if raw < 0:
        report(field_name, f"{raw} is negative; expected a whole number >= 0")
        return None
    return raw


def _matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    if patterns == ("*",):
        return lambda _name: True
    regex = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))

    @functools.lru_cache(maxsize=1024)
    def matches(name: str) -> bool:
        return regex.match(name) is not None

    return matches
