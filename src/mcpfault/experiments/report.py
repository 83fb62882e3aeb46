"""``report.md`` and ``timeline.svg`` of one experiment: probe values, a timeline, the verdict, recovery."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcpfault.experiments import probes
from mcpfault.experiments.plan import Plan
from mcpfault.experiments.runner import Outcome
from mcpfault.harness.charts import xml

BUCKET_S = 1.0
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 760, 300, 56, 150, 34, 40
SERIES = (("requests/s", "#1f77b4"), ("errors/s", "#d62728"), ("faults/s", "#ff7f0e"))


def buckets(events_path: Path, t0: float, until: float) -> list[tuple[float, int, int, int]]:
    """(t, requests, errors, faults) per second since ``t0``, from the proxy's events."""
    count = max(1, math.ceil((until - t0) / BUCKET_S))
    rows = [[0, 0, 0] for _ in range(count)]
    window = probes.Window(t0, until, events_path)
    for record in probes.requests_in(window):
        index = min(count - 1, int((probes.event_time(record) - t0) / BUCKET_S))
        rows[index][0] += 1
        rows[index][1] += record.get("client_received") not in probes.SUCCESS
        rows[index][2] += bool(record.get("fault_type"))
    return [(i * BUCKET_S, *row) for i, row in enumerate(rows)]  # type: ignore[misc]


def saw_errors(rows: Sequence[tuple[float, int, int, int]], action_start_s: float) -> bool:
    """Whether any request failed from the second of a process action's start on."""
    return any(r[2] for r in rows if r[0] >= math.floor(action_start_s))


def recovery_s(rows: Sequence[tuple[float, int, int, int]], action_start_s: float) -> float | None:
    """From a process action's start to the first second with requests and no errors after its first error."""
    after = [r for r in rows if r[0] >= math.floor(action_start_s)]
    first_error = next((i for i, r in enumerate(after) if r[2]), None)
    if first_error is None:  # no error seen: recovered at once if requests went on, else never
        return 0.0 if any(r[1] for r in after[1:]) else None
    clean = next((r for r in after[first_error:] if r[1] and not r[2]), None)
    return None if clean is None else round(clean[0] - action_start_s, 1)


def timeline_svg(plan: Plan, outcome: Outcome, rows: Sequence[tuple[float, int, int, int]]) -> str:
    # The axis ends where the run did (the method's end plus the cool-down), not at the next whole bucket.
    buckets_s = max(rows[-1][0] + BUCKET_S, 1.0) if rows else 1.0
    run_s = outcome.method_end - outcome.t0 + plan.cooldown_s if outcome.t0 else buckets_s
    span_s = min(buckets_s, run_s) if run_s > 0 else buckets_s
    rows = [r for r in rows if r[0] < span_s]
    peak = max([max(r[1:]) for r in rows] + [1])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + plot_w * t / span_s

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / peak)

    parts: list[str] = []
    method_start = outcome.method_start - outcome.t0
    for run in outcome.actions:
        if run.started is None:
            continue
        start = run.started - outcome.t0
        end = (run.ended or outcome.method_end) - outcome.t0
        parts.append(
            f'<rect x="{x(start):.1f}" y="{TOP}" width="{max(1.0, x(end) - x(start)):.1f}" height="{plot_h}" '
            f'fill="#999" fill-opacity="0.18"><title>{xml(run.action.name)}: {run.state}</title></rect>'
        )
        parts.append(f'<text x="{x(start) + 2:.1f}" y="{TOP + 12}" font-size="10">{xml(run.action.name)}</text>')
    if outcome.stopped_at_s is not None:
        sx = x(outcome.stopped_at_s)
        parts.append(
            f'<line x1="{sx:.1f}" x2="{sx:.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="black" stroke-dasharray="4 3"/>'
        )
        parts.append(f'<text x="{sx + 3:.1f}" y="{TOP + plot_h - 4}" font-size="10">stopped</text>')
    for index, (label, colour) in enumerate(SERIES):
        points = " ".join(f"{x(min(r[0] + BUCKET_S / 2, span_s)):.1f},{y(r[1 + index]):.1f}" for r in rows)
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
        ly = TOP + 16 * index + 8
        key = f'x1="{WIDTH - RIGHT + 12}" x2="{WIDTH - RIGHT + 30}" y1="{ly}" y2="{ly}"'
        parts.append(f'<line {key} stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{WIDTH - RIGHT + 34}" y="{ly + 4}" font-size="11">{label}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" stroke="#333"/>')
    parts.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#333"/>')
    step = max(1, math.ceil(span_s / 10))
    ticks: list[float] = list(range(0, int(span_s) + 1, step))
    if span_s - ticks[-1] >= 0.4 * step:  # the run's own end, when it falls between ticks (8.5 s)
        ticks.append(round(span_s, 1))
    for t in ticks:
        label = f"{t:g}"
        parts.append(f'<text x="{x(t):.1f}" y="{TOP + plot_h + 14}" font-size="10" text-anchor="middle">{label}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" font-size="11" text-anchor="middle">seconds</text>')
    parts.append(f'<text x="{LEFT - 6}" y="{TOP + 4}" font-size="10" text-anchor="end">{peak}</text>')
    parts.append(f'<text x="{LEFT - 6}" y="{TOP + plot_h}" font-size="10" text-anchor="end">0</text>')
    mx = x(method_start)
    parts.append(_vline(mx, plot_h, 'stroke="#666" stroke-width="0.8"'))
    parts.append(
        f'<text class="method-start" x="{mx + 3:.1f}" y="{TOP + plot_h - 16}" font-size="10" fill="#444">'
        f"method starts ({method_start:.1f} s)</text>"
    )
    title = xml(f"{plan.title}: requests, errors and faults per second (shaded: actions)")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'font-family="sans-serif"><title>{title}</title>'
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>'
        f'<text x="{LEFT}" y="20" font-size="13">{title}</text>{"".join(parts)}</svg>\n'
    )


