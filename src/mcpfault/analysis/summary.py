"""Task records aggregated per (profile, agent) cell and per fault type: pure, sorted, deterministic."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mcpfault.analysis.records import OUTCOMES, Outcome, TaskRecord
from mcpfault.faults.catalog import CATALOG

PROFILE_ORDER = (
    "baseline",
    "timeout",
    "latency",
    "error",
    "malformed",
    "stale",
    "drift_input",
    "drift_output",
    "mixed",
)
# Faults on the server process, with the supervisor restarting it: `bench --profiles process`.
PROCESS_PROFILES = ("crash_restart", "stall", "cpu_starve")
AGENT_ORDER = ("naive", "retry-only", "resilient")
FAULT_TYPE_ORDER = CATALOG.in_order()  # the catalog's order: a new fault type needs no line here
UNCLASSIFIED = "(unclassified)"
UNKNOWN_FAULT = "(unknown)"


# ---------------------------------------------------------------------------------------------
# Aggregation


@dataclass(frozen=True)
class CellSummary:
    """One profile x agent cell: how its tasks ended and what they cost."""

    profile: str
    agent: str
    tasks: int
    success: int
    recovered: int
    failed_detected: int
    failed_silent: int
    duplicates: int
    retries: int
    # The llm agent's model account (zero for scripted agents); cost None when no task had a known price.
    model_tasks: int = 0  # tasks run by a model
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    def count(self, outcome: Outcome) -> int:
        counts = {
            "success": self.success,
            "recovered": self.recovered,
            "failed_detected": self.failed_detected,
            "failed_silent": self.failed_silent,
        }
        return counts[outcome]

    @property
    def correct(self) -> int:
        return self.success + self.recovered

    @property
    def success_rate(self) -> float:
        return self.correct / self.tasks

    @property
    def silent_rate(self) -> float:
        return self.failed_silent / self.tasks

    @property
    def retries_per_task(self) -> float:
        return self.retries / self.tasks


@dataclass(frozen=True)
class RecoveryStats:
    """Recovery times of one agent's recovered tasks that one fault type touched."""

    fault_type: str
    agent: str
    samples: int
    median_s: float
    p95_s: float


@dataclass(frozen=True)
class FailureCount:
    """How many of one agent's failed_detected tasks ended with one failure class."""

    failure: str
    agent: str
    count: int


@dataclass(frozen=True)
class Summary:
    """Everything the report shows, ordered for display; cells exist only for pairs that ran."""

    profiles: tuple[str, ...]
    agents: tuple[str, ...]
    fault_types: tuple[str, ...]  # every fault type that touched any task
    cells: tuple[CellSummary, ...]  # profile order, then agent order
    recovery: tuple[RecoveryStats, ...]  # fault type order, then agent order; pairs with samples only
    failure_classes: tuple[str, ...]  # most frequent first, ties by name
    failures: tuple[FailureCount, ...]

    @property
    def total_tasks(self) -> int:
        return sum(cell.tasks for cell in self.cells)

    def cell(self, profile: str, agent: str) -> CellSummary | None:
        return next((c for c in self.cells if c.profile == profile and c.agent == agent), None)

    def cells_of(self, profile: str) -> tuple[CellSummary, ...]:
        return tuple(c for c in self.cells if c.profile == profile)

    def recovery_for(self, fault_type: str, agent: str) -> RecoveryStats | None:
        return next((r for r in self.recovery if r.fault_type == fault_type and r.agent == agent), None)

    def failure_count(self, failure: str, agent: str) -> int:
        return sum(f.count for f in self.failures if f.failure == failure and f.agent == agent)


def ordered(names: Iterable[str], preferred: Sequence[str]) -> tuple[str, ...]:
    """The names in ``preferred`` order, then any others alphabetically."""
    unique = set(names)
    return tuple([n for n in preferred if n in unique] + sorted(unique.difference(preferred)))


def percentile(values: Iterable[float], pct: int) -> float:
    """Linear interpolation between closest ranks (numpy's default): h = (n-1)*pct/100.

    The rank is computed in integers so that, say, the p95 of five values lands exactly at 3.8.
    """
    data = sorted(values)
    if not data:
        raise ValueError("percentile of no values")
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile {pct}: give 0..100")
    index, remainder = divmod((len(data) - 1) * pct, 100)
    upper = data[min(index + 1, len(data) - 1)]
    return data[index] + (upper - data[index]) * remainder / 100


