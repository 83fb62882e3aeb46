"""Task records aggregated per (profile, agent) cell and per fault type: pure, sorted, deterministic."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mcpfault.analysis.records import OUTCOMES, Outcome, TaskRecord, row_name
from mcpfault.faults.catalog import CATALOG

GENTLE_PROFILES = (
    "baseline",
    "timeout",
    "latency",
    "error",
    "malformed",
    "stale",
    "drift_input",
    "drift_output",
    "mixed",
    "lies",
)
# Harsher than production on a bad day: a run of consecutive failures, outages that last a time (one
# second, ten) next to the one counted in calls, clustered faults, p=0.5, and half of all reads lying.
STRESS_PROFILES = ("outage", "outage_1s", "outage_10s", "burst", "storm", "lies_storm")
# Faults on the server process, with the supervisor restarting it: `bench --profiles process`.
PROCESS_PROFILES = ("crash_restart", "stall", "cpu_starve")
PROFILE_ORDER = (*GENTLE_PROFILES, *STRESS_PROFILES, *PROCESS_PROFILES)
# Report rows: each profile over stdio, then over HTTP (bench --transport both); `http` is HTTP-only.
ROW_ORDER = (*PROFILE_ORDER, "http", *(row_name(p, "http") for p in (*PROFILE_ORDER, "http")))
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
    trials: int = 1  # runs of each task (bench --trials K); tasks counts every run
    # tau-bench's pass^k for k = 1..trials: the mean over tasks of C(c, k) / C(n, k), c correct of n runs.
    pass_k: tuple[float, ...] = ()
    # The same estimator for "never silent": the chance that k runs of a task all avoid failed_silent.
    never_silent_k: tuple[float, ...] = ()
    distinct_tasks: int = 0  # tasks counted once however many trials ran them
    touched_no_effect: int = 0  # success tasks that faults reached without changing what they received
    # failed_detected tasks by the failure class that ended them: most frequent first, ties by name.
    failure_classes: tuple[tuple[str, int], ...] = ()
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
    def silent_rate(self) -> float:
        return self.failed_silent / self.tasks

    @property
    def retries_per_task(self) -> float:
        return self.retries / self.tasks

    @property
    def success_interval(self) -> tuple[float, float]:
        return wilson(self.correct, self.tasks)

    @property
    def silent_interval(self) -> tuple[float, float]:
        return wilson(self.failed_silent, self.tasks)


Z_95 = 1.959963984540054  # the standard normal's 97.5th percentile: a two-sided 95% interval


def wilson(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (Wilson 1927): well-behaved at 0 and n, unlike Wald's.

    ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)`` with p = successes/trials. (0, 1) for no trials.
    """
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    z2 = z * z
    centre = p + z2 / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    denominator = 1 + z2 / trials
    low = 0.0 if successes <= 0 else max(0.0, (centre - spread) / denominator)
    high = 1.0 if successes >= trials else min(1.0, (centre + spread) / denominator)
    return low, high


def pass_hat_k(runs: Sequence[tuple[int, int]], k: int) -> float:
    """tau-bench's pass^k over tasks given as (c, n): c successes in n runs; tasks with n < k are skipped."""
    usable = [(c, n) for c, n in runs if n >= k]
    if not usable:
        raise ValueError(f"no task ran {k} times")
    return sum(math.comb(c, k) / math.comb(n, k) for c, n in usable) / len(usable)


@dataclass(frozen=True)
class RecoveryStats:
    """Recovery times of one agent's recovered tasks that one fault type touched."""

    fault_type: str
    agent: str
    samples: int
    median_s: float
    p95_s: float


@dataclass(frozen=True)
class FaultOutcomes:
    """How one agent's tasks ended that one fault type affected (a task counts under each type that did)."""

    fault_type: str
    agent: str
    recovered: int
    failed_detected: int
    failed_silent: int

    @property
    def tasks(self) -> int:
        return self.recovered + self.failed_detected + self.failed_silent


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
    fault_types: tuple[str, ...]  # every fault type that affected any task (or (unknown))
    cells: tuple[CellSummary, ...]  # profile order, then agent order
    recovery: tuple[RecoveryStats, ...]  # fault type order, then agent order; pairs with samples only
    failure_classes: tuple[str, ...]  # most frequent first, ties by name
    failures: tuple[FailureCount, ...]
    by_fault: tuple[FaultOutcomes, ...] = ()  # fault type order, then agent order; pairs with tasks only

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
    first = [n for n in dict.fromkeys(preferred) if n in unique]  # a name given twice keeps its first place
    return tuple(first + sorted(unique.difference(preferred)))


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


