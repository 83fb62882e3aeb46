"""An experiment file, read into a pure plan: target, load, hypothesis, method, stop conditions, radius.

Every problem is collected at once, each naming file, section, field and what is allowed, as
``mcpfault validate`` does for profiles; a fault action's rule is checked by the profile's own code.
The plan is data: nothing here starts a process or reads a clock.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpfault.app.toml_text import toml_text
from mcpfault.errors import ProblemsError, ProfileError
from mcpfault.loopback import UrlError, check_http_url

PROBES = ("metric", "promql", "http", "command")
# The proxy's own figures over a trailing window (from its events); the task ones judge driven load.
LIVE_METRICS = ("error_rate", "p95_duration_s", "faults_injected", "request_rate")
TASK_METRICS = ("task_success_rate", "silent_failure_rate")
METRICS = LIVE_METRICS + TASK_METRICS
PROCESS_ACTIONS = ("crash", "stall", "restart")
AGENTS = ("naive", "retry-only", "resilient")
LOAD_KEYS = (
    "agent",
    "pace_s",
    "seed",
    "warmup_s",
    "cooldown_s",
    "deadline_s",
    "workflows",
    "command",
    "agent_timeout_s",
    "model",
)
# server: the proxy profile's own [server] table (how it supervises its server), passed through as it is.
TOP_KEYS = (
    "title",
    "description",
    "target",
    "load",
    "hypothesis",
    "method",
    "stop_conditions",
    "blast_radius",
    "server",
)
PROBE_KEYS = (
    *("name", "probe", "tolerance", "window_s", "metric", "query", "prometheus", "url", "command"),
    *("during", "interval_s", "timeout_s"),
)
MAX_DURATION_S = 3600.0


@dataclass(frozen=True, slots=True)
class PlanProblem:
    file: str
    where: str  # e.g. method[1].duration_s
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.message}"


class ExperimentError(ProblemsError):
    """An experiment file failed validation; ``problems`` holds every PlanProblem found."""

    kind = "experiment"

    def __init__(self, problems: list[PlanProblem]) -> None:
        super().__init__(problems)
        self.problems: list[PlanProblem] = problems


@dataclass(frozen=True, slots=True)
class Tolerance:
    """Chaos Toolkit's: an exact value, an inclusive [low, high] range, or a regex over the value's text."""

    exact: Any = None
    low: float | None = None
    high: float | None = None
    regex: str | None = None

    def holds(self, value: Any) -> bool:
        if value is None:
            return False
        if self.regex is not None:
            return re.search(self.regex, str(value)) is not None
        if self.low is not None and self.high is not None:
            return isinstance(value, int | float) and not isinstance(value, bool) and self.low <= value <= self.high
        return bool(value == self.exact)

    def describe(self) -> str:
        if self.regex is not None:
            return f"matches /{self.regex}/"
        if self.low is not None:
            return f"in [{self.low:g}, {self.high:g}]"
        return f"= {self.exact!r}"


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    name: str
    probe: str  # metric, promql, http, command
    tolerance: Tolerance
    window_s: float = 5.0  # metric: the trailing window
    metric: str | None = None
    query: str | None = None  # promql
    prometheus: str | None = None  # promql: the server's base URL
    url: str | None = None  # http
    command: tuple[str, ...] = ()  # command
    during: bool = False  # hypothesis: checked during the method too
    interval_s: float = 1.0  # stop condition: how often
    timeout_s: float = 5.0

    @property
    def live(self) -> bool:
        """Can be measured while the experiment runs (task outcomes are judged at the end)."""
        return not (self.probe == "metric" and self.metric in TASK_METRICS)


@dataclass(frozen=True, slots=True)
class Action:
    name: str
    start_after_s: float
    duration_s: float
    fault: Mapping[str, Any] | None = None  # a [[faults]] table, switched on for the window
    process: str | None = None  # crash, stall, restart
    signal: str = "SIGKILL"

    @property
    def end_s(self) -> float:
        return self.start_after_s + self.duration_s

    def describe(self) -> str:
        if self.fault is not None:
            settings = ", ".join(f"{k}={v!r}" for k, v in self.fault.items() if k not in ("name",))
            return f"fault rule ({settings})"
        if self.process == "crash":
            return f"crash the server ({self.signal})"
        if self.process == "stall":
            return f"stall the server for {self.duration_s:g} s"
        return "restart the server"


@dataclass(frozen=True, slots=True)
class Target:
    command: tuple[str, ...] = ()  # the stdio server, or the HTTP server the runner starts
    listen: str | None = None  # HTTP: where the proxy listens for clients
    url: str | None = None  # HTTP: the server's MCP endpoint

    @property
    def http(self) -> bool:
        return self.url is not None


@dataclass(frozen=True, slots=True)
class Load:
    agent: str = "resilient"
    pace_s: float = 0.1  # between tasks
    seed: int = 0
    warmup_s: float = 3.0  # traffic before the method (the "before" probes' window)
    cooldown_s: float = 3.0  # traffic after the method (the "after" probes' window)
    deadline_s: float = 0.5
    workflows: tuple[str, ...] = ()  # the harness's task workflows to draw from; empty: all of them
    command: tuple[str, ...] = ()  # agent = "cmd:NAME": the command line of your agent (the MCPFAULT_* contract)
    agent_timeout_s: float = 120.0  # an external agent's time per task
    model: str | None = None  # agent = "llm": the model (openai:MODEL, anthropic:MODEL); None: the default


@dataclass(frozen=True, slots=True)
class Plan:
    title: str
    description: str
    target: Target
    load: Load | None
    hypothesis: tuple[ProbeSpec, ...]
    method: tuple[Action, ...]
    stop_conditions: tuple[ProbeSpec, ...]
    radius: Mapping[str, Any] = field(default_factory=dict)  # blast radius: tools and/or sessions, for every fault
    source: str = "<memory>"
    server: Mapping[str, Any] = field(default_factory=dict)  # the profile's [server] table, as the proxy reads it

    @property
    def method_s(self) -> float:
        return max((a.end_s for a in self.method), default=0.0)

    @property
    def warmup_s(self) -> float:
        return self.load.warmup_s if self.load is not None else max((p.window_s for p in self.hypothesis), default=3.0)

    @property
    def cooldown_s(self) -> float:
        return (
            self.load.cooldown_s if self.load is not None else max((p.window_s for p in self.hypothesis), default=3.0)
        )

    @property
    def total_s(self) -> float:
        return self.warmup_s + self.method_s + self.cooldown_s


# The experiments that ship inside the package (package data), usable by name: ``experiment run server-killed``.
BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"


def bundled() -> dict[str, Path]:
    """The bundled experiments by name, sorted."""
    return {path.stem: path for path in sorted(BUNDLED_DIR.glob("*.toml"))}


def load(path: str | Path) -> Plan:
    """An experiment file by path, or a bundled one by name; every problem at once (ExperimentError)."""
    path = Path(path)
    if not path.exists() and path.suffix != ".toml" and len(path.parts) == 1 and str(path) in bundled():
        path = bundled()[str(path)]
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        where = str(path) if path.is_absolute() else f"{path} (relative to the working directory {Path.cwd()})"
        known = ", ".join(bundled()) or "none bundled"
        raise ExperimentError(
            [PlanProblem(str(path), "file", f"{where} does not exist; give a path, or a bundled name: {known}")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ExperimentError([PlanProblem(str(path), "file", f"cannot be read: {exc}")]) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError([PlanProblem(str(path), "toml", f"is not valid TOML: {exc}")]) from None
    return from_mapping(document, str(path))


def from_mapping(document: Mapping[str, Any], source: str = "<memory>") -> Plan:
    problems: list[PlanProblem] = []
    reader = _Reader(source, problems)
    for key in document:
        if key not in TOP_KEYS:
            reader.report(key, f"unknown top-level key; allowed: {', '.join(TOP_KEYS)}")
    title = reader.string(document, "title", "title", required=True) or Path(source).stem
    description = reader.string(document, "description", "description") or ""
    target = _target(reader, document.get("target"))
    load_spec = _load(reader, document.get("load")) if "load" in document else None
    hypothesis = tuple(
        p for i, t in enumerate(reader.tables(document, "hypothesis")) if (p := _probe(reader, t, f"hypothesis[{i}]"))
    )
    stops = tuple(
        p
        for i, t in enumerate(reader.tables(document, "stop_conditions"))
        if (p := _probe(reader, t, f"stop_conditions[{i}]", stop=True))
    )
    radius = _radius(reader, document.get("blast_radius"))
    server = _server(reader, document.get("server"))
    method = tuple(
        a for i, t in enumerate(reader.tables(document, "method")) if (a := _action(reader, t, f"method[{i}]", radius))
    )
    if "method" not in document:
        reader.report("method", "is required: at least one [[method]] action (a fault rule or a process action)")
    _names(reader, [p.name for p in hypothesis], "hypothesis")
    _names(reader, [a.name for a in method], "method")
    _names(reader, [p.name for p in stops], "stop_conditions")
    if load_spec is not None and (target.http or target.command[:2] not in ((), ("mcpfault", "mock-server"))):
        reader.report(
            "load", 'drives the bundled mock over stdio: leave [target] empty or command = ["mcpfault", "mock-server"]'
        )
    if load_spec is None and not target.http:
        reader.report(
            "target",
            "a stdio server gets traffic only from [load]; add [load], or give an HTTP target (command, listen, url) "
            "that your own agent connects to",
        )
    uses_tasks = [p.name for p in hypothesis if p.metric in TASK_METRICS]
    if uses_tasks and load_spec is None:
        reader.report("hypothesis", f"{', '.join(map(repr, uses_tasks))} judge driven tasks: add [load]")
    if "sessions" in radius and load_spec is not None:
        reader.report(
            "blast_radius.sessions", "is a share of HTTP sessions; [load] drives one stdio stream, which has none"
        )
    if problems:
        raise ExperimentError(problems)
    return Plan(title, description, target, load_spec, hypothesis, method, stops, radius, source, server)


class _Reader:
    """Typed reads of TOML values; each bad one becomes a PlanProblem, never an exception."""

    def __init__(self, source: str, problems: list[PlanProblem]) -> None:
        self.source = source
        self.problems = problems

    def report(self, where: str, message: str) -> None:
        self.problems.append(PlanProblem(self.source, where, message))

    def tables(self, document: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
        raw = document.get(key, [])
        if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
            self.report(key, f"expected an array of tables: write each under [[{key}]]")
            return []
        return raw

    def string(self, table: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
        value = table.get(key)
        if value is None:
            if required:
                self.report(where, "is required: a non-empty string")
            return None
        if not isinstance(value, str) or not value:
            self.report(where, f"got {value!r}; expected a non-empty string")
            return None
        return value

    def seconds(
        self, table: Mapping[str, Any], key: str, where: str, default: float | None, *, positive: bool = False
    ) -> float:
        value = table.get(key, default)
        bound = "> 0" if positive else ">= 0"
        if value is None:
            self.report(where, f"is required: seconds {bound}")
            return 0.0
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            self.report(where, f"got {value!r}; expected seconds as a finite number {bound}")
            return 0.0
        if value < 0 or (positive and value == 0) or value > MAX_DURATION_S:
            self.report(where, f"{value} is out of range; expected seconds {bound} and at most {MAX_DURATION_S:g}")
            return 0.0
        return float(value)

    def command(self, table: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
        value = table.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            self.report(where, f'got {value!r}; expected a list of strings, e.g. ["mcpfault", "mock-server"]')
            return ()
        return tuple(value)

    def unknown(self, table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for key in table:
            if key not in allowed:
                self.report(f"{where}.{key}", f"unknown key; allowed: {', '.join(allowed)}")


def _target(reader: _Reader, raw: Any) -> Target:
    if raw is None:
        return Target()
    if not isinstance(raw, dict):
        reader.report("target", "expected a table: [target]")
        return Target()
    reader.unknown(raw, ("command", "listen", "url"), "target")
    command = reader.command(raw, "command", "target.command")
    listen = reader.string(raw, "listen", "target.listen")
    url = reader.string(raw, "url", "target.url")
    if (listen is None) != (url is None):
        reader.report(
            "target", "an HTTP target needs both listen (where clients connect) and url (the server's endpoint)"
        )
    if url is not None:
        try:
            check_http_url(url, "target.url", "e.g. http://127.0.0.1:3000/mcp")
        except UrlError as exc:
            reader.report("target.url", str(exc).removeprefix("target.url "))
    return Target(command, listen, url)


def _load(reader: _Reader, raw: Any) -> Load | None:
    if not isinstance(raw, dict):
        reader.report("load", "expected a table: [load]")
        return None
    reader.unknown(raw, LOAD_KEYS, "load")
    from mcpfault.harness.agents.tasks import WORKFLOWS

    workflows = raw.get("workflows", [])
    if not isinstance(workflows, list) or any(w not in WORKFLOWS for w in workflows):
        reader.report("load.workflows", f"got {workflows!r}; a list of: {', '.join(WORKFLOWS)}")
        workflows = []
    agent = raw.get("agent", "resilient")
    command, model = _load_agent(reader, raw, agent)
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        reader.report("load.seed", f"got {seed!r}; expected an integer")
        seed = 0
    return Load(
        agent=str(agent),
        pace_s=reader.seconds(raw, "pace_s", "load.pace_s", 0.1),
        seed=seed,
        warmup_s=reader.seconds(raw, "warmup_s", "load.warmup_s", 3.0, positive=True),
        cooldown_s=reader.seconds(raw, "cooldown_s", "load.cooldown_s", 3.0, positive=True),
        deadline_s=reader.seconds(raw, "deadline_s", "load.deadline_s", 0.5, positive=True),
        workflows=tuple(workflows),
        command=command,
        agent_timeout_s=reader.seconds(raw, "agent_timeout_s", "load.agent_timeout_s", 120.0, positive=True),
        model=model,
    )


def _load_agent(reader: _Reader, raw: Mapping[str, Any], agent: Any) -> tuple[tuple[str, ...], str | None]:
    """(command, model) of the load's agent: a scripted one, llm (model = ...), or cmd:NAME (command = ...)."""
    command = raw.get("command")
    model = raw.get("model")
    external = isinstance(agent, str) and agent.startswith("cmd:")
    if not external and agent not in (*AGENTS, "llm"):
        reader.report("load.agent", f"got {agent!r}; one of: {', '.join(AGENTS)}, llm, or cmd:NAME with a command")
    if external:
        import shlex

        if isinstance(command, str):
            try:
                command = shlex.split(command)
            except ValueError as exc:
                reader.report("load.command", f"not a command line ({exc})")
                command = []
        if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
            reader.report("load.command", f'{agent} needs its command: command = ["python", "my_agent.py"]')
            command = []
    elif command is not None:
        reader.report("load.command", 'is the command of an external agent: agent = "cmd:NAME"')
    if model is not None and (agent != "llm" or not isinstance(model, str) or not model):
        reader.report("load.model", 'is the model of agent = "llm", e.g. model = "openai:gpt-4o-mini"')
        model = None
    return tuple(command or ()), model


