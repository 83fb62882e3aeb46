"""``mcpfault mcp-server``: mcpfault as an MCP server (the SDK's MCPServer; both eras; stdio or HTTP).

The safety model, in the order a call meets it:
- Confined files: every path is taken inside the work directory (MCPFAULT_WORKDIR, default the
  working directory) and must stay there once resolved: ``../x``, an absolute path outside it and
  a symlink that leads out are refused, each with its own message.
- Validated input: profiles and experiments are validated as ``mcpfault validate`` does; names that
  reach a command line match a strict pattern and a known set; a command is an argv list, run without
  a shell; a control URL must be loopback HTTP.
- Dry run by default: ``run_experiment``, ``set_faults``, ``audit_server`` and overwriting a file do
  nothing unless called with ``dry_run=false`` and ``confirm_destructive=true``; the answer says what
  would happen, or what happened and how to undo it. ``audit_server`` calls a tool annotated destructive
  only with ``call_destructive_tools=true`` as well.
- Bounds: texts, reports, runs' tasks and times have upper limits, named in each refusal.
"""

from __future__ import annotations

import os
import re
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from mcpfault.app.toml_text import toml_text
from mcpfault.errors import MCPFaultError, ProblemsError, ProfileError, UsageError
from mcpfault.loopback import UrlError, check_http_url, is_loopback

if TYPE_CHECKING:
    from mcpfault.api import AuditOutcome

WORKDIR_VARIABLE = "MCPFAULT_WORKDIR"
MAX_TEXT_BYTES = 256 * 1024
MAX_REPORT_BYTES = 200 * 1024
MAX_BENCH_TASKS = 100
MAX_BENCH_S = 300.0
MAX_EXPERIMENT_S = 600.0
MAX_RUNS_LISTED = 100
MAX_AUDIT_CALLS = 200
MAX_AUDIT_S = 600.0
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES_FILE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
RUNS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
LIVE_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
LIVE_CHANGE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)


# -- answers (each a TypedDict: the SDK derives the outputSchema and sends structuredContent) --------


class FaultType(TypedDict):
    name: str
    modes: list[str]
    transports: list[str]
    needs_process: bool
    description: str


class FaultTypes(TypedDict):
    fault_types: list[FaultType]


class Validation(TypedDict):
    valid: bool
    name: str | None
    rules: int
    problems: list[str]


class Written(TypedDict):
    path: str
    written: bool
    dry_run: bool
    message: str
    undo: str


class ExperimentRun(TypedDict):
    dry_run: bool
    message: str
    timeline: list[str]
    verdict: str | None
    state: str | None
    exit_code: int | None
    out_dir: str | None
    undo: str


class BenchRun(TypedDict):
    run_dir: str
    tasks: int
    outcomes: dict[str, int]
    wall_s: float


class Report(TypedDict):
    path: str
    text: str
    truncated: bool
    bytes: int


class RunEntry(TypedDict):
    path: str
    kind: str
    modified: str


class Runs(TypedDict):
    runs: list[RunEntry]
    truncated: bool


class ProxyStatus(TypedDict):
    faults_enabled: bool
    rules: int
    requests_total: int
    faults_total: int
    transport: str
    server_pid: int | None
    faults: list[dict[str, Any]]


class AuditRun(TypedDict):
    dry_run: bool
    passed: bool | None
    message: str
    plan: list[str]
    tools: list[dict[str, Any]]
    audit_json: str | None
    undo: str


class FaultChange(TypedDict):
    dry_run: bool
    action: str
    message: str
    result: dict[str, Any] | None
    undo: str


# -- the safety model's helpers -----------------------------------------------------------------


def workdir() -> Path:
    return Path(os.environ.get(WORKDIR_VARIABLE) or os.getcwd()).resolve()


def confine(path: str, *, must_exist: bool = False) -> Path:
    """``path`` inside the work directory, or a ToolError that says which rule it broke."""
    root = workdir()
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise ToolError("path: give a non-empty path inside the work directory")
    given = Path(path)
    if ".." in given.parts:
        raise ToolError(f"path {path!r}: '..' is refused; give a path inside the work directory {root}")
    lexical = given if given.is_absolute() else root / given
    if given.is_absolute() and not _inside(Path(os.path.normpath(lexical)), root):
        raise ToolError(f"path {path!r} is an absolute path outside the work directory {root}; refused")
    resolved = lexical.resolve()
    if not _inside(resolved, root):
        raise ToolError(f"path {path!r} leads outside the work directory {root} through a symlink; refused")
    if must_exist and not resolved.exists():
        raise ToolError(f"path {path!r} does not exist in the work directory {root}")
    return resolved


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _relative(path: Path) -> str:
    return str(path.relative_to(workdir())) if _inside(path, workdir()) else str(path)


