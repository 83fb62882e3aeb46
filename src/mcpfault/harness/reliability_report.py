"""The report's reliability surface: its Markdown section and its chart file (numbers from harness/reliability.py).

Both appear only when a model ran (an llm agent's records carry ``model``): the surface compares
models; the scripted agents of the same bench are rows of it too, with no cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mcpfault.analysis.records import TaskRecord
from mcpfault.harness.charts import RELIABILITY_CHART, reliability_chart
from mcpfault.harness.formatting import interval, md, md_table
from mcpfault.harness.model_usage import usd
from mcpfault.harness.reliability import ReliabilityPoint, reliability_points

RELIABILITY_HEADER = (
    "agent",
    "intensity",
    "profiles",
    "tasks",
    "runs",
    "pass^k",
    "95% interval",
    "never silent^k",
    "95% interval",
    "recovered",
    "cost per task",
    "cost per recovered",
)


def surface_points(records: Sequence[TaskRecord]) -> tuple[ReliabilityPoint, ...]:
    """The points of the surface, or none when no model ran in these records."""
    if not any(r.model is not None for r in records):
        return ()
    return reliability_points(records)


def reliability_row(point: ReliabilityPoint) -> list[str]:
    """One point's cells, as the Markdown table and report.html show them."""
    model = point.model_runs > 0
    return [
        point.agent,
        point.intensity,
        str(len(point.profiles)),
        str(point.tasks),
        str(point.runs),
        f"pass^{point.k} {100 * point.pass_k:.0f}%",
        interval(point.pass_k_interval),
        f"{100 * point.never_silent_k:.0f}%",
        interval(point.never_silent_interval),
        str(point.recovered),
        usd(point.cost_per_task) if model else "-",
        (usd(point.cost_per_recovered) if point.recovered else "-") if model else "-",
    ]


RELIABILITY_TEXT = (
    "Each agent (for the llm agent, each model: `llm-<provider:model>`) at each profile intensity: the bundled "
    "set its profiles belong to (`gentle`, `stress`, `process`; a profile in none is its own row). A task is "
    "one profile's task of one seed; its trials are its runs. `pass^k` is tau-bench's estimator (the mean "
    "over tasks of C(c,k)/C(n,k), c correct runs of n) with k the fewest runs of any task, the bench's "
    "`--trials`; `never silent^k` the same for runs that did not fail silently. Each interval is the Wilson "
    '95% score interval over the distinct tasks of the indicator "all k runs passed": tasks, not runs, are '
    "the independent draws. `cost per task`: the estimated model cost (price table or `--llm-price`) per "
    "task run; `cost per recovered`: the same total per `recovered` run (a fault changed what the agent "
    "read and it still answered right), `-` when none recovered. A scripted or external agent reports no "
    "cost: `-`."
)


def reliability_section(records: Sequence[TaskRecord]) -> list[str]:
    points = surface_points(records)
    if not points:
        return []
    rows = [[md(cell) for cell in reliability_row(p)] for p in points]
    return [
        "## Reliability surface",
        "",
        RELIABILITY_TEXT,
        "",
        *md_table(RELIABILITY_HEADER, rows, left_columns=2),
        "",
        f"![pass^k per profile intensity, one line per agent](charts/{RELIABILITY_CHART})",
    ]


def write_reliability_chart(records: Sequence[TaskRecord], charts_dir: Path) -> Path | None:
    """charts_dir/reliability.svg when a model ran; an older one from another run is removed otherwise."""
    path = charts_dir / RELIABILITY_CHART
    points = surface_points(records)
    if not points:
        path.unlink(missing_ok=True)
        return None
    path.write_text(reliability_chart(points), encoding="utf-8", newline="\n")
    return path
