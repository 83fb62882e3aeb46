"""Profiles: TOML documents of ``name``, ``seed`` and ``[[faults]]`` rules.

A rule is read in two steps (as Toxiproxy decodes a toxic): first its generic keys (``type``,
``name``, ``methods`` and the name globs per kind ``tools``, ``resources`` (URIs), ``prompts``,
``probability``, ``after``, ``limit``, and the time window ``start_after_s`` / ``duration_s``), then
its type's own settings. A method the type cannot act on, or a glob for a kind none of the rule's
methods names, is a problem too. Every problem is collected, each naming file, rule,
field and what is allowed. ``rule_from_mapping`` reads one rule alone (the control API's POST).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

from mcpfault.errors import Problem, ProfileError, UsageError
from mcpfault.faults import settings
from mcpfault.faults.base import DIRECTIONS, NAMED_KINDS, NOTIFICATIONS, REQUESTS, SERVER_REQUESTS, TOOLS_CALL, Fault
from mcpfault.faults.catalog import CATALOG, Catalog

GENERIC_KEYS = (
    "type",
    "name",
    "tools",
    "read_only",
    "probability",
    "after",
    "limit",
    "start_after_s",
    "duration_s",
    "sessions",
    "methods",
    "resources",
    "prompts",
    "direction",
)
TOP_LEVEL_KEYS = ("name", "seed", "description", "faults", "server", "probe")  # [probe]: probe/policy.py
# The profiles that ship inside the package (package data), usable by name: ``--config error``.
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "profiles"
# MCP tool names are 1-128 of [A-Za-z0-9_.-]; globs add * ? [ ] !
_GLOB_CHARS = re.compile(r"^[A-Za-z0-9_.\-/*?\[\]!]+$")
# Resource URIs take any printable character but white space; the globs add nothing to that.
_URI_GLOB_CHARS = re.compile(r"^[^\s\x00-\x1f\x7f]+$")
# Which kinds' names each method that names something is matched on (a completion names a prompt or a resource).
KINDS_OF_METHOD: Mapping[str, frozenset[str]] = {
    **{method: frozenset({kind}) for method, kind in NAMED_KINDS.items()},
    "completion/complete": frozenset({"prompts", "resources"}),
}


@dataclass(frozen=True)
class Rule:
    index: int
    name: str
    type_name: str
    fault: Fault
    tools: tuple[str, ...] = ("*",)
    # The requests the rule acts on (each one its fault type takes), and the globs for the other kinds' names.
    methods: frozenset[str] = TOOLS_CALL
    resources: tuple[str, ...] = ("*",)
    prompts: tuple[str, ...] = ("*",)
    # client_to_server: the client's requests; server_to_client: the server's requests, acted on in the
    # client's answer (methods are then sampling/createMessage, elicitation/create, roots/list).
    direction: str = "client_to_server"
    probability: float = 1.0
    after: int = 0  # matching calls let through before the rule may fire
    limit: int | None = None  # at most this many injections; None: no limit
    # Only tools whose annotations (from tools/list) say readOnlyHint is this; None: any tool.
    read_only: bool | None = None
    matches_tool: Callable[[str], bool] = field(default=lambda _name: True, compare=False, repr=False)
    # In force from start_after_s seconds after the proxy started, for duration_s seconds; None: always.
    # A process fault with start_after_s fires once at that time instead of on a request.
    start_after_s: float | None = None
    duration_s: float | None = None
    # A blast radius: the share of HTTP sessions (chosen by a seeded hash of the session id) the rule acts in.
    sessions: float | None = None
    matches_resource: Callable[[str], bool] = field(default=lambda _uri: True, compare=False, repr=False)
    matches_prompt: Callable[[str], bool] = field(default=lambda _name: True, compare=False, repr=False)

    def matches(self, kind: str | None, name: str | None) -> bool:
        """Whether the rule's glob for ``kind`` matches ``name``; a request naming nothing (a list) always does."""
        if kind is None or name is None:
            return True
        if kind == "tools":
            return self.matches_tool(name)
        return self.matches_resource(name) if kind == "resources" else self.matches_prompt(name)

    def in_window(self, elapsed_s: float) -> bool:
        start = self.start_after_s or 0.0
        if elapsed_s < start:
            return False
        return self.duration_s is None or elapsed_s < start + self.duration_s


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The ``[server]`` table: how the proxy supervises a server it started (proxy/process/supervisor.py)."""

    type_name: ClassVar[str] = "[server]"  # how settings' messages name the table

    # never: a death ends the proxy, as without it; on-crash: restart after a crash (a signal, or an
    # exit status other than 0); always: after any exit the proxy did not ask for.
    restart: Literal["never", "on-crash", "always"] = "never"
    restart_delay_s: float = settings.bounded(0.5, min=0.0, max=3600.0)
    max_restarts: int = settings.bounded(5, min=0, max=1_000_000)
    # After a restart, re-send the client's initialize and notifications/initialized (2025-11-25 era).
    replay_handshake: bool = True
    # How long requests that arrive while the server is down wait for it, before an error answers them.
    hold_s: float = settings.bounded(10.0, min=0.0, max=3600.0)


@dataclass(frozen=True)
class Profile:
    name: str
    seed: int
    rules: tuple[Rule, ...]
    source: str = "<memory>"
    description: str = ""
    server: ServerSettings = ServerSettings()
    # faults = [] written out (a relay on purpose, as baseline), or a [server] table (a profile for the
    # supervisor): no warning calls the missing rules a mistake.
    no_faults_on_purpose: bool = False

    def is_fixed(self) -> bool:
        """Nothing random in it: every rule fires with certainty (in its after, limit and window), in every
        HTTP session, and its fault draws nothing; its faults are the same whatever the seed."""
        return not any(rule.probability < 1.0 or rule.sessions is not None or rule.fault.draws() for rule in self.rules)


def bundled() -> dict[str, Path]:
    """The bundled profiles by name, sorted."""
    return {path.stem: path for path in sorted(BUNDLED_DIR.glob("*.toml"))}


def resolve(name_or_path: str | Path) -> Path:
    """A profile file by path, or a bundled profile by name; a UsageError that says what exists otherwise."""
    text = str(name_or_path)
    path = Path(text)
    if path.is_file():
        return path
    if path.is_dir():
        raise UsageError(_a_directory(path))
    names = bundled()
    looks_like_path = path.suffix == ".toml" or os.sep in text or (os.altsep is not None and os.altsep in text)
    if not looks_like_path and text in names:
        return names[text]
    known = ", ".join(names) or "none bundled"
    if looks_like_path:
        raise UsageError(f"profile file {_where(path)} does not exist; give a path to a .toml file or one of: {known}")
    hint = settings.did_you_mean(text, names)
    raise UsageError(f"unknown profile {text!r}{hint}; give a .toml path or one of: {known}")


def first_line(path: Path) -> str:
    """A profile's one-line description: its ``description``, else its first comment line."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        description = tomllib.loads(text).get("description")
    except tomllib.TOMLDecodeError:
        description = None
    if isinstance(description, str) and description.strip():
        return description.strip().splitlines()[0]
    comment: list[str] = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("# ").strip())
    joined = " ".join(comment)
    end = joined.find(". ")
    return joined[: end + 1] if end >= 0 else joined


