"""A tool's arguments for the audit: the user's own examples (``--examples FILE.toml``), else one
drawn from its ``inputSchema`` by hypothesis-jsonschema, seeded, so the same seed gives the same call.

The examples file, one table per tool (the examples win over the schema)::

    [tools.open_incident.arguments]
    device_id = "dev-0001"
    summary = "audit probe"
    severity = "low"

An idempotency key is a string property whose name says so (``idempotency_key``, ``idempotencyKey``,
``request_id``, ``dedupe_key``, ``client_token`` and their spellings); the audit retries with one as well.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpfault.errors import MCPFaultError, UsageError

DRAW_TIMEOUT_S = 120.0
EXAMPLES_PER_DRAW = 3  # hypothesis's first example is the simplest; the last of a few says more
_KEY_NAME = re.compile(
    r"^(idempotency|idempotent|dedupe|dedup|deduplication|request|client_?request|client)_?(key|id|token)$"
)


class Unsatisfiable(MCPFaultError):
    """No value satisfies the schema (or the generator cannot draw one); ``str()`` says why."""


@dataclass(frozen=True, slots=True)
class Arguments:
    values: dict[str, Any]
    source: str  # "examples" or "schema (seed N)"


def idempotency_key(schema: Mapping[str, Any]) -> str | None:
    """The name of the schema's idempotency-key property, when it has one (a string)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return None
    for name in sorted(properties):
        spec = properties[name]
        normal = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower().replace("-", "_")
        if _KEY_NAME.match(normal) and isinstance(spec, Mapping) and _takes_string(spec):
            return str(name)
    return None


def _takes_string(spec: Mapping[str, Any]) -> bool:
    """Whether a property may be a string: ``"string"``, ``["string", "null"]``, or an anyOf/oneOf with one."""
    kind = spec.get("type")
    if kind is None:
        options = spec.get("anyOf") or spec.get("oneOf")
        if isinstance(options, list):
            return any(isinstance(o, Mapping) and _takes_string(o) for o in options)
        return "enum" not in spec and "const" not in spec
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def load_examples(path: Path) -> dict[str, dict[str, Any]]:
    """``--examples FILE.toml``: arguments per tool name; a UsageError naming the file and the table."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--examples {path}: cannot read it ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--examples {path}: not valid TOML ({exc})") from None
    unknown = sorted(set(document) - {"tools"})
    if unknown:
        raise UsageError(f"--examples {path}: unknown top-level key {unknown[0]!r}; put each tool under [tools.NAME]")
    tools = document.get("tools", {})
    if not isinstance(tools, dict):
        raise UsageError(f"--examples {path}: 'tools' must be a table of [tools.NAME] tables")
    examples: dict[str, dict[str, Any]] = {}
    for name, table in tools.items():
        where = f"--examples {path}: [tools.{name}]"
        if not isinstance(table, dict) or set(table) - {"arguments"}:
            raise UsageError(f"{where}: give only an 'arguments' table, e.g. [tools.{name}.arguments]")
        arguments = table.get("arguments", {})
        if not isinstance(arguments, dict):
            raise UsageError(f"{where}: 'arguments' must be a table of the tool's arguments")
        examples[name] = arguments
    return examples


def tool_seed(seed: int, tool: str) -> int:
    """One seed per tool, from the audit's seed and the tool's name: adding a tool changes no other's call."""
    return zlib.crc32(f"{seed}:{tool}".encode()) & 0x7FFFFFFF