def _vline(at: float, plot_h: float, style: str) -> str:
    return f'<line x1="{at:.1f}" x2="{at:.1f}" y1="{TOP}" y2="{TOP + plot_h}" {style}/>'


def _cell(value: Any, held: bool | None) -> str:
    if held is None:
        return "-"
    return f"{value if value is not None else 'no data'} ({'ok' if held else 'DEVIATED'})"


def write(plan: Plan, outcome: Outcome, out_dir: Path) -> Path:
    end = max(outcome.method_end + plan.cooldown_s, outcome.method_end) + 1.0
    rows = buckets(out_dir / "events.jsonl", outcome.t0, end) if outcome.t0 else []
    if rows:
        (out_dir / "timeline.svg").write_text(timeline_svg(plan, outcome, rows), encoding="utf-8")
    lines = [f"# Experiment: {plan.title}", ""]
    if plan.description:
        lines += [plan.description, ""]
    lines += [
        f"**Verdict: {outcome.verdict}.** State `{outcome.state}`; experiment id `{outcome.experiment_id}`.",
        "",
        "## Hypothesis",
        "",
        "| probe | tolerance | before | during | after |",
        "|---|---|---|---|---|",
    ]
    for m in outcome.measured:
        cells = [_cell(m.values.get(p), m.held.get(p)) for p in ("before", "during", "after")]
        lines.append(f"| {m.spec.name} | {m.spec.tolerance.describe()} | {' | '.join(cells)} |")
    if not outcome.measured:
        lines.append("| (none) | - | - | - | - |")
    lines += ["", "## Method", "", "| action | what | window (s after the method starts) | state | recovery |"]
    lines.append("|---|---|---|---|---|")
    for run in outcome.actions:
        action = run.action
        recovery = "-"
        if action.process is not None and run.started is not None:
            start = run.started - outcome.t0
            found = recovery_s(rows, start)
            if found is not None and not saw_errors(rows, start):
                recovery = "none needed: no request failed"  # the server was back before anyone asked it
            else:
                recovery = f"{found:g} s" if found is not None else "not recovered"
        window = f"{action.start_after_s:g}-{action.end_s:g}"
        lines.append(f"| {action.name} | {action.describe()} | {window} | {run.state} | {recovery} |")
    if any(run.action.process is not None for run in outcome.actions):
        lines += [
            "",
            "Recovery: from a process action's start to the first second with requests and no failed one, "
            'after its first failed request; "none needed" when no request failed (the server was restarted '
            "between requests, so the kill cost the agent nothing it could see).",
        ]
    if plan.stop_conditions:
        lines += ["", "## Stop conditions", "", "| condition | tolerance | checks | last value |", "|---|---|---|---|"]
        for spec in plan.stop_conditions:
            seen = [v for name, _t, v in outcome.stop_values if name == spec.name]
            last = seen[-1] if seen else "-"
            lines.append(f"| {spec.name} | {spec.tolerance.describe()} | {len(seen)} | {last} |")
    if rows:
        lines += ["", "## Timeline", "", "![requests, errors and faults per second](timeline.svg)"]
    if outcome.reason:
        lines += ["", f"Reason: {outcome.reason}"]
    if outcome.load_error:
        lines += ["", f"The load: {outcome.load_error}"]
    lines += [
        "",
        "Files: `journal.jsonl` (FIS log schema v2), `events.jsonl`, `experiment-spans.jsonl`, `metrics.prom`.",
    ]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out_dir / "outcome.json").write_text(
        json.dumps(
            {
                "experiment_id": outcome.experiment_id,
                "state": outcome.state,
                "verdict": outcome.verdict,
                "exit_code": outcome.exit_code,
                "stopped_by": outcome.stopped_by,
                "stopped_at_s": outcome.stopped_at_s,
                "hypothesis": {m.spec.name: m.values for m in outcome.measured},
                "actions": {r.action.name: r.state for r in outcome.actions},
            },
            indent=2,
            default=str,
        )
        + "\n",
        encoding="utf-8",
    )
    return path
