"""What the agents cost: outcomes per agent over every profile, and for a model its calls, tokens and the
estimated cost, as a report section and as a terminal table."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpfault.analysis.records import TaskRecord
from mcpfault.analysis.summary import Summary, summarize
from mcpfault.harness.formatting import md, md_table, percent, success_cell

if TYPE_CHECKING:
    from rich.console import Console


def usd(cost: float | None) -> str:
    """An estimated cost: cents to four places below a dollar, ``?`` for a model without a price."""
    if cost is None:
        return "?"
    return f"${cost:,.4f}" if cost < 1 else f"${cost:,.2f}"


@dataclass(frozen=True)
class AgentTotals:
    """One agent over every profile it ran: outcomes and, for a model, its token account."""

    agent: str
    tasks: int
    correct: int
    silent: int
    duplicates: int
    model_tasks: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None

    def row(self) -> list[str]:
        model = self.model_tasks > 0
        per_task = None if self.cost_usd is None or not self.model_tasks else self.cost_usd / self.model_tasks
        return [
            self.agent,
            str(self.tasks),
            percent(self.correct, self.tasks),
            percent(self.silent, self.tasks),
            str(self.duplicates),
            f"{self.model_calls:,}" if model else "-",
            f"{self.input_tokens:,}" if model else "-",
            f"{self.output_tokens:,}" if model else "-",
            usd(self.cost_usd) if model else "-",
            usd(per_task) if model else "-",
        ]


AGENT_TOTALS_HEADER = (
    "agent",
    "tasks",
    "success",
    "silent",
    "dups",
    "model calls",
    "tokens in",
    "tokens out",
    "est. cost",
    "per task",
)


MODEL_USAGE_HEADER = ("agent", "tasks", "model calls", "tokens in", "tokens out", "est. cost")


def agent_totals(summary: Summary) -> list[AgentTotals]:
    totals = []
    for agent in summary.agents:
        cells = [c for c in summary.cells if c.agent == agent]
        costs = [c.cost_usd for c in cells if c.cost_usd is not None]
        totals.append(
            AgentTotals(
                agent=agent,
                tasks=sum(c.tasks for c in cells),
                correct=sum(c.correct for c in cells),
                silent=sum(c.failed_silent for c in cells),
                duplicates=sum(c.duplicates for c in cells),
                model_tasks=sum(c.model_tasks for c in cells),
                model_calls=sum(c.model_calls for c in cells),
                input_tokens=sum(c.input_tokens for c in cells),
                output_tokens=sum(c.output_tokens for c in cells),
                cost_usd=round(sum(costs), 6) if costs else None,
            )
        )
    return totals


def models_section(summary: Summary) -> list[str]:
    """Scripted agents and models side by side, with the models' tokens and cost; only when a model ran."""
    model_cells = [c for c in summary.cells if c.model_tasks]
    if not model_cells:
        return []
    per_cell = [
        [
            md(c.profile),
            md(c.agent),
            str(c.tasks),
            success_cell(c),
            f"{c.model_calls:,}",
            f"{c.input_tokens:,}",
            f"{c.output_tokens:,}",
            usd(c.cost_usd),
        ]
        for c in model_cells
    ]
    return [
        "## Agents and models",
        "",
        "Every agent over all its profiles: the share of tasks that ended correct and the share that failed "
        "silently, duplicates, and for the llm agents (`llm-<model>`, `-hints` when the model was told the "
        "connection is unreliable) the model calls (retries included), tokens and the estimated cost from the "
        "price table (`harness/agents/llm/prices.py`; `?` for a model without a price).",
        "",
        *md_table(AGENT_TOTALS_HEADER, ([md(c) for c in t.row()] for t in agent_totals(summary))),
        "",
        "Per profile:",
        "",
        *md_table(
            ["profile", "agent", "tasks", "success (silent)", "model calls", "input tokens", "output tokens", "cost"],
            per_cell,
            left_columns=2,
        ),
    ]


def print_model_usage(records: Iterable[TaskRecord] | Summary, console: Console) -> None:
    """The agents-and-models table on a rich console, when a model ran; nothing otherwise."""
    from rich.table import Table

    from mcpfault.harness.claims_report import is_claims_run, model_usage_rows

    if not isinstance(records, Summary):
        records = list(records)
        if is_claims_run(records):  # no ground truth: the tokens and cost, without success or silent shares
            rows = model_usage_rows(records)
            if rows:
                usage = Table(title="models (all profiles)", title_justify="left")
                for index, column in enumerate(MODEL_USAGE_HEADER):
                    usage.add_column(column, justify="left" if index == 0 else "right", no_wrap=index == 0)
                for row in rows:
                    usage.add_row(*row)
                console.print(usage)
            return
    summary = records if isinstance(records, Summary) else summarize(records)
    if not any(c.model_tasks for c in summary.cells):
        return
    table = Table(title="agents and models (all profiles)", title_justify="left")
    for index, column in enumerate(AGENT_TOTALS_HEADER):
        table.add_column(column, justify="left" if index == 0 else "right", no_wrap=index == 0)
    for totals in agent_totals(summary):
        table.add_row(*totals.row())
    console.print(table)