def draw_each(requests: Mapping[str, tuple[Mapping[str, Any], int]]) -> dict[str, dict[str, Any] | Unsatisfiable]:
    """Arguments per tool (``{name: (schema, seed)}``), or the Unsatisfiable that says why there are none.

    Drawn in a fresh interpreter of our own, because hypothesis also draws constants it finds in the
    modules its caller has loaded: in-process, the same seed would give other arguments in the CLI, the
    API and the MCP server. It runs in a temporary directory, so hypothesis's ``.hypothesis`` folder
    is not left in the caller's.
    """
    if not requests:
        return {}
    wanted = {name: {"schema": dict(schema), "seed": seed} for name, (schema, seed) in requests.items()}
    with tempfile.TemporaryDirectory(prefix="mcpfault-audit-draw-") as scratch:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "mcpfault.audit.arguments"],
                input=json.dumps(wanted),
                capture_output=True,
                text=True,
                cwd=scratch,
                timeout=DRAW_TIMEOUT_S,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise UsageError(f"drawing arguments from the input schemas took over {DRAW_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise UsageError(f"drawing arguments from the input schemas failed: {said[0]}")
    answers = json.loads(done.stdout)
    return {
        name: dict(answer["arguments"]) if "arguments" in answer else Unsatisfiable(answer["unsatisfiable"])
        for name, answer in answers.items()
    }


def _main() -> int:
    """``python -m mcpfault.audit.arguments``: {name: {schema, seed}} on stdin, {name: answer} on stdout."""
    try:
        wanted = json.load(sys.stdin)
        answers: dict[str, dict[str, Any]] = {}
        for name, request in wanted.items():
            try:
                answers[name] = {"arguments": draw(request["schema"], int(request["seed"]))}
            except Unsatisfiable as exc:
                answers[name] = {"unsatisfiable": str(exc)}
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    json.dump(answers, sys.stdout)
    return 0


def draw(schema: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Arguments that satisfy ``schema``, the same for the same seed; ``Unsatisfiable`` when none can be drawn."""
    try:
        from hypothesis.errors import HypothesisException
        from hypothesis_jsonschema import from_schema
    except ImportError as exc:  # pragma: no cover - the audit extra not installed
        raise UsageError(f"drawing arguments needs the audit extra: pip install 'mcpfault[audit]' ({exc})") from None

    # Extra properties and control characters make a call no client would send: a tool gets only
    # what it declares (unless its schema asks for more), in printable ASCII.
    wanted = {"type": "object", "additionalProperties": False, **dict(schema)}
    try:
        strategy = from_schema(wanted, allow_x00=False, codec="ascii")
        try:
            drawn = _examples(strategy.filter(_printable), seed)
        except HypothesisException:  # a schema whose strings must hold control characters
            drawn = _examples(strategy, seed)
    except HypothesisException as exc:
        raise Unsatisfiable(_why_empty(wanted) or _first_line(exc)) from None
    except (ValueError, TypeError, re.error) as exc:  # a schema hypothesis-jsonschema cannot read
        raise Unsatisfiable(f"the schema cannot be used: {_first_line(exc)}") from None
    if not drawn or not isinstance(drawn[-1], dict):
        raise Unsatisfiable("no object satisfies the schema")
    return dict(drawn[-1])


def _examples(strategy: Any, seed: int) -> list[Any]:
    """The first EXAMPLES_PER_DRAW values hypothesis draws from ``strategy`` with ``seed``."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    drawn: list[Any] = []

    @seeded(seed)
    @settings(
        max_examples=EXAMPLES_PER_DRAW,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(strategy)
    def collect(value: Any) -> None:
        drawn.append(value)

    collect()
    return drawn


def _printable(value: Any) -> bool:
    """No control characters in any string of ``value`` (keys included)."""
    if isinstance(value, str):
        return value.isprintable()
    if isinstance(value, dict):
        return all(_printable(k) and _printable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_printable(item) for item in value)
    return True


def _why_empty(schema: Mapping[str, Any]) -> str | None:
    """Which required properties no value satisfies, in words, when that is why nothing could be drawn."""
    from hypothesis_jsonschema import from_schema

    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return None
    empty = []
    for name in schema.get("required") or ():
        spec = properties.get(name)
        try:
            if (
                isinstance(spec, (Mapping, bool))
                and from_schema(spec if isinstance(spec, bool) else dict(spec)).is_empty
            ):
                empty.append(f"{name} {json.dumps(spec, sort_keys=True)}")
        except Exception:  # a property the generator cannot read says nothing here
            continue
    return f"no value satisfies the required {'; '.join(empty)}" if empty else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(_main())
