"""Across seeds: each cell's correct share per seed (bench --seeds N), and how far apart they lie.

One seed is one draw of the world, the task plan and the faults; a rate seen under one seed may not
hold under the next (naive on timeout: 50%, 60%, 60% under seeds 0, 1, 2). Pure, over the records.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from mcpfault.analysis.records import TaskRecord
from mcpfault.analysis.summary import AGENT_ORDER, ROW_ORDER, ordered


@dataclass(frozen=True, slots=True)
class SeedRate:
    seed: int
    correct: int  # success + recovered
    tasks: int

    @property
    def share(self) -> float:
        return self.correct / self.tasks


@dataclass(frozen=True, slots=True)
class SeedSpread:
    """One report row x agent: the correct share under every seed."""

    row: str
    agent: str
    rates: tuple[SeedRate, ...]  # in seed order

    @property
    def correct(self) -> int:
        return sum(r.correct for r in self.rates)

    @property
    def tasks(self) -> int:
        return sum(r.tasks for r in self.rates)

    @property
    def spread(self) -> float:
        """The highest seed's share minus the lowest's (0 with one seed)."""
        shares = [r.share for r in self.rates]
        return max(shares) - min(shares)


def seeds_of(records: Iterable[TaskRecord]) -> list[int]:
    return sorted({r.seed for r in records})


def seed_spreads(records: Iterable[TaskRecord]) -> list[SeedSpread]:
    """Every (row, agent) cell's rate per seed, rows and agents in the report's order."""
    counts: defaultdict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0])
    for record in records:
        tally = counts[record.row, record.agent, record.seed]
        tally[0] += record.outcome in ("success", "recovered")
        tally[1] += 1
    rows = ordered((row for row, _, _ in counts), ROW_ORDER)
    agents = ordered((agent for _, agent, _ in counts), AGENT_ORDER)
    seeds = sorted({seed for _, _, seed in counts})
    spreads = []
    for row in rows:
        for agent in agents:
            rates = tuple(SeedRate(seed, *counts[row, agent, seed]) for seed in seeds if (row, agent, seed) in counts)
            if rates:
                spreads.append(SeedSpread(row, agent, rates))
    return spreads
