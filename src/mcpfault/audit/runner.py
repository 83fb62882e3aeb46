"""Performs an audit: lists the server's tools, then (with ``confirm``) calls each planned tool through
an mcpfault proxy (``app.launch.Proxy``, the public ``api.Proxy``: the same proxy, faults, probe and
supervisor as any session; no transport of its own), and grades what was seen.

One session per audit. A rule per tool loses the reply of its second call (the proxy drops it, or
kills the server after it acted and the supervisor restarts it), and, when the schema offers an
idempotency key, of its fourth. The client is the official SDK's; a lost reply is waited for
``lost_wait_s``, as a client's timeout, and then the same arguments go again.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from mcpfault.audit import grade as grades
from mcpfault.audit import plan as plans
from mcpfault.audit.grade import Grade, Observation, ProbeSeen
from mcpfault.audit.plan import Settings, ToolPlan
from mcpfault.errors import UpstreamError, UsageError
from mcpfault.telemetry import names

MAX_DIFF_LINES = 40
MAX_STATE_CHARS = 200_000
SESSION_GRACE_S = 60.0  # beyond max_time_s, for the handshake and the proxy's orderly exit
PREVIOUS_OUTPUT = ("audit.json", "events.jsonl", "spans.jsonl", "server.stderr")  # an earlier audit's, in OUT


@dataclass(slots=True)
class ToolAudit:
    plan: ToolPlan
    calls: list[Observation] = field(default_factory=list)
    grade: Grade | None = None
    stopped: str | None = None  # a bound reached before this tool's calls


@dataclass(slots=True)
class Result:
    settings: Settings
    dry_run: bool
    tools: list[ToolAudit]
    workdir: Path | None
    out: Path | None
    calls_made: int = 0
    wall_s: float = 0.0

    @property
    def findings(self) -> list[grades.Finding]:
        return [f for tool in self.tools if tool.grade is not None for f in tool.grade.findings]

    @property
    def failing(self) -> list[grades.Finding]:
        return grades.at_or_above(self.findings, self.settings.fail_on)

    @property
    def exit_code(self) -> int:
        """0: passed (or a dry run); 1: a finding at or above ``fail_on``."""
        return 1 if not self.dry_run and self.failing else 0


@dataclass(slots=True)
class _AuditCall:
    tool: str
    step: str
    number: int
    arguments: dict[str, Any]
    ok: bool
    error: str | None
    diff: tuple[str, ...] | None
    state_error: str | None


def run(settings: Settings) -> Result:
    """The audit ``settings`` ask for: a dry run (the plan) unless ``settings.confirm``."""
    settings.check()
    started = time.monotonic()
    if settings.state_args and not isinstance(settings.state_args, Mapping):
        raise UsageError("--state-args must be a JSON object")
    if not settings.confirm:
        with tempfile.TemporaryDirectory(prefix="mcpfault-audit-plan-") as scratch:
            workdir = settings.workdir or Path(scratch)
            listed = anyio.run(_list_tools, settings, workdir)
        tools = [ToolAudit(p) for p in plans.tool_plans(listed, settings)]
        return Result(settings, True, tools, settings.workdir, None, 0, time.monotonic() - started)
    out = settings.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for earlier in PREVIOUS_OUTPUT:  # an earlier audit's records would be read as this one's (the same call ids)
        (out / earlier).unlink(missing_ok=True)
    workdir = (settings.workdir or out / "workdir").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    listed = anyio.run(_list_tools, settings, workdir)
    audits = [ToolAudit(p) for p in plans.tool_plans(listed, settings)]
    calls, spans, reports, calls_made = _perform(settings, audits, out, workdir)
    by_number = _spans_by_call(spans)
    observed = settings.probe is not None or settings.state_tool is not None or settings.state_resource is not None
    state = settings.state_tool is not None or settings.state_resource is not None
    for audit in audits:
        for call in (c for c in calls if c.tool == audit.plan.name):
            span = by_number.get(call.number)
            audit.calls.append(
                Observation(
                    step=call.step,
                    number=call.number,
                    arguments=call.arguments,
                    ok=call.ok,
                    error=call.error,
                    span_id=span.span_id if span else None,
                    trace_id=span.trace_id if span else None,
                    probe=reports.get(call.number) if settings.probe is not None else None,
                    diff=call.diff,
                    state_error=call.state_error,
                )
            )
        audit.grade = grades.grade(audit.plan, audit.calls, observed=observed, state=state)
    return Result(settings, False, audits, workdir, out, calls_made, time.monotonic() - started)


# -- the server's tools -------------------------------------------------------------------------


def _server_env() -> dict[str, str]:
    # Python's bytecode cache would be written on a server's first import inside a call and pass
    # for that call's effect.
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


async def _list_tools(settings: Settings, workdir: Path) -> list[dict[str, Any]]:
    """``tools/list`` (every page), straight from the server: nothing is called."""
    from mcp import Client, StdioServerParameters, stdio_client

    tools: list[dict[str, Any]] = []
    handle, name = tempfile.mkstemp(prefix="mcpfault-audit-", suffix=".stderr")  # not in the workdir: a dry
    os.close(handle)  # run leaves that as it was
    errlog_path = Path(name)
    where = settings.upstream or f"{' '.join(settings.command)} (run in {workdir})"
    try:
        with anyio.fail_after(settings.call_timeout_s * 4), open(errlog_path, "w", encoding="utf-8") as errlog:
            if settings.upstream is not None:
                transport: Any = settings.upstream
            else:
                command = list(settings.command)
                params = StdioServerParameters(
                    command=command[0], args=command[1:], cwd=str(workdir), env=_server_env()
                )
                transport = stdio_client(params, errlog=errlog)
            async with Client(transport, read_timeout_seconds=settings.call_timeout_s) as client:
                cursor = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools += [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools]
                    cursor = page.next_cursor
                    if not cursor:
                        break
    except Exception as exc:  # the SDK wraps a dead server's end in exception groups
        said = _tail(errlog_path)
        raise UpstreamError(
            f"listing the tools of {where} failed: {_root_cause(exc)}"
            + (f"; the server said: {said}" if said else "")
            + ". The server runs in the work directory: give its command with absolute paths."
        ) from None
    finally:
        errlog_path.unlink(missing_ok=True)
    return tools


def _root_cause(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])[:500]


# -- the calls ----------------------------------------------------------------------------------


def _profile(settings: Settings, audits: Sequence[ToolAudit]) -> dict[str, Any]:
    """One rule per tool that loses the reply of its second call (and its fourth, when keyed)."""
    faults: list[dict[str, Any]] = []
    for index, audit in enumerate(audits):
        if not audit.plan.steps:
            continue
        pattern = re.sub(r"([*?\[])", r"[\1]", audit.plan.name)  # the name itself, not a glob
        lose: dict[str, Any] = (
            {"type": "timeout", "mode": "drop"}
            if settings.lose == "drop"
            else {"type": "crash", "when": "after", "signal": "SIGKILL", "after_s": settings.lost_wait_s}
        )
        faults.append({"name": f"lose-{index}", **lose, "tools": [pattern], "after": 1, "limit": 1})
        if plans.LOST_KEYED in audit.plan.steps:
            faults.append({"name": f"lose-keyed-{index}", **lose, "tools": [pattern], "after": 3, "limit": 1})
    profile: dict[str, Any] = {"name": "audit", "seed": settings.seed, "faults": faults}
    if settings.lose == "crash":
        profile["server"] = {"restart": "on-crash", "restart_delay_s": 0.05, "replay_handshake": True, "hold_s": 30}
    return profile


def _policy_file(out: Path, workdir: Path) -> Path:
    """The probe's policy: the server may write in the work directory and nowhere else."""
    path = out / "probe-policy.toml"
    text = json.dumps(str(workdir))
    path.write_text(f"[probe]\nworkspace = {text}\ntmpdir = {text}\n", encoding="utf-8")
    return path


