"""One session: a fresh proxy in front of a fresh mock server, an agent running tasks through it.

Tasks run one after another, so a session's request sequence (and with it every fault the seeded
engine injects) is the same on every run. After the session the harness joins what the client
sent with what the proxy recorded and judges every task against the world and the server's state.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpfault.analysis.join import faults_by_request, latency_pairs, touches_by_task
from mcpfault.analysis.judge import TaskRun, judge
from mcpfault.analysis.records import TaskRecord
from mcpfault.errors import CallError, MCPFaultError, UpstreamError
from mcpfault.harness.agents.policies import make_agent
from mcpfault.harness.agents.tasks import TaskSpec, expected_answer, run_task
from mcpfault.harness.client import Era, StdioClient
from mcpfault.mock.world import World

# What naive task code raises when an answer is not what it was written for.
TASK_CRASHES = (KeyError, TypeError, ValueError, AttributeError, IndexError)


@dataclass(frozen=True, slots=True)
class SessionPlan:
    profile: Path
    profile_name: str
    agent: str
    tasks: tuple[TaskSpec, ...]
    out_dir: Path
    world_seed: int = 0
    proxy_seed: int | None = None  # None: the profile's own seed
    session: int = 0
    deadline_s: float = 0.5
    era: Era = "legacy"
    proxy_summary: bool = False  # the proxy's fault table, in proxy.log
    server_command: tuple[str, ...] | None = None  # None: the bundled mock server with world_seed


@dataclass(slots=True)
class SessionResult:
    plan: SessionPlan
    records: list[TaskRecord] = field(default_factory=list)
    runs: list[TaskRun] = field(default_factory=list)
    wall_s: float = 0.0
    error: str | None = None  # the session broke (server died, could not start): what and why
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (client s, upstream s), unfaulted calls


def proxy_command(plan: SessionPlan) -> list[str]:
    python = sys.executable
    server = [python, "-m", "mcpfault", "mock-server", "--seed", str(plan.world_seed)]
    server += ["--state", str(plan.out_dir / "server-state.json")]
    if plan.server_command is not None:
        server = list(plan.server_command)
    proxy = [python, "-m", "mcpfault", "proxy", "--config", str(plan.profile)]
    if not plan.proxy_summary:
        proxy.append("--no-summary")
    proxy += ["--events", str(plan.out_dir / "events.jsonl")]
    if plan.proxy_seed is not None:
        proxy += ["--seed", str(plan.proxy_seed)]
    return [*proxy, "--", *server]


async def run_session(
    plan: SessionPlan, world: World, on_task_done: Callable[[], None] = lambda: None
) -> SessionResult:
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    result = SessionResult(plan)
    started = time.monotonic()
    attempts: list[dict[str, Any]] = []
    with (plan.out_dir / "proxy.log").open("wb") as proxy_log:
        client = StdioClient(proxy_command(plan), deadline_s=plan.deadline_s, era=plan.era, stderr=proxy_log)
        try:
            async with client:
                await client.connect()
                agent = make_agent(plan.agent, client, random.Random(f"agent:{plan.world_seed}:{plan.session}"))
                await agent.start()
                for spec in plan.tasks:
                    result.runs.append(await _run_one(agent, client, spec))
                    on_task_done()
        except (UpstreamError, CallError) as exc:
            result.error = f"session {plan.session} of {plan.profile_name}/{plan.agent} broke: {exc}"
        finally:
            attempts = [{**a.as_record(), "started": a.started} for a in client.attempts if a.method == "tools/call"]
            _write_jsonl(plan.out_dir / "attempts.jsonl", attempts)
    result.wall_s = time.monotonic() - started
    try:
        result.records = judge_session(plan, world, result.runs, attempts)
    except MCPFaultError as exc:
        result.error = str(exc)
    result.latencies = latency_pairs(attempts, _read_jsonl(plan.out_dir / "events.jsonl"))
    return result


async def _run_one(agent: Any, client: StdioClient, spec: TaskSpec) -> TaskRun:
    agent.begin_task(spec)
    sent_before = sum(1 for a in client.attempts if a.method == "tools/call")
    started = time.monotonic()
    answer: Any = None
    failure: str | None = None
    detail = ""
    try:
        answer = await run_task(agent, spec)
    except CallError as exc:
        failure, detail = exc.failure, str(exc)
    except TASK_CRASHES as exc:
        failure, detail = "task_crashed", f"{type(exc).__name__}: {exc}"
    sent = sum(1 for a in client.attempts if a.method == "tools/call") - sent_before
    return TaskRun(
        index=spec.index,
        workflow=spec.workflow,
        target=spec.target,
        tag=spec.tag,
        started=started,
        finished=time.monotonic(),
        answer=answer,
        failure=failure,
        detail=detail,
        attempts=sent,
        calls=agent.stats.calls,
    )


def judge_session(
    plan: SessionPlan, world: World, runs: Sequence[TaskRun], attempts: Sequence[dict[str, Any]]
) -> list[TaskRecord]:
    events = _read_jsonl(plan.out_dir / "events.jsonl")
    state_path = plan.out_dir / "server-state.json"
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError) as exc:
        raise MCPFaultError(
            f"{state_path}: the mock server's final state is missing or unreadable ({exc}); "
            "without it the session's writes cannot be judged; see proxy.log beside it"
        ) from None
    touches = touches_by_task(attempts, faults_by_request(events))
    return [
        judge(
            run,
            expected_answer(world, TaskSpec(run.index, run.workflow, run.target, run.tag)),
            state,
            touches.get(run.index),
            profile=plan.profile_name,
            agent=plan.agent,
            session=plan.session,
        )
        for run in runs
    ]


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, default=str) + "\n")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a proxy killed mid-write leaves at most one partial line
    return rows
