"""Agents that live in time: the task deadline, the deadline-bounded backoff, waiting for the breaker's
probe and Retry-After, on an injected clock (a sleep moves it; nothing waits for real)."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpfault.errors import CallError, HttpStatusError, ProtocolError
from mcpfault.harness.agents.policies import MIN_ATTEMPT_S, Agent, RetryOnly, TaskDeadlineExceeded
from mcpfault.harness.agents.resilient import CircuitOpen, Resilient
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.protocol import jsonrpc

SPEC = TaskSpec(0, "interface_check", "dev-0", "task-t-0")
TOOL = {
    "name": "get_interface",
    "inputSchema": {"type": "object", "properties": {"device_id": {"type": "string"}}},
    "annotations": {"readOnlyHint": True},
}


class FakeTime:
    """The agent's clock and sleep: sleeping moves the clock, and is logged."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class OutageClient:
    """What the proxy does under a timed outage (``error`` with ``start_after_s = 0`` and ``duration_s``):
    every tools/call before ``outage_s`` is answered with -32000 upstream unavailable, in ``answer_s``."""

    def __init__(self, time: FakeTime, outage_s: float, *, answer_s: float = 0.002, error: CallError | None = None):
        self.time = time
        self.outage_s = outage_s
        self.answer_s = answer_s
        self.error = error
        self.deadline_s = 0.5
        self.tools_changed = False
        self.current_task: int | None = None
        self.sent: list[tuple[float, float]] = []  # (when, the attempt's deadline)

    async def list_tools(self) -> list[dict[str, Any]]:
        return [TOOL]

    async def call_tool(self, tool: str, arguments: Mapping[str, Any], **options: Any) -> Any:
        self.sent.append((self.time.now, options["deadline_s"]))
        self.time.now += self.answer_s
        if self.time.now < self.outage_s:
            raise self.error or ProtocolError(jsonrpc.UPSTREAM_UNAVAILABLE, "Upstream unavailable: backend is down")
        return {"ok": True}


def resilient(time: FakeTime, client: OutageClient, *, deadline_s: float = 5.0, disabled: frozenset[str] = frozenset()):
    agent = Resilient(
        client,  # type: ignore[arg-type]
        random.Random(0),
        disabled,
        task_deadline_s=deadline_s,
        clock=time.clock,
        sleep=time.sleep,
    )
    anyio.run(agent.start)
    agent.begin_task(SPEC)
    return agent


def test_resilient_rides_out_a_one_second_outage_within_its_deadline() -> None:
    time = FakeTime()
    client = OutageClient(time, outage_s=1.0)
    agent = resilient(time, client)
    assert anyio.run(agent.call, "get_interface", {"device_id": "dev-0"}) == {"ok": True}
    assert 1.0 <= time.now <= 5.0
    # The breaker opened and the call waited for the probe instead of failing: one wait of about open_s.
    assert any(s >= 0.9 * agent.breaker.open_s for s in time.slept), time.slept
    assert agent.breaker.state == "closed"


def test_without_the_breaker_the_backoff_alone_rides_it_out_and_sends_more() -> None:
    with_breaker, without = FakeTime(), FakeTime()
    guarded, bare = OutageClient(with_breaker, 1.0), OutageClient(without, 1.0)
    assert anyio.run(resilient(with_breaker, guarded).call, "get_interface", {}) == {"ok": True}
    assert anyio.run(resilient(without, bare, disabled=frozenset({"breaker"})).call, "get_interface", {}) == {
        "ok": True
    }
    assert len(bare.sent) > len(guarded.sent)  # what the breaker buys: fewer requests into the outage


def test_a_ten_second_outage_fails_at_once_when_the_probe_would_come_after_the_deadline() -> None:
    time = FakeTime()
    client = OutageClient(time, outage_s=10.0)
    agent = resilient(time, client, deadline_s=1.5)
    with pytest.raises((CircuitOpen, ProtocolError, TaskDeadlineExceeded)):
        anyio.run(agent.call, "get_interface", {})
    assert time.now <= 1.5  # never slept past its deadline
    # The next task meets the open breaker: it waits for the probe (its deadline allows), the probe
    # fails, and it gives up without sleeping into a wait its deadline cannot cover.
    agent.begin_task(SPEC)
    started = time.now
    with pytest.raises(CallError) as raised:
        anyio.run(agent.call, "get_interface", {})
    assert time.now - started <= 1.5
    assert raised.value.failure in ("circuit_open", "protocol_error", "task_deadline")


def test_backoff_is_bounded_by_the_deadline_not_by_an_attempt_count() -> None:
    time = FakeTime()
    client = OutageClient(time, outage_s=100.0)
    agent = resilient(time, client, deadline_s=3.0, disabled=frozenset({"breaker", "budget"}))
    with pytest.raises(ProtocolError):
        anyio.run(agent.call, "get_interface", {})
    assert time.now <= 3.0
    assert max(time.slept) <= agent.max_backoff_s
    assert 3.0 - time.now < agent.max_backoff_s + MIN_ATTEMPT_S  # it gave up only when the next wait would not fit
    assert all(deadline <= 3.0 - when for when, deadline in client.sent)  # each attempt's deadline cut to what is left


def test_retry_after_is_honoured_when_it_fits_the_deadline_and_ends_the_call_when_not() -> None:
    time = FakeTime()
    refused = HttpStatusError(503, "HTTP 503", retry_after_s=0.7)
    client = OutageClient(time, outage_s=0.5, error=refused)
    agent = resilient(time, client, disabled=frozenset({"breaker"}))
    assert anyio.run(agent.call, "get_interface", {}) == {"ok": True}
    assert time.slept == [0.7]
    late = FakeTime()
    agent = resilient(late, OutageClient(late, outage_s=10.0, error=refused), deadline_s=0.6)
    with pytest.raises(HttpStatusError):
        anyio.run(agent.call, "get_interface", {})
    assert late.slept == []  # a wait past the deadline is not started


def test_every_agent_stops_sending_once_its_task_deadline_has_passed() -> None:
    for make in (Agent, RetryOnly):
        time = FakeTime()
        client = OutageClient(time, outage_s=0.0)
        agent = make(client, random.Random(0), task_deadline_s=1.0, clock=time.clock, sleep=time.sleep)  # type: ignore[arg-type]
        agent.begin_task(SPEC)
        time.now += 0.8
        anyio.run(agent.call, "get_interface", {})
        assert client.sent[-1][1] == pytest.approx(0.2)  # the attempt's deadline: what the task has left
        time.now += 0.5
        with pytest.raises(TaskDeadlineExceeded):
            anyio.run(agent.call, "get_interface", {})
        assert len(client.sent) == 1


def test_a_task_deadline_shorter_than_one_call_is_refused_before_anything_starts(tmp_path: Path) -> None:
    for command in ("run", "bench"):
        done = subprocess.run(
            [sys.executable, "-m", "mcpfault", command, "--task-deadline-s", "0.2", "--out", str(tmp_path / command)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "--task-deadline-s 0.2 is shorter than one call's --deadline 0.5" in done.stderr
        assert not (tmp_path / command).exists()
