"""``mcpfault cassette diff A B``: what changed between two cassettes' tool, resource and prompt listings.

Breaking: a removed tool, resource or prompt; a new required argument; an argument's changed type; a
removed argument. Compatible: anything added that a client need not send (a new tool, a new optional
argument), and changed descriptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from mcpfault.cassette.format import Cassette

Kind = Literal["breaking", "compatible"]


@dataclass(frozen=True, slots=True)
class Change:
    kind: Kind
    where: str
    what: str


def _by(items: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {str(item.get(key)): item for item in items}


def _schema(tool: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    schema = tool.get("inputSchema")
    schema = schema if isinstance(schema, dict) else {}
    properties = schema.get("properties")
    required = schema.get("required")
    return (
        properties if isinstance(properties, dict) else {},
        {str(name) for name in required} if isinstance(required, list) else set(),
    )


def _tool_changes(name: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    where = f"tool {name}"
    old_props, old_required = _schema(old)
    new_props, new_required = _schema(new)
    changes = []
    for arg in sorted(set(old_props) - set(new_props)):
        changes.append(Change("breaking", where, f"argument {arg!r} removed"))
    for arg in sorted(set(new_props) - set(old_props)):
        kind: Kind = "breaking" if arg in new_required else "compatible"
        changes.append(Change(kind, where, f"new {'required' if arg in new_required else 'optional'} argument {arg!r}"))
    for arg in sorted(set(old_props) & set(new_props)):
        old_type = old_props[arg].get("type") if isinstance(old_props[arg], dict) else None
        new_type = new_props[arg].get("type") if isinstance(new_props[arg], dict) else None
        if old_type != new_type:
            changes.append(Change("breaking", where, f"argument {arg!r} type {old_type} -> {new_type}"))
        if arg in new_required and arg not in old_required:
            changes.append(Change("breaking", where, f"argument {arg!r} is now required"))
        elif arg in old_required and arg not in new_required:
            changes.append(Change("compatible", where, f"argument {arg!r} is now optional"))
    if old.get("description") != new.get("description"):
        changes.append(Change("compatible", where, "description changed"))
    if old.get("outputSchema") != new.get("outputSchema"):
        changes.append(Change("breaking", where, "output schema changed"))
    return changes


def diff(old: Cassette, new: Cassette) -> list[Change]:
    """Every change from ``old`` to ``new``, tools first, then resources, then prompts."""
    changes: list[Change] = []
    for method, noun, key in (
        ("tools/list", "tool", "name"),
        ("resources/list", "resource", "uri"),
        ("prompts/list", "prompt", "name"),
    ):
        before, after = _by(old.listing(method), key), _by(new.listing(method), key)
        for name in sorted(set(before) - set(after)):
            changes.append(Change("breaking", f"{noun} {name}", "removed"))
        for name in sorted(set(after) - set(before)):
            changes.append(Change("compatible", f"{noun} {name}", "added"))
        for name in sorted(set(before) & set(after)):
            if noun == "tool":
                changes += _tool_changes(name, before[name], after[name])
            elif noun == "prompt":
                changes += _prompt_changes(name, before[name], after[name])
    return changes


def _prompt_changes(name: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    def arguments(prompt: dict[str, Any]) -> dict[str, bool]:
        items = prompt.get("arguments")
        return (
            {str(a.get("name")): bool(a.get("required")) for a in items if isinstance(a, dict)}
            if isinstance(items, list)
            else {}
        )

    before, after = arguments(old), arguments(new)
    changes = [
        Change("breaking", f"prompt {name}", f"argument {arg!r} removed") for arg in sorted(set(before) - set(after))
    ]
    for arg in sorted(set(after) - set(before)):
        changes.append(
            Change(
                "breaking" if after[arg] else "compatible",
                f"prompt {name}",
                f"new {'required' if after[arg] else 'optional'} argument {arg!r}",
            )
        )
    return changes
