"""What the audit will do, decided before any tool is called: the settings, and per tool its claimed
hints, its arguments and the calls it gets. From the settings and ``tools/list`` to a plan; nothing is
called (the arguments are drawn in a helper interpreter: see ``arguments.draw_each``)."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcpfault.audit import arguments as args_
from mcpfault.errors import UsageError

Lose = Literal["drop", "crash"]
SEVERITIES = ("info", "low", "medium", "high")
FAIL_ON = (*SEVERITIES, "never")
# The calls one tool gets, in order; the keyed pair only when its schema offers an idempotency key.
PLAIN, LOST, RETRY, LOST_KEYED, RETRY_KEYED = "plain", "lost", "retry", "lost-keyed", "retry-keyed"
STEPS = (PLAIN, LOST, RETRY)
KEYED_STEPS = (LOST_KEYED, RETRY_KEYED)
MAX_CALLS_LIMIT = 10_000
MAX_TIME_LIMIT_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Settings:
    """One audit, as ``mcpfault audit`` takes it. ``command`` (stdio) or ``upstream`` (HTTP URL)."""

    command: tuple[str, ...] = ()
    upstream: str | None = None
    tools: tuple[str, ...] = ("*",)  # name globs
    examples: Path | None = None
    seed: int = 0
    probe: str | None = None  # "ebpf", or "fake:EVENTS.json" (scripted events, for tests)
    state_tool: str | None = None
    state_args: Mapping[str, Any] = field(default_factory=dict)
    state_resource: str | None = None
    lose: Lose = "drop"
    confirm: bool = False
    confirm_destructive: bool = False
    workdir: Path | None = None  # where the server runs; default OUT/workdir
    out: Path = Path("mcpfault-audit")
    fail_on: str = "medium"
    max_calls: int = 200  # tools/call requests in all, the state probe's included
    max_time_s: float = 600.0
    call_timeout_s: float = 30.0  # a call that should be answered
    lost_wait_s: float = 3.0  # how long the client waits for the reply the proxy drops, then retries

    def check(self) -> None:
        """Every problem a person can fix before anything starts, as a UsageError (what, where, what to do)."""
        if bool(self.command) == (self.upstream is not None):
            raise UsageError("give the server's command after '--', or --upstream URL (one of the two)")
        if self.upstream is not None:
            if not re.match(r"^https?://", self.upstream):
                raise UsageError(f"--upstream {self.upstream!r}: give an http:// or https:// URL")
            if self.probe is not None:
                raise UsageError("--probe watches a process mcpfault starts; with --upstream use a state probe")
            if self.lose == "crash":
                raise UsageError("--lose crash kills a process mcpfault starts; with --upstream use --lose drop")
        if self.probe is not None and self.probe != "ebpf" and not self.probe.startswith("fake:"):
            raise UsageError(f"--probe {self.probe!r}: give ebpf (root), or fake:EVENTS.json")
        if self.state_tool is not None and self.state_resource is not None:
            raise UsageError("give --state-tool or --state-resource, not both")
        if self.state_args and self.state_tool is None:
            raise UsageError("--state-args goes with --state-tool NAME")
        if self.fail_on not in FAIL_ON:
            raise UsageError(f"--fail-on {self.fail_on!r}: give one of {', '.join(FAIL_ON)}")
        if not 1 <= self.max_calls <= MAX_CALLS_LIMIT:
            raise UsageError(f"--max-calls {self.max_calls}: give 1 to {MAX_CALLS_LIMIT}")
        if not 0 < self.max_time_s <= MAX_TIME_LIMIT_S:
            raise UsageError(f"--max-time-s {self.max_time_s:g}: give more than 0 and at most {MAX_TIME_LIMIT_S:g}")
        for name, value in (("--call-timeout-s", self.call_timeout_s), ("--lost-wait-s", self.lost_wait_s)):
            if not 0 < value <= 3600:
                raise UsageError(f"{name} {value:g}: give more than 0 and at most 3600 seconds")
        if self.lose not in ("drop", "crash"):
            raise UsageError(f"--lose {self.lose!r}: give drop or crash")

    @property
    def observers(self) -> list[str]:
        """What can see what a call did, in the words of the plan."""
        seen = []
        if self.probe is not None:
            seen.append(f"the {self.probe.partition(':')[0]} probe (writes, execs, connects per call)")
        if self.state_tool is not None:
            seen.append(f"the state tool {self.state_tool}({json.dumps(dict(self.state_args), sort_keys=True)})")
        if self.state_resource is not None:
            seen.append(f"the state resource {self.state_resource}")
        return seen


@dataclass(frozen=True, slots=True)
class Hints:
    """The tool's annotations as claimed (None: not said)."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None

    @property
    def treated_destructive(self) -> bool:
        """MCP's defaults: destructiveHint is true unless said otherwise, for a tool not read-only."""
        if self.read_only is True:
            return False
        return self.destructive is not False

    def as_dict(self) -> dict[str, bool | None]:
        return {
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        }