def _name(value: str, what: str, known: set[str] | None = None) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise ToolError(f"{what} {value!r}: use letters, digits, '_', '.', '-' (at most 64, no leading '-')")
    if known is not None and value not in known:
        raise ToolError(f"{what} {value!r} is not one of: {', '.join(sorted(known))}")
    return value


def _control_url(url: str) -> str:
    try:
        parts = check_http_url(url, "control_url", "the proxy's loopback control URL")
    except UrlError:
        parts = None
    if parts is None or parts.scheme != "http" or not is_loopback(str(parts.hostname)):
        raise ToolError(f"control_url {url!r}: give the proxy's loopback control URL, e.g. http://127.0.0.1:8474")
    return url


def _confirmed(dry_run: bool, confirm_destructive: bool) -> bool:
    """True to act; False for a dry run; a refusal for a half-confirmed call."""
    if dry_run:
        return False
    if not confirm_destructive:
        raise ToolError("dry_run=false acts only with confirm_destructive=true as well; nothing was done")
    return True


def _text_bound(text: str, what: str) -> None:
    if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        raise ToolError(f"{what} is larger than {MAX_TEXT_BYTES} bytes; refused")


def _checked_rule(rule: dict[str, Any]) -> None:
    """A rule checked as a profile's is (NaN and Infinity refused by name), before a dry run says it would add it."""
    from mcpfault.api import check_rule

    try:
        check_rule(rule, source="set_faults rule")
    except ProblemsError as exc:
        raise ToolError("rule refused: " + "; ".join(_problems(exc))) from None


def _problems(exc: ProblemsError) -> list[str]:
    return [str(problem) for problem in exc.problems]


# -- the server ----------------------------------------------------------------------------------


# -- the tools -----------------------------------------------------------------------------------


def list_fault_types() -> FaultTypes:
    """Every fault type a profile's [[faults]] rule can use, with its modes and transports."""
    from mcpfault.api import fault_types

    types: list[FaultType] = [
        {
            "name": kind.name,
            "modes": list(kind.modes),
            "transports": list(kind.transports),
            "needs_process": kind.needs_process,
            "description": kind.description,
        }
        for kind in fault_types()
    ]
    return {"fault_types": types}


def validate_profile(text: str | None = None, path: str | None = None) -> Validation:
    """Validate a fault profile given as TOML text or as a path in the work directory (one of them)."""
    from mcpfault.api import check_profile

    if (text is None) == (path is None):
        raise ToolError("give either text (the profile's TOML) or path (a file in the work directory)")
    if path is not None:
        file = confine(path, must_exist=True)
        if file.stat().st_size > MAX_TEXT_BYTES:
            raise ToolError(f"path {path!r} is larger than {MAX_TEXT_BYTES} bytes; refused")
        text, source = file.read_text(encoding="utf-8", errors="replace"), _relative(file)
    else:
        assert text is not None
        _text_bound(text, "text")
        source = "<text>"
    try:
        checked = check_profile(text, source=source)
    except ProfileError as exc:
        return {"valid": False, "name": None, "rules": 0, "problems": _problems(exc)}
    return {"valid": True, "name": checked.name, "rules": checked.rules, "problems": []}


def write_profile(
    path: str,
    name: str,
    seed: int,
    faults: list[dict[str, Any]],
    *,
    dry_run: bool = False,
    confirm_destructive: bool = False,
) -> Written:
    """Write a validated fault profile (``faults``: a list of [[faults]] tables) to a .toml path in the
    work directory. Overwriting an existing file needs dry_run=false and confirm_destructive=true."""
    from mcpfault.api import check_profile

    target = confine(path)
    if target.suffix != ".toml":
        raise ToolError(f"path {path!r}: a profile file ends in .toml")
    document = {"name": _name(name, "name"), "seed": int(seed), "faults": list(faults)}
    try:
        check_profile(document, source=_relative(target))
    except ProfileError as exc:
        raise ToolError("the profile is not valid; nothing was written:\n" + "\n".join(_problems(exc))) from None
    return _write(target, toml_text(document), dry_run, confirm_destructive, "profile")


