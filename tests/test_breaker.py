"""The resilient agent's circuit breaker: closed, open for a time, half-open, on an injected clock."""

from __future__ import annotations

import pytest

from mcpfault.harness.agents.resilient import Breaker, CircuitOpen


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sent(breaker: Breaker) -> bool:
    """One attempt's turn at the breaker: True when it may be sent."""
    try:
        breaker.check()
    except CircuitOpen:
        return False
    return True


def state(breaker: Breaker) -> str:
    return breaker.state  # read through a call: mypy would narrow the attribute between asserts


def test_threshold_failures_open_it_for_open_s_then_it_lets_one_probe_through() -> None:
    clock = Clock()
    breaker = Breaker(clock=clock, threshold=3, open_s=1.0)
    for _ in range(3):
        assert sent(breaker)
        breaker.record(False)
    assert breaker.state == "open"
    assert breaker.wait_s() == 1.0
    clock.now += 0.4
    assert not sent(breaker)  # refused without a request while the open state lasts
    assert breaker.wait_s() == pytest.approx(0.6)
    clock.now += 0.6
    assert breaker.wait_s() == 0.0
    assert sent(breaker)  # the probe
    assert state(breaker) == "half_open"
    breaker.record(False)  # the probe failed: open again, for a whole new open_s from now
    assert state(breaker) == "open" and breaker.wait_s() == 1.0
    clock.now += 1.0
    assert sent(breaker)
    breaker.record(True)  # the probe succeeded: closed, the count of failures forgotten
    assert state(breaker) == "closed" and breaker.failures == 0
    assert all(sent(breaker) for _ in range(5))


def test_refusals_do_not_shorten_the_open_state_only_time_does() -> None:
    # Counted in refusals, a burst of fast-failing callers would end the open state at once; counted in
    # time, however many are refused, the server is left alone for open_s.
    clock = Clock()
    breaker = Breaker(clock=clock, threshold=1, open_s=2.0)
    breaker.record(False)
    assert [sent(breaker) for _ in range(50)] == [False] * 50
    clock.now += 2.0
    assert sent(breaker)


def test_a_success_while_closed_resets_the_consecutive_count() -> None:
    breaker = Breaker(clock=Clock(), threshold=3)
    for ok in (False, False, True, False, False):
        assert sent(breaker)
        breaker.record(ok)
    assert breaker.state == "closed" and breaker.failures == 2
