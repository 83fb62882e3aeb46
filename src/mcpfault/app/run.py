"""One session of tasks and its run directory: what ``mcpfault run`` and ``mcpfault.api.agent_bench`` share.

``plan_session(profile, agent, out_dir, ...)`` loads the profile and plans the tasks (nothing is written);
``run_session_dir(planned)`` runs them through a proxy and writes ``records.jsonl`` and ``report.html``
beside what the session itself writes (attempts, events, spans, the proxy log, the server's state). The
caller prints: this module writes files and nothing to the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from mcpfault.analysis.records import write_records
from mcpfault.faults import profile as profiles
from mcpfault.harness.agents.policies import DEFAULT_TASK_DEADLINE_S
from mcpfault.harness.agents.tasks import WORKFLOWS, cassette_tasks, plan_tasks
from mcpfault.harness.bench import fault_seed
from mcpfault.harness.client import Era
from mcpfault.harness.session import SessionPlan, SessionResult, run_session
from mcpfault.mock.world import World

if TYPE_CHECKING:
    from mcpfault.harness.agents.external import ExternalConfig
    from mcpfault.harness.agents.llm.agent import LLMConfig


@dataclass(frozen=True, slots=True)
class PlannedSession:
    """A session ready to run: its plan, the world its mock server and judge share, and its profile."""

    plan: SessionPlan
    world: World
    profile: profiles.Profile


def plan_session(
    profile: str | Path,
    agent: str,
    out_dir: Path,
    *,
    tasks: int,
    seed: int = 0,
    workflows: Sequence[str] = WORKFLOWS,
    server_cassette: Path | None = None,
    cassette_task: str = "",
    deadline_s: float = 0.5,
    task_deadline_s: float = DEFAULT_TASK_DEADLINE_S,
    era: Era = "legacy",
    transport: str = "stdio",
    proxy_summary: bool = False,
    otlp_endpoint: str | None = None,
    llm: LLMConfig | None = None,
    external: ExternalConfig | None = None,
    probe: str | None = None,
) -> PlannedSession:
    """``tasks`` tasks for ``agent`` through a proxy with ``profile`` (a bundled name or a .toml path):
    the world's tasks drawn from ``seed`` (``workflows``: the ones to rotate), or with
    ``server_cassette`` that many trials of ``cassette_task``. A bad profile raises ``UsageError``."""
    profile_path = profiles.resolve(profile)
    loaded = profiles.load(profile_path)
    world = World.generate(seed)
    planned = (
        cassette_tasks(tasks, cassette_task)
        if server_cassette is not None
        else plan_tasks(world, tasks, seed, workflows=workflows)
    )
    plan = SessionPlan(
        profile=profile_path,
        profile_name=loaded.name,
        agent=agent,
        tasks=tuple(planned),
        out_dir=out_dir,
        world_seed=seed,
        proxy_seed=fault_seed(loaded.seed, seed),
        deadline_s=deadline_s,
        task_deadline_s=task_deadline_s,
        era=era,
        transport=transport,
        proxy_summary=proxy_summary,
        otlp_endpoint=otlp_endpoint,
        llm=llm,
        probe=probe,
        external=external,
        server_cassette=server_cassette,
    )
    return PlannedSession(plan, world, loaded)


def run_session_dir(planned: PlannedSession, *, on_task_done: Callable[[], None] = lambda: None) -> SessionResult:
    """Run the session and write its records and its HTML report (none when it broke before its first task:
    there is nothing to show); ``SessionResult.error`` says what broke."""
    result = anyio.run(run_session, planned.plan, planned.world, on_task_done)
    out = planned.plan.out_dir
    write_records(out / "records.jsonl", result.records)
    if result.records:
        from mcpfault.harness.report_html import write_html

        write_html(out)  # report.html: the tasks and their traces in a browser
    return result