def write_experiment(
    path: str,
    experiment: dict[str, Any],
    dry_run: bool = False,
    confirm_destructive: bool = False,
) -> Written:
    """Write a validated experiment (the mapping of an experiment file: title, load, hypothesis,
    method, stop_conditions) to a .toml path in the work directory. A target server command must be
    an argv list (it is never run through a shell). Overwriting needs both confirmations."""
    from mcpfault.api import load_experiment

    target = confine(path)
    if target.suffix != ".toml":
        raise ToolError(f"path {path!r}: an experiment file ends in .toml")
    command = (experiment.get("target") or {}).get("command") if isinstance(experiment, dict) else None
    if command is not None and (
        not isinstance(command, list) or not command or not all(isinstance(p, str) and p for p in command)
    ):
        raise ToolError("target.command must be an argv list of non-empty strings, e.g. ['mcpfault', 'mock-server']")
    try:
        text = toml_text(experiment)
        load_experiment(tomllib.loads(text), source=_relative(target))
    except ValueError as exc:
        raise ToolError(f"the experiment cannot be written as TOML: {exc}") from None
    except ProblemsError as exc:
        raise ToolError("the experiment is not valid; nothing was written:\n" + "\n".join(_problems(exc))) from None
    return _write(target, text, dry_run, confirm_destructive, "experiment")


async def run_experiment(path: str, dry_run: bool = True, confirm_destructive: bool = False) -> ExperimentRun:
    """Run an experiment file of the work directory (at most 10 minutes). A dry run (the default)
    validates it and says what would happen; it runs only with dry_run=false and confirm_destructive=true."""
    from mcpfault.api import load_experiment

    file = confine(path, must_exist=True)
    try:
        loaded = load_experiment(file)
    except ProblemsError as exc:
        raise ToolError("the experiment is not valid:\n" + "\n".join(_problems(exc))) from None
    if loaded.total_s > MAX_EXPERIMENT_S:
        raise ToolError(f"the experiment lasts {loaded.total_s:g} s; at most {MAX_EXPERIMENT_S:g} s here")
    timeline = [f"0 s: a proxy in front of the bundled mock starts; load runs for {loaded.total_s:g} s"]
    timeline += [
        f"{loaded.warmup_s + action.start_after_s:g} s: {action.name}: {action.describe()} for {action.duration_s:g} s"
        for action in sorted(loaded.method, key=lambda a: a.start_after_s)
    ]
    undo = "nothing to undo: the proxy it starts, and every fault in it, end with the run"
    if not _confirmed(dry_run, confirm_destructive):
        message = f"dry run: would run {loaded.title!r} ({loaded.total_s:g} s); nothing was started"
        return _experiment_answer(True, message, timeline, None, undo)
    out_dir = workdir() / "runs" / f"experiment-{file.stem}-{time.strftime('%Y%m%dT%H%M%S')}"

    def perform() -> Any:
        from mcpfault.api import run_experiment as run

        return run(file, out_dir=out_dir)

    with anyio.fail_after(MAX_EXPERIMENT_S + 60):
        outcome = await anyio.to_thread.run_sync(perform)
    message = f"ran {loaded.title!r}: verdict {outcome.verdict} (state {outcome.state})"
    return _experiment_answer(False, message, timeline, outcome, undo)


async def run_bench(profile: str = "error", agent: str = "resilient", tasks: int = 20, seed: int = 0) -> BenchRun:
    """Run the benchmark on the bundled mock: one bundled profile x one agent, at most 100 tasks and
    300 s; its run directory goes under runs/ in the work directory (read it with read_report)."""
    from mcpfault.api import bundled_profiles, scripted_agents, task_outcomes

    _name(profile, "profile", set(bundled_profiles()))
    _name(agent, "agent", set(scripted_agents()))
    if not isinstance(tasks, int) or not 1 <= tasks <= MAX_BENCH_TASKS:
        raise ToolError(f"tasks {tasks!r}: give an integer in [1, {MAX_BENCH_TASKS}]")
    from mcpfault.app import bench as app_bench  # the harness, imported when a bench runs

    run_dir = workdir() / "runs" / f"bench-{profile}-{agent}-{time.strftime('%Y%m%dT%H%M%S')}"
    config = app_bench.config_for([profile], [agent], run_dir, tasks=tasks, session_tasks=min(tasks, 20), seed=seed)
    command = f"mcpfault bench --profiles {profile} --agents {agent} --tasks {tasks} --seed {int(seed)}"
    started = time.monotonic()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        done = await anyio.to_thread.run_sync(
            lambda: app_bench.run_bench(config, command=command, timeout_s=MAX_BENCH_S)
        )
    except TimeoutError:
        raise ToolError(f"the bench did not finish in {MAX_BENCH_S:g} s (partial output in {run_dir})") from None
    except MCPFaultError as exc:
        raise ToolError(f"the bench failed: {exc}") from None
    if done.errors:
        raise ToolError("the bench ran with errors: " + "; ".join(done.errors)[-1500:])
    outcomes = dict(task_outcomes(run_dir))
    wall = round(time.monotonic() - started, 2)
    return {"run_dir": _relative(run_dir), "tasks": sum(outcomes.values()), "outcomes": outcomes, "wall_s": wall}


