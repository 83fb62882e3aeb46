"""The resilient agent's circuit breaker: closed, open, half-open, and a cooldown counted in calls."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcpfault.harness.agents.policies import Breaker, CircuitOpen
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.session import SessionPlan, run_session
from mcpfault.mock.world import World
from tests.conftest import write_profile

WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]


def sent(breaker: Breaker) -> bool:
    """One attempt's turn at the breaker: True when it may be sent."""
    try:
        breaker.check()
    except CircuitOpen:
        return False
    return True


def state(breaker: Breaker) -> str:
    return breaker.state  # read through a call: mypy would narrow the attribute between asserts


def test_threshold_failures_open_it_and_it_refuses_the_cooldown_then_probes_once():
    breaker = Breaker(threshold=3, cooldown_calls=2)
    for _ in range(3):
        assert sent(breaker)
        breaker.record(False)
    assert breaker.state == "open"
    assert [sent(breaker), sent(breaker)] == [False, False]  # the cooldown: two calls refused, no request
    assert sent(breaker)  # the probe
    assert state(breaker) == "half_open"
    breaker.record(False)  # the probe failed: open again, for a whole new cooldown
    assert state(breaker) == "open"
    assert [sent(breaker), sent(breaker), sent(breaker)] == [False, False, True]
    breaker.record(True)  # the probe succeeded: closed, the count of failures forgotten
    assert state(breaker) == "closed" and breaker.failures == 0
    assert all(sent(breaker) for _ in range(5))


def test_the_cooldown_does_not_pass_by_itself_however_long_or_short_the_wait():
    # A wall-clock cooldown lets a task that fails fast keep failing until time passes; counted in
    # calls, the breaker refuses exactly cooldown_calls whatever the clock says.
    breaker = Breaker(threshold=1, cooldown_calls=3)
    breaker.record(False)
    assert [sent(breaker) for _ in range(4)] == [False, False, False, True]


def test_a_success_while_closed_resets_the_consecutive_count():
    breaker = Breaker(threshold=3)
    for ok in (False, False, True, False, False):
        assert sent(breaker)
        breaker.record(ok)
    assert breaker.state == "closed" and breaker.failures == 2


OUTAGE = '[[faults]]\ntype = "error"\ncode = -32000\nafter = 2\nlimit = 10\n'


@pytest.mark.slow
def test_after_an_outage_the_breaker_refuses_two_tasks_then_probes_and_the_rest_succeed(tmp_path: Path):
    # One call per task. Calls 3-12 fail: task 2 spends its 8 attempts, task 3 fails twice more and
    # opens the breaker (10 consecutive failures); tasks 3 and 4 are refused without a request; task 5
    # is the probe, the outage is over, and every task after it succeeds. With the old 0.5 s wall-clock
    # cooldown every task that came within half a second of the opening was refused instead.
    profile = write_profile(tmp_path, OUTAGE)
    specs = tuple(TaskSpec(i, "interface_check", DEVICE, f"task-b-{i}") for i in range(12))
    plan = SessionPlan(profile=profile, profile_name="outage", agent="resilient", tasks=specs, out_dir=tmp_path / "s")

    async def main() -> list:
        with anyio.fail_after(60):
            return (await run_session(plan, WORLD)).records

    records = anyio.run(main)
    outcomes = [(r.outcome, r.failure) for r in records]
    assert outcomes[:6] == [
        ("success", None),
        ("success", None),
        ("failed_detected", "protocol_error"),
        ("failed_detected", "circuit_open"),
        ("failed_detected", "circuit_open"),
        ("success", None),
    ], outcomes
    assert [r.attempts for r in records[2:6]] == [8, 2, 0, 1]
    assert all(outcome == ("success", None) for outcome in outcomes[6:]), outcomes
