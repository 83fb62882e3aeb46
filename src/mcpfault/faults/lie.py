"""lie: the server answers, and one value of its answer is plausibly wrong.

Unlike ``malformed``, nothing breaks: the answer still parses and still conforms to the tool's
``outputSchema``; only one field holds a value the server never said. The modes are the lies a
buggy cache, a wrong join or a half-written replica tells:

- ``swap``: the field's value is exchanged with the same field of another item of its list (two
  devices' statuses), or with a sibling of the same type;
- ``scale``: a number is multiplied by ten (a unit mix-up);
- ``shift``: a number moves by a little, an enum string to its neighbour value;
- ``empty``: a list (or a string) comes back empty;
- ``truncate``: a list loses its second half, a string likewise;
- ``stale_field``: the field takes its value from an earlier answer to the same call, the rest is fresh;
- ``contradict``: a boolean is flipped, an enum string takes another value, a number becomes another.

``fields`` chooses which field lies: JSON pointers into the structured content (``/devices/*/status``,
a segment may be a glob) or globs over field names (``status``, ``*_count``); ``"auto"`` picks one of the
answer's fields for each tool and mode from the profile's seed (ids excepted: a wrong id fails the next
call, it is not a lie one believes), so every run tells the same lies. ``structuredContent`` and its
JSON text mirror are rewritten together; the delivery names the changed field (``Delivery.fields``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from random import Random
from typing import Any, ClassVar, Literal

from mcpfault.faults.base import (
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
from mcpfault.faults.settings import bounded

Mode = Literal["swap", "scale", "shift", "empty", "truncate", "stale_field", "contradict"]
ALL_MODES: tuple[Mode, ...] = ("swap", "scale", "shift", "empty", "truncate", "stale_field", "contradict")
AUTO: Literal["auto"] = "auto"
BELIEVED_LIE = "believed_lie"  # the judge's failure class for a wrong answer a lie affected
Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Lie(FaultBase):
    type_name: ClassVar[str] = "lie"
    MODES: ClassVar[tuple[str, ...]] = ALL_MODES
    event_name: ClassVar[str] = "mcpfault.lie"
    targets: ClassVar[frozenset[str]] = TOOLS_CALL
    # A lie matters when the task reads the field it changed (the delivery names it).
    effect: ClassVar[Effect] = "changed_fields"
    # A wrong answer from a task this affected used the lie: the agent believed it.
    wrong_answer: ClassVar[str | None] = BELIEVED_LIE
    needs_tools: ClassVar[bool] = True  # the outputSchema says which values stay valid (an enum's values)

    # One is drawn per injection.
    modes: tuple[Mode, ...] = ALL_MODES
    # JSON pointers (segments may be globs) or field-name globs; "auto": one field per tool and mode, from the seed.
    fields: tuple[str, ...] | Literal["auto"] = AUTO
    # How many earlier answers per call stale_field may take a value from.
    history: int = bounded(8, min=1, max=1024)

    def __post_init__(self) -> None:
        if not self.modes:
            raise ValueError(f"name at least one mode, from: {', '.join(ALL_MODES)}", "modes")
        if self.fields != AUTO and not self.fields:
            raise ValueError('name at least one field, e.g. ["/devices/*/status"] or ["status"], or "auto"', "fields")

    def history_depth(self) -> int:
        return self.history if "stale_field" in self.modes else 0

    def touches(self, tool: Mapping[str, Any], *, seed: int, rule_name: str) -> dict[str, list[str]]:
        """Per mode, the fields this rule may lie in, in ``tool``'s answers (``proxy --dry-run``)."""
        return touches(self, tool, seed=seed, rule_name=rule_name)

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        mode = self.modes[rng.randrange(len(self.modes))]
        # Drawn now so that which item lies, and how, depends only on the request sequence.
        where, how = rng.random(), rng.random()
        tool = call.target or ""
        listing = ctx.tool(tool)
        schema = listing.get("outputSchema") if isinstance(listing, Mapping) else None
        earlier = ctx.history(call)[-self.history :] if mode == "stale_field" else ()
        salt = f"{ctx.seed}:{ctx.rule_name}:{tool}:{mode}"

        def step(data: bytes) -> Delivery:
            return tell(
                data,
                mode,
                fields=self.fields,
                schema=schema if isinstance(schema, Mapping) else None,
                earlier=earlier,
                salt=salt,
                where=where,
                how=how,
            )

        return Injection(mode, response=step)