def _probe(reader: _Reader, raw: Mapping[str, Any], where: str, *, stop: bool = False) -> ProbeSpec | None:
    count = len(reader.problems)
    reader.unknown(raw, PROBE_KEYS, where)
    name = reader.string(raw, "name", f"{where}.name", required=True) or where
    kind = raw.get("probe")
    if kind not in PROBES:
        reader.report(f"{where}.probe", f"got {kind!r}; one of: {', '.join(PROBES)}")
    tolerance = _tolerance(reader, raw.get("tolerance"), f"{where}.tolerance")
    metric = query = prometheus = url = None
    command: tuple[str, ...] = ()
    if kind == "metric":
        metric = raw.get("metric")
        if metric not in METRICS:
            reader.report(f"{where}.metric", f"got {metric!r}; one of: {', '.join(METRICS)}")
        elif stop and metric in TASK_METRICS:
            reader.report(
                f"{where}.metric",
                f"{metric!r} is judged after the run; a stop condition needs one of: {', '.join(LIVE_METRICS)}",
            )
    elif kind == "promql":
        query = reader.string(raw, "query", f"{where}.query", required=True)
        prometheus = reader.string(raw, "prometheus", f"{where}.prometheus", required=True)
    elif kind == "http":
        url = reader.string(raw, "url", f"{where}.url", required=True)
    elif kind == "command":
        command = reader.command(raw, "command", f"{where}.command")
        if not command:
            reader.report(f"{where}.command", "is required: the command to run, as a list of strings")
    window_s = reader.seconds(raw, "window_s", f"{where}.window_s", 5.0, positive=True)
    interval_s = reader.seconds(raw, "interval_s", f"{where}.interval_s", 1.0, positive=True)
    timeout_s = reader.seconds(raw, "timeout_s", f"{where}.timeout_s", 5.0, positive=True)
    during = raw.get("during", False)
    if not isinstance(during, bool):
        reader.report(f"{where}.during", f"got {during!r}; expected true or false")
    if len(reader.problems) > count or tolerance is None:
        return None
    return ProbeSpec(
        name,
        str(kind),
        tolerance,
        window_s,
        metric,
        query,
        prometheus,
        url,
        command,
        bool(during),
        interval_s,
        timeout_s,
    )


