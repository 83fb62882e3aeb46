"""``report.html``: one self-contained page of a run, a bench or an experiment, beside ``report.md``.

The page needs no network: its styles and its script are inline and small, the charts are the SVGs
``harness.charts`` draws, inline too. It renders the same analysis the Markdown report does
(``analysis.summary`` over ``records.jsonl``, ``analysis.traces`` over the span files), and adds what a
page can do and a Markdown file cannot: a task list filtered by outcome, profile, agent and fault type,
and per task its trace as a waterfall. Silent failures come first.

Each task's trace is embedded as compact JSON in a ``<script type="application/json">`` of its own,
parsed and drawn only when the task is opened, so the page stays light however many tasks ran.
``load_run`` reads the files; ``render_run`` and ``render_experiment`` are pure (data in, text out).
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from mcpfault.analysis.records import OUTCOMES, TaskRecord, read_records
from mcpfault.analysis.summary import STRESS_PROFILES, CellSummary, Summary, summarize
from mcpfault.harness.charts import OUTCOME_COLOURS as CHART_OUTCOME_COLOURS
from mcpfault.harness.charts import render_charts
from mcpfault.harness.formatting import interval, percent
from mcpfault.harness.waterfall import Step, task_nodes, waterfall
from mcpfault.protocol.jsonlines import read_jsonl

HTML_NAME: Final = "report.html"

# Okabe and Ito's palette, told apart with every common colour-vision deficiency; every outcome also
# shows its name, so colour is never the only cue.
OUTCOME_COLOURS: Final = {
    "success": "#009E73",  # bluish green
    "recovered": "#0072B2",  # blue
    "failed_detected": "#E69F00",  # orange
    "failed_silent": "#D55E00",  # vermillion, with a black outline wherever it shows
    "unjudged": "#666666",  # grey: claimed done, nobody could check (a server cassette)
}
KIND_COLOURS: Final = {
    "task": "#555555",
    "attempt": "#0072B2",
    "proxy": "#E69F00",
    "server": "#009E73",
    "model": "#CC79A7",
    "span": "#999999",
}


# ---------------------------------------------------------------------------------------------
# What the page is drawn from


@dataclass(frozen=True, slots=True)
class RunData:
    """A run's or a bench's results: records, each task's waterfall (by record), the Markdown report."""

    title: str
    records: tuple[TaskRecord, ...]
    steps: Mapping[int, tuple[Step, ...]] = field(default_factory=dict)  # record position -> its trace
    markdown: str | None = None  # report.md, when the run wrote one
    meta: Mapping[str, Any] = field(default_factory=dict)  # bench.json


def load_run(run_dir: Path) -> RunData:
    """Everything ``render_run`` needs from a run's or a bench's --out directory.

    Raises ValueError naming what is missing when ``run_dir`` holds no ``records.jsonl``.
    """
    records_path = run_dir / "records.jsonl"
    if not records_path.is_file():
        raise ValueError(
            f"{run_dir} holds no records.jsonl: give the --out directory of `mcpfault run` or `bench` "
            "(an experiment's directory holds journal.jsonl instead)"
        )
    records = tuple(read_records(records_path))
    tasks = task_nodes(run_dir)
    steps = {}
    for position, record in enumerate(records):
        node = tasks.get((record.trace_id or "", record.task_index))
        if node is not None:
            steps[position] = waterfall(node)
    markdown_path = run_dir / "report.md"
    meta_path = run_dir / "bench.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    except ValueError as exc:
        raise ValueError(f"{meta_path}: not the bench's JSON ({exc}); remove it or rerun the bench") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_path}: not the bench's JSON (an object); remove it or rerun the bench")
    return RunData(
        title=f"mcpfault {'bench' if meta else 'run'}: {run_dir.name}",
        records=records,
        steps=steps,
        markdown=markdown_path.read_text(encoding="utf-8") if markdown_path.is_file() else None,
        meta=meta,
    )