def tell(
    data: bytes,
    mode: Mode,
    *,
    fields: tuple[str, ...] | Literal["auto"],
    schema: Mapping[str, Any] | None,
    earlier: tuple[bytes, ...],
    salt: str,
    where: float,
    how: float,
) -> Delivery:
    """The answer ``data`` with one lie told in it; unchanged (no fields) when no field can carry the lie."""
    body = load_object(data)
    result = body.get("result") if body is not None else None
    structured = result.get("structuredContent") if isinstance(result, dict) else None
    if body is None or not isinstance(result, dict) or not isinstance(structured, dict):
        return Delivery(data)
    lied = json.loads(json.dumps(structured))
    olds = [_structured(old) for old in earlier]
    candidates = [
        path
        for path in _paths(lied)
        if _selected(path, fields) and _can_lie(mode, lied, path, _schema_at(schema, path), olds)
    ]
    if not candidates:
        return Delivery(data)
    if fields == AUTO:
        # One field (all its list items alike) per tool and mode, from the seed and the tool's outputSchema
        # (so that every answer of the tool lies in the same field, the one --dry-run names), or from the
        # answer's own fields when there is no schema; then one item by the draw.
        shapes = schema_fields(schema, mode, fields) if schema is not None else []
        shapes = shapes or sorted({_shape(path) for path in candidates})
        chosen_shape = _seeded(shapes, salt)
        candidates = [path for path in candidates if _shape(path) == chosen_shape]
        if not candidates:
            return Delivery(data)
    path = candidates[min(len(candidates) - 1, int(where * len(candidates)))]
    _apply(mode, lied, path, schema=_schema_at(schema, path), olds=olds, how=how)
    result["structuredContent"] = lied
    rewrite_text_json(result, lied)
    key = next((step for step in reversed(path) if isinstance(step, str)), None)
    return Delivery(encode(body), fields=(key,) if key is not None else ())


def touches(lie: Lie, tool: Mapping[str, Any], *, seed: int, rule_name: str) -> dict[str, list[str]]:
    """Per mode, the fields (JSON pointers, list items as ``*``) a lie of ``lie`` may change in ``tool``'s
    answers, from its tools/list entry's outputSchema (what ``proxy --dry-run`` shows); empty without one."""
    schema = tool.get("outputSchema")
    if not isinstance(schema, Mapping):
        return {}
    found: dict[str, list[str]] = {}
    for mode in lie.modes:
        shapes = schema_fields(schema, mode, lie.fields)
        if lie.fields == AUTO and shapes:
            shapes = [_seeded(shapes, f"{seed}:{rule_name}:{tool.get('name')}:{mode}")]
        if shapes:
            found[mode] = ["/" + "/".join(shape) for shape in shapes]
    return found


def schema_fields(
    schema: Mapping[str, Any], mode: Mode, fields: tuple[str, ...] | Literal["auto"]
) -> list[tuple[str, ...]]:
    """The fields of an outputSchema (list items as ``*``) that can carry a lie of ``mode``, sorted."""
    found: list[tuple[str, ...]] = []

    def walk(node: Mapping[str, Any], shape: tuple[str, ...], in_list: bool) -> None:
        properties = node.get("properties")
        if not isinstance(properties, Mapping):
            return
        kinds = {key: _kinds(child) for key, child in properties.items() if isinstance(child, Mapping)}
        for key, child in properties.items():
            if not isinstance(child, Mapping):
                continue
            here = (*shape, key)
            kind = kinds[key]
            if "object" in kind:
                walk(child, here, in_list)
                continue
            items = child.get("items")
            if "array" in kind and isinstance(items, Mapping) and "object" in _kinds(items):
                walk(items, (*here, "*"), True)
            siblings = any(k != key and not _is_id(str(k)) and kinds[k] & kind - {"null"} for k in kinds)
            if _selected(tuple("0" if step == "*" else step for step in here), fields) and _schema_can_lie(
                mode, kind, child, swappable=in_list or siblings
            ):
                found.append(here)

    walk(schema, (), False)
    return sorted(found)


def _kinds(schema: Mapping[str, Any]) -> set[str]:
    declared = schema.get("type")
    kinds = {declared} if isinstance(declared, str) else set(declared) if isinstance(declared, list) else set()
    for branch in (*schema.get("anyOf", ()), *schema.get("oneOf", ())):
        if isinstance(branch, Mapping):
            kinds |= _kinds(branch)
    return {str(kind) for kind in kinds}


def _schema_can_lie(mode: Mode, kind: set[str], schema: Mapping[str, Any], *, swappable: bool) -> bool:
    numeric = bool(kind & {"integer", "number"})
    enum = len(_enum(schema)) > 1
    if mode == "swap":
        return swappable and "array" not in kind
    if mode == "scale":
        return numeric
    if mode == "shift":
        return numeric or enum
    if mode in {"empty", "truncate"}:
        return "array" in kind or ("string" in kind and not enum)
    if mode == "stale_field":
        return True
    return "boolean" in kind or numeric or enum


def _seeded(shapes: list[tuple[str, ...]], salt: str) -> tuple[str, ...]:
    digest = hashlib.sha256(salt.encode()).digest()
    return shapes[int.from_bytes(digest[:8], "big") % len(shapes)]


def _structured(data: bytes) -> Any:
    body = load_object(data)
    result = body.get("result") if body is not None else None
    return result.get("structuredContent") if isinstance(result, dict) else None


