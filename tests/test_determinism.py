"""Determinism in full: every bundled profile x the scripted agents, run twice, the same per-task outcomes
and the same fault sequences. The ablation agents run on storm, the profile with every fault type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpfault.analysis.summary import PROCESS_PROFILES
from mcpfault.harness.agents.roster import AGENT_NAMES
from mcpfault.harness.bench import BenchConfig, plan_sessions, run_bench
from mcpfault.mock.world import World

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
# Outages that last a time (start_after_s / duration_s: outage_1s, outage_10s) are in force for so many
# seconds, not so many requests: how many calls they meet is the machine's speed (test_timed_outage).
TIMED = ("outage_1s.toml", "outage_10s.toml")
PROFILES = tuple(p for p in sorted((ROOT / "profiles").glob("*.toml")) if p.name not in TIMED)
MAIN_AGENTS = ("naive", "retry-only", "resilient")
ABLATIONS = tuple(a for a in AGENT_NAMES if a not in MAIN_AGENTS)
WORLD = World.generate(3)
ENDED_RIGHT = "success or recovered"  # one class, for the profiles of process faults (see run)


def run(out: Path, profiles: tuple[Path, ...], agents: tuple[str, ...]) -> list[tuple[Any, ...]]:
    config = BenchConfig(
        profiles=profiles, agents=agents, out_dir=out, tasks=8, session_tasks=8, seed=3, jobs=4, traces=True
    )

    async def main() -> Any:
        with anyio.fail_after(300):
            return await run_bench(config, plan_sessions(config, WORLD), WORLD, lambda: None)

    result = anyio.run(main)
    assert result.errors == [], result.errors
    # A process fault acts in wall time: how many of a retrying agent's attempts fall inside a 1 s
    # stall, and whether a throttled call outlasts the agent's timeout (so whether the fault changed an
    # answer: a task "recovered", or a "success" the fault touched without effect), depend on the
    # machine's speed, not on the seed (seen in CI: cpu_starve under load). Which faults fired, when,
    # and whether the task ended right, and how it failed if not, must not.
    timed = PROCESS_PROFILES
    # And a process fault outlasts the call that set it off: a 1 s stall that ended task 0's call after
    # its 0.5 s deadline is still in force when task 1 begins, and whether task 1's first answer comes
    # before its own deadline is a race of milliseconds (seen in CI: stall, naive, a task with no fault
    # of its own, success in one run and a timeout in the other). So in those profiles a task that met
    # no fault itself is compared by that alone: its outcome, failure and duplicates are the race's.
    # The same for a task that resilient's circuit breaker ended: its cooldown runs in wall time, so
    # whether the next call waits for the probe or is refused at once (and so how many attempts, and
    # faults, the task met before circuit_open) is the machine's speed (seen in CI: drift_any under load).
    return sorted(
        (
            r.profile,
            r.agent,
            r.task_index,
            _outcome(r.outcome, timed=r.profile in timed, met_a_fault=bool(r.fault_modes)),
            None if r.profile in timed and not r.fault_modes else r.failure,
            None if r.failure == "circuit_open" else r.fault_modes,
            None if r.profile in timed else r.affected_types,
            None if r.profile in timed else r.touched_no_effect,
            None if r.profile in timed or r.failure == "circuit_open" else r.attempts,
            None if r.profile in timed or r.failure == "circuit_open" else r.retries,
            None if r.profile in timed and not r.fault_modes else r.duplicates,
        )
        for r in result.records
    )


def _outcome(outcome: str, *, timed: bool, met_a_fault: bool) -> str | None:
    if not timed:
        return outcome
    if not met_a_fault:
        return None  # a neighbour's fault may still be in force (see run)
    return ENDED_RIGHT if outcome in ("success", "recovered") else outcome


@pytest.mark.parametrize(
    ("profiles", "agents"), [(PROFILES, MAIN_AGENTS), ((ROOT / "profiles" / "storm.toml",), ABLATIONS)]
)
def test_the_same_seed_gives_the_same_tasks_and_faults(tmp_path: Path, profiles, agents):
    first, second = run(tmp_path / "a", profiles, agents), run(tmp_path / "b", profiles, agents)
    assert len(first) == len(profiles) * len(agents) * 8
    assert first == second
    assert any(row[5] for row in first)  # faults fired: the comparison is not of empty sequences