def read_report(path: str) -> Report:
    """A report of the work directory: a report.md, or a run directory holding one (at most 200 KiB)."""
    file = confine(path, must_exist=True)
    if file.is_dir():
        file = confine(str(Path(path) / "report.md"), must_exist=True)
    data = file.read_bytes()
    text = data[:MAX_REPORT_BYTES].decode("utf-8", errors="replace")
    return {"path": _relative(file), "text": text, "truncated": len(data) > MAX_REPORT_BYTES, "bytes": len(data)}


def list_runs() -> Runs:
    """Bench and experiment run directories in the work directory (newest first, at most 100)."""
    root = workdir()
    found: list[tuple[float, RunEntry]] = []
    for marker, kind in (("records.jsonl", "bench"), ("journal.jsonl", "experiment")):
        for file in root.rglob(marker):
            directory = file.parent
            if not _inside(directory.resolve(), root):
                continue
            modified = directory.stat().st_mtime
            entry: RunEntry = {
                "path": _relative(directory),
                "kind": kind,
                "modified": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(modified)),
            }
            found.append((modified, entry))
    found.sort(key=lambda item: -item[0])
    return {"runs": [entry for _t, entry in found[:MAX_RUNS_LISTED]], "truncated": len(found) > MAX_RUNS_LISTED}


def proxy_status(control_url: str) -> ProxyStatus:
    """A live proxy's state through its control API (loopback URL, as the proxy printed it)."""
    control = _control(control_url)
    status, rules = _live(control.status), _live(control.faults)
    server_info = status.get("server") or {}
    return {
        "faults_enabled": status["faults_enabled"],
        "rules": status["rules"],
        "requests_total": status["requests_total"],
        "faults_total": status["faults_total"],
        "transport": status["transport"],
        "server_pid": server_info.get("pid"),
        "faults": rules["faults"],
    }


def set_faults(
    control_url: str,
    action: Literal["add", "remove", "off", "on", "reset"],
    rule: dict[str, Any] | None = None,
    name: str | None = None,
    *,
    dry_run: bool = True,
    confirm_destructive: bool = False,
) -> FaultChange:
    """Change a live proxy's faults: add a rule (one [[faults]] table), remove one by name, switch all
    off or on, or reset to its profile. A dry run (the default) says what would change; it acts only
    with dry_run=false and confirm_destructive=true, and the answer says how to undo it."""
    control = _control(control_url)
    if action == "add":
        if not isinstance(rule, dict) or not isinstance(rule.get("name"), str):
            raise ToolError("action 'add' needs rule: one [[faults]] table with a name")
        _name(rule["name"], "rule name")
        _checked_rule(rule)
        what, undo = f"add rule {rule['name']!r} ({rule.get('type')})", f"set_faults remove name={rule['name']!r}"
    elif action == "remove":
        if name is None:
            raise ToolError("action 'remove' needs name: the rule's name")
        _name(name, "name")
        what, undo = f"remove rule {name!r}", "set_faults add with the same rule, or reset"
    else:
        what = {"off": "switch every fault off", "on": "switch faults on", "reset": "reset to the profile"}[action]
        undo = {"off": "set_faults on", "on": "set_faults off", "reset": "add back the run-time rules"}[action]
    if not _confirmed(dry_run, confirm_destructive):
        return {
            "dry_run": True,
            "action": action,
            "message": f"dry run: would {what}",
            "result": None,
            "undo": undo,
        }
    calls = {
        "add": lambda: control.add(rule or {}),
        "remove": lambda: control.remove(name or ""),
        "off": control.off,
        "on": control.on,
        "reset": control.reset,
    }
    result = _live(calls[action])
    answer = result if isinstance(result, dict) else {"answer": result}
    return {"dry_run": False, "action": action, "message": f"done: {what}", "result": answer, "undo": undo}