def _perform(
    settings: Settings, audits: list[ToolAudit], out: Path, workdir: Path
) -> tuple[list[_AuditCall], list[Any], dict[int, ProbeSeen], int]:
    """The calls, the proxy's spans, the probe's reports by call number, and how many tools/call went."""
    from mcpfault.app.launch import Proxy, ProxyError

    common: dict[str, Any] = {"profile": _profile(settings, audits), "seed": settings.seed, "workdir": out}
    if settings.probe is not None:
        common.update(probe=settings.probe, probe_policy=_policy_file(out, workdir))
    if settings.upstream is not None:
        proxy = Proxy(transport="http", upstream=settings.upstream, control=False, **common)
    else:
        proxy = Proxy(list(settings.command), control=False, **common)
    done = _Done()
    try:
        proxy.start()
    except ProxyError as exc:
        raise UpstreamError(f"the audit's proxy did not start: {exc}") from None
    try:
        anyio.run(_session, settings, audits, proxy, workdir, done)
    except Exception as exc:  # the SDK wraps a dead proxy or server in exception groups
        said = _tail(out / "server.stderr") if settings.upstream is None else ""
        raise UpstreamError(
            f"the audit's session through the proxy failed after {done.count} tools/call requests: "
            f"{_root_cause(exc)}" + (f"; the proxy said: {said}" if said else "")
        ) from None
    finally:
        proxy.close()
    return done.calls, proxy.spans(), _probe_reports(proxy.events()), done.count


