"""Your agent under faults from Python: one session of an external agent (``cmd:NAME``), judged."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpfault.errors import MCPFaultError, UsageError


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How one task of your agent was judged."""

    index: int
    workflow: str
    outcome: str  # success, recovered, failed_detected, failed_silent
    failure: str | None  # the class of a failed_detected task (agent_reported_failure, agent_timeout, ...)
    fault_types: tuple[str, ...]  # the faults the proxy injected into its requests
    answer: Any  # what the agent answered
    detail: str  # why it failed
    agent_stderr: str  # the tail of the agent's stderr
    trace_id: str | None

    @property
    def silent(self) -> bool:
        return self.outcome == "failed_silent"


@dataclass(frozen=True, slots=True)
class AgentRun:
    """Every task of an ``agent_bench`` run, in order; ``out_dir`` holds its records, spans and logs."""

    outcomes: tuple[TaskOutcome, ...]
    out_dir: Path

    def __iter__(self) -> Iterator[TaskOutcome]:
        return iter(self.outcomes)

    def __len__(self) -> int:
        return len(self.outcomes)

    def __getitem__(self, index: int) -> TaskOutcome:
        return self.outcomes[index]

    def counts(self) -> Counter[str]:
        """Tasks by outcome."""
        return Counter(o.outcome for o in self.outcomes)

    @property
    def silent(self) -> list[TaskOutcome]:
        """The tasks the agent got wrong without saying so."""
        return [o for o in self.outcomes if o.silent]


def agent_bench(
    agent_command: Sequence[str],
    *,
    profile: str | os.PathLike[str] = "mixed",
    tasks: int = 4,
    seed: int = 0,
    agent_timeout_s: float = 120.0,
    transport: str = "stdio",
    out_dir: str | os.PathLike[str] | None = None,
    name: str = "agent",
) -> AgentRun:
    """Run ``agent_command`` as ``cmd:NAME`` on ``tasks`` tasks through a proxy with ``profile``, and judge them.

    The agent gets the ``MCPFAULT_*`` contract (README, "Your agent"); the four tool workflows rotate.
    Raises ``UsageError`` for a bad argument and ``MCPFaultError`` when the session broke.
    """
    from mcpfault.app.run import plan_session, run_session_dir
    from mcpfault.harness.agents.external import ExternalConfig, external_configs

    command = tuple(str(part) for part in agent_command)
    if isinstance(agent_command, str) or not command:
        raise UsageError("agent_command: give the agent's argv as a list, e.g. [sys.executable, 'my_agent.py']")
    if tasks < 1:
        raise UsageError(f"tasks={tasks}: give at least 1")
    if transport not in ("stdio", "http"):
        raise UsageError(f"transport={transport!r}: choose stdio or http")
    (config,) = external_configs([f"cmd:{name}"], {name: command}, agent_timeout_s).values()
    assert isinstance(config, ExternalConfig)
    directory = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="mcpfault-agent-"))
    planned = plan_session(
        str(profile), config.label, directory, tasks=tasks, seed=seed, transport=transport, external=config
    )
    result = run_session_dir(planned)
    if result.error is not None:
        raise MCPFaultError(result.error)
    return AgentRun(
        tuple(
            TaskOutcome(
                index=r.task_index,
                workflow=r.task,
                outcome=r.outcome,
                failure=r.failure,
                fault_types=r.fault_types,
                answer=r.answer,
                detail=r.detail,
                agent_stderr=r.agent_stderr or "",
                trace_id=r.trace_id,
            )
            for r in result.records
        ),
        directory,
    )
