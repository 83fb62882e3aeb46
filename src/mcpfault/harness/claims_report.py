"""The report of a run against a server cassette (run/bench --server-cassette): no ground truth.

A recorded server knows no right answer and keeps no state, so the judge (``analysis.judge.judge_claim``)
takes the agent's word only where a word can be taken: a task the agent reports failed is
failed_detected, one it claims done is unjudged. This report therefore has no success rate and no
silent rate, not even as a dash: per profile x agent it counts tasks, detected, unjudged and the tasks
in which a fault changed what the agent received, under a banner that says why.
``analysis.summary.summarize`` refuses these records, so no rate elsewhere can count them by mistake.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from mcpfault.analysis.records import NO_TRUTH_OUTCOMES, TaskRecord
from mcpfault.analysis.summary import AGENT_ORDER, FAULT_TYPE_ORDER, ROW_ORDER, ordered
from mcpfault.harness.formatting import md, md_table

if TYPE_CHECKING:
    from rich.console import Console

BANNER: Final = "no ground truth: judged detected vs unjudged only"
EXPLANATION: Final = (
    "The server was a cassette (`mcpfault replay`), which knows no right answer and keeps no state. A task "
    "the agent reported failed (or that crashed, timed out or broke the answer schema) is **failed_detected**; "
    "a task it claimed done is **unjudged**: nobody checked its answer. There is no success rate and no "
    "silent-failure rate here, by design."
)
CLAIMS_HEADER: Final = ("profile", "agent", "tasks", "detected", "unjudged", "faults seen", "fault types")


def is_claims_run(records: Iterable[TaskRecord]) -> bool:
    """Whether these records were judged without ground truth (any of them: a run is one or the other)."""
    return any(r.no_ground_truth is not None or r.outcome == "unjudged" for r in records)


@dataclass(frozen=True, slots=True)
class ClaimCell:
    """One profile x agent cell of a run without ground truth."""

    profile: str  # the report row (a profile, over HTTP "name (http)")
    agent: str
    tasks: int
    detected: int
    unjudged: int
    faults_seen: int  # tasks a fault changed what the agent received
    fault_types: tuple[str, ...]  # those faults' types, in the catalog's order
    failure_classes: tuple[tuple[str, int], ...]  # the detected tasks by class, most frequent first


def claim_cells(records: Sequence[TaskRecord], profile_order: Sequence[str] = ()) -> tuple[ClaimCell, ...]:
    """The cells, in the report's row and agent order; ValueError for an outcome a claim cannot have."""
    wrong = [r for r in records if r.outcome not in NO_TRUTH_OUTCOMES]
    if wrong:
        first = wrong[0]
        raise ValueError(
            f"task {first.task_index} of {first.profile}/{first.agent}: outcome {first.outcome!r} in a run without "
            f"ground truth, which has only {' and '.join(NO_TRUTH_OUTCOMES)}; these records are not one run's"
        )
    groups: defaultdict[tuple[str, str], list[TaskRecord]] = defaultdict(list)
    for record in records:
        groups[record.row, record.agent].append(record)
    rows = ordered((r.row for r in records), (*profile_order, *ROW_ORDER))
    agents = ordered((r.agent for r in records), AGENT_ORDER)
    cells = []
    for row in rows:
        for agent in agents:
            cell = groups.get((row, agent))
            if not cell:
                continue
            classes = Counter(r.failure or "(unclassified)" for r in cell if r.outcome == "failed_detected")
            cells.append(
                ClaimCell(
                    profile=row,
                    agent=agent,
                    tasks=len(cell),
                    detected=sum(r.outcome == "failed_detected" for r in cell),
                    unjudged=sum(r.outcome == "unjudged" for r in cell),
                    faults_seen=sum(bool(r.affected_types) for r in cell),
                    fault_types=ordered((t for r in cell for t in r.affected_types), FAULT_TYPE_ORDER),
                    failure_classes=tuple(sorted(classes.items(), key=lambda item: (-item[1], item[0]))),
                )
            )
    return tuple(cells)


def cassettes_of(records: Iterable[TaskRecord]) -> tuple[str, ...]:
    """The records' reasons for having no ground truth (each names its cassette), each once."""
    return tuple(dict.fromkeys(r.no_ground_truth for r in records if r.no_ground_truth is not None))