@dataclass(slots=True)
class _Done:
    calls: list[_AuditCall] = field(default_factory=list)
    count: int = 0  # tools/call requests sent, the state probe's included
    current: ToolAudit | None = None  # the tool whose calls are under way


async def _session(settings: Settings, audits: list[ToolAudit], proxy: Any, workdir: Path, done: _Done) -> None:
    from mcp import Client, StdioServerParameters, stdio_client

    with (
        anyio.move_on_after(settings.max_time_s + SESSION_GRACE_S) as bound,
        open(proxy.workdir / "server.stderr", "w", encoding="utf-8") as errlog,
    ):
        if proxy.url is not None:
            transport: Any = proxy.url
        else:
            argv = list(proxy.command)
            params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(workdir), env=_server_env())
            transport = stdio_client(params, errlog=errlog)
        async with Client(transport, read_timeout_seconds=settings.call_timeout_s) as client:
            session = _Session(client, settings)
            deadline = time.monotonic() + settings.max_time_s  # from the handshake's end: the calls' time
            try:
                await _each_tool(session, settings, audits, done, deadline)
            finally:
                done.count = session.count
    if bound.cancelled_caught and done.current is not None:  # one tool's calls outlasted the bound
        done.current.stopped = f"interrupted: the time bound (--max-time-s {settings.max_time_s:g}) was passed"


async def _each_tool(
    session: _Session, settings: Settings, audits: list[ToolAudit], done: _Done, deadline: float
) -> None:
    for audit in audits:
        steps = audit.plan.steps
        if not steps:
            continue
        needed = len(steps) * (2 if settings.state_tool else 1) + (1 if settings.state_tool else 0)
        if time.monotonic() > deadline:
            audit.stopped = f"the time bound (--max-time-s {settings.max_time_s:g}) was reached"
            continue
        if session.count + needed > settings.max_calls:
            audit.stopped = f"the call bound (--max-calls {settings.max_calls}) would be passed"
            continue
        done.current = audit
        await session.tool(audit.plan, done.calls)
        done.current = None


