"""Perform a plan against a real proxy, through its control API, and judge the hypothesis.

The timeline, in seconds from the moment the proxy's control API answers: warm-up (load runs, the
"before" probes measure it), then the method (each action at ``start_after_s`` for ``duration_s``;
stop conditions polled every ``interval_s``), then the cool-down (the "after" probes). A stop
condition that fails switches every fault off at once (``POST /off``), rolls back the rules the
method added, and marks the experiment ``stopped``. A steady state that does not hold before the
method means the method never runs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from mcpfault.analysis.records import TaskRecord
from mcpfault.app import ready
from mcpfault.app.argv import mcpfault_argv
from mcpfault.control.client import ApiError, Control, Unreachable
from mcpfault.errors import MCPFaultError
from mcpfault.experiments import probes
from mcpfault.experiments.journal import ExperimentJournal
from mcpfault.experiments.plan import Action, Plan, ProbeSpec, profile_text

EXIT_HELD, EXIT_DEVIATED, EXIT_INVALID, EXIT_STOPPED, EXIT_FAILED = 0, 1, 2, 3, 4
START_TIMEOUT_S = 30.0
TICK_S = 0.05


@dataclass(slots=True)
class Measured:
    """One probe's values: before, during (the method's span) and after, and whether each held."""

    spec: ProbeSpec
    values: dict[str, Any] = field(default_factory=dict)
    held: dict[str, bool] = field(default_factory=dict)

    def record(self, phase: str, value: Any) -> None:
        self.values[phase] = value
        self.held[phase] = self.spec.tolerance.holds(value)


@dataclass(slots=True)
class ActionRun:
    action: Action
    state: str = "pending"
    started: float | None = None  # wall clock
    ended: float | None = None
    reason: str = ""


@dataclass(slots=True)
class Outcome:
    experiment_id: str
    state: str
    verdict: str
    exit_code: int
    out_dir: Path
    t0: float = 0.0  # wall clock at the timeline's zero
    method_start: float = 0.0
    method_end: float = 0.0
    measured: list[Measured] = field(default_factory=list)
    actions: list[ActionRun] = field(default_factory=list)
    stopped_by: str | None = None
    stopped_at_s: float | None = None
    stop_values: list[tuple[str, float, Any]] = field(default_factory=list)  # (condition, t, value)
    tasks: list[tuple[float, TaskRecord]] = field(default_factory=list)
    reason: str = ""
    load_error: str | None = None


class Failed(MCPFaultError):
    """Something the experiment needs could not start or answer."""


class _Target:
    """The proxy (and the HTTP server behind it) or the harness session driving load through it."""

    def __init__(self, plan: Plan, out_dir: Path) -> None:
        self.plan = plan
        self.out_dir = out_dir
        self.events = out_dir / "events.jsonl"
        self.control: Control | None = None
        self.serving: str | None = None  # an HTTP target: where clients connect
        self.tasks: list[tuple[float, TaskRecord]] = []
        self.load_error: str | None = None
        self._stop_load = False
        self._finished_at: list[float] = []
        self._processes: list[subprocess.Popen[bytes]] = []
        self._ready_file = out_dir / ready.FILE_NAME  # the load's session proxy writes it there too
        self._ready_file.unlink(missing_ok=True)  # one left by a killed run in this directory is not ours
        self._profile = out_dir / "experiment-profile.toml"
        self._profile.write_text(profile_text(plan.server), encoding="utf-8")

    async def start(self, tg: Any) -> None:
        if self.plan.load is not None:
            tg.start_soon(self._drive_load)
            readiness = await self._wait_ready()
        else:
            readiness = await self._start_http()
        if readiness.control is None:
            raise Failed(f"the proxy serves no control API; see {self.out_dir / 'proxy.log'}")
        self.control = Control(readiness.control, token=os.environ.get("MCPFAULT_CONTROL_TOKEN") or None)

    async def _drive_load(self) -> None:
        from mcpfault.harness.agents.tasks import WORKFLOWS, plan_tasks
        from mcpfault.harness.session import SessionPlan, run_session
        from mcpfault.mock.world import World

        load = self.plan.load
        assert load is not None
        world = World.generate(load.seed)
        count = int(self.plan.total_s / max(load.pace_s, 0.01)) * 2 + 50  # an upper bound: stop_when ends it
        agent, external, llm = _load_agent(load)
        session = SessionPlan(
            profile=self._profile,
            profile_name="experiment",
            agent=agent,
            external=external,
            llm=llm,
            tasks=tuple(plan_tasks(world, count, load.seed, workflows=load.workflows or WORKFLOWS)),
            out_dir=self.out_dir,
            world_seed=load.seed,
            deadline_s=load.deadline_s,
            proxy_summary=True,
            traces=False,
            proxy_args=("--control", "127.0.0.1:0"),
            pace_s=load.pace_s,
            stop_when=lambda: self._stop_load,
        )
        try:
            result = await run_session(session, world, lambda: self._finished_at.append(time.time()))
        except Exception as exc:  # the load is the experiment's instrument: its failure is reported, not raised
            self.load_error = f"the load broke: {type(exc).__name__}: {exc}"
            return
        self.load_error = result.error
        by_index = dict(enumerate(self._finished_at))
        self.tasks = [(by_index.get(r.task_index, time.time()), r) for r in result.records]

    async def _start_http(self) -> ready.Readiness:
        target = self.plan.target
        assert target.url is not None and target.listen is not None
        if target.command:
            self._processes.append(self._spawn(list(target.command), self.out_dir / "server.log"))
            await self._wait_for_port(target.url)
        command = mcpfault_argv("proxy", "--config", str(self._profile), "--events")
        command += [str(self.events), "--listen", target.listen, "--upstream", target.url]
        command += ["--control", "127.0.0.1:0", "--ready-file", str(self._ready_file)]
        self._processes.append(self._spawn(command, self.out_dir / "proxy.log"))
        readiness = await self._wait_ready()
        self.serving = readiness.listen
        return readiness

    def _spawn(self, command: list[str], log: Path) -> subprocess.Popen[bytes]:
        try:
            with log.open("wb") as out:
                return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        except OSError as exc:
            raise Failed(f"cannot start {command[0]!r}: {exc.strerror}") from None

    async def _wait_for_port(self, url: str) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                stream = await anyio.connect_tcp(parts.hostname or "127.0.0.1", port)
                await stream.aclose()
                return
            if any(p.poll() is not None for p in self._processes):
                break
            await anyio.sleep(0.1)
        raise Failed(f"the target server did not listen at {url} in time; see {self.out_dir / 'server.log'}")

    async def _wait_ready(self) -> ready.Readiness:
        """The proxy's readiness record, once it serves; Failed (with its log's tail) if it never does."""

        def exited() -> bool:
            return self.load_error is not None or any(p.poll() is not None for p in self._processes)

        try:
            return await ready.wait_for_async(self._ready_file, exited=exited, timeout_s=START_TIMEOUT_S)
        except ready.ReadyFileError as exc:
            log = self.out_dir / "proxy.log"
            tail = (log.read_bytes()[-600:] if log.exists() else b"").decode(errors="replace")
            raise Failed(
                f"the proxy did not come up ({self.load_error or exc}); {log}: {tail.strip() or '(empty)'}"
            ) from None

    async def stop(self) -> None:
        self._stop_load = True
        for process in reversed(self._processes):
            if process.poll() is None:
                process.terminate()
                try:
                    await anyio.to_thread.run_sync(process.wait, 10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    await anyio.to_thread.run_sync(process.wait)


class _Run:
    def __init__(self, plan: Plan, out_dir: Path, echo: Callable[[str], None]) -> None:
        self.plan = plan
        self.out_dir = out_dir
        self.echo = echo
        self.id = "EXP" + uuid.uuid4().hex[:16]
        self.journal = ExperimentJournal(out_dir, self.id, plan.title)
        self.target = _Target(plan, out_dir)
        self.outcome = Outcome(self.id, "pending", "", EXIT_FAILED, out_dir)
        self.outcome.actions = [ActionRun(a) for a in plan.method]
        self.outcome.measured = [Measured(p) for p in plan.hypothesis]

    @property
    def control(self) -> Control:
        assert self.target.control is not None
        return self.target.control

    async def api(self, call: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(call)

    async def run(self) -> Outcome:
        self.journal.experiment("pending", "the experiment was created")
        for run in self.outcome.actions:
            self.journal.action(run.action.name, "pending", "waiting for its start time")
        self.journal.experiment("initiating", "starting the proxy and the load")
        failure: str | None = None
        async with anyio.create_task_group() as tg:  # the load's task: it reports its own errors
            try:
                await self.target.start(tg)
                await self._timeline()
            except Failed as exc:
                failure = str(exc)
            except (ApiError, Unreachable) as exc:
                failure = f"the control API failed: {exc}"
            finally:
                with anyio.CancelScope(shield=True):
                    await self.target.stop()
        if failure is not None:
            self._fail(failure)
        self._after_load()
        self.journal.close()
        return self.outcome

    def _fail(self, reason: str) -> None:
        self.outcome.reason = reason
        for run in self.outcome.actions:
            if run.state in ("pending", "running"):
                self._action(run, "failed", "the experiment failed before this action could finish")
        self.journal.experiment("failed", reason)
        self.outcome.state, self.outcome.verdict, self.outcome.exit_code = "failed", f"failed: {reason}", EXIT_FAILED

    def _action(self, run: ActionRun, state: str, reason: str) -> None:
        run.state, run.reason = state, reason
        if state == "running":
            run.started = time.time()
        elif state in ("completed", "stopped", "failed") and run.started is not None:
            run.ended = time.time()
        self.journal.action(run.action.name, state, reason)

    async def _timeline(self) -> None:
        plan, outcome = self.plan, self.outcome
        outcome.t0 = time.time()
        outcome.method_start = outcome.t0 + plan.warmup_s
        outcome.method_end = outcome.method_start + plan.method_s
        self.journal.experiment("running", "the proxy is up; warming up before the method")
        if self.target.serving is not None:
            self.echo(f"clients connect to {self.target.serving}")
        # The method's length runs to its last action's end (start_after_s + duration_s): name each window,
        # so "method 4.5 s" next to a file's duration_s = 4 reads as what it is.
        windows = ", ".join(f"{a.name} {a.start_after_s:g}-{a.end_s:g} s" for a in plan.method)
        self.echo(
            f"running: warm-up {plan.warmup_s:g} s, method {plan.method_s:g} s ({windows}), "
            f"cool-down {plan.cooldown_s:g} s"
        )
        await _sleep_until(outcome.method_start)
        before = await self._measure("before", outcome.t0, outcome.method_start, live_only=True)
        if not all(before):
            failing = [m.spec.name for m in outcome.measured if m.held.get("before") is False]
            reason = f"the steady state did not hold before the method ({', '.join(failing)}); the method did not run"
            for run in outcome.actions:
                self._action(run, "stopped", reason)
            outcome.reason = reason
            self.journal.experiment("completed", reason)
            outcome.state = "completed"
            return
        stopped = await self._method()
        if stopped:
            return
        for m in outcome.measured:
            if m.spec.during and m.spec.live:
                m.record("during", await self._value(m.spec, outcome.method_start, outcome.method_end))
        await _sleep_until(outcome.method_end + plan.cooldown_s)
        await self._measure("after", outcome.method_end, outcome.method_end + plan.cooldown_s, live_only=True)
        outcome.state = "completed"
        self.journal.experiment("completed", "every action ran its course")

    async def _method(self) -> bool:
        """Run the actions; True when a stop condition ended the method."""
        outcome, plan = self.outcome, self.plan
        checks = {spec.name: outcome.method_start for spec in plan.stop_conditions}
        while True:
            now = time.time()
            for run in outcome.actions:
                start = outcome.method_start + run.action.start_after_s
                end = outcome.method_start + run.action.end_s
                if run.state == "pending" and now >= start:
                    await self._start(run)
                if run.state == "running" and now >= end:
                    await self._end(run)
            for spec in plan.stop_conditions:
                if now < checks[spec.name]:
                    continue
                checks[spec.name] = now + spec.interval_s
                value = await self._value(spec, now - spec.window_s, now)
                outcome.stop_values.append((spec.name, round(now - outcome.t0, 3), value))
                if value is not None and not spec.tolerance.holds(value):
                    await self._stop(spec, value)
                    return True
            if all(run.state not in ("pending", "running") for run in outcome.actions):
                return False
            await anyio.sleep(TICK_S)

    async def _start(self, run: ActionRun) -> None:
        action = run.action
        try:
            if action.fault is not None:
                await self.api(lambda: self.control.add(dict(action.fault or {})))
            elif action.process == "crash":
                await self.api(lambda: self.control.crash(action.signal))
            elif action.process == "stall":
                await self.api(lambda: self.control.stall(action.duration_s))
            elif action.process == "restart":
                await self.api(self.control.restart)
        except (ApiError, Unreachable) as exc:
            self._action(run, "failed", f"the proxy refused it: {exc}")
            return
        self._action(run, "running", f"started: {action.describe()}")
        self.echo(f"  t={time.time() - self.outcome.t0:6.2f} s  {action.name}: running")

    async def _end(self, run: ActionRun) -> None:
        if run.action.fault is not None:
            try:
                await self.api(lambda: self.control.remove(run.action.name))
            except (ApiError, Unreachable) as exc:
                self._action(run, "failed", f"its rule could not be removed: {exc}")
                return
        self._action(run, "completed", f"its {run.action.duration_s:g} s window ended")
        self.echo(f"  t={time.time() - self.outcome.t0:6.2f} s  {run.action.name}: completed")

    async def _stop(self, spec: ProbeSpec, value: Any) -> None:
        outcome = self.outcome
        await self.api(self.control.off)  # first, and at once: every fault off
        at = round(time.time() - outcome.t0, 3)
        reason = f"stop condition {spec.name!r}: {value!r} is not {spec.tolerance.describe()}"
        self.echo(f"  t={at:6.2f} s  STOPPED by {reason}")
        for run in outcome.actions:  # the rollbacks: the method's rules go
            if run.state == "running" and run.action.fault is not None:
                with contextlib.suppress(ApiError, Unreachable):
                    await self.api(functools.partial(self.control.remove, run.action.name))
            if run.state in ("pending", "running"):
                self._action(run, "stopped", reason)
        outcome.stopped_by, outcome.stopped_at_s, outcome.reason = spec.name, at, reason
        outcome.method_end = time.time()
        outcome.state = "stopped"
        self.journal.experiment("stopped", reason)
        for m in outcome.measured:
            if m.spec.during and m.spec.live:
                m.record("during", await self._value(m.spec, outcome.method_start, outcome.method_end))
        await anyio.sleep(self.plan.cooldown_s)  # with every fault off: does the steady state come back?
        await self._measure("after", outcome.method_end, outcome.method_end + self.plan.cooldown_s, live_only=True)

    async def _measure(self, phase: str, start: float, end: float, *, live_only: bool) -> list[bool]:
        held = []
        for m in self.outcome.measured:
            if live_only and not m.spec.live:
                continue
            m.record(phase, await self._value(m.spec, start, end))
            held.append(m.held[phase])
        return held

    async def _value(self, spec: ProbeSpec, start: float, end: float) -> Any:
        window = probes.Window(start, end, self.target.events, self.target.tasks)
        return await anyio.to_thread.run_sync(probes.measure, spec, window)

    def _after_load(self) -> None:
        """Task outcomes are judged when the load ends: their probes are measured now, phase by phase."""
        outcome = self.outcome
        outcome.tasks = self.target.tasks
        outcome.load_error = self.target.load_error
        if outcome.state == "failed":
            return
        phases = {
            "before": (outcome.t0, outcome.method_start),
            "during": (outcome.method_start, outcome.method_end),
            "after": (outcome.method_end, outcome.method_end + self.plan.cooldown_s + 5.0),
        }
        placed = probes.place_tasks(self.target.tasks, outcome.method_start, outcome.method_end)
        for m in outcome.measured:
            if m.spec.live:
                continue
            for phase, (start, end) in phases.items():
                if phase == "during" and not m.spec.during:
                    continue
                value = probes.measure(m.spec, probes.Window(start, end, self.target.events, placed))
                m.record(phase, value)
        if outcome.state == "stopped":
            outcome.verdict = f"stopped at t={outcome.stopped_at_s:g} s by condition {outcome.stopped_by!r}"
            outcome.exit_code = EXIT_STOPPED
            return
        deviations = [f"{m.spec.name} ({phase})" for m in outcome.measured for phase, ok in m.held.items() if not ok]
        if deviations:
            outcome.verdict = "deviated: " + ", ".join(deviations)
            outcome.exit_code = EXIT_DEVIATED
        else:
            outcome.verdict = "held"
            outcome.exit_code = EXIT_HELD
        if self.target.load_error and outcome.exit_code == EXIT_HELD:
            outcome.verdict = f"deviated: {self.target.load_error}"
            outcome.exit_code = EXIT_DEVIATED


async def _sleep_until(wall: float) -> None:
    await anyio.sleep(max(0.0, wall - time.time()))


async def run(plan: Plan, out_dir: Path, echo: Callable[[str], None] = print) -> Outcome:
    """Perform ``plan``; write journal.jsonl, spans, metrics, events and report.md into ``out_dir``."""
    from mcpfault.experiments import report

    out_dir.mkdir(parents=True, exist_ok=True)
    outcome = await _Run(plan, out_dir, echo).run()
    report.write(plan, outcome, out_dir)
    return outcome


def _load_agent(load: Any) -> tuple[str, Any, Any]:
    """(agent label, external config, llm config) of the load: your agent (cmd:NAME), the llm agent, or a policy."""
    if load.agent.startswith("cmd:"):
        from mcpfault.harness.agents.external import ExternalConfig

        return load.agent, ExternalConfig(load.agent.removeprefix("cmd:"), load.command, load.agent_timeout_s), None
    if load.agent == "llm":
        from mcpfault.harness.agents.llm.agent import LLMConfig, check_config
        from mcpfault.harness.agents.llm.backend import DEFAULT_MODEL

        config = LLMConfig(model=load.model or DEFAULT_MODEL)
        check_config(config)
        return config.label, None, config
    return load.agent, None, None
