"""Hand-drawn SVG charts of a bench summary: valid standalone SVG 1.1, deterministic bytes."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from mcpfault.analysis.records import OUTCOMES, Outcome
from mcpfault.analysis.summary import CellSummary, RecoveryStats, Summary
from mcpfault.harness.formatting import interval, milliseconds, percent
from mcpfault.harness.reliability import ReliabilityPoint, intensities_of

CHARTS = ("outcomes.svg", "silent.svg", "recovery.svg")

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
# A whisker on a bar's lower edge reaches this far up and down: clear of labels ending at y + 12.
WHISKER_CAP_BELOW = 2.5


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


def _whisker(x0: float, x1: float, y: float, *, css: str, tooltip: str, under_labels: bool = False) -> str:
    """A 95% interval drawn across a bar: a line from x0 to x1 with end caps, centred on the bar.
    ``under_labels``: on the bar's lower edge instead, with short caps, clear of the percentages
    written inside the bar (their digits end at the baseline, y + 12)."""
    if under_labels:
        mid, cap = y + BAR_H, WHISKER_CAP_BELOW
    else:
        mid, cap = y + BAR_H / 2, BAR_H / 2 - 2
    path = f"M{_num(x0)} {_num(mid)}H{_num(x1)}M{_num(x0)} {_num(mid - cap)}V{_num(mid + cap)}"
    path += f"M{_num(x1)} {_num(mid - cap)}V{_num(mid + cap)}"
    attrs: dict[str, str | float] = {"class": css, "d": path, "stroke": "#1a1a1a", "stroke-width": 1.5, "fill": "none"}
    return _el("path", attrs, f"<title>{xml(tooltip)}</title>")


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
            low, high = cell.success_interval
            tooltip = f"{cell.profile} / {cell.agent}: correct, 95% interval {interval((low, high))}"
            whisker = _whisker(layout.x(low), layout.x(high), row.y, css="interval", tooltip=tooltip, under_labels=True)
            parts.append(whisker)
    desc = (
        "Stacked bars: success, recovered, failed (detected) and failed (silent) as shares of each cell's tasks; "
        "the whisker on each bar's lower edge is the Wilson 95% interval of the correct share (success + recovered)."
    )
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
        (c.profile, c.agent): f"{percent(c.failed_silent, c.tasks)} ({c.failed_silent} of {c.tasks}; "
        f"95% {interval(c.silent_interval)})"
        for c in summary.cells
    }
    layout = _layout(groups, _agent_legend(summary), right=max(map(_text_w, labels.values())) + MARGIN + 8)
    top = nice_ceiling(max(100 * c.silent_interval[1] for c in summary.cells))
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
        low, high = (layout.x(100 * bound / top) for bound in cell.silent_interval)
        interval_tip = f"{cell.profile} / {cell.agent}: silent, 95% interval {interval(cell.silent_interval)}"
        parts.append(_whisker(low, high, row.y, css="interval", tooltip=interval_tip))
        parts.append(_text(max(end, high) + 6, row.y + 12, labels[cell.profile, cell.agent]))
    desc = (
        "Grouped bars: share of each cell's tasks that ended with a wrong answer or wrong server state; the "
        "whisker is its Wilson 95% interval."
    )
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
# The reliability surface: pass^k against profile intensity, a line per agent (harness/reliability.py)

RELIABILITY_CHART = "reliability.svg"
LINE_PLOT_H = 260.0
LINE_STEP_W = 200.0  # between two intensities on the x axis
LINE_DODGE = 6.0  # between two agents' points at one intensity
LINE_LABEL_GAP = 15.0  # the least vertical distance between two lines' end labels


def reliability_chart(points: Sequence[ReliabilityPoint]) -> str:
    """pass^k (y) per intensity (x), one line per agent with its 95% whiskers; each line's name beside its end."""
    intensities = intensities_of(points)
    agents = list(dict.fromkeys(p.agent for p in points))
    colours = {agent: AGENT_COLOURS[i % len(AGENT_COLOURS)] for i, agent in enumerate(agents)}
    ks = sorted({p.k for p in points})
    k_text = f"k = {ks[0]}" if len(ks) == 1 else f"k = {ks[0]}..{ks[-1]} (the fewest runs of a task per point)"
    end_labels = {a: f"{a} {_pass_label(_last(points, a))}" for a in agents}
    left = MARGIN + 44
    step = LINE_STEP_W if len(intensities) > 1 else 0.0
    first_x = left + (30.0 if len(intensities) > 1 else LINE_STEP_W / 2)
    label_x = first_x + step * max(len(intensities) - 1, 0) + LINE_DODGE * len(agents) / 2 + 12
    width = label_x + 20 + max(map(_text_w, end_labels.values()), default=0) + MARGIN
    placed, legend_bottom = _legend([(a, colours[a]) for a in agents], width)
    top = legend_bottom + 20
    bottom = top + LINE_PLOT_H

    def x_of(intensity: str, agent: str | None = None) -> float:
        # Each agent's points sit a little apart, so equal lines and their whiskers stay distinguishable.
        dodge = 0.0 if agent is None else LINE_DODGE * (agents.index(agent) - (len(agents) - 1) / 2)
        return first_x + step * intensities.index(intensity) + dodge

    def y_of(share: float) -> float:
        return bottom - LINE_PLOT_H * share

    parts = [_text(MARGIN, 24, f"pass^k per profile intensity and agent ({k_text})", font_size=16, font_weight="bold")]
    for label, colour, x, y in placed:
        parts.append(_el("rect", {"x": x, "y": y, "width": 12, "height": 12, "fill": colour}))
        parts.append(_text(x + 18, y + 10, label))
    right_edge = first_x + step * max(len(intensities) - 1, 0) + 30
    for i in range(5):
        y = y_of(i / 4)
        parts.append(_el("line", {"x1": left, "y1": y, "x2": right_edge, "y2": y, "stroke": "#dddddd"}))
        parts.append(_text(left - 6, y + 4, f"{25 * i}%", text_anchor="end", font_size=11, fill="#444444"))
    parts.append(_el("line", {"x1": left, "y1": bottom, "x2": right_edge, "y2": bottom, "stroke": "#444444"}))
    for intensity in intensities:
        parts.append(_text(x_of(intensity), bottom + 16, intensity, text_anchor="middle"))
    parts.append(_text((left + right_edge) / 2, bottom + 36, "profile intensity", text_anchor="middle"))
    for agent in agents:
        line = [p for p in points if p.agent == agent]
        colour = colours[agent]
        path = "".join(
            f"{'M' if i == 0 else 'L'}{_num(x_of(p.intensity, agent))} {_num(y_of(p.pass_k))}"
            for i, p in enumerate(line)
        )
        tip = f"{agent}: " + "; ".join(f"{p.intensity} {_pass_label(p)}" for p in line)
        attrs: Attrs = {"class": "line", "d": path, "stroke": colour, "stroke-width": 2.5, "fill": "none"}
        parts.append(_el("path", attrs, f"<title>{xml(tip)}</title>"))
        for p in line:
            x, (low, high) = x_of(p.intensity, agent), p.pass_k_interval
            whisker = f"M{_num(x)} {_num(y_of(low))}V{_num(y_of(high))}"
            whisker += f"M{_num(x - 4)} {_num(y_of(low))}H{_num(x + 4)}M{_num(x - 4)} {_num(y_of(high))}H{_num(x + 4)}"
            point_tip = f"{agent} / {p.intensity}: {_pass_label(p)}"
            parts.append(
                _el("path", {"class": "interval", "d": whisker, "stroke": colour, "stroke-width": 1.2, "fill": "none"})
            )
            parts.append(
                _el(
                    "circle",
                    {"class": "point", "cx": x, "cy": y_of(p.pass_k), "r": 4, "fill": colour},
                    f"<title>{xml(point_tip)}</title>",
                )
            )
    baselines = _spread_labels({a: y_of(_last(points, a).pass_k) + 4 for a in agents})
    for agent, baseline in baselines.items():
        swatch: Attrs = {"x1": label_x, "y1": baseline - 4, "x2": label_x + 14, "y2": baseline - 4}
        parts.append(_el("line", {**swatch, "stroke": colours[agent], "stroke-width": 3}))
        parts.append(_text(label_x + 20, baseline, end_labels[agent], fill="#1a1a1a"))
    # Labels pushed below the axis (several lines at 0%) still fit: the height follows the lowest one.
    lowest = max(baselines.values(), default=bottom)
    layout = _Layout(width, left, top, max(bottom, lowest - 40), (), (), placed)
    desc = (
        "Lines: pass^k (tau-bench's estimator) of each agent at each profile intensity, one line per agent; "
        "the vertical whiskers are Wilson 95% intervals over the distinct tasks of the all-k-runs-correct indicator."
    )
    return _svg(layout, "mcpfault: pass^k per profile intensity and agent", desc, parts)


def _spread_labels(baselines: Mapping[str, float]) -> dict[str, float]:
    """The labels' baselines moved apart, top to bottom, so no two are closer than LINE_LABEL_GAP."""
    spread: dict[str, float] = {}
    previous = -math.inf
    for agent, baseline in sorted(baselines.items(), key=lambda item: item[1]):
        previous = max(baseline, previous + LINE_LABEL_GAP)
        spread[agent] = previous
    return spread


def _last(points: Sequence[ReliabilityPoint], agent: str) -> ReliabilityPoint:
    return [p for p in points if p.agent == agent][-1]


def _pass_label(point: ReliabilityPoint) -> str:
    return f"pass^{point.k} {100 * point.pass_k:.0f}% (95% {interval(point.pass_k_interval)})"


# ---------------------------------------------------------------------------------------------
# Entry points