class _Session:
    def __init__(self, client: Any, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.count = 0  # tools/call requests so far: the probe numbers its call windows the same way

    async def call(self, tool: str, arguments: Mapping[str, Any], timeout_s: float) -> tuple[int, Any, str | None]:
        from mcp import MCPError

        self.count += 1
        number = self.count
        try:
            result = await self.client.call_tool(tool, dict(arguments), read_timeout_seconds=timeout_s)
        except MCPError as exc:
            return number, None, str(exc)
        if result.is_error:
            return number, result, _text(result) or "the tool answered with isError"
        return number, result, None

    async def state(self) -> tuple[str | None, str | None]:
        """The state probe's answer as canonical text, or (None, why it failed)."""
        settings = self.settings
        if settings.state_tool is not None:
            _, result, error = await self.call(settings.state_tool, settings.state_args, settings.call_timeout_s)
            if error is not None:
                return None, f"the state tool failed: {error}"
            value: Any = (
                result.structured_content
                if result.structured_content is not None
                else [c.model_dump(mode="json", exclude_none=True) for c in result.content]
            )
        elif settings.state_resource is not None:
            from mcp import MCPError

            try:
                read = await self.client.read_resource(settings.state_resource)
            except MCPError as exc:
                return None, f"the state resource failed: {exc}"
            value = [c.model_dump(mode="json", exclude_none=True) for c in read.contents]
        else:
            return None, None
        return _canonical(value)[:MAX_STATE_CHARS], None

    async def tool(self, plan: ToolPlan, done: list[_AuditCall]) -> None:
        """The plan's calls in order, each appended to ``done`` as it ends (so a bound keeps what was seen)."""
        settings = self.settings
        state_on = settings.state_tool is not None or settings.state_resource is not None
        before, state_error = await self.state() if state_on else (None, None)
        for step in plan.steps:
            keyed = step in plans.KEYED_STEPS
            arguments = dict(
                plan.keyed_arguments if keyed and plan.keyed_arguments is not None else plan.arguments or {}
            )
            lost = step in (plans.LOST, plans.LOST_KEYED)
            number, _result, error = await self.call(
                plan.name, arguments, settings.lost_wait_s if lost else settings.call_timeout_s
            )
            ok = error is not None if lost else error is None
            if lost and error is None:
                error = "the reply was not lost (the server answered before the fault could act)"
            after, after_error = await self.state() if state_on else (None, None)
            diff = None
            if before is not None and after is not None:
                diff = _diff(before, after)
            done.append(_AuditCall(plan.name, step, number, arguments, ok, error, diff, after_error or state_error))
            before, state_error = after, after_error


# -- reading back what the proxy recorded ------------------------------------------------------


def _probe_reports(events: Sequence[Mapping[str, Any]]) -> dict[int, ProbeSeen]:
    """The probe's ``side_effects`` records by the session's call number (their call id is "n:<id>")."""
    found: dict[int, ProbeSeen] = {}
    for record in events:
        if record.get("record") != "side_effects":
            continue
        number, _, _ = str(record.get("call_id", "")).partition(":")
        if not number.isdigit():
            continue
        found[int(number)] = ProbeSeen(
            side_effects=tuple(
                {"type": e.get("type"), "detail": e.get("detail")}
                for e in record.get("side_effects") or ()
                if not e.get("ambiguous")
            ),
            findings=tuple(
                {"category": f.get("category"), "severity": f.get("severity"), "detail": f.get("detail")}
                for f in record.get("findings") or ()
                if not f.get("ambiguous")
            ),
            confirmed=bool(record.get("probe_confirmed")),
            acted=record.get("server_acted"),
        )
    return found


def _spans_by_call(spans: Sequence[Any]) -> dict[int, Any]:
    """The proxy's tools/call spans by the session's call number: from the probe's call id when it ran,
    else by order of start (the audit's calls go one at a time)."""
    tool_calls = sorted(
        (s for s in spans if s.attributes.get(names.MCP_METHOD_NAME) == "tools/call"), key=lambda s: s.start_unix_nano
    )
    by_number: dict[int, Any] = {}
    for position, span in enumerate(tool_calls, start=1):
        call_id = str(span.attributes.get(names.PROBE_CALL_ID, ""))
        number, _, _ = call_id.partition(":")
        by_number[int(number) if number.isdigit() else position] = span
    return by_number


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False, default=str)


def _diff(before: str, after: str) -> tuple[str, ...]:
    """The state's change as unified-diff lines (+ and -), at most MAX_DIFF_LINES; () when unchanged."""
    if before == after:
        return ()
    lines = [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... {len(lines) - MAX_DIFF_LINES} more lines"]
    return tuple(lines) or ("(changed)",)


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content).strip()[:500]