@dataclass(frozen=True, slots=True)
class ToolPlan:
    name: str
    hints: Hints
    arguments: dict[str, Any] | None  # None: none could be found (see ``unsatisfiable``)
    source: str  # where the arguments come from: "examples" or "schema (seed N)"
    key_field: str | None  # the idempotency key's property, when the schema offers one
    keyed_arguments: dict[str, Any] | None
    unsatisfiable: str | None = None
    skip: str | None = None  # why it is not called

    @property
    def steps(self) -> tuple[str, ...]:
        if self.skip is not None:
            return ()
        return STEPS + (KEYED_STEPS if self.keyed_arguments is not None else ())


def selected(names: Sequence[str], globs: Sequence[str]) -> list[str]:
    return [name for name in names if any(fnmatch.fnmatchcase(name, glob) for glob in globs)]


def tool_plans(tools: Sequence[Mapping[str, Any]], settings: Settings) -> list[ToolPlan]:
    """One plan per tool of ``tools/list`` (each a Tool as JSON) that ``--tools`` selects, in list order."""
    examples = args_.load_examples(settings.examples) if settings.examples is not None else {}
    by_name = {str(tool["name"]): tool for tool in tools}
    unknown = sorted(set(examples) - set(by_name))
    if unknown:
        raise UsageError(f"--examples {settings.examples}: the server has no tool {unknown[0]!r}")
    if settings.state_tool is not None and settings.state_tool not in by_name:
        raise UsageError(f"--state-tool {settings.state_tool!r}: the server has no such tool ({', '.join(by_name)})")
    names = selected(list(by_name), settings.tools)
    if not names:
        raise UsageError(f"--tools {' '.join(settings.tools)}: no tool of the server matches ({', '.join(by_name)})")
    requests = {
        name: (_schema(by_name[name]), args_.tool_seed(settings.seed, name)) for name in names if name not in examples
    }
    drawn = args_.draw_each(requests)
    return [_plan(by_name[name], examples.get(name), drawn.get(name), settings) for name in names]


def _schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    schema = tool.get("inputSchema")
    return dict(schema) if isinstance(schema, Mapping) else {"type": "object"}


def _plan(
    tool: Mapping[str, Any],
    example: dict[str, Any] | None,
    drawn: dict[str, Any] | args_.Unsatisfiable | None,
    settings: Settings,
) -> ToolPlan:
    name = str(tool["name"])
    raw = tool.get("annotations") or {}
    hints = Hints(*(_bool(raw.get(k)) for k in ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")))
    schema = _schema(tool)
    key_field = args_.idempotency_key(schema)
    seed = args_.tool_seed(settings.seed, name)
    unsatisfiable = None
    arguments: dict[str, Any] | None
    if example is not None:
        arguments, source = dict(example), "examples"
    else:
        source = f"schema (seed {seed})"
        if isinstance(drawn, dict):
            arguments = dict(drawn)
        else:
            arguments, unsatisfiable = None, str(drawn or "no arguments were drawn")
    keyed = None
    if arguments is not None and key_field is not None:
        required = key_field in (schema.get("required") or [])
        if not required and example is None:
            arguments.pop(key_field, None)  # the plain retry carries no key, as a client that knows none
        keyed = {**arguments, key_field: f"mcpfault-audit-{seed:08x}"}
        if required:
            arguments = dict(keyed)  # a key it must have: every call carries the same one
            keyed = None
    skip = None
    if unsatisfiable is not None:
        skip = "no arguments: the input schema cannot be satisfied; give some with --examples"
    elif name == settings.state_tool:
        skip = "it is the state probe"
    elif hints.treated_destructive and not settings.confirm_destructive:
        skip = "destructive (as annotated, or by MCP's default): needs --confirm-destructive"
    return ToolPlan(name, hints, arguments, source, key_field, keyed, unsatisfiable, skip)


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def describe(plan: ToolPlan, settings: Settings) -> list[str]:
    """The plan of one tool, in lines for the dry run."""
    lines = [f"{plan.name}: hints {_hints_text(plan.hints)}"]
    if plan.unsatisfiable is not None:
        lines.append(f"  input schema unsatisfiable: {plan.unsatisfiable}")
    if plan.arguments is not None:
        lines.append(f"  arguments ({plan.source}): {json.dumps(plan.arguments, sort_keys=True, ensure_ascii=True)}")
    if plan.skip is not None:
        lines.append(f"  not called: {plan.skip}")
        return lines
    how = "its reply dropped by the proxy" if settings.lose == "drop" else "the server killed after it acted"
    lines.append(f"  calls: once; again with {how}; then the same arguments again (the client's retry)")
    if plan.keyed_arguments is not None:
        key = json.dumps(plan.keyed_arguments.get(str(plan.key_field)))
        lines.append(f"  and with the idempotency key {plan.key_field}={key}: lost, then retried")
    lines.append("  observed by: " + ("; ".join(settings.observers) or "nothing (retry-safe will be unknown)"))
    return lines


def _hints_text(hints: Hints) -> str:
    said = [f"{k}={str(v).lower()}" for k, v in hints.as_dict().items() if v is not None]
    return ", ".join(said) or "none"