def summarize(records: Iterable[TaskRecord]) -> Summary:
    """Aggregate task records for the report and the terminal table; raise ValueError if there are none."""
    items = list(records)
    if not items:
        raise ValueError("no task records: nothing to summarize (did the bench run any task?)")
    for record in items:
        if record.outcome not in OUTCOMES:
            raise ValueError(
                f"task {record.task_index} of {record.profile}/{record.agent}: unknown outcome "
                f"{record.outcome!r}; one of {', '.join(OUTCOMES)}"
            )
    profiles = ordered((r.profile for r in items), PROFILE_ORDER)
    agents = ordered((r.agent for r in items), AGENT_ORDER)
    fault_types = ordered((t for r in items for t in _fault_types(r)), FAULT_TYPE_ORDER)
    classes, failures = _failures(items, agents)
    return Summary(
        profiles=profiles,
        agents=agents,
        fault_types=fault_types,
        cells=_cells(items, profiles, agents),
        recovery=_recovery(items, fault_types, agents),
        failure_classes=classes,
        failures=failures,
    )


def _fault_types(record: TaskRecord) -> set[str]:
    # A recovered task with no recorded fault is inconsistent data; keep it visible, not dropped.
    if not record.fault_types and record.outcome == "recovered":
        return {UNKNOWN_FAULT}
    return set(record.fault_types)


def _cells(records: Sequence[TaskRecord], profiles: Sequence[str], agents: Sequence[str]) -> tuple[CellSummary, ...]:
    groups: defaultdict[tuple[str, str], list[TaskRecord]] = defaultdict(list)
    for record in records:
        groups[record.profile, record.agent].append(record)
    return tuple(
        _cell(profile, agent, groups[profile, agent])
        for profile in profiles
        for agent in agents
        if (profile, agent) in groups
    )


def _cell(profile: str, agent: str, records: Sequence[TaskRecord]) -> CellSummary:
    outcomes = Counter(r.outcome for r in records)
    return CellSummary(
        profile=profile,
        agent=agent,
        tasks=len(records),
        success=outcomes["success"],
        recovered=outcomes["recovered"],
        failed_detected=outcomes["failed_detected"],
        failed_silent=outcomes["failed_silent"],
        duplicates=sum(r.duplicates for r in records),
        retries=sum(r.retries for r in records),
        model_tasks=sum(1 for r in records if r.model is not None),
        model_calls=sum(r.model_calls for r in records),
        input_tokens=sum(r.input_tokens for r in records),
        output_tokens=sum(r.output_tokens for r in records),
        cost_usd=_cost([r.cost_usd for r in records if r.cost_usd is not None]),
    )


def _cost(costs: Sequence[float]) -> float | None:
    return round(sum(costs), 6) if costs else None


def _recovery(
    records: Sequence[TaskRecord], fault_types: Sequence[str], agents: Sequence[str]
) -> tuple[RecoveryStats, ...]:
    samples: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
    for record in records:
        if record.outcome == "recovered" and record.recovery_s is not None:
            for fault_type in _fault_types(record):
                samples[fault_type, record.agent].append(record.recovery_s)
    return tuple(
        RecoveryStats(fault_type, agent, len(times), percentile(times, 50), percentile(times, 95))
        for fault_type in fault_types
        for agent in agents
        if (times := samples.get((fault_type, agent)))
    )


def _failures(records: Sequence[TaskRecord], agents: Sequence[str]) -> tuple[tuple[str, ...], tuple[FailureCount, ...]]:
    counts = Counter((r.failure or UNCLASSIFIED, r.agent) for r in records if r.outcome == "failed_detected")
    totals = Counter[str]()
    for (failure, _agent), count in counts.items():
        totals[failure] += count
    classes = tuple(sorted(totals, key=lambda name: (-totals[name], name)))
    failures = tuple(
        FailureCount(failure, agent, counts[failure, agent])
        for failure in classes
        for agent in agents
        if counts[failure, agent]
    )
    return classes, failures
