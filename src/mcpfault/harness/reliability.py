"""The reliability surface: per agent (model) and per profile intensity, pass^k, never-silent^k and cost.

Pure: records in, points out (no I/O), so the Markdown report, report.html and the chart read the
same numbers. An intensity is the bundled set a profile belongs to (``gentle``, ``stress``,
``process``, as ``bench --profiles`` names them); a profile in none of them is its own intensity.

A point's tasks are its distinct tasks, a task being one (profile, transport, seed, task index):
the trials of a task are its runs. ``k`` is the fewest runs any of its tasks had (the bench's
``--trials``). pass^k is tau-bench's estimator, the mean over tasks of C(c, k) / C(n, k) for c
correct runs of n; with n = k for every task, each task contributes 1 when all its k runs were
correct and 0 otherwise. Its interval is the Wilson 95% interval over the tasks of that
all-k-correct indicator (tasks, not runs, are the independent units; a task with more than k runs
counts its share, rounded, as analysis.summary's intervals do).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mcpfault.analysis.records import TaskRecord
from mcpfault.analysis.summary import (
    GENTLE_PROFILES,
    PROCESS_PROFILES,
    STRESS_PROFILES,
    pass_hat_k,
    require_ground_truth,
    wilson,
)

INTENSITIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gentle", tuple(GENTLE_PROFILES)),
    ("stress", tuple(STRESS_PROFILES)),
    ("process", tuple(PROCESS_PROFILES)),
)


def intensity_of(profile: str) -> str:
    """The bundled set ``profile`` belongs to; the profile's own name when it is in none."""
    return next((name for name, members in INTENSITIES if profile in members), profile)


@dataclass(frozen=True)
class ReliabilityPoint:
    """One agent at one intensity, over every profile of it the records hold."""

    agent: str
    intensity: str
    profiles: tuple[str, ...]  # in the records' order
    tasks: int  # distinct tasks
    runs: int  # task runs (tasks x trials)
    k: int  # the fewest runs of any task: pass^k's k
    pass_k: float
    pass_k_interval: tuple[float, float]
    never_silent_k: float
    never_silent_interval: tuple[float, float]
    recovered: int  # runs that ended ``recovered``: a fault affected them and the answer was right
    model_runs: int  # runs made by a model (0 for a scripted or external agent, which report no cost)
    cost_usd: float | None  # None when no run carried a cost

    @property
    def cost_per_task(self) -> float | None:
        """The cost of one task run on average; None without a cost."""
        return None if self.cost_usd is None or not self.runs else self.cost_usd / self.runs

    @property
    def cost_per_recovered(self) -> float | None:
        """What the whole point cost per recovered run; None without a cost or with no run recovered."""
        return None if self.cost_usd is None or not self.recovered else self.cost_usd / self.recovered


def reliability_points(records: Iterable[TaskRecord]) -> tuple[ReliabilityPoint, ...]:
    """Every (agent, intensity) point, agents in the records' order, intensities gentle, stress, process, others."""
    items = list(records)
    require_ground_truth(items)  # pass^k and never-silent^k would count an unjudged run as clean
    grouped: defaultdict[tuple[str, str], list[TaskRecord]] = defaultdict(list)
    for record in items:
        grouped[record.agent, intensity_of(record.profile)].append(record)
    agents = list(dict.fromkeys(agent for agent, _ in grouped))
    known = [name for name, _ in INTENSITIES]
    others = list(dict.fromkeys(i for _, i in grouped if i not in known))
    order = [*known, *others]
    return tuple(
        _point(agent, intensity, grouped[agent, intensity])
        for agent in agents
        for intensity in order
        if (agent, intensity) in grouped
    )


def intensities_of(points: Sequence[ReliabilityPoint]) -> tuple[str, ...]:
    """The intensities the points cover, in their order."""
    return tuple(dict.fromkeys(p.intensity for p in points))


def _point(agent: str, intensity: str, records: Sequence[TaskRecord]) -> ReliabilityPoint:
    per_task: defaultdict[tuple[str, str, int, int], list[TaskRecord]] = defaultdict(list)
    for record in records:
        per_task[record.profile, record.transport, record.seed, record.task_index].append(record)
    k = min(len(runs) for runs in per_task.values())
    correct = [(sum(r.outcome in ("success", "recovered") for r in runs), len(runs)) for runs in per_task.values()]
    clean = [(sum(r.outcome != "failed_silent" for r in runs), len(runs)) for runs in per_task.values()]
    costs = [r.cost_usd for r in records if r.cost_usd is not None]
    return ReliabilityPoint(
        agent=agent,
        intensity=intensity,
        profiles=tuple(dict.fromkeys(r.profile for r in records)),
        tasks=len(per_task),
        runs=len(records),
        k=k,
        pass_k=pass_hat_k(correct, k),
        pass_k_interval=_all_k_interval(correct, k),
        never_silent_k=pass_hat_k(clean, k),
        never_silent_interval=_all_k_interval(clean, k),
        recovered=sum(1 for r in records if r.outcome == "recovered"),
        model_runs=sum(1 for r in records if r.model is not None),
        cost_usd=round(math.fsum(costs), 6) if costs else None,
    )


def _all_k_interval(runs: Sequence[tuple[int, int]], k: int) -> tuple[float, float]:
    """Wilson 95% over tasks of "k runs all counted": each task's C(c, k) / C(n, k) (0 or 1 when n = k)."""
    shares = math.fsum(math.comb(c, k) / math.comb(n, k) for c, n in runs)
    return wilson(round(shares), len(runs))