def _paths(node: Any, path: Path = ()) -> list[Path]:
    """Every value below the root: scalars and lists (a list is a field too: empty, truncate)."""
    found: list[Path] = []
    if isinstance(node, dict):
        for key in node:
            child = node[key]
            if not isinstance(child, dict):
                found.append((*path, key))
            found += _paths(child, (*path, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += _paths(child, (*path, index)) if isinstance(child, dict | list) else []
    return found


def _shape(path: Path) -> tuple[str, ...]:
    return tuple("*" if isinstance(step, int) else step for step in path)


def _is_id(key: str) -> bool:
    return key == "id" or key.endswith("_id") or key.endswith("Id") or key.endswith("_ids") or key.endswith("Ids")


def _selected(path: Path, fields: tuple[str, ...] | Literal["auto"]) -> bool:
    key = next((step for step in reversed(path) if isinstance(step, str)), "")
    if fields == AUTO:
        return not _is_id(key)
    for pattern in fields:
        if pattern.startswith("/"):
            segments = pattern[1:].split("/")
            if len(segments) == len(path) and all(
                fnmatch.fnmatchcase(str(step), segment) for step, segment in zip(path, segments, strict=True)
            ):
                return True
        elif isinstance(path[-1], str) and fnmatch.fnmatchcase(key, pattern):
            return True
    return False


def _schema_at(schema: Mapping[str, Any] | None, path: Path) -> Mapping[str, Any] | None:
    node: Any = schema
    for step in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get("items") if isinstance(step, int) else (node.get("properties") or {}).get(step)
    return node if isinstance(node, Mapping) else None


def _get(root: Any, path: Path) -> Any:
    for step in path:
        root = root[step]
    return root


def _set(root: Any, path: Path, value: Any) -> None:
    _get(root, path[:-1])[path[-1]] = value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _enum(schema: Mapping[str, Any] | None) -> list[Any]:
    values = schema.get("enum") if schema is not None else None
    return list(values) if isinstance(values, list) else []


def _partner(root: Any, path: Path) -> Path | None:
    """Where a swap takes its value: the same field of the first other list item that differs, else a
    sibling of the same type that differs."""
    value = _get(root, path)
    index = next((i for i in range(len(path) - 1, -1, -1) if isinstance(path[i], int)), None)
    if index is not None:
        items = _get(root, path[:index])
        for other in range(len(items)):
            candidate = (*path[:index], other, *path[index + 1 :])
            try:
                theirs = _get(root, candidate)
            except (KeyError, IndexError, TypeError):
                continue
            if other != path[index] and theirs != value and type(theirs) is type(value):
                return candidate
    parent = _get(root, path[:-1])
    if isinstance(parent, dict):
        for key, theirs in parent.items():
            same_type = type(theirs) is type(value) and not isinstance(theirs, dict | list)
            if key != path[-1] and not _is_id(str(key)) and same_type and theirs != value:
                return (*path[:-1], key)
    return None


def _can_lie(mode: Mode, root: Any, path: Path, schema: Mapping[str, Any] | None, olds: list[Any]) -> bool:
    value = _get(root, path)
    if mode == "swap":
        return not isinstance(value, list) and _partner(root, path) is not None
    if mode == "scale":
        return _number(value)
    if mode == "shift":
        return _number(value) or len(_enum(schema)) > 1
    # A string of an enum has no shorter value the schema allows.
    if mode == "empty":
        return (isinstance(value, list) or (isinstance(value, str) and not _enum(schema))) and len(value) > 0
    if mode == "truncate":
        return (isinstance(value, list) or (isinstance(value, str) and not _enum(schema))) and len(value) > 1
    if mode == "stale_field":
        return any(_old_value(old, path, value) is not None for old in olds)
    # contradict
    return isinstance(value, bool) or _number(value) or len(_enum(schema)) > 1


def _old_value(old: Any, path: Path, value: Any) -> tuple[Any] | None:
    try:
        theirs = _get(old, path)
    except (KeyError, IndexError, TypeError):
        return None
    return (theirs,) if theirs != value and type(theirs) is type(value) else None


def _apply(mode: Mode, root: Any, path: Path, *, schema: Mapping[str, Any] | None, olds: list[Any], how: float) -> None:
    value = _get(root, path)
    enum = _enum(schema)
    if mode == "swap":
        other = _partner(root, path)
        assert other is not None  # _can_lie checked
        theirs = _get(root, other)
        _set(root, other, value)
        _set(root, path, theirs)
    elif mode == "scale":
        _set(root, path, value * 10 if value else (10 if isinstance(value, int) else 10.0))
    elif mode == "shift":
        if _number(value):
            step = 1 + int(how * 3)
            _set(root, path, value + step if isinstance(value, int) else round(value * (1.05 + how * 0.1), 6))
        else:
            _set(root, path, enum[(enum.index(value) + 1) % len(enum)] if value in enum else enum[0])
    elif mode == "empty":
        _set(root, path, [] if isinstance(value, list) else "")
    elif mode == "truncate":
        _set(root, path, value[: len(value) // 2])
    elif mode == "stale_field":
        for old in olds:
            found = _old_value(old, path, value)
            if found is not None:
                _set(root, path, found[0])
                return
    elif isinstance(value, bool):
        _set(root, path, not value)
    elif _number(value):
        _set(root, path, 0 if value else 1 + int(how * 5))
    else:
        others = [choice for choice in enum if choice != value]
        _set(root, path, others[min(len(others) - 1, int(how * len(others)))])