def _tolerance(reader: _Reader, raw: Any, where: str) -> Tolerance | None:
    if raw is None:
        reader.report(where, 'is required: a value, an inclusive [low, high] range, or {regex = "..."}')
        return None
    if isinstance(raw, dict):
        regex = raw.get("regex")
        if set(raw) != {"regex"} or not isinstance(regex, str):
            reader.report(where, 'a table tolerance is {regex = "..."}')
            return None
        try:
            re.compile(regex)
        except re.error as exc:
            reader.report(where, f"bad regex {regex!r}: {exc}")
            return None
        return Tolerance(regex=regex)
    if isinstance(raw, list):
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in raw)
        if len(raw) != 2 or not numbers or raw[0] > raw[1]:
            reader.report(where, f"got {raw!r}; a range is [low, high] of finite numbers with low <= high")
            return None
        return Tolerance(low=float(raw[0]), high=float(raw[1]))
    if isinstance(raw, float) and not math.isfinite(raw):
        reader.report(where, f"got {raw}; expected a finite number (nan equals nothing, so it could never hold)")
        return None
    if isinstance(raw, str | int | float | bool):
        return Tolerance(exact=raw)
    reader.report(where, f'got {raw!r}; expected a value, [low, high] or {{regex = "..."}}')
    return None