# ---------------------------------------------------------------------------------------------
# The page of a run or a bench


def render_run(data: RunData) -> str:
    """The whole page: silent failures, outcome table, exposure, charts, the task list and its traces."""
    from mcpfault.harness.claims_report import is_claims_run

    if is_claims_run(data.records):
        return render_claims_run(data)
    rows = data.meta.get("rows")  # bench.json: the order --profiles gave, as report.md has it
    summary = summarize(data.records, tuple(str(row) for row in rows) if isinstance(rows, list) else ())
    body = [
        f"<h1>{_e(data.title)}</h1>",
        _meta_line(data),
        _silent_section(data.records, _table_cells(summary)),
        _outcome_section(summary),
        _reliability_section(data.records),
        _exposure_section(summary, data.records),
        _charts_section(summary, data.records),
        _tasks_section(data, summary.profiles, summary.agents),
        _markdown_section(data.markdown),
    ]
    return _page(data.title, "\n".join(part for part in body if part), _asset("report.js"))


def render_claims_run(data: RunData) -> str:
    """The page of a run against a server cassette: the no-ground-truth banner, the counts per cell (no
    rate of any kind), the task list and its traces."""
    from mcpfault.analysis.records import NO_TRUTH_OUTCOMES
    from mcpfault.harness.claims_report import BANNER, CLAIMS_HEADER, cassettes_of, claim_cells

    cells = claim_cells(data.records)
    reasons = "".join(f"<li>{_e(reason)}</li>" for reason in cassettes_of(data.records))
    banner = (
        f'<section id="no-ground-truth" class="callout bad"><h2>{_e(BANNER.capitalize())}</h2>'
        "<p>The server was a cassette (<code>mcpfault replay</code>), which knows no right answer and keeps no "
        "state. A task the agent reported failed (or that crashed, timed out or broke the answer schema) is "
        "<strong>failed_detected</strong>; a task it claimed done is <strong>unjudged</strong>: nobody checked "
        f"its answer. There is no success rate and no silent-failure rate here, by design.</p><ul>{reasons}</ul>"
        "</section>"
    )
    head = "".join(f'<th scope="col">{_e(h)}</th>' for h in CLAIMS_HEADER)
    rows = "".join(
        f'<tr><td>{_e(c.profile)}</td><td>{_e(c.agent)}</td><td class="n">{c.tasks}</td>'
        f'<td class="n" data-outcome="failed_detected">{c.detected}</td>'
        f'<td class="n" data-outcome="unjudged">{c.unjudged}</td><td class="n">{c.faults_seen}</td>'
        f"<td>{_e(', '.join(c.fault_types) or '-')}</td></tr>"
        for c in cells
    )
    table = (
        '<section id="outcomes"><h2>Outcomes per profile and agent</h2>'
        f'<table id="claims-table" class="grid"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        "<p>faults seen: tasks in which a fault changed what the agent received.</p></section>"
    )
    profiles = tuple(dict.fromkeys(c.profile for c in cells))
    agents = tuple(dict.fromkeys(c.agent for c in cells))
    body = [
        f"<h1>{_e(data.title)}</h1>",
        _meta_line(data),
        banner,
        table,
        _tasks_section(
            data,
            profiles,
            agents,
            outcomes=NO_TRUTH_OUTCOMES,
            # A replayed cassette writes no spans of its own: the proxy's are the server side of a trace.
            intro="Detected failures first. Click a task to see its trace: the attempts, and the proxy's spans "
            "with their faults and what the client received.",
        ),
        _markdown_section(data.markdown),
    ]
    return _page(data.title, "\n".join(part for part in body if part), _asset("report.js"))