def _a_directory(path: Path) -> str:
    inside = sorted(path.glob("*.toml"))[:3]
    example = f" (in it: {', '.join(p.name for p in inside)})" if inside else ""
    return f"{_where(path)} is a directory, not a profile; give one .toml file{example} or a bundled profile's name"


def _where(path: Path) -> str:
    """A path as the user gave it, with the working directory when it is relative (a client's cwd may be /)."""
    return str(path) if path.is_absolute() else f"{path} (relative to the working directory {Path.cwd()})"


def load(path: str | Path, catalog: Catalog = CATALOG) -> Profile:
    """Read and validate a profile file; raise ProfileError listing every problem."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ProfileError(
            [Problem(str(path), None, "file", f"{_where(path)} does not exist; check the path")]
        ) from None
    except IsADirectoryError:
        raise ProfileError([Problem(str(path), None, "file", _a_directory(path))]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError([Problem(str(path), None, "file", f"cannot be read: {exc}")]) from None
    if catalog is not CATALOG:
        return loads(text, source=str(path), catalog=catalog)
    # A profile of the bundled catalog is parsed once per text: a bench reads each of its profiles (and
    # each session's copy) for every session it plans, warns about and judges. A Profile is immutable.
    parsed = _PARSED.get(text)
    if parsed is None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        parsed = _PARSED[text] = loads(text, source=str(path))
    return parsed if parsed.source == str(path) else dataclasses.replace(parsed, source=str(path))


_PARSED: dict[str, Profile] = {}
_PARSED_MAX = 256


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
            hint = settings.did_you_mean(key, TOP_LEVEL_KEYS)
            where_rules_go = "; rules go under [[faults]]" if "'faults'" in hint else ""
            top(key, f"unknown top-level key{hint}; allowed: {', '.join(TOP_LEVEL_KEYS)}{where_rules_go}")
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

    server = ServerSettings()
    raw_server = document.get("server", {})
    if not isinstance(raw_server, dict):
        top("server", "expected a table: write it as [server] with keys restart, restart_delay_s, ...")
    else:
        decoded = settings.decode(ServerSettings, raw_server, lambda key, message: top(f"server.{key}", message))
        server = decoded if decoded is not None else server

    rules: list[Rule] = []
    seen_names: dict[str, int] = {}
    for index, raw in enumerate(raw_rules):
        rule = _rule(index, raw, source, catalog, problems)
        # The name is checked from the table, not the rule: a rule with other problems has none, and
        # its duplicate name is one more problem to list.
        rule_name = raw.get("name", f"{raw.get('type')}-{index}") if isinstance(raw, dict) else None
        if isinstance(rule_name, str) and rule_name:
            if rule_name in seen_names:
                first = seen_names[rule_name]
                message = f"{rule_name!r} is already the name of faults[{first}]; rule names must be unique"
                problems.append(Problem(source, index, "name", message, rule_name))
            seen_names.setdefault(rule_name, index)
        if rule is not None:
            rules.append(rule)
    if problems:
        raise ProfileError(problems)
    return Profile(
        name=name,
        seed=seed,
        rules=tuple(rules),
        source=source,
        description=description,
        server=server,
        # faults = [] written out, or a [server] table: the profile's point is its supervision.
        no_faults_on_purpose=document.get("faults") == [] or "server" in document,
    )


def rule_from_mapping(raw: Any, source: str, index: int = 0, catalog: Catalog = CATALOG) -> Rule:
    """One ``[[faults]]`` table on its own, validated as in a profile; raise ProfileError listing every problem."""
    problems: list[Problem] = []
    rule = _rule(index, raw, source, catalog, problems)
    if problems or rule is None:
        raise ProfileError(problems)
    return rule


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
    resources = _tools(
        raw.get("resources", ["*"]), report, "resources", _URI_GLOB_CHARS, "URIs use printable characters"
    )
    prompts = _tools(raw.get("prompts", ["*"]), report, "prompts")
    direction, methods = _direction_and_methods(raw, report)
    probability = _probability(raw.get("probability", 1.0), report)
    read_only = raw.get("read_only")
    if read_only is not None and not isinstance(read_only, bool):
        report("read_only", f"got {read_only!r}; expected true (read-only tools) or false (tools that may write)")
    after = _count(raw.get("after", 0), "after", report, allow_none=False)
    limit = _count(raw.get("limit"), "limit", report, allow_none=True)
    start_after_s = _seconds(raw.get("start_after_s"), "start_after_s", report)
    # A fault type with a setting of a generic key's name (stall's and cpu_starve's duration_s: how
    # long the server is stopped or starved) takes the key as its own; the rule has no window length.
    own_fields = {f.name for f in dataclasses.fields(cast(Any, fault_type))} if fault_type is not None else set()
    duration_s = (
        None if "duration_s" in own_fields else _seconds(raw.get("duration_s"), "duration_s", report, positive=True)
    )
    sessions = _sessions(raw.get("sessions"), report)

    fault = None
    if fault_type is not None:
        own = {k: v for k, v in raw.items() if k not in GENERIC_KEYS or k in own_fields}
        fault = settings.decode(fault_type, own, report, rule_keys=GENERIC_KEYS)
    if fault is not None and methods:
        _check_methods(fault, methods, raw, report)
    if len(problems) > count or fault is None:
        return None
    return Rule(
        index=index,
        name=str(name),
        type_name=str(type_name),
        fault=fault,
        tools=tools,
        methods=methods,
        direction=str(direction),
        resources=resources,
        prompts=prompts,
        matches_resource=_matcher(resources),
        matches_prompt=_matcher(prompts),
        probability=float(probability),
        after=int(after or 0),
        limit=limit,
        read_only=read_only if isinstance(read_only, bool) else None,
        matches_tool=_matcher(tools),
        start_after_s=start_after_s,
        duration_s=duration_s,
        sessions=sessions,
    )


def _direction_and_methods(raw: Mapping[str, Any], report: Callable[[str, str], None]) -> tuple[str, frozenset[str]]:
    """The rule's direction and the methods it acts on: client requests and notifications by default
    (tools/call), or server requests, which a server_to_client rule must name."""
    direction = raw.get("direction", "client_to_server")
    if direction not in DIRECTIONS:
        report("direction", f"got {direction!r}; expected one of: {', '.join(DIRECTIONS)}")
        direction = "client_to_server"
    towards_client = direction == "server_to_client"
    if towards_client and "methods" not in raw:
        report(
            "methods",
            f"a server_to_client rule names the server requests it acts on: {', '.join(sorted(SERVER_REQUESTS))}",
        )
    methods = _methods(
        raw.get("methods", ["tools/call"]),
        report,
        SERVER_REQUESTS if towards_client else REQUESTS | NOTIFICATIONS,
        direction,
    )
    return str(direction), methods


def _sessions(value: Any, report: Callable[[str, str], None]) -> float | None:
    """``sessions``: the share of HTTP sessions the rule acts in, in (0, 1]; None for every session."""
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 1:
        report("sessions", f"got {value!r}; expected the share of HTTP sessions, a number in (0, 1]")
        return None
    return float(value)


def changed_rule(rule: Rule, changes: Mapping[str, Any], source: str) -> Rule:
    """``rule`` with a new ``probability`` and/or ``limit`` (what may change on a live rule), checked as
    in a profile; raise ProfileError listing every problem."""
    problems: list[Problem] = []

    def report(field_name: str, message: str) -> None:
        problems.append(Problem(source, rule.index, field_name, message, rule.name))

    probability = _probability(changes.get("probability", rule.probability), report)
    limit = _count(changes["limit"], "limit", report, allow_none=True) if "limit" in changes else rule.limit
    if problems:
        raise ProfileError(problems)
    return dataclasses.replace(rule, probability=float(probability), limit=limit)


def _probability(raw: Any, report: Callable[[str, str], None]) -> float:
    if not isinstance(raw, int | float) or isinstance(raw, bool):
        report("probability", f"got {raw!r}; expected a number from 0 to 1")
        return 1.0
    if not 0.0 <= raw <= 1.0:
        report("probability", f"{raw} is outside [0, 1]; use a number from 0 to 1")
        return 1.0
    return float(raw)


def _tools(
    raw: Any,
    report: Callable[[str, str], None],
    key: str = "tools",
    allowed: re.Pattern[str] = _GLOB_CHARS,
    names_use: str = "names use A-Z a-z 0-9 _ . -",
) -> tuple[str, ...]:
    """The globs of ``key`` (tool names, resource URIs, prompt names)."""
    example = "netops://devices/*/config" if key == "resources" else "get_*"
    patterns = [raw] if isinstance(raw, str) else raw
    if not isinstance(patterns, list) or not patterns:
        report(key, f'got {raw!r}; expected a glob or a non-empty list of globs, e.g. ["{example}"]')
        return ("*",)
    good: list[str] = []
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            report(key, f"got {pattern!r}; expected a non-empty glob string")
        elif not allowed.match(pattern):
            report(key, f"bad glob {pattern!r}: {key[:-1]} {names_use} and globs add * ? [ ] !")
        elif pattern.count("[") != pattern.count("]") or re.search(r"\[[^\]]*\[", pattern):
            report(key, f"bad glob {pattern!r}: unbalanced [ ]; a set looks like get_[abc]*")
        else:
            good.append(pattern)
    return tuple(good)


def _methods(raw: Any, report: Callable[[str, str], None], known: frozenset[str], direction: str) -> frozenset[str]:
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names:
        report("methods", f'got {raw!r}; expected a non-empty list of request methods, e.g. ["resources/read"]')
        return frozenset()
    good: set[str] = set()
    for name in names:
        if isinstance(name, str) and name in known:
            good.add(name)
            continue
        hint = settings.did_you_mean(name, sorted(known)) if isinstance(name, str) else ""
        other = " (a server_to_client method: set direction)" if name in SERVER_REQUESTS else ""
        if name in REQUESTS and name not in known:
            other = " (a client request: this rule is server_to_client)"
        report(
            "methods",
            f"{name!r} is not a {direction} request a rule can act on{other}{hint}; one of: {', '.join(sorted(known))}",
        )
    return frozenset(good) if len(good) == len(names) else frozenset()


def _check_methods(
    fault: Fault, methods: frozenset[str], raw: Mapping[str, Any], report: Callable[[str, str], None]
) -> None:
    """The impossible combinations: a method the fault type (with these settings) cannot act on, a glob
    for a kind of name that none of the methods carries, ``read_only`` without tools/call."""
    allowed = fault.methods_allowed()
    for method in sorted(methods - allowed):
        report(
            "methods",
            f"{fault.type_name} (as configured) cannot act on {method}; it takes: {', '.join(sorted(allowed))}; "
            f"remove {method!r} from methods or use another fault type",
        )
    named = {kind for method in methods for kind in KINDS_OF_METHOD.get(method, ())}
    for key in ("tools", "resources", "prompts"):
        if key in raw and key not in named:
            takers = sorted(m for m, kinds in KINDS_OF_METHOD.items() if key in kinds)
            report(
                key,
                f"{key} globs match the names of {', '.join(takers)}, and methods = {sorted(methods)} has none of "
                f"them; add one to methods, or remove {key}",
            )
    if raw.get("read_only") is not None and "tools/call" not in methods:
        report("read_only", f"read_only picks tools by annotation, and methods = {sorted(methods)} has no tools/call")


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


def _seconds(raw: Any, field_name: str, report: Callable[[str, str], None], *, positive: bool = False) -> float | None:
    bound = "> 0" if positive else ">= 0"
    if raw is None:
        return None
    if not isinstance(raw, int | float) or isinstance(raw, bool):
        report(field_name, f"got {raw!r}; expected seconds as a number {bound}, e.g. 30 or 2.5")
        return None
    if not math.isfinite(raw) or raw < 0 or (positive and raw == 0):
        report(field_name, f"{raw} is not a finite number of seconds {bound}")
        return None
    return float(raw)


def _matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    if patterns == ("*",):
        return lambda _name: True
    regex = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))

    @functools.lru_cache(maxsize=1024)
    def matches(name: str) -> bool:
        return regex.match(name) is not None

    return matches