def _action(reader: _Reader, raw: Mapping[str, Any], where: str, radius: Mapping[str, Any]) -> Action | None:
    count = len(reader.problems)
    reader.unknown(raw, ("name", "start_after_s", "duration_s", "fault", "action", "signal"), where)
    name = reader.string(raw, "name", f"{where}.name", required=True) or where
    start = reader.seconds(raw, "start_after_s", f"{where}.start_after_s", 0.0)
    duration = reader.seconds(raw, "duration_s", f"{where}.duration_s", None, positive=True)
    fault, process = raw.get("fault"), raw.get("action")
    if (fault is None) == (process is None):
        reader.report(
            where, f"give either fault = {{...}} (a [[faults]] rule) or action = one of {', '.join(PROCESS_ACTIONS)}"
        )
    rule: dict[str, Any] | None = None
    if fault is not None:
        rule = _fault_rule(reader, fault, f"{where}.fault", name, radius)
    if process is not None and process not in PROCESS_ACTIONS:
        reader.report(f"{where}.action", f"got {process!r}; one of: {', '.join(PROCESS_ACTIONS)}")
    signal_name = raw.get("signal", "SIGKILL")
    if not isinstance(signal_name, str):
        reader.report(f"{where}.signal", f"got {signal_name!r}; expected a signal name such as SIGKILL")
    elif process is not None:
        from mcpfault.control.server import signal_number

        try:
            signal_number(signal_name)
        except ValueError as exc:
            reader.report(f"{where}.signal", str(exc))
    if len(reader.problems) > count:
        return None
    return Action(name, start, duration, rule, process if isinstance(process, str) else None, str(signal_name).upper())


