"""The fifth workflow, config_audit: resource reads around a write, then the incident_summary prompt.

Run through the real bench (mock server, proxy, agents): a stale configuration read gives naive and
retry-only a wrong verdict, judged from the server's state; resilient's freshness check catches it;
the same seed gives the same outcomes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpfault.analysis.judge import TaskRun, check_answer
from mcpfault.errors import UsageError
from mcpfault.harness.agents.tasks import ALL_WORKFLOWS, WORKFLOWS, check_workflows, expected_answer, plan_tasks
from mcpfault.harness.bench import BenchConfig, plan_sessions, run_bench
from mcpfault.mock.world import World

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
WORLD = World.generate(5)
STALE_ONLY = """
name = "stale-configs"
seed = 4

[[faults]]
name = "stale-config"
type = "stale"
methods = ["resources/read"]
resources = ["netops://devices/*/config"]
probability = 0.5
"""


def _bench(out: Path, profile: Path, agents: tuple[str, ...]) -> list[Any]:
    config = BenchConfig(
        profiles=(profile,),
        agents=agents,
        out_dir=out,
        tasks=12,
        session_tasks=12,
        seed=5,
        jobs=3,
        traces=True,
        workflows=("config_audit",),
    )

    async def main() -> Any:
        with anyio.fail_after(240):
            return await run_bench(config, plan_sessions(config, WORLD), WORLD, lambda: None)

    result = anyio.run(main)
    assert result.errors == [], result.errors
    return list(result.records)


def test_the_default_suite_is_the_four_tool_workflows() -> None:
    assert WORKFLOWS == ("site_triage", "interface_check", "maintenance_roundtrip", "open_incident")
    assert check_workflows(["config_audit"]) == ("config_audit",) and "config_audit" in ALL_WORKFLOWS
    with pytest.raises(UsageError, match="config_audit"):
        check_workflows(["config_audt"])


def test_the_verdict_is_judged_from_the_servers_state() -> None:
    (spec,) = plan_tasks(WORLD, 1, 5, workflows=("config_audit",))
    expected = expected_answer(WORLD, spec)
    write = {"op": "set_maintenance", "arguments": {"reason": f"config audit {spec.tag}"}}
    right = {"window_opened": True, **expected}
    run = TaskRun(spec.index, spec.workflow, spec.target, spec.tag, 0.0, 1.0, answer=right)
    assert check_answer(run, expected, {"write_log": [write]}).correct
    assert not check_answer(run, expected, {"write_log": []}).correct  # it claims a window the server never opened
    stale = TaskRun(
        spec.index, spec.workflow, spec.target, spec.tag, 0.0, 1.0, answer={**right, "window_opened": False}
    )
    assert not check_answer(stale, expected, {"write_log": [write]}).correct


def test_a_stale_config_read_fools_the_naive_agents_and_not_the_resilient_one(tmp_path: Path) -> None:
    profile = tmp_path / "stale-configs.toml"
    profile.write_text(STALE_ONLY)
    agents = ("naive", "retry-only", "resilient")
    first = _bench(tmp_path / "a", profile, agents)
    outcomes = {agent: Counter(r.outcome for r in first if r.agent == agent) for agent in agents}
    assert outcomes["naive"]["failed_silent"] > 0, outcomes
    assert outcomes["retry-only"]["failed_silent"] > 0, outcomes  # a stale answer is no error: nothing to retry
    assert outcomes["resilient"]["failed_silent"] == 0 and outcomes["resilient"]["recovered"] > 0, outcomes
    silent = [r for r in first if r.outcome == "failed_silent"]
    assert all("stale" in r.affected_types for r in silent), silent
    second = _bench(tmp_path / "b", profile, agents)
    assert sorted((r.agent, r.task_index, r.outcome, r.fault_modes) for r in first) == sorted(
        (r.agent, r.task_index, r.outcome, r.fault_modes) for r in second
    )


def test_the_bundled_resources_profile_reaches_reads_and_the_prompt(tmp_path: Path) -> None:
    records = _bench(tmp_path, ROOT / "profiles" / "resources.toml", ("naive",))
    touched = {t for r in records for t in r.fault_types}
    assert {"stale", "error"} <= touched, touched  # resource reads and the prompt both met faults