def render_claims_markdown(
    records: Sequence[TaskRecord], *, command: str | None = None, profile_order: Sequence[str] = ()
) -> str:
    """report.md of a run without ground truth: the banner, then the counts per cell."""
    cells = claim_cells(records, profile_order)
    lines = [
        "# mcpfault bench against a server cassette",
        "",
        f"> **{BANNER.capitalize()}.** {EXPLANATION}",
        "",
    ]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += [f"- {md(reason)}" for reason in cassettes_of(records)]
    lines += ["", "## Outcomes per profile and agent", ""]
    rows = [
        [
            md(c.profile),
            md(c.agent),
            str(c.tasks),
            str(c.detected),
            str(c.unjudged),
            str(c.faults_seen),
            md(", ".join(c.fault_types)) or "-",
        ]
        for c in cells
    ]
    lines += md_table(list(CLAIMS_HEADER), rows, left_columns=2)
    lines += [
        "",
        "*faults seen*: tasks in which a fault changed what the agent received. *detected*: failed_detected.",
    ]
    models = model_usage_rows(records)
    if models:
        from mcpfault.harness.model_usage import MODEL_USAGE_HEADER

        lines += ["", "## Models", ""]
        lines += md_table(list(MODEL_USAGE_HEADER), ([md(v) for v in row] for row in models))
    classes = [(c, name, count) for c in cells for name, count in c.failure_classes]
    if classes:
        lines += ["", "## Detected failures by class", ""]
        lines += md_table(
            ["profile", "agent", "failure class", "tasks"],
            [[md(c.profile), md(c.agent), md(name), str(count)] for c, name, count in classes],
            left_columns=3,
        )
    return "\n".join(lines) + "\n"


def model_usage_rows(records: Sequence[TaskRecord]) -> list[list[str]]:
    """Per agent that called a model: tasks, model calls, tokens and cost (model_usage.MODEL_USAGE_HEADER)."""
    from mcpfault.harness.model_usage import usd

    by_agent: defaultdict[str, list[TaskRecord]] = defaultdict(list)
    for record in records:
        if record.model is not None:
            by_agent[record.agent].append(record)
    rows = []
    for agent in ordered(by_agent, AGENT_ORDER):
        runs = by_agent[agent]
        costs = [r.cost_usd for r in runs if r.cost_usd is not None]
        rows.append(
            [
                agent,
                str(len(runs)),
                f"{sum(r.model_calls for r in runs):,}",
                f"{sum(r.input_tokens for r in runs):,}",
                f"{sum(r.output_tokens for r in runs):,}",
                usd(round(sum(costs), 6) if costs else None),
            ]
        )
    return rows


def write_claims_report(
    records: Sequence[TaskRecord], out_dir: Path, *, command: str | None = None, profile_order: Sequence[str] = ()
) -> Path:
    """Write out_dir/report.md for a run without ground truth; return its path (no charts: no rates to draw)."""
    report = out_dir / "report.md"
    text = render_claims_markdown(records, command=command, profile_order=profile_order)
    report.write_text(text, encoding="utf-8", newline="\n")
    return report


def print_claims(
    records: Sequence[TaskRecord], console: Console, *, title: str, profile_order: Sequence[str] = ()
) -> None:
    """The terminal table of a run without ground truth, under its banner."""
    from rich.table import Table
    from rich.text import Text

    console.print(Text(BANNER.upper(), style="bold yellow"))
    table = Table(title=title, title_justify="left")
    for name in CLAIMS_HEADER:
        table.add_column(name, justify="left" if name in ("profile", "agent", "fault types") else "right")
    for c in claim_cells(records, profile_order):
        table.add_row(
            Text(c.profile),
            Text(c.agent),
            str(c.tasks),
            str(c.detected),
            str(c.unjudged),
            str(c.faults_seen),
            Text(", ".join(c.fault_types) or "-"),
        )
    console.print(table)
    failures = Counter(r.failure or "" for r in records if r.outcome == "failed_detected")
    if failures:
        console.print("failed_detected by class: " + ", ".join(f"{k} {v}" for k, v in failures.most_common()))