def _fault_rule(reader: _Reader, raw: Any, where: str, name: str, radius: Mapping[str, Any]) -> dict[str, Any] | None:
    from mcpfault.faults.profile import rule_from_mapping

    if not isinstance(raw, dict):
        reader.report(where, 'expected a table: one [[faults]] rule, e.g. {type = "error", probability = 0.5}')
        return None
    if "start_after_s" in raw or "duration_s" in raw:
        reader.report(where, "the action's own start_after_s and duration_s set its window; leave them out of the rule")
        return None
    rule = {"name": name, **raw}
    for key, value in radius.items():
        rule.setdefault(key, value)  # the blast radius, unless the rule narrows it itself
    try:
        rule_from_mapping(rule, reader.source)
    except ProfileError as exc:
        for problem in exc.problems:
            reader.report(f"{where}.{problem.field}", problem.message)
        return None
    return rule


def _radius(reader: _Reader, raw: Any) -> dict[str, Any]:
    """The rule keys a blast radius sets on every fault action: ``tools`` globs, a ``sessions`` share."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        reader.report("blast_radius", "expected a table: [blast_radius]")
        return {}
    reader.unknown(raw, ("tools", "sessions"), "blast_radius")
    radius: dict[str, Any] = {}
    tools = raw.get("tools")
    if tools is not None:
        if isinstance(tools, list) and tools and all(isinstance(t, str) and t for t in tools):
            radius["tools"] = list(tools)
        else:
            reader.report("blast_radius.tools", f'got {tools!r}; expected a list of tool globs, e.g. ["get_*"]')
    sessions = raw.get("sessions")
    if sessions is not None:
        if isinstance(sessions, int | float) and not isinstance(sessions, bool) and 0 < sessions <= 1:
            radius["sessions"] = float(sessions)
        else:
            reader.report("blast_radius.sessions", f"got {sessions!r}; expected a share of HTTP sessions in (0, 1]")
    return radius


def profile_text(server: Mapping[str, Any]) -> str:
    """The profile the experiment's proxy starts with: no rules (the method adds them through the
    control API), and ``server``."""
    document: dict[str, Any] = {"name": "experiment", "seed": 0, "faults": []}
    return toml_text({**document, "server": dict(server)} if server else document)


def _server(reader: _Reader, raw: Any) -> dict[str, Any]:
    """A [server] table, checked by the profile's own code (what this proxy accepts there)."""
    from mcpfault.faults.profile import loads

    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str | int | float | bool) for v in raw.values()):
        reader.report("server", "expected a table of settings, as a profile's [server] table")
        return {}
    try:
        loads(profile_text(raw), source=reader.source)
    except ProfileError as exc:
        for problem in exc.problems:
            reader.report("server" if problem.field == "server" else f"server.{problem.field}", problem.message)
        return {}
    return dict(raw)


def _names(reader: _Reader, names: list[str], section: str) -> None:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            reader.report(f"{section}[{index}].name", f"{name!r} is used twice; names must be unique")
        seen.add(name)