async def audit_server(
    server_command: list[str],
    *,
    tools: list[str] | None = None,
    seed: int = 0,
    state_tool: str | None = None,
    state_args: dict[str, Any] | None = None,
    state_resource: str | None = None,
    examples: str | None = None,
    lose: Literal["drop", "crash"] = "drop",
    probe: Literal["ebpf"] | None = None,
    fail_on: Literal["info", "low", "medium", "high", "never"] = "medium",
    max_calls: int = 100,
    dry_run: bool = True,
    confirm_destructive: bool = False,
    call_destructive_tools: bool = False,
) -> AuditRun:
    """Audit a server's tools as `mcpfault audit` does: call each, lose its reply, retry, and grade
    (lying hints, not idempotent, retry-safe). A dry run (the default) lists the tools and says what it
    would call; it calls them only with dry_run=false and confirm_destructive=true, and calls tools
    annotated destructive only with call_destructive_tools=true too. The server runs in a new directory
    under audits/ of the work directory. Use it against staging, never against production data."""
    from mcpfault.api import audit

    if (
        not isinstance(server_command, list)
        or not server_command
        or not all(isinstance(part, str) and part for part in server_command)
    ):
        raise ToolError(
            "server_command: give the server's argv as a list of strings, e.g. ['python', '/abs/server.py']"
        )
    if not isinstance(max_calls, int) or not 1 <= max_calls <= MAX_AUDIT_CALLS:
        raise ToolError(f"max_calls {max_calls!r}: give an integer in [1, {MAX_AUDIT_CALLS}]")
    act = _confirmed(dry_run, confirm_destructive)
    out_dir = workdir() / "audits" / f"audit-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{time.monotonic_ns()}"
    examples_file = confine(examples, must_exist=True) if examples is not None else None

    def perform() -> Any:
        return audit(
            server_command,
            tools=tools or ("*",),
            seed=seed,
            state_tool=state_tool,
            state_args=state_args,
            state_resource=state_resource,
            examples=examples_file,
            lose=lose,
            probe=probe,
            fail_on=fail_on,
            max_calls=max_calls,
            max_time_s=MAX_AUDIT_S,
            confirm=act,
            confirm_destructive=act and call_destructive_tools,
            out=out_dir,
        )

    try:
        with anyio.fail_after(MAX_AUDIT_S + 120):
            outcome = await anyio.to_thread.run_sync(perform)
    except MCPFaultError as exc:
        raise ToolError(f"the audit did not run: {exc}") from None
    return _audit_run(outcome, fail_on)


def _audit_run(outcome: AuditOutcome, fail_on: str) -> AuditRun:
    """What audit_server answers: the plan, each tool's findings, and where audit.json is."""
    summary = [
        {
            "name": t["name"],
            "not_called": t["not_called"],
            "retry_safe": t.get("retry_safe"),
            "findings": [f"{f['kind']} ({f['severity']}): {f['message']}" for f in t.get("findings", [])],
        }
        for t in outcome.document["tools"]
    ]
    if outcome.dry_run:
        message = "dry run: nothing was called; call again with dry_run=false and confirm_destructive=true"
    else:
        message = f"audited: {'passed' if outcome.passed else 'FAILED'} (fail_on {fail_on})"
    return {
        "dry_run": outcome.dry_run,
        "passed": None if outcome.dry_run else outcome.passed,
        "message": message,
        "plan": outcome.plan,
        "tools": summary,
        "audit_json": _relative(outcome.audit_json) if outcome.audit_json is not None else None,
        "undo": "the server ran in its own directory (see audit_json); what it did outside it, it did for real",
    }


def test_server_under_faults(server_command: str, profile: str = "mixed") -> str:
    """Plan a fault test of an MCP server: profile, experiment, run, report."""
    return (
        f"Test the MCP server started by `{server_command}` under faults with mcpfault.\n"
        "1. Call list_fault_types and pick faults that match how this server can fail.\n"
        f"2. Start from the bundled profile {profile!r}; write your own with write_profile "
        "(path inside the work directory), and check it with validate_profile.\n"
        "3. Write an experiment with write_experiment: a steady-state hypothesis (tolerances), "
        "a method (fault rules on a timeline) and stop conditions. Its target command is an argv list.\n"
        "4. Call run_experiment first as a dry run and read what it would do; run it for real only "
        "with dry_run=false and confirm_destructive=true.\n"
        "5. Read the result with read_report and say which faults the client handled and which it did not."
    )