def _meta_line(data: RunData) -> str:
    meta = data.meta
    parts = [f"{len(data.records):,} tasks"]
    if meta.get("command"):
        parts.insert(0, f"<code>{_e(str(meta['command']))}</code>")
    for key, label in (("seed", "seed"), ("tasks_per_cell", "tasks per cell"), ("trials", "trials")):
        if key in meta:
            parts.append(f"{label} {_e(str(meta[key]))}")
    if "wall_s" in meta:
        parts.append(f"wall time {_e(str(meta['wall_s']))} s")
    if meta.get("broken"):
        parts.append(f'<strong class="warn">{len(meta["broken"])} session(s) broke: see report.md</strong>')
    return f'<p class="meta">{" · ".join(parts)}</p>'


def _silent_section(records: Sequence[TaskRecord], table_cells: Sequence[CellSummary]) -> str:
    """The silent failures, listed and counted by cell in the outcome tables' order (``table_cells``)."""
    place = {(c.profile, c.agent): n for n, c in enumerate(table_cells)}
    silent = sorted(
        ((i, r) for i, r in enumerate(records) if r.outcome == "failed_silent"),
        key=lambda item: (place.get((item[1].row, item[1].agent), len(place)), item[1].session, item[1].task_index),
    )
    if not silent:
        return (
            '<section id="silent" class="callout ok"><h2>No silent failures</h2>'
            f"<p>None of the {len(records):,} tasks ended with a wrong answer or wrong state on the server "
            "that its agent did not notice.</p></section>"
        )
    cells = Counter(f"{r.row} / {r.agent}" for _, r in silent)  # in first-seen order: the tables' order
    listed = "".join(
        f'<li><a href="#task-{i}" data-open="{i}">{_e(r.row)} / {_e(r.agent)} · session {r.session} · task '
        f"{r.task_index} ({_e(r.task)})</a>: {_e(_counted(r.fault_modes) or 'no fault')}"
        f"{f' · {r.duplicates} duplicate(s)' if r.duplicates else ''} · {_e(r.detail)}</li>"
        for i, r in silent[:25]
    )
    more = f"<p>... and {len(silent) - 25} more: filter the task list by failed_silent.</p>" if len(silent) > 25 else ""
    by_cell = ", ".join(f"{_e(cell)}: {count}" for cell, count in cells.items())
    return (
        '<section id="silent" class="callout bad">'
        f"<h2>{len(silent)} silent failure{'s' if len(silent) != 1 else ''}</h2>"
        "<p>Tasks that ended with a wrong answer, or with wrong state on the server that the agent did not "
        "report (a duplicate, a write it said had failed): what no error log shows. "
        f"By cell: {by_cell}.</p>"
        f'<p><button type="button" data-filter-outcome="failed_silent">List them all below</button></p>'
        f"<ol>{listed}</ol>{more}</section>"
    )


def _counted(items: Sequence[str]) -> str:
    """``a (3 times), b``: each distinct item once, in first-seen order, with how often it repeats."""
    counts = Counter(items)
    return ", ".join(item if counts[item] == 1 else f"{item} ({counts[item]} times)" for item in dict.fromkeys(items))


def _table_cells(summary: Summary) -> list[CellSummary]:
    """The cells in the order the outcome tables show them: the gentle profiles' table, then the stress one."""
    gentle = [c for c in summary.cells if c.profile not in STRESS_PROFILES]
    return gentle + [c for c in summary.cells if c.profile in STRESS_PROFILES]


def _outcome_section(summary: Summary) -> str:
    trials = min((c.trials for c in summary.cells), default=1)
    gentle = [c for c in summary.cells if c.profile not in STRESS_PROFILES]
    stress = [c for c in summary.cells if c.profile in STRESS_PROFILES]
    parts = [
        '<section id="outcomes"><h2>Outcomes</h2>',
        "<p>Counts per cell; <em>correct</em> is success + recovered, with its Wilson 95% interval, and "
        "<em>silent</em> the share that failed silently."
        + (
            f" pass^k for k = 1..{trials}: the chance that k runs of a task are all correct (tau-bench's estimator); "
            "never silent^k: that none of k runs fails silently. A falling pass^k is an agent that copes on some runs "
            "of a task and not on others."
            if trials > 1
            else ""
        )
        + "</p>",
    ]
    if gentle:
        parts.append(_outcome_table(gentle, trials, "outcome-table", "Profiles"))
    if stress:
        parts.append("<h3>Stress profiles: an outage, bursts, a storm, a storm of lies</h3>")
        parts.append(_outcome_table(stress, trials, "stress-table", "Stress profiles"))
    parts.append("</section>")
    return "".join(parts)


