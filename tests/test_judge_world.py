"""Outcomes from the world, in real sessions (proxy and mock processes): a raise never outranks the damage
it left, and an agent that takes no action after a fault is never "recovered"."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcpfault.analysis.records import TaskRecord
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.bench import resolve_profile
from mcpfault.harness.session import SessionPlan, run_session
from mcpfault.mock.world import World
from tests.conftest import write_profile

WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]

pytestmark = pytest.mark.slow


def session(tmp_path: Path, profile: Path, agent: str, specs: list[TaskSpec]) -> list[TaskRecord]:
    plan = SessionPlan(
        profile=profile, profile_name=profile.stem, agent=agent, tasks=tuple(specs), out_dir=tmp_path / agent
    )

    async def main() -> list[TaskRecord]:
        with anyio.fail_after(120):
            result = await run_session(plan, WORLD)
        assert result.error is None, result.error
        return result.records

    records: list[TaskRecord] = anyio.run(main)
    return records


def test_a_retry_only_task_that_raised_after_leaving_duplicates_is_silent(tmp_path: Path) -> None:
    """Every answer of open_incident is lost: retry-only retries the write blind, the server creates an
    incident each time, and the agent finally raises a timeout. The server holds the duplicates."""
    profile = write_profile(tmp_path, '[[faults]]\ntype = "timeout"\ntools = ["open_incident"]\nmode = "drop"\n')
    records = session(tmp_path, profile, "retry-only", [TaskSpec(0, "open_incident", DEVICE, "task-d-0")])
    (record,) = records
    assert record.duplicates >= 1 and record.retries >= 1
    assert record.outcome == "failed_silent"  # not failed_detected, although the agent raised
    assert record.failure == "duplicate_write"
    assert "timeout" in record.detail and record.answer is None


def test_naive_is_never_recovered_on_a_bad_day(tmp_path: Path) -> None:
    """The bundled ``mixed`` profile (lost writes, errors, delays, corrupt answers, drift) x 20 tasks."""
    specs = [
        TaskSpec(i, workflow, target, f"task-n-{i}")
        for i, (workflow, target) in enumerate(
            [("site_triage", WORLD.site_ids()[i % 3]) for i in range(5)]
            + [("interface_check", WORLD.device_ids()[i]) for i in range(5)]
            + [("maintenance_roundtrip", WORLD.device_ids()[i]) for i in range(5)]
            + [("open_incident", WORLD.device_ids()[i]) for i in range(5)]
        )
    ]
    records = session(tmp_path, resolve_profile("mixed"), "naive", specs)
    assert len(records) == 20
    assert all(r.outcome != "recovered" for r in records)
    touched = [r for r in records if r.fault_types]
    assert touched  # the seed puts faults in its way
    for record in records:
        if record.outcome == "success" and record.affected_types:
            assert record.absorbed and record.recovery_s is None