def explain_report(path: str) -> str:
    """Explain a bench or experiment report of the work directory."""
    return (
        f"Read the report at {path!r} with read_report (list_runs shows what exists). Explain, for a "
        "person who did not run it: what was tested, the verdict or the outcome table "
        "(success, recovered, failed_detected, failed_silent), which faults hurt most, and what "
        "to change in the agent or the server. Quote figures from the report only."
    )


# The tools and prompts the server offers: each a function above, with its annotations (or title).
TOOLS: tuple[tuple[Callable[..., Any], ToolAnnotations], ...] = (
    (list_fault_types, READ_ONLY),
    (validate_profile, READ_ONLY),
    (write_profile, WRITES_FILE),
    (write_experiment, WRITES_FILE),
    (run_experiment, DESTRUCTIVE),
    (run_bench, RUNS),
    (read_report, READ_ONLY),
    (list_runs, READ_ONLY),
    (proxy_status, LIVE_READ),
    (set_faults, LIVE_CHANGE),
    (audit_server, DESTRUCTIVE),
)
PROMPTS: tuple[tuple[Callable[..., str], str], ...] = (
    (test_server_under_faults, "Test this server under faults"),
    (explain_report, "Explain this report"),
)


def build() -> MCPServer:
    server = MCPServer(
        "mcpfault",
        log_level="WARNING",
        instructions="Chaos engineering for MCP: write fault profiles and experiments, run them against the "
        "bundled mock, read reports, change a live proxy's faults. Files stay in the work directory; "
        "anything destructive is a dry run unless dry_run=false and confirm_destructive=true.",
    )
    for tool, hints in TOOLS:
        server.tool(annotations=hints, structured_output=True)(tool)
    for prompt, title in PROMPTS:
        server.prompt(title=title)(prompt)
    return server


def _write(target: Path, text: str, dry_run: bool, confirm_destructive: bool, what: str) -> Written:
    _text_bound(text, what)
    shown = _relative(target)
    if target.exists():
        if dry_run or not confirm_destructive:  # never an overwrite by default: the answer says how
            return {
                "path": shown,
                "written": False,
                "dry_run": True,
                "message": f"{shown} exists; overwriting it needs dry_run=false and confirm_destructive=true",
                "undo": "nothing was written",
            }
        previous = target.with_name(target.name + ".previous")
        previous.write_bytes(target.read_bytes())
        target.write_text(text, encoding="utf-8")
        undo = f"the file it replaced is kept as {_relative(previous)}"
        return {"path": shown, "written": True, "dry_run": False, "message": f"overwrote {shown}", "undo": undo}
    if dry_run:
        return {
            "path": shown,
            "written": False,
            "dry_run": True,
            "message": f"dry run: would write {shown}",
            "undo": "",
        }
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return {"path": shown, "written": True, "dry_run": False, "message": f"wrote {shown}", "undo": f"delete {shown}"}


def _experiment_answer(dry: bool, message: str, timeline: list[str], outcome: Any, undo: str) -> ExperimentRun:
    return {
        "dry_run": dry,
        "message": message,
        "timeline": timeline,
        "verdict": outcome.verdict if outcome is not None else None,
        "state": outcome.state if outcome is not None else None,
        "exit_code": int(outcome.exit_code) if outcome is not None else None,
        "out_dir": _relative(outcome.out_dir) if outcome is not None else None,
        "undo": undo,
    }


def _control(url: str) -> Any:
    from mcpfault.api import Control

    return Control(_control_url(url), token=os.environ.get("MCPFAULT_CONTROL_TOKEN") or None, timeout_s=10.0)


def _live(call: Any) -> Any:
    from mcpfault.api import ApiError, Unreachable

    try:
        return call()
    except Unreachable as exc:
        raise ToolError(str(exc)) from None
    except ApiError as exc:
        raise ToolError(f"the proxy refused: {exc.detail()}") from None


async def serve_http(server: MCPServer, host: str, port: int, announce: Any) -> None:
    """Streamable HTTP on ``host:port`` (0: the OS picks); ``announce(url)`` once listening."""
    import socket

    import uvicorn

    if not is_loopback(host):
        raise UsageError(f"--listen {host}: mcp-server serves loopback only (it writes files and runs experiments)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(server.streamable_http_app(host=host), log_level="warning", lifespan="on")
    announce(f"http://{shown}:{bound}/mcp")
    await uvicorn.Server(config).serve(sockets=[sock])