def _outcome_table(cells: Sequence[CellSummary], trials: int, table_id: str, caption: str) -> str:
    head = ["profile", "agent", "tasks", *OUTCOMES, "correct (95%)", "silent (95%)"]
    if trials > 1:
        head += [f"pass^{k}" for k in range(1, trials + 1)]
        head += [f"never silent^{k}" for k in range(1, trials + 1)]
    rows = []
    for number, c in enumerate(cells):
        first = " first-of-profile" if number and cells[number - 1].profile != c.profile else ""
        counts = "".join(
            f'<td class="n{" silent" if o == "failed_silent" and c.count(o) else ""}" data-outcome="{o}">'
            f"{c.count(o)}</td>"
            for o in OUTCOMES
        )
        passes = ""
        if trials > 1:
            passes = "".join(f'<td class="n" data-pass-k="{k}">{100 * v:.0f}%</td>' for k, v in enumerate(c.pass_k, 1))
            passes += "".join(
                f'<td class="n" data-never-silent-k="{k}">{100 * v:.0f}%</td>'
                for k, v in enumerate(c.never_silent_k, 1)
            )
        rows.append(
            f'<tr class="cell{first}" data-profile="{_e(c.profile)}" data-agent="{_e(c.agent)}">'
            f'<th scope="row">{_e(c.profile)}</th>'
            f'<td>{_e(c.agent)}</td><td class="n" data-outcome="tasks">{c.tasks}</td>{counts}'
            f'<td class="n">{percent(c.correct, c.tasks)} ({interval(c.success_interval)})</td>'
            f'<td class="n">{percent(c.failed_silent, c.tasks)} ({interval(c.silent_interval)})</td>{passes}</tr>'
        )
    header = "".join(f'<th scope="col">{_e(h)}</th>' for h in head)
    return (
        f'<table id="{table_id}" class="grid"><caption>{_e(caption)}</caption><thead><tr>{header}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _exposure_section(summary: Summary, records: Sequence[TaskRecord]) -> str:
    """Per cell: how many tasks faults reached, how many they affected, and by which fault types."""
    rows = []
    for c in summary.cells:
        mine = [r for r in records if r.row == c.profile and r.agent == c.agent]
        reached = sum(1 for r in mine if r.fault_types)
        affected = sum(1 for r in mine if r.affected_types)
        types = Counter(t for r in mine for t in r.fault_types)
        listed = ", ".join(f"{_e(t)} {n}" for t, n in sorted(types.items())) or "-"
        rows.append(
            f'<tr data-profile="{_e(c.profile)}" data-agent="{_e(c.agent)}"><th scope="row">{_e(c.profile)}</th>'
            f'<td>{_e(c.agent)}</td><td class="n">{c.tasks}</td><td class="n" data-exposure="reached">{reached}</td>'
            f'<td class="n" data-exposure="affected">{affected}</td><td class="n">{c.touched_no_effect}</td>'
            f"<td>{listed}</td></tr>"
        )
    head = "".join(
        f'<th scope="col">{h}</th>'
        for h in ("profile", "agent", "tasks", "reached", "affected", "touched, no effect", "tasks by fault type")
    )
    return (
        '<section id="exposure"><h2>Exposure per cell</h2><p><em>reached</em>: tasks a fault was injected into; '
        "<em>affected</em>: those where it changed what the client received; <em>touched, no effect</em>: "
        "success tasks faults reached without changing anything.</p>"
        f'<table id="exposure-table" class="grid"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
        "</table></section>"
    )


def _reliability_section(records: Sequence[TaskRecord]) -> str:
    """The reliability surface (harness/reliability_report.py), when a model ran."""
    from mcpfault.harness.reliability_report import RELIABILITY_HEADER, reliability_row, surface_points

    points = surface_points(records)
    if not points:
        return ""
    header = "".join(f'<th scope="col">{_e(h)}</th>' for h in RELIABILITY_HEADER)
    rows = "".join(
        f'<tr data-agent="{_e(p.agent)}" data-intensity="{_e(p.intensity)}"><th scope="row">{_e(cells[0])}</th>'
        + "".join(f'<td class="n">{_e(c)}</td>' if i > 1 else f"<td>{_e(c)}</td>" for i, c in enumerate(cells[1:], 1))
        + "</tr>"
        for p, cells in ((p, reliability_row(p)) for p in points)
    )
    return (
        '<section id="reliability"><h2>Reliability surface</h2>'
        "<p>Per agent (each model its own) and profile intensity: pass^k and never-silent^k with Wilson 95% "
        "intervals over the distinct tasks (of the indicator that all k runs passed), and the estimated model "
        "cost per task run and per recovered run; a scripted or external agent reports no cost (-). "
        "The report.md section says exactly how each figure is computed.</p>"
        f'<table id="reliability-table" class="grid"><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>'
        "</section>"
    )


def _charts_section(summary: Summary, records: Sequence[TaskRecord] = ()) -> str:
    from mcpfault.harness.charts import RELIABILITY_CHART, reliability_chart
    from mcpfault.harness.reliability_report import surface_points

    charts = dict(render_charts(summary))
    points = surface_points(records)
    if points:
        charts[RELIABILITY_CHART] = reliability_chart(points)
    note = ""
    if not summary.recovery:  # an empty chart of recovery times is an axis and nothing else: say so instead
        charts.pop("recovery.svg", None)
        note = "<p>No task recovered from a fault, so there are no recovery times to chart.</p>"
    figures = "".join(
        f'<figure class="chart">{_inline_svg(_recoloured(svg))}<figcaption>{_e(name)}</figcaption></figure>'
        for name, svg in charts.items()
    )
    return f'<section id="charts"><h2>Charts</h2>{figures}{note}</section>'


def _recoloured(svg: str) -> str:
    """The chart in the page's outcome colours (its own red and green are hard to tell apart for many)."""
    for outcome, colour in CHART_OUTCOME_COLOURS.items():
        svg = svg.replace(f'fill="{colour}"', f'fill="{OUTCOME_COLOURS[outcome]}"')
    return svg


def _inline_svg(svg: str) -> str:
    # An XML declaration is not allowed inside HTML; the SVG element itself is.
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


TASKS_INTRO: Final = (
    "Failures first. Click a task to see its trace: the attempts, the proxy's spans with their faults and "
    "what the client received, the server's spans with their state changes and duplicates."
)


def _tasks_section(
    data: RunData,
    profiles: Sequence[str],
    agents_in_order: Sequence[str],
    outcomes: Sequence[str] = OUTCOMES,
    intro: str = TASKS_INTRO,
) -> str:
    """The task list (rows drawn by the script from compact JSON) and each task's trace, unparsed."""
    order = {o: i for i, o in enumerate(("failed_silent", "failed_detected", "unjudged", "recovered", "success"))}
    rows = {p: i for i, p in enumerate(profiles)}
    agents = {a: i for i, a in enumerate(agents_in_order)}

    def place(i: int) -> tuple[int, ...]:
        r = data.records[i]
        return (order.get(r.outcome, 9), rows.get(r.row, 0), agents.get(r.agent, 0), r.trial, r.session, r.task_index)

    positions = sorted(range(len(data.records)), key=place)
    tasks = [_task_row(i, data.records[i], i in data.steps) for i in positions]
    fault_types = sorted({t for r in data.records for t in r.fault_types})
    selects = "".join(
        f'<label>{label} <select id="filter-{key}"><option value="">all</option>'
        + "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
        + "</select></label>"
        for key, label, values in (
            ("outcome", "outcome", outcomes),
            ("profile", "profile", sorted({r.row for r in data.records})),
            ("agent", "agent", sorted({r.agent for r in data.records})),
            ("fault", "fault type", fault_types),
        )
    )
    trace_scripts = "\n".join(
        f'<script type="application/json" id="trace-{i}">{_json([s.compact() for s in steps])}</script>'
        for i, steps in sorted(data.steps.items())
    )
    head = "".join(
        f'<th scope="col">{h}</th>'
        for h in ("outcome", "profile", "agent", "session", "task", "workflow", "faults", "attempts", "dup", "ms")
    )
    return (
        f'<section id="tasks"><h2>Tasks</h2><p>{_e(intro)}</p>'
        f'<div class="filters">{selects} <span id="task-count"></span></div>'
        f'<table id="task-table" class="grid tasks"><thead><tr>{head}</tr></thead><tbody></tbody></table>'
        f'<script type="application/json" id="task-data">{_json(tasks)}</script>\n{trace_scripts}</section>'
    )


def _task_row(position: int, record: TaskRecord, traced: bool) -> list[Any]:
    return [
        position,
        record.outcome,
        record.row,
        record.agent,
        record.session,
        record.task_index,
        record.task,
        list(record.fault_modes),
        record.attempts,
        record.duplicates,
        round(1000 * record.duration_s, 1),
        record.detail,
        record.failure or "",
        record.trace_id or "",
        traced,
        list(record.fault_types),
    ]


def _markdown_section(markdown: str | None) -> str:
    if markdown is None:
        return ""
    from markdown_it import MarkdownIt

    # Its charts are inline above; their <img> links would be the page's only requests.
    text = markdown.split("\n## Charts\n", 1)[0]
    rendered = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    return (
        '<section id="markdown"><details><summary>Every table of report.md (recovery times, failure classes, '
        f"process faults, overhead)</summary>{rendered}</details></section>"
    )


# ---------------------------------------------------------------------------------------------
# The page of an experiment


@dataclass(frozen=True, slots=True)
class ExperimentData:
    title: str
    journal: tuple[Mapping[str, Any], ...]
    outcome: Mapping[str, Any]
    timeline_svg: str | None
    markdown: str | None


def load_experiment(out_dir: Path) -> ExperimentData:
    journal_path = out_dir / "journal.jsonl"
    if not journal_path.is_file():
        raise ValueError(f"{out_dir} holds no journal.jsonl: give the --out directory of `mcpfault experiment run`")
    outcome_path, timeline, report = out_dir / "outcome.json", out_dir / "timeline.svg", out_dir / "report.md"
    return ExperimentData(
        title=f"mcpfault experiment: {out_dir.name}",
        journal=tuple(row for row in read_jsonl(journal_path) if isinstance(row, dict)),
        outcome=json.loads(outcome_path.read_text(encoding="utf-8")) if outcome_path.is_file() else {},
        timeline_svg=timeline.read_text(encoding="utf-8") if timeline.is_file() else None,
        markdown=report.read_text(encoding="utf-8") if report.is_file() else None,
    )


def render_experiment(data: ExperimentData) -> str:
    outcome = data.outcome
    verdict = str(outcome.get("verdict", "unknown"))
    held = verdict == "held"
    body = [
        f"<h1>{_e(data.title)}</h1>",
        f'<section id="verdict" class="callout {"ok" if held else "bad"}"><h2>Verdict: {_e(verdict)}</h2>'
        f"<p>State {_e(str(outcome.get('state', '?')))}"
        + (f"; stopped by {_e(str(outcome['stopped_by']))}" if outcome.get("stopped_by") else "")
        + "</p></section>",
        _probe_table(outcome.get("hypothesis", {})),
        f'<section id="timeline"><h2>Timeline</h2>{_inline_svg(data.timeline_svg)}</section>'
        if data.timeline_svg
        else "",
        _journal_table(data.journal),
        _experiment_markdown(data.markdown),
    ]
    return _page(data.title, "\n".join(part for part in body if part), "")


def _probe_table(hypothesis: Mapping[str, Any]) -> str:
    if not hypothesis:
        return ""
    rows = "".join(
        f'<tr><th scope="row">{_e(name)}</th>'
        + "".join(f'<td class="n">{_e(_value(values.get(phase)))}</td>' for phase in ("before", "during", "after"))
        + "</tr>"
        for name, values in hypothesis.items()
        if isinstance(values, dict)
    )
    return (
        '<section id="probes"><h2>Probe values</h2><table id="probe-table" class="grid"><thead><tr>'
        '<th scope="col">probe</th><th scope="col">before</th><th scope="col">during</th>'
        f'<th scope="col">after</th></tr></thead><tbody>{rows}</tbody></table></section>'
    )


def _value(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _journal_table(journal: Iterable[Mapping[str, Any]]) -> str:
    rows = []
    for entry in journal:
        data = entry.get("data") if isinstance(entry.get("data"), dict) else {}
        assert isinstance(data, dict)
        what = str(data.get("actionId") or "experiment")
        state = str(data.get("state", ""))
        kind = str(entry.get("type", "")).removesuffix("-state-change")
        rows.append(
            f'<tr class="state-{_e(state)}"><td>{_e(str(entry.get("time", "")))}</td><td>{_e(kind)}</td>'
            f'<td>{_e(what)}</td><td><span class="state">{_e(state)}</span></td>'
            f"<td>{_e(str(data.get('reason', '')))}</td></tr>"
        )
    return (
        '<section id="journal"><h2>States and actions</h2><table id="journal-table" class="grid"><thead><tr>'
        '<th scope="col">time</th><th scope="col">kind</th><th scope="col">of</th><th scope="col">state</th>'
        f'<th scope="col">reason</th></tr></thead><tbody>{"".join(rows)}</tbody></table></section>'
    )


def _experiment_markdown(markdown: str | None) -> str:
    if markdown is None:
        return ""
    from markdown_it import MarkdownIt

    text = markdown.split("\n## Timeline\n", 1)[0]
    rendered = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    return f'<section id="markdown"><h2>report.md</h2>{rendered}</section>'


# ---------------------------------------------------------------------------------------------
# Writing


def write_html(run_dir: Path) -> Path:
    """Write ``run_dir/report.html`` for a run, a bench or an experiment; return its path.

    Raises ValueError, saying what to give instead, for a directory that is none of these.
    """
    if (run_dir / "records.jsonl").is_file():
        text = render_run(load_run(run_dir))
    elif (run_dir / "journal.jsonl").is_file():
        text = render_experiment(load_experiment(run_dir))
    else:
        raise ValueError(
            f"{run_dir} is not a run's directory: it holds neither records.jsonl (run, bench) nor journal.jsonl "
            "(experiment run); give the --out directory of one of them"
        )
    path = run_dir / HTML_NAME
    path.write_text(text, encoding="utf-8", newline="\n")
    return path


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _json(value: Any) -> str:
    # Inside <script>: no "<" at all, so neither "</script>" nor "<!--" can end or bend it.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")


def _page(title: str, body: str, script: str) -> str:
    colours = "".join(f"--{k}:{v};" for k, v in {**OUTCOME_COLOURS, **KIND_COLOURS}.items())
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
        # No request can leave the page: everything is inline, and the policy says so to the browser too.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{_e(title)}</title><style>:root{{{colours}}}\n{_asset('report.css')}</style></head>\n"
        f"<body>{body}\n<script>{script}</script></body></html>\n"
    )


def _asset(name: str) -> str:
    """A file of ``report_assets`` (the page's stylesheet and script), read from the installed package."""
    from importlib.resources import files

    return (files("mcpfault.harness") / "report_assets" / name).read_text(encoding="utf-8")
