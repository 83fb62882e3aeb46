"""``mcpfault proxy --dry-run``: which rule of a profile would act on which of a server's tools.

A profile that silently does nothing (a glob that names the mock's tools, ``read_only = true`` on a
server without annotations) is the commonest mistake. The dry run starts the server, reads what it
offers (tools/list, resources/list, prompts/list, every page) with the official SDK's client, and
matches each rule the way the engine will: globs, annotations, the transport it can act on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from mcpfault.errors import UpstreamError
from mcpfault.faults.base import STDIO, Call
from mcpfault.faults.engine import Engine
from mcpfault.faults.profile import KINDS_OF_METHOD, Profile, Rule

READ_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Inventory:
    """What a server offers; ``None`` for a kind it does not offer (no capability, or it refused to list)."""

    tools: tuple[Mapping[str, Any], ...]
    resources: tuple[str, ...] | None = None
    prompts: tuple[str, ...] | None = None
    server: str = ""


@dataclass(frozen=True, slots=True)
class RuleMatch:
    rule: Rule
    tools: tuple[str, ...] = ()
    why_none: str = ""  # when ``tools`` is empty: why the rule can never fire here
    # For a fault that says which result fields it changes (its ``touches``, e.g. a lie): per tool,
    # "mode: /pointer, ..." from the tool's outputSchema.
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class DryRun:
    inventory: Inventory
    rules: tuple[RuleMatch, ...] = field(default=())

    @property
    def idle(self) -> tuple[RuleMatch, ...]:
        """The rules that match nothing."""
        return tuple(m for m in self.rules if not m.tools)


async def read_inventory(command: Sequence[str]) -> Inventory:
    """Start ``command``, list everything it offers, stop it."""
    from mcp import Client, MCPError, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=command[0], args=list(command[1:]), env=dict(os.environ))
    try:
        with anyio.fail_after(READ_TIMEOUT_S):
            async with Client(stdio_client(params), mode="auto", read_timeout_seconds=READ_TIMEOUT_S) as client:
                tools: list[Mapping[str, Any]] = []
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools += [t.model_dump(by_alias=True, exclude_none=True) for t in page.tools]
                    cursor = page.next_cursor
                    if not cursor:
                        break
                capabilities = client.server_capabilities

                async def names(kind: str) -> tuple[str, ...] | None:
                    if getattr(capabilities, kind, None) is None:
                        return None
                    found: list[str] = []
                    cursor: str | None = None
                    try:
                        while True:
                            if kind == "resources":
                                listed = await client.list_resources(cursor=cursor)
                                found += [str(r.uri) for r in listed.resources]
                            else:
                                prompts = await client.list_prompts(cursor=cursor)
                                found += [p.name for p in prompts.prompts]
                                listed = prompts  # type: ignore[assignment]
                            cursor = listed.next_cursor
                            if not cursor:
                                return tuple(found)
                    except MCPError:
                        return None

                resources = await names("resources")
                prompts = await names("prompts")
                info = client.server_info
                server = f"{info.name} {info.version}".strip() if info is not None else ""
    except TimeoutError:
        raise UpstreamError(f"the server did not list its tools within {READ_TIMEOUT_S:.0f} s") from None
    except (OSError, MCPError) as exc:
        raise UpstreamError(f"could not read the server's tools: {exc}") from None
    return Inventory(tuple(tools), resources, prompts, server)


def match(profile: Profile, inventory: Inventory, transport: str = STDIO) -> DryRun:
    """Each rule with the tools it would act on, as the engine matches them (globs, annotations)."""
    engine = Engine(profile, transport=transport)
    listing = {"jsonrpc": "2.0", "id": 0, "result": {"tools": list(inventory.tools)}}
    engine.observe_response(Call.from_body({"jsonrpc": "2.0", "id": 0, "method": "tools/list"}), b"", listing)
    names = [str(t.get("name")) for t in inventory.tools]
    found = []
    for rule in profile.rules:
        if transport not in rule.fault.transports:
            found.append(RuleMatch(rule, why_none=f"acts over HTTP only (--listen); not over {transport}"))
            continue
        acts_on_tools = "tools/call" in rule.methods
        by_glob = [n for n in names if rule.matches_tool(n)] if acts_on_tools else []
        tools = tuple(n for n in by_glob if engine.annotated_as(rule, n))
        others = _other_targets(rule, inventory)
        why = ""
        if not tools and not others:
            if not acts_on_tools:
                why = f"methods = {sorted(rule.methods)} name none of what the server offers"
            elif not by_glob:
                why = f"tools = {list(rule.tools)} names none of the server's tools"
            else:
                wanted = "readOnlyHint true" if rule.read_only else "no readOnlyHint true"
                why = f"read_only = {str(rule.read_only).lower()}: none of {', '.join(by_glob)} has {wanted}"
        found.append(RuleMatch(rule, tools + others, why, _fields(rule, profile.seed, inventory, tools)))
    return DryRun(inventory, tuple(found))


def _fields(rule: Rule, seed: int, inventory: Inventory, tools: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(tool, "mode: /field, ...; mode: ...") for each tool the rule acts on whose fields its fault names."""
    touches = getattr(rule.fault, "touches", None)
    if not callable(touches):
        return ()
    listed = {str(t.get("name")): t for t in inventory.tools}
    found = []
    for name in tools:
        by_mode = touches(listed[name], seed=seed, rule_name=rule.name)
        if by_mode:
            found.append((name, "; ".join(f"{mode}: {', '.join(fields)}" for mode, fields in by_mode.items())))
    return tuple(found)


def _other_targets(rule: Rule, inventory: Inventory) -> tuple[str, ...]:
    """What a rule acts on besides tools: the server's resources and prompts its globs match (as
    ``resource URI`` and ``prompt NAME``), and the listings it names (``prompts/list``)."""
    found: list[str] = []
    offered = {"resources": inventory.resources, "prompts": inventory.prompts}
    for kind, match in (("resources", rule.matches_resource), ("prompts", rule.matches_prompt)):
        if offered[kind] and {m for m in rule.methods if kind in KINDS_OF_METHOD.get(m, ())}:
            found += [f"{kind[:-1]} {name}" for name in offered[kind] or () if match(name)]
    found += sorted(m for m in rule.methods if m not in KINDS_OF_METHOD and m != "tools/call")
    return tuple(found)
