"""The report's lies table: per agent, the tasks a lie changed what they read, and what became of them.

A lie is any fault type whose module names ``believed_lie`` as the class of a wrong answer it affected
(faults/lie.py); the counts come from the records alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mcpfault.analysis.records import TaskRecord
from mcpfault.analysis.summary import AGENT_ORDER
from mcpfault.faults.catalog import CATALOG
from mcpfault.faults.lie import BELIEVED_LIE
from mcpfault.harness.agents.roster import AGENT_NAMES, disabled_mechanisms
from mcpfault.harness.formatting import md, md_table

LYING_TYPES = frozenset(fault.type_name for fault in CATALOG if getattr(fault, "wrong_answer", None) == BELIEVED_LIE)


@dataclass(frozen=True, slots=True)
class AgentLies:
    agent: str
    lied_to: int  # tasks a lie affected (it changed a field the task reads)
    # failed_silent: a wrong answer built on the lie (believed_lie), or a write the lie made the agent
    # deny (the server's damage keeps its own class, write_denied)
    believed: int
    noticed: int  # failed_detected: the agent refused an answer
    cross_checked: int  # recovered: right, after acting on the lie (a re-read from another source)
    absorbed: int  # right with no action after it
    # What verification cost: the reads it added (second sources, re-reads), per task of the agent's,
    # over all its tasks (a lie is not known when the agent pays for checking). None for an agent that
    # chooses each read itself (a model, your agent): no read of theirs is marked as a check.
    verify_reads_per_task: float | None = 0.0


def agent_lies(records: Iterable[TaskRecord]) -> list[AgentLies]:
    """One row per agent that a lie affected or that believed one, in the report's agent order."""
    by_agent: dict[str, list[TaskRecord]] = {}
    reads: dict[str, list[int]] = {}
    for record in records:
        reads.setdefault(record.agent, []).append(record.verify_reads)
        if record.failure == BELIEVED_LIE or LYING_TYPES & set(record.affected_types):
            by_agent.setdefault(record.agent, []).append(record)
    order = [a for a in AGENT_ORDER if a in by_agent] + sorted(a for a in by_agent if a not in AGENT_ORDER)
    return [
        AgentLies(
            agent=agent,
            lied_to=len(by_agent[agent]),
            believed=sum(r.outcome == "failed_silent" for r in by_agent[agent]),
            noticed=sum(r.outcome == "failed_detected" for r in by_agent[agent]),
            cross_checked=sum(r.outcome == "recovered" for r in by_agent[agent]),
            absorbed=sum(r.outcome == "success" for r in by_agent[agent]),
            verify_reads_per_task=sum(reads[agent]) / len(reads[agent])
            if agent in AGENT_NAMES or disabled_mechanisms(agent)
            else None,
        )
        for agent in order
    ]


def lies_section(records: Sequence[TaskRecord]) -> list[str]:
    """The report's "believed a lie" table; nothing when no lie reached a task."""
    rows = [
        [
            md(a.agent),
            str(a.lied_to),
            str(a.believed),
            str(a.noticed),
            str(a.cross_checked),
            str(a.absorbed),
            "-" if a.verify_reads_per_task is None else f"{a.verify_reads_per_task:.2f}",
        ]
        for a in agent_lies(records)
    ]
    if not rows:
        return []
    return [
        "## Lies",
        "",
        "Tasks a plausible lie (an answer valid and schema-conformant, one field wrong) changed what they read: "
        "`believed a lie`, a wrong answer built on it (failed_silent: `believed_lie`, or `write_denied` when "
        "the lie made the agent deny a write the server applied); `noticed`, the agent "
        "refused an answer (failed_detected); `cross-checked`, right after re-reading (recovered); `absorbed`, "
        "right with no action after the lie. `verify reads/task`: what checking cost, the reads an agent's "
        "verification added (a second source read, an answer read again after a disagreement) per task, over "
        "all its tasks: `resilient` verifies, `resilient-no-verify` and the other scripted agents do not; `-` for "
        "a model or your agent, whose every read is its own choice (their cost is in the agents table).",
        "",
        *md_table(
            ["agent", "lied to", "believed a lie", "noticed", "cross-checked", "absorbed", "verify reads/task"], rows
        ),
    ]