def summarize(records: Iterable[TaskRecord], profile_order: Sequence[str] = ()) -> Summary:
    """Aggregate task records for the report and the terminal table; raise ValueError if there are none.
    ``profile_order``: the report rows in the order the user gave them (``--profiles error,timeout``),
    before the usual order of the rest."""
    items = list(records)
    if not items:
        raise ValueError("no task records: nothing to summarize (did the bench run any task?)")
    require_ground_truth(items)
    for record in items:
        if record.outcome not in OUTCOMES:
            raise ValueError(
                f"task {record.task_index} of {record.profile}/{record.agent}: unknown outcome "
                f"{record.outcome!r}; one of {', '.join(OUTCOMES)}"
            )
    profiles = ordered((r.row for r in items), (*profile_order, *ROW_ORDER))
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
        by_fault=_by_fault(items, fault_types, agents),
    )


def require_ground_truth(records: Iterable[TaskRecord]) -> None:
    """ValueError for records judged without ground truth (a --server-cassette run): no success, silent or
    pass^k rate may count an unjudged task, so what computes them refuses such records outright."""
    for record in records:
        if record.no_ground_truth is not None or record.outcome == "unjudged":
            raise ValueError(
                f"task {record.task_index} of {record.profile}/{record.agent} was judged without ground truth "
                f"({record.no_ground_truth or record.outcome}): no success or silent rate applies to it; its "
                "run's report counts detected vs unjudged only (harness.claims_report)"
            )


def _fault_types(record: TaskRecord) -> set[str]:
    """The fault types a task counts under: those that changed what it received."""
    # A recovered task with no recorded affecting fault is inconsistent data; keep it visible, not dropped.
    if not record.affected_types and record.outcome == "recovered":
        return {UNKNOWN_FAULT}
    return set(record.affected_types)


def _cells(records: Sequence[TaskRecord], profiles: Sequence[str], agents: Sequence[str]) -> tuple[CellSummary, ...]:
    groups: defaultdict[tuple[str, str], list[TaskRecord]] = defaultdict(list)
    for record in records:
        groups[record.row, record.agent].append(record)
    return tuple(
        _cell(profile, agent, groups[profile, agent])
        for profile in profiles
        for agent in agents
        if (profile, agent) in groups
    )


def _cell(profile: str, agent: str, records: Sequence[TaskRecord]) -> CellSummary:
    outcomes = Counter(r.outcome for r in records)
    per_task: defaultdict[tuple[int, int], list[TaskRecord]] = defaultdict(list)
    for record in records:
        per_task[record.seed, record.task_index].append(record)  # each seed plans its own tasks
    trials = min(len(runs) for runs in per_task.values())
    correct = [(sum(r.outcome in ("success", "recovered") for r in runs), len(runs)) for runs in per_task.values()]
    clean = [(sum(r.outcome != "failed_silent" for r in runs), len(runs)) for runs in per_task.values()]
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
        failure_classes=_classes(records),
        trials=trials,
        pass_k=tuple(round(pass_hat_k(correct, k), 6) for k in range(1, trials + 1)),
        never_silent_k=tuple(round(pass_hat_k(clean, k), 6) for k in range(1, trials + 1)),
        distinct_tasks=len(per_task),
        touched_no_effect=sum(1 for r in records if r.outcome == "success" and r.touched_no_effect),
        model_tasks=sum(1 for r in records if r.model is not None),
        model_calls=sum(r.model_calls for r in records),
        input_tokens=sum(r.input_tokens for r in records),
        output_tokens=sum(r.output_tokens for r in records),
        cost_usd=_cost([r.cost_usd for r in records if r.cost_usd is not None]),
    )


def _classes(records: Sequence[TaskRecord]) -> tuple[tuple[str, int], ...]:
    counts = Counter(r.failure or UNCLASSIFIED for r in records if r.outcome == "failed_detected")
    return tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


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


def _by_fault(
    records: Sequence[TaskRecord], fault_types: Sequence[str], agents: Sequence[str]
) -> tuple[FaultOutcomes, ...]:
    counts: Counter[tuple[str, str, str]] = Counter()
    for record in records:
        for fault_type in _fault_types(record):
            counts[fault_type, record.agent, record.outcome] += 1
    return tuple(
        FaultOutcomes(fault_type, agent, *(counts[fault_type, agent, o] for o in OUTCOMES[1:]))
        for fault_type in fault_types
        for agent in agents
        if any(counts[fault_type, agent, o] for o in OUTCOMES[1:])
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
