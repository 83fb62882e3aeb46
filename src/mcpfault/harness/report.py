"""The bench report: task records aggregated into Markdown tables and hand-drawn SVG charts.

Everything here is a pure function of the records and the meta, with every collection sorted, so
the same records always give the same bytes and a report can be diffed between runs.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from mcpfault.analysis.records import OUTCOMES, Outcome, TaskRecord

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

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
AGENT_ORDER = ("naive", "retry-only", "resilient")
FAULT_TYPE_ORDER = ("timeout", "latency", "error", "malformed", "stale", "schema_drift")
CHARTS = ("outcomes.svg", "silent.svg", "recovery.svg")
UNCLASSIFIED = "(unclassified)"
UNKNOWN_FAULT = "(unknown)"

OUTCOME_COLOURS: Mapping[Outcome, str] = {
    "success": "#2e7d32",
    "recovered": "#1565c0",
    "failed_detected": "#ef6c00",
    "failed_silent": "#c62828",
}
# White on the orange is below WCAG contrast, so that one segment gets dark text.
OUTCOME_TEXT: Mapping[Outcome, str] = {
    "success": "#ffffff",
    "recovered": "#ffffff",
    "failed_detected": "#1a1a1a",
    "failed_silent": "#ffffff",
}
OUTCOME_LABELS: Mapping[Outcome, str] = {
    "success": "success",
    "recovered": "recovered",
    "failed_detected": "failed (detected)",
    "failed_silent": "failed (silent)",
}
# Hues kept away from the outcome colours so an agent bar is never read as an outcome.
AGENT_COLOURS = ("#6a3d9a", "#00838f", "#8d6e63", "#f9a825", "#ad1457", "#546e7a", "#9e9d24", "#4e342e")


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
    )


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


# ---------------------------------------------------------------------------------------------
# Formatting shared by the Markdown, the SVG and the terminal


def percent(part: int, whole: int) -> str:
    """A whole-number percentage, rounded half up in exact integer arithmetic.

    A share that is neither none nor all never rounds to 0% or 100%: one silent failure in 300
    tasks reads "<1%", not "0%", because hiding it is exactly what this report must not do.
    """
    if whole <= 0:
        return "-"
    if part in (0, whole):
        return "0%" if part == 0 else "100%"
    rounded = (200 * part + whole) // (2 * whole)
    if rounded == 0:
        return "<1%"
    if rounded >= 100:
        return ">99%"
    return f"{rounded}%"


def success_cell(cell: CellSummary) -> str:
    return f"{percent(cell.correct, cell.tasks)} ({percent(cell.failed_silent, cell.tasks)})"


def milliseconds(seconds: float) -> str:
    ms = seconds * 1000
    if ms >= 100:
        return f"{ms:,.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    clock = f"{hours} h {minutes:02d} min {secs:02d} s" if hours else f"{minutes} min {secs:02d} s"
    return f"{seconds:.1f} s ({clock})"


# ---------------------------------------------------------------------------------------------
# Markdown


@dataclass(frozen=True)
class ReportMeta:
    command: str  # the exact command line that produced the results
    seed: int
    tasks_per_cell: int
    wall_s: float  # wall time of the whole bench
    jobs: int
    started_at: str  # ISO time
    machine: str  # e.g. "2 CPUs, Python 3.11.7, Linux 6.x"
    proxy_overhead: Mapping[str, float] | None = None  # e.g. {"direct_p50_ms": .., "proxied_p50_ms": ..}


_MD_SPECIAL = re.compile(r"([\\`*\[\]|])")


def md(text: str) -> str:
    """Text safe inside a GFM table cell.

    GitHub renders raw HTML, so <, > and & become entities; a bare | would split the cell. Underscores
    stay as they are: GFM ignores them inside words, and names like drift_input read better unescaped.
    """
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text.replace("\n", " "))


def md_table(header: Sequence[str], rows: Iterable[Sequence[str]], left_columns: int = 1) -> list[str]:
    """A GFM table padded so the raw file reads as a table too; numbers right-aligned."""
    body = [list(row) for row in rows]
    widths = [max(3, len(header[i]), *(len(row[i]) for row in body)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i < left_columns else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * w if i < left_columns else "-" * (w - 1) + ":" for i, w in enumerate(widths)]
    return [line(header), "| " + " | ".join(rule) + " |", *(line(row) for row in body)]


def _fence(text: str) -> str:
    # A fence must be longer than any backtick run inside the command, or the block ends early.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def render_markdown(summary: Summary, meta: ReportMeta) -> str:
    sections = [
        _header(summary, meta),
        _success_section(summary),
        _counts_section(summary),
        _cost_section(summary),
        _recovery_section(summary),
        _failures_section(summary),
        _overhead_section(meta),
        _charts_section(),
    ]
    return "\n\n".join("\n".join(lines) for lines in sections if lines) + "\n"


def _header(summary: Summary, meta: ReportMeta) -> list[str]:
    fence = _fence(meta.command)
    cells = len(summary.cells)
    lines = [
        "# mcpfault bench report",
        "",
        "Produced by:",
        "",
        f"{fence}sh",
        meta.command.replace("\r", ""),
        fence,
        "",
        f"- **Seed:** {meta.seed}",
        f"- **Tasks per cell:** {meta.tasks_per_cell} ({len(summary.profiles)} profiles x "
        f"{len(summary.agents)} agents = {cells} cells, {summary.total_tasks:,} tasks recorded)",
        f"- **Jobs:** {meta.jobs}",
        f"- **Wall time:** {duration(meta.wall_s)}",
        f"- **Machine:** {md(meta.machine)}",
        f"- **Started:** {md(meta.started_at)}",
    ]
    short = [c for c in summary.cells if c.tasks != meta.tasks_per_cell]
    if short:
        listed = ", ".join(f"{md(c.profile)}/{md(c.agent)} ({c.tasks})" for c in short)
        lines += ["", f"**Note:** {len(short)} cell(s) do not have {meta.tasks_per_cell} tasks: {listed}."]
    lines += [
        "",
        "Each task ends in exactly one outcome: **success** (correct, no fault touched it), **recovered** "
        "(correct despite at least one injected fault), **failed_detected** (the agent gave up or raised), "
        "**failed_silent** (a wrong answer, or wrong state left on the server).",
    ]
    return lines


def _success_section(summary: Summary) -> list[str]:
    rows = [
        [md(profile), *(_maybe(summary.cell(profile, agent), success_cell) for agent in summary.agents)]
        for profile in summary.profiles
    ]
    return [
        "## Success rate",
        "",
        "Each cell: tasks that ended correct (success + recovered) as a share of the cell's tasks, and in "
        "parentheses the share that failed silently. Higher first, lower second is better; `-` means not run. "
        "A share that is neither none nor all never shows as 0% or 100% (it shows `<1%` or `>99%`).",
        "",
        *md_table(["profile", *map(md, summary.agents)], rows),
    ]


def _maybe(cell: CellSummary | None, render: Callable[[CellSummary], str]) -> str:
    return "-" if cell is None else render(cell)


def _counts_section(summary: Summary) -> list[str]:
    rows = [[md(c.profile), md(c.agent), str(c.tasks), *(str(c.count(o)) for o in OUTCOMES)] for c in summary.cells]
    return ["## Outcome counts", "", *md_table(["profile", "agent", "tasks", *OUTCOMES], rows, left_columns=2)]


def _cost_section(summary: Summary) -> list[str]:
    rows = [
        [md(c.profile), md(c.agent), str(c.duplicates), str(c.retries), f"{c.retries_per_task:.2f}"]
        for c in summary.cells
    ]
    return [
        "## Duplicates and retries",
        "",
        "Duplicates: extra objects a task created on the server (a blind retry after a lost response). "
        "Retries: attempts beyond the first of each logical call, summed and per task.",
        "",
        *md_table(["profile", "agent", "duplicates", "retries", "retries per task"], rows, left_columns=2),
    ]


def _recovery_section(summary: Summary) -> list[str]:
    lines = [
        "## Recovery time by fault type",
        "",
        "Over recovered tasks: time from the first faulted attempt to the task's correct completion. A task "
        "touched by several fault types counts once under each. Each cell is `median / p95 (n)`; `-` means "
        "no recovered task. Percentiles interpolate linearly between closest ranks (numpy's default): "
        "with the n times sorted, the p-th percentile sits at rank (n-1)*p/100, counting from 0.",
        "",
    ]
    if not summary.fault_types:
        return [*lines, "No fault touched any task."]
    rows = [[md(t), *(_recovery_cell(summary.recovery_for(t, a)) for a in summary.agents)] for t in summary.fault_types]
    return [*lines, *md_table(["fault type", *map(md, summary.agents)], rows)]


def _recovery_cell(stats: RecoveryStats | None) -> str:
    if stats is None:
        return "-"
    return f"{milliseconds(stats.median_s)} / {milliseconds(stats.p95_s)} ({stats.samples})"


def _failures_section(summary: Summary) -> list[str]:
    lines = ["## Failures by class", "", "The failure class that ended each failed_detected task, per agent.", ""]
    if not summary.failure_classes:
        return [*lines, "No task failed detected."]
    rows = [
        [md(f), *(str(summary.failure_count(f, a)) for a in summary.agents), str(_class_total(summary, f))]
        for f in summary.failure_classes
    ]
    return [*lines, *md_table(["failure", *map(md, summary.agents), "total"], rows)]


def _class_total(summary: Summary, failure: str) -> int:
    return sum(f.count for f in summary.failures if f.failure == failure)


def _overhead_section(meta: ReportMeta) -> list[str]:
    if not meta.proxy_overhead:
        return []
    rows = [[md(name), _figure(name, value)] for name, value in sorted(meta.proxy_overhead.items())]
    intro = (
        "Over tool calls no fault touched: `client_*` is the round trip the agent saw, `upstream_*` the time "
        "the proxy waited for the server, `added_*` their difference per call (the proxy and its two pipe hops). "
        f"Measured under the bench's own load ({meta.jobs} sessions at a time on {meta.machine.split(',')[0]}), so "
        "they include CPU contention; the proxy's cost on a quiet machine is in `docs/results/performance.md`."
    )
    return ["## Proxy overhead", "", intro, "", *md_table(["figure", "value"], rows)]


def _figure(name: str, value: float) -> str:
    if name.endswith("_ms"):
        return f"{value:,.3f} ms"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3f}"


def _charts_section() -> list[str]:
    return [
        "## Charts",
        "",
        "![Outcome shares per profile and agent](charts/outcomes.svg)",
        "",
        "![Silent-failure rate per profile and agent](charts/silent.svg)",
        "",
        "![Median recovery time per fault type and agent, with p95 whiskers](charts/recovery.svg)",
    ]


# ---------------------------------------------------------------------------------------------
# SVG: every chart is horizontal bars grouped under a heading, so labels never collide however
# many profiles or agents a bench has; the chart grows downwards instead.

_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
FONT_SIZE = 12
Attrs = Mapping[str, str | float]
CHAR_W = 0.6  # average glyph width as a share of font size, for sans-serif layout estimates
PLOT_W = 520.0
MARGIN = 16.0
BAR_H = 16.0
ROW_H = 22.0
HEADER_H = 22.0
GROUP_GAP = 8.0
MIN_SEGMENT_LABEL_W = 32.0


def xml(text: str) -> str:
    """Text safe in XML content and in double-quoted attributes; characters XML forbids become U+FFFD."""
    return escape(_XML_INVALID.sub("\ufffd", text), {'"': "&quot;"})


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _text_w(text: str, size: float = FONT_SIZE) -> float:
    return len(text) * size * CHAR_W


def _el(name: str, attrs: Attrs, content: str | None = None) -> str:
    rendered = "".join(f' {k}="{_num(v) if isinstance(v, float | int) else xml(v)}"' for k, v in attrs.items())
    return f"<{name}{rendered}/>" if content is None else f"<{name}{rendered}>{content}</{name}>"


def _text(x: float, y: float, text: str, **style: str | float) -> str:
    attrs: dict[str, str | float] = {"x": x, "y": y}
    attrs.update({k.replace("_", "-"): v for k, v in style.items()})
    return _el("text", attrs, xml(text))


def _bar(x: float, y: float, width: float, fill: str, *, css: str, tooltip: str) -> str:
    attrs: dict[str, str | float] = {"class": css, "x": x, "y": y, "width": width, "height": BAR_H, "fill": fill}
    return _el("rect", attrs, f"<title>{xml(tooltip)}</title>")


@dataclass(frozen=True)
class _Row:
    group: str
    label: str
    y: float  # top edge of the bar


@dataclass(frozen=True)
class _Layout:
    width: float
    left: float  # the plot's left edge; row labels end just before it
    top: float
    bottom: float
    rows: tuple[_Row, ...]
    headers: tuple[tuple[str, float], ...]  # group name, text baseline
    legend: tuple[tuple[str, str, float, float], ...]  # label, colour, x, y of the swatch

    def x(self, fraction: float) -> float:
        return self.left + PLOT_W * fraction

    @property
    def height(self) -> float:
        return self.bottom + 52


def _layout(groups: Sequence[tuple[str, Sequence[str]]], legend: Sequence[tuple[str, str]], right: float) -> _Layout:
    labels = [label for _group, members in groups for label in members]
    left = MARGIN + 12 + max((_text_w(label) for label in labels), default=0) + 8
    width = left + PLOT_W + right
    placed, legend_bottom = _legend(legend, width)
    y = legend_bottom + 14
    top, rows, headers = y, [], []
    for group, members in groups:
        headers.append((group, y + 15))
        y += HEADER_H
        for label in members:
            rows.append(_Row(group, label, y + (ROW_H - BAR_H) / 2))
            y += ROW_H
        y += GROUP_GAP
    return _Layout(width, left, top, y, tuple(rows), tuple(headers), placed)


def _legend(items: Sequence[tuple[str, str]], width: float) -> tuple[tuple[tuple[str, str, float, float], ...], float]:
    x, y, placed = MARGIN, 40.0, []
    for label, colour in items:
        item_w = 12 + 6 + _text_w(label) + 18
        if x > MARGIN and x + item_w > width - MARGIN:
            x, y = MARGIN, y + 20
        placed.append((label, colour, x, y))
        x += item_w
    return tuple(placed), y + 12


def _frame(layout: _Layout, title: str, ticks: Sequence[tuple[float, str]], axis_label: str) -> list[str]:
    parts = [_text(MARGIN, 24, title, font_size=16, font_weight="bold")]
    for label, colour, x, y in layout.legend:
        parts.append(_el("rect", {"x": x, "y": y, "width": 12, "height": 12, "fill": colour}))
        parts.append(_text(x + 18, y + 10, label))
    for fraction, label in ticks:
        x = layout.x(fraction)
        parts.append(_el("line", {"x1": x, "y1": layout.top, "x2": x, "y2": layout.bottom, "stroke": "#dddddd"}))
        parts.append(_text(x, layout.bottom + 16, label, text_anchor="middle", font_size=11, fill="#444444"))
    axis: Attrs = {"x1": layout.left, "y1": layout.bottom, "x2": layout.x(1), "y2": layout.bottom, "stroke": "#444444"}
    parts.append(_el("line", axis))
    parts.append(_text(layout.x(0.5), layout.bottom + 36, axis_label, text_anchor="middle"))
    for group, baseline in layout.headers:
        parts.append(_text(MARGIN, baseline, group, font_weight="bold"))
    for row in layout.rows:
        parts.append(_text(layout.left - 8, row.y + 12, row.label, text_anchor="end"))
    return parts


def _svg(layout: _Layout, title: str, desc: str, parts: Sequence[str]) -> str:
    root: Attrs = {
        "xmlns": "http://www.w3.org/2000/svg",
        "version": "1.1",
        "width": layout.width,
        "height": layout.height,
        "viewBox": f"0 0 {_num(layout.width)} {_num(layout.height)}",
        "font-family": "Helvetica, Arial, sans-serif",
        "font-size": FONT_SIZE,
    }
    opening = _el("svg", root).removesuffix("/>") + ">"
    # An opaque background keeps the dark axis text legible in dark-mode viewers.
    background = _el("rect", {"x": 0, "y": 0, "width": layout.width, "height": layout.height, "fill": "#ffffff"})
    head = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        opening,
        f"<title>{xml(title)}</title>",
        f"<desc>{xml(desc)}</desc>",
    ]
    return "\n".join([*head, background, *parts, "</svg>"]) + "\n"


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is at least ``value``, for a round axis."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value * (1 - 1e-12))


def _ticks(maximum: float, fmt: Callable[[float], str]) -> list[tuple[float, str]]:
    return [(i / 5, fmt(maximum * i / 5)) for i in range(6)]


def _agent_colour(summary: Summary, agent: str) -> str:
    return AGENT_COLOURS[summary.agents.index(agent) % len(AGENT_COLOURS)]


def _agent_legend(summary: Summary) -> list[tuple[str, str]]:
    return [(agent, _agent_colour(summary, agent)) for agent in summary.agents]


def outcomes_chart(summary: Summary) -> str:
    groups = [(p, [c.agent for c in summary.cells_of(p)]) for p in summary.profiles]
    legend = [(OUTCOME_LABELS[o], OUTCOME_COLOURS[o]) for o in OUTCOMES]
    layout = _layout(groups, legend, right=MARGIN + 8)
    ticks = [(i / 4, f"{25 * i}%") for i in range(5)]
    parts = _frame(layout, "Task outcomes per profile and agent", ticks, "share of the cell's tasks")
    for row in layout.rows:
        cell = summary.cell(row.group, row.label)
        if cell is not None:
            parts += _stacked_bar(layout, row, cell)
    desc = "Stacked bars: success, recovered, failed (detected) and failed (silent) as shares of each cell's tasks."
    return _svg(layout, "mcpfault: task outcomes per profile and agent", desc, parts)


def _stacked_bar(layout: _Layout, row: _Row, cell: CellSummary) -> list[str]:
    parts, done = [], 0
    for outcome in OUTCOMES:
        count = cell.count(outcome)
        if not count:
            continue
        # Edges come from cumulative counts so the segments always end exactly at 100%.
        x0, x1 = layout.x(done / cell.tasks), layout.x((done + count) / cell.tasks)
        done += count
        share = percent(count, cell.tasks)
        tooltip = f"{cell.profile} / {cell.agent}: {OUTCOME_LABELS[outcome]} {count} of {cell.tasks} ({share})"
        parts.append(_bar(x0, row.y, x1 - x0, OUTCOME_COLOURS[outcome], css=f"bar bar-{outcome}", tooltip=tooltip))
        if x1 - x0 >= MIN_SEGMENT_LABEL_W:
            style: Attrs = {"text_anchor": "middle", "font_size": 11, "fill": OUTCOME_TEXT[outcome]}
            parts.append(_text((x0 + x1) / 2, row.y + 12, share, **style))
    return parts


def silent_chart(summary: Summary) -> str:
    groups = [(p, [c.agent for c in summary.cells_of(p)]) for p in summary.profiles]
    labels = {
        (c.profile, c.agent): f"{percent(c.failed_silent, c.tasks)} ({c.failed_silent} of {c.tasks})"
        for c in summary.cells
    }
    layout = _layout(groups, _agent_legend(summary), right=max(map(_text_w, labels.values())) + MARGIN + 8)
    top = nice_ceiling(max(100 * c.silent_rate for c in summary.cells))
    top = max(top, 5.0)  # so a few silent failures do not fill the whole width
    parts = _frame(
        layout,
        "Silent failures per profile and agent",
        _ticks(top, lambda v: f"{_num(v)}%"),
        "failed silently (% of the cell's tasks)",
    )
    for row in layout.rows:
        cell = summary.cell(row.group, row.label)
        if cell is None:
            continue
        end = layout.x(100 * cell.silent_rate / top)
        tooltip = f"{cell.profile} / {cell.agent}: failed silently {labels[cell.profile, cell.agent]}"
        parts.append(
            _bar(
                layout.left,
                row.y,
                end - layout.left,
                _agent_colour(summary, cell.agent),
                css="bar bar-silent",
                tooltip=tooltip,
            )
        )
        parts.append(_text(end + 6, row.y + 12, labels[cell.profile, cell.agent]))
    desc = "Grouped bars: share of each cell's tasks that ended with a wrong answer or wrong server state."
    return _svg(layout, "mcpfault: silent-failure rate per profile and agent", desc, parts)


def recovery_chart(summary: Summary) -> str:
    types = [t for t in summary.fault_types if any(r.fault_type == t for r in summary.recovery)]
    groups = [(t, list(summary.agents)) for t in types]
    labels = {(r.fault_type, r.agent): _recovery_label(r) for r in summary.recovery}
    right = max(map(_text_w, [*labels.values(), "no recovered task"])) + MARGIN + 8
    layout = _layout(groups, _agent_legend(summary), right=right)
    top = nice_ceiling(max((1000 * r.p95_s for r in summary.recovery), default=0.0))
    axis = "recovery time (ms): bar = median, whisker = p95"
    parts = _frame(layout, "Recovery time per fault type and agent", _ticks(top, _ms_tick), axis)
    for row in layout.rows:
        stats = summary.recovery_for(row.group, row.label)
        parts += _recovery_bar(layout, row, stats, summary, top) if stats else _no_data(layout, row)
    if not types:
        parts.append(_text(layout.x(0.5), layout.top + 18, "no recovered task in these records", text_anchor="middle"))
    desc = "Grouped bars: median recovery time of recovered tasks per fault type and agent; whiskers reach the p95."
    return _svg(layout, "mcpfault: recovery time per fault type and agent", desc, parts)


def _ms_tick(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else _num(value)


def _recovery_label(stats: RecoveryStats) -> str:
    return f"median {milliseconds(stats.median_s)}, p95 {milliseconds(stats.p95_s)} (n={stats.samples})"


def _recovery_bar(layout: _Layout, row: _Row, stats: RecoveryStats, summary: Summary, top: float) -> list[str]:
    median_x = layout.x(1000 * stats.median_s / top)
    p95_x = layout.x(1000 * stats.p95_s / top)
    middle = row.y + BAR_H / 2
    tooltip = f"{stats.fault_type} / {stats.agent}: {_recovery_label(stats)}"
    colour = _agent_colour(summary, stats.agent)
    whisker: Attrs = {"class": "whisker", "stroke": "#222222", "stroke-width": 1.5}
    return [
        _bar(layout.left, row.y, median_x - layout.left, colour, css="bar bar-recovery", tooltip=tooltip),
        _el("line", {**whisker, "x1": median_x, "y1": middle, "x2": p95_x, "y2": middle}),
        _el("line", {**whisker, "x1": p95_x, "y1": middle - 5, "x2": p95_x, "y2": middle + 5}),
        _text(p95_x + 6, row.y + 12, _recovery_label(stats)),
    ]


def _no_data(layout: _Layout, row: _Row) -> list[str]:
    return [_text(layout.left + 6, row.y + 12, "no recovered task", fill="#777777", font_style="italic")]


def render_charts(summary: Summary) -> dict[str, str]:
    """The SVG documents by file name, in CHARTS order."""
    return {
        "outcomes.svg": outcomes_chart(summary),
        "silent.svg": silent_chart(summary),
        "recovery.svg": recovery_chart(summary),
    }


# ---------------------------------------------------------------------------------------------
# Entry points


def write_report(records: Sequence[TaskRecord], out_dir: Path, meta: ReportMeta) -> Path:
    """Write out_dir/report.md and out_dir/charts/*.svg; return the report path.

    Raises ValueError before touching the disk when there are no records.
    """
    summary = summarize(records)
    charts = out_dir / "charts"
    charts.mkdir(parents=True, exist_ok=True)
    # newline="\n" keeps the bytes identical on Windows, where text mode would write CRLF.
    for name, svg in render_charts(summary).items():
        (charts / name).write_text(svg, encoding="utf-8", newline="\n")
    report = out_dir / "report.md"
    report.write_text(render_markdown(summary, meta), encoding="utf-8", newline="\n")
    return report


def print_summary(records: Iterable[TaskRecord] | Summary, console: Console) -> None:
    """Print the success table (success+recovered, and silent failures in red) to a rich console."""
    from rich.table import Table
    from rich.text import Text

    summary = records if isinstance(records, Summary) else summarize(records)
    table = Table(title="success (silent failures) per profile and agent", title_justify="left")
    table.add_column("profile")
    for agent in summary.agents:
        table.add_column(Text(agent), justify="right")
    for profile in summary.profiles:
        table.add_row(Text(profile), *(_rich_cell(summary.cell(profile, agent)) for agent in summary.agents))
    console.print(table)


def _rich_cell(cell: CellSummary | None) -> Text:
    from rich.text import Text

    if cell is None:
        return Text("-", style="dim")
    text = Text(f"{percent(cell.correct, cell.tasks)} ")
    text.append(f"({percent(cell.failed_silent, cell.tasks)})", style="red" if cell.failed_silent else "dim")
    return text


def print_outcomes(records: Sequence[TaskRecord], console: Console, *, title: str) -> None:
    """One session's tasks: outcomes per workflow, then retries, duplicates and what failed how."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("workflow")
    for outcome in OUTCOMES:
        table.add_column(outcome, justify="right")
    table.add_column("retries", justify="right")
    table.add_column("duplicates", justify="right")
    by_task: dict[str, list[TaskRecord]] = defaultdict(list)
    for record in records:
        by_task[record.task].append(record)
    for task in sorted(by_task):
        rows = by_task[task]
        counts = Counter(r.outcome for r in rows)
        table.add_row(
            task,
            *(str(counts.get(o, 0)) for o in OUTCOMES),
            str(sum(r.retries for r in rows)),
            str(sum(r.duplicates for r in rows)),
        )
    console.print(table)
    failures = Counter(r.failure or "" for r in records if r.outcome == "failed_detected")
    if failures:
        console.print("failed_detected by class: " + ", ".join(f"{k} {v}" for k, v in failures.most_common()))
    silent = [r for r in records if r.outcome == "failed_silent"]
    for record in silent[:5]:
        console.print(f"failed_silent: task {record.task_index} ({record.task}): {record.detail}", markup=False)
    if len(silent) > 5:
        console.print(f"... and {len(silent) - 5} more failed_silent tasks (records.jsonl)")
