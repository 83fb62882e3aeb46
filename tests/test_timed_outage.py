"""Timed outages through the real proxy and mock server: resilient rides out one second within its
task deadline; against ten seconds every task fails detected, each at its own deadline, not the outage's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpfault.analysis.records import TaskRecord
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.session import SessionPlan, run_session
from mcpfault.mock.world import World
from mcpfault.protocol.jsonlines import read_jsonl
from tests.conftest import write_profile

pytestmark = pytest.mark.slow

WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]


def timed_outage(duration_s: float) -> str:
    return (
        "[[faults]]\n"
        'name = "backend-down"\ntype = "error"\nmode = "protocol"\ncode = -32000\n'
        f"start_after_s = 0.0\nduration_s = {duration_s}\n"
    )


def run(tmp_path: Path, duration_s: float, tasks: int, **options: Any) -> tuple[list[TaskRecord], list[dict[str, Any]]]:
    profile = write_profile(tmp_path, timed_outage(duration_s))
    specs = tuple(TaskSpec(i, "interface_check", DEVICE, f"task-o-{i}") for i in range(tasks))
    plan = SessionPlan(
        profile=profile, profile_name="timed", agent="resilient", tasks=specs, out_dir=tmp_path / "s", **options
    )

    async def main() -> list[TaskRecord]:
        with anyio.fail_after(120):
            result = await run_session(plan, WORLD)
        assert result.error is None, result.error
        return result.records

    records = anyio.run(main)
    attempts = read_jsonl(tmp_path / "s" / "attempts.jsonl", strict=True)
    return records, attempts


def test_resilient_rides_out_a_one_second_outage_from_the_start_within_its_deadline(tmp_path: Path) -> None:
    records, attempts = run(tmp_path, 1.0, 3)
    first = records[0]
    assert first.outcome == "recovered" and "error" in first.affected_types, first  # it met the outage
    assert all(r.outcome in ("success", "recovered") for r in records), [(r.outcome, r.detail) for r in records]
    waited = sum(a["backoff_s"] for a in attempts if a.get("task") == 0)
    assert 0 < waited <= 5.0  # backoff and the wait for the breaker's probe, inside the 5 s task deadline


def test_a_ten_second_outage_fails_every_task_detected_each_within_its_own_deadline(tmp_path: Path) -> None:
    records, attempts = run(tmp_path, 10.0, 3, task_deadline_s=1.0)
    assert [r.outcome for r in records] == ["failed_detected"] * 3, [(r.outcome, r.detail) for r in records]
    assert {r.failure for r in records} <= {"circuit_open", "protocol_error", "task_deadline"}
    for task in range(3):
        # Fast: what the agent chose to wait fits in its 1 s deadline, not in the 10 s of the outage.
        assert sum(a["backoff_s"] for a in attempts if a.get("task") == task) <= 1.0
    assert len(attempts) < 3 * 20  # the breaker keeps it from hammering the backend meanwhile
