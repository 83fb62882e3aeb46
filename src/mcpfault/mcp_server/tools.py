"""The MCP server's tools and prompts: one function each, listed with its annotations (or title) in
``TOOLS`` and ``PROMPTS``, which ``build`` registers."""

from __future__ import annotations

import os
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.to_thread
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from mcpfault.app.toml_text import toml_text
from mcpfault.errors import MCPFaultError, ProblemsError, ProfileError
from mcpfault.mcp_server.answers import (
    AuditRun,
    BenchRun,
    ExperimentRun,
    FaultChange,
    FaultType,
    FaultTypes,
    ProxyStatus,
    Report,
    RunEntry,
    Runs,
    Validation,
    Written,
)
from mcpfault.mcp_server.safety import (
    MAX_AUDIT_CALLS,
    MAX_AUDIT_S,
    MAX_BENCH_S,
    MAX_BENCH_TASKS,
    MAX_EXPERIMENT_S,
    MAX_REPORT_BYTES,
    MAX_RUNS_LISTED,
    MAX_TEXT_BYTES,
    bound_text,
    checked_name,
    checked_rule,
    confine,
    confirmed,
    inside,
    loopback_control_url,
    problems,
    relative,
    workdir,
    write_confined,
)

if TYPE_CHECKING:
    from mcpfault.api import AuditOutcome

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES_FILE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
RUNS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
LIVE_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
LIVE_CHANGE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)


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
        text, source = file.read_text(encoding="utf-8", errors="replace"), relative(file)
    else:
        assert text is not None
        bound_text(text, "text")
        source = "<text>"
    try:
        checked = check_profile(text, source=source)
    except ProfileError as exc:
        return {"valid": False, "name": None, "rules": 0, "problems": problems(exc)}
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
    document = {"name": checked_name(name, "name"), "seed": int(seed), "faults": list(faults)}
    try:
        check_profile(document, source=relative(target))
    except ProfileError as exc:
        raise ToolError("the profile is not valid; nothing was written:\n" + "\n".join(problems(exc))) from None
    return write_confined(target, toml_text(document), dry_run, confirm_destructive, "profile")


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
        load_experiment(tomllib.loads(text), source=relative(target))
    except ValueError as exc:
        raise ToolError(f"the experiment cannot be written as TOML: {exc}") from None
    except ProblemsError as exc:
        raise ToolError("the experiment is not valid; nothing was written:\n" + "\n".join(problems(exc))) from None
    return write_confined(target, text, dry_run, confirm_destructive, "experiment")


async def run_experiment(path: str, dry_run: bool = True, confirm_destructive: bool = False) -> ExperimentRun:
    """Run an experiment file of the work directory (at most 10 minutes). A dry run (the default)
    validates it and says what would happen; it runs only with dry_run=false and confirm_destructive=true."""
    from mcpfault.api import load_experiment

    file = confine(path, must_exist=True)
    try:
        loaded = load_experiment(file)
    except ProblemsError as exc:
        raise ToolError("the experiment is not valid:\n" + "\n".join(problems(exc))) from None
    if loaded.total_s > MAX_EXPERIMENT_S:
        raise ToolError(f"the experiment lasts {loaded.total_s:g} s; at most {MAX_EXPERIMENT_S:g} s here")
    timeline = [f"0 s: a proxy in front of the bundled mock starts; load runs for {loaded.total_s:g} s"]
    timeline += [
        f"{loaded.warmup_s + action.start_after_s:g} s: {action.name}: {action.describe()} for {action.duration_s:g} s"
        for action in sorted(loaded.method, key=lambda a: a.start_after_s)
    ]
    undo = "nothing to undo: the proxy it starts, and every fault in it, end with the run"
    if not confirmed(dry_run, confirm_destructive):
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

    checked_name(profile, "profile", set(bundled_profiles()))
    checked_name(agent, "agent", set(scripted_agents()))
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
    return {"run_dir": relative(run_dir), "tasks": sum(outcomes.values()), "outcomes": outcomes, "wall_s": wall}


def read_report(path: str) -> Report:
    """A report of the work directory: a report.md, or a run directory holding one (at most 200 KiB)."""
    file = confine(path, must_exist=True)
    if file.is_dir():
        file = confine(str(Path(path) / "report.md"), must_exist=True)
    data = file.read_bytes()
    text = data[:MAX_REPORT_BYTES].decode("utf-8", errors="replace")
    return {"path": relative(file), "text": text, "truncated": len(data) > MAX_REPORT_BYTES, "bytes": len(data)}


def list_runs() -> Runs:
    """Bench and experiment run directories in the work directory (newest first, at most 100)."""
    root = workdir()
    found: list[tuple[float, RunEntry]] = []
    for marker, kind in (("records.jsonl", "bench"), ("journal.jsonl", "experiment")):
        for file in root.rglob(marker):
            directory = file.parent
            if not inside(directory.resolve(), root):
                continue
            modified = directory.stat().st_mtime
            entry: RunEntry = {
                "path": relative(directory),
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
        checked_name(rule["name"], "rule name")
        checked_rule(rule)
        what, undo = f"add rule {rule['name']!r} ({rule.get('type')})", f"set_faults remove name={rule['name']!r}"
    elif action == "remove":
        if name is None:
            raise ToolError("action 'remove' needs name: the rule's name")
        checked_name(name, "name")
        what, undo = f"remove rule {name!r}", "set_faults add with the same rule, or reset"
    else:
        what = {"off": "switch every fault off", "on": "switch faults on", "reset": "reset to the profile"}[action]
        undo = {"off": "set_faults on", "on": "set_faults off", "reset": "add back the run-time rules"}[action]
    if not confirmed(dry_run, confirm_destructive):
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
    act = confirmed(dry_run, confirm_destructive)
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
        "audit_json": relative(outcome.audit_json) if outcome.audit_json is not None else None,
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


def _experiment_answer(dry: bool, message: str, timeline: list[str], outcome: Any, undo: str) -> ExperimentRun:
    return {
        "dry_run": dry,
        "message": message,
        "timeline": timeline,
        "verdict": outcome.verdict if outcome is not None else None,
        "state": outcome.state if outcome is not None else None,
        "exit_code": int(outcome.exit_code) if outcome is not None else None,
        "out_dir": relative(outcome.out_dir) if outcome is not None else None,
        "undo": undo,
    }


def _control(url: str) -> Any:
    from mcpfault.api import Control

    return Control(loopback_control_url(url), token=os.environ.get("MCPFAULT_CONTROL_TOKEN") or None, timeout_s=10.0)


def _live(call: Any) -> Any:
    from mcpfault.api import ApiError, Unreachable

    try:
        return call()
    except Unreachable as exc:
        raise ToolError(str(exc)) from None
    except ApiError as exc:
        raise ToolError(f"the proxy refused: {exc.detail()}") from None
