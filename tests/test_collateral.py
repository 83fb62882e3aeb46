"""A stall's collateral failure names the stall: the task after it, which met the still-stopped server
with no fault of its own, is attributed to the task the stall fired in."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcpfault.analysis.collateral import Outage, collateral, outages
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.session import SessionPlan, SessionResult, run_session
from mcpfault.mock.world import World
from tests.conftest import write_profile

WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]


def event(request_id: int, at: str, duration_s: float, **fault: str) -> dict[str, object]:
    return {"request_id": request_id, "time": f"2026-12-03T10:00:{at}+00:00", "duration_s": duration_s, **fault}


def test_a_request_inside_an_earlier_tasks_stall_is_collateral_and_one_after_it_is_not() -> None:
    events = [
        event(1, "00.500", 0.5, rule="paused", fault_type="stall"),  # stalls the server from 00.000 for 1 s
        event(2, "01.000", 0.5),  # task 1: 00.500-01.000, inside the stall
        event(3, "02.000", 0.5),  # task 2: 01.500-02.000, after it
    ]
    tasks = {1: 0, 2: 1, 3: 2}
    windows = outages(events, [], tasks, {"paused": 1.0})
    assert windows == [Outage(windows[0].start, windows[0].start + 1.0, 0, "stall", "paused")]
    assert collateral(windows, events, tasks, failed_tasks=[1, 2]) == {1: windows[0]}
    assert collateral(windows, events, tasks, failed_tasks=[2]) == {}  # only failed tasks are attributed


def test_a_crash_holds_the_server_from_its_death_until_it_is_back() -> None:
    events = [event(1, "00.010", 0.01, rule="killed", fault_type="crash"), event(2, "02.500", 0.5)]
    server = [
        {"event": "server_exited", "time": "2026-12-03T10:00:00.020+00:00", "cause": "crash"},
        {"event": "server_back", "time": "2026-12-03T10:00:03.000+00:00", "cause": "crash"},
    ]
    (window,) = outages(events, server, {1: 0, 2: 1}, {})
    assert window.end - window.start == pytest.approx(3.0)
    assert collateral([window], events, {1: 0, 2: 1}, [1])[1].describe() == "crash (rule 'killed') in task 0"


STALL_FIRST_CALL = '[[faults]]\nname = "paused"\ntype = "stall"\nduration_s = 1.5\nlimit = 1\n'


@pytest.mark.slow
def test_a_stalls_collateral_failure_names_the_stall(tmp_path: Path) -> None:
    # interface_check makes one call; the stall stops the server on task 0's, for 1.5 s: task 0 times out
    # (0.5 s), task 1 (sent into the still-stopped server, no fault of its own) times out too.
    profile = write_profile(tmp_path, STALL_FIRST_CALL)
    specs = tuple(TaskSpec(i, "interface_check", DEVICE, f"task-s-{i}") for i in range(2))
    plan = SessionPlan(profile=profile, profile_name="stall", agent="naive", tasks=specs, out_dir=tmp_path / "s")

    async def main() -> SessionResult:
        with anyio.fail_after(60):
            return await run_session(plan, WORLD)

    result = anyio.run(main)
    assert result.error is None, result.error
    first, second = result.records
    assert (first.outcome, first.fault_types, first.caused_by) == ("failed_detected", ("stall",), None)
    assert second.outcome == "failed_detected", second
    assert second.caused_by == "stall (rule 'paused') in task 0"
    assert "stall" in second.fault_types and "stall" in second.affected_types
    assert "still held by the stall" in second.detail
