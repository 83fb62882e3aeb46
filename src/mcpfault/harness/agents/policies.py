"""Agents: the same task code behind different call-boundary policies.

- ``naive`` (``Agent``): one try per call, with the client's deadline.
- ``retry-only`` (``RetryOnly``): retries retryable failures (timeouts, internal errors, corrupt
  answers) with exponential backoff and full jitter, writes included: what most retry wrappers do.
- ``resilient`` (``harness/agents/resilient.py``), built on ``RetryOnly``; ``roster.py`` names them
  all, with the ablations, and makes one by name.

Every task has a deadline (``--task-deadline-s``, ``DEFAULT_TASK_DEADLINE_S``): no agent sends an
attempt once too little of it is left, and each attempt's own deadline is cut to what is left. Clock
and sleep are given to the agent, so tests run its timing on a fake clock.

Over Streamable HTTP the transport's own failures (an error status, a cut stream, a reset: each a
``TransportFailure``) are transient to both retrying agents.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from mcpfault.errors import (
    CallError,
    CallTimeout,
    MalformedResponse,
    ProtocolError,
    TransportFailure,
)
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.client import StdioClient
from mcpfault.protocol import jsonrpc

# JSON-RPC errors worth another try: internal errors, and the proxy's "upstream unavailable".
TRANSIENT_CODES = frozenset({jsonrpc.INTERNAL_ERROR, jsonrpc.UPSTREAM_UNAVAILABLE, -32001})


# The bench's time scale: one bench second stands for a minute of production (README, "Agents that live in
# time"). A task has 5 s, a production agent's five minutes; the per-call deadline (0.5 s) is 30 s.
DEFAULT_TASK_DEADLINE_S = 5.0
# Below this much time left, an attempt is not worth sending: the mock answers in about a millisecond,
# but a loaded machine and the proxy take tens of them.
MIN_ATTEMPT_S = 0.05

Clock = Callable[[], float]  # monotonic seconds
Sleep = Callable[[float], Awaitable[None]]


class TaskDeadlineExceeded(CallError):
    """The task's own deadline (--task-deadline-s) passed, or would before another attempt could end."""

    failure = "task_deadline"


@dataclass
class TaskStats:
    calls: int = 0  # logical calls the task code made
    verify_reads: int = 0  # reads verification added: second sources read, answers read again
    first_fault_at: float | None = None


class Agent:
    """Naive: the call boundary most code has."""

    name = "naive"

    def __init__(
        self,
        client: StdioClient,
        rng: random.Random,
        *,
        task_deadline_s: float = DEFAULT_TASK_DEADLINE_S,
        clock: Clock = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        self.client = client
        self.rng = rng
        self.task: TaskSpec | None = None
        self.stats = TaskStats()
        self.task_deadline_s = task_deadline_s
        self.clock = clock
        self.sleep = sleep
        self.deadline_at = clock() + task_deadline_s

    async def start(self) -> None:
        """Anything to do once per session, after the handshake."""

    def begin_task(self, spec: TaskSpec) -> None:
        self.task = spec
        self.stats = TaskStats()
        self.client.current_task = spec.index
        self.deadline_at = self.clock() + self.task_deadline_s

    def remaining_s(self) -> float:
        """Seconds left before the task's deadline."""
        return self.deadline_at - self.clock()

    def call_deadline_s(self) -> float:
        """The next attempt's deadline: the client's per-call one, cut to what the task has left.

        Raises TaskDeadlineExceeded when too little is left for an attempt to be answered."""
        remaining = self.remaining_s()
        if remaining < MIN_ATTEMPT_S:
            raise TaskDeadlineExceeded(
                f"the task's deadline of {self.task_deadline_s:g}s has passed "
                f"({max(0.0, remaining):.3f}s left, an attempt needs {MIN_ATTEMPT_S:g}s)"
            )
        return min(self.client.deadline_s, remaining)

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> Any:
        self.stats.calls += 1
        return await self.client.call_tool(tool, arguments, deadline_s=self.call_deadline_s())

    async def read(self, uri: str) -> Any:
        self.stats.calls += 1
        return await self.client.read_resource(uri, deadline_s=self.call_deadline_s())

    async def prompt(self, name: str, arguments: Mapping[str, str]) -> str:
        self.stats.calls += 1
        return await self.client.get_prompt(name, arguments, deadline_s=self.call_deadline_s())


# One attempt of a logical call: (attempt number, seconds slept before it) -> the answer.
Send = Callable[[int, float], Awaitable[Any]]


class RetryOnly(Agent):
    name = "retry-only"
    max_attempts = 4
    base_backoff_s = 0.01
    max_backoff_s = 0.2

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> Any:
        return await self._retrying(
            lambda n, slept: self.client.call_tool(
                tool, arguments, deadline_s=self.call_deadline_s(), attempt=n, backoff_s=slept
            )
        )

    async def read(self, uri: str) -> Any:
        return await self._retrying(
            lambda n, slept: self.client.read_resource(
                uri, deadline_s=self.call_deadline_s(), attempt=n, backoff_s=slept
            )
        )

    async def prompt(self, name: str, arguments: Mapping[str, str]) -> str:
        answer: str = await self._retrying(
            lambda n, slept: self.client.get_prompt(
                name, arguments, deadline_s=self.call_deadline_s(), attempt=n, backoff_s=slept
            )
        )
        return answer

    async def _retrying(self, send: Send) -> Any:
        self.stats.calls += 1
        slept = 0.0
        for attempt in range(self.max_attempts):
            try:
                return await send(attempt + 1, slept)
            except CallError as exc:
                if not self.retryable(exc) or attempt == self.max_attempts - 1:
                    raise
                slept = await self.backoff(attempt)
        raise AssertionError("unreachable")

    @staticmethod
    def retryable(exc: CallError) -> bool:
        if isinstance(exc, CallTimeout | MalformedResponse):
            return True
        if isinstance(exc, TransportFailure):
            return exc.transient
        return isinstance(exc, ProtocolError) and exc.code in TRANSIENT_CODES

    async def backoff(self, attempt: int, exc: CallError | None = None) -> float:
        """Sleep before the next try; returns the seconds slept."""
        # Full jitter (AWS architecture blog): uniform in [0, min(cap, base * 2^attempt)].
        delay_s = self.rng.uniform(0.0, min(self.max_backoff_s, self.base_backoff_s * 2**attempt))
        await self.sleep(delay_s)
        return delay_s
