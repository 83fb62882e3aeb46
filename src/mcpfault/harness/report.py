"""The bench report: Markdown tables over the summary (analysis.summary), with the SVG charts
(harness.charts) beside it, and the same tables for the terminal.

Everything here is a pure function of the records and the meta, with every collection sorted, so
the same records always give the same bytes and a report can be diffed between runs.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mcpfault.analysis.records import OUTCOMES, TaskRecord, row_name
from mcpfault.analysis.server import OWN_EXIT, ServerAccount
from mcpfault.analysis.summary import (
    AGENT_ORDER,
    FAULT_TYPE_ORDER,
    PROFILE_ORDER,
    STRESS_PROFILES,
    UNCLASSIFIED,
    UNKNOWN_FAULT,
    CellSummary,
    FailureCount,
    RecoveryStats,
    Summary,
    ordered,
    percentile,
    summarize,
    wilson,
)
from mcpfault.faults.base import HTTP
from mcpfault.faults.catalog import CATALOG
from mcpfault.harness.charts import (
    AGENT_COLOURS,
    CHARTS,
    OUTCOME_COLOURS,
    nice_ceiling,
    outcomes_chart,
    recovery_chart,
    render_charts,
    silent_chart,
    xml,
)
from mcpfault.harness.formatting import duration, interval, md, md_table, milliseconds, percent, success_cell
from mcpfault.harness.model_usage import AgentTotals, agent_totals, models_section, print_model_usage, usd
from mcpfault.harness.seeds_report import seeds_section

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = [
    "AGENT_COLOURS",
    "AGENT_ORDER",
    "CHARTS",
    "FAULT_TYPE_ORDER",
    "OUTCOME_COLOURS",
    "PROFILE_ORDER",
    "UNCLASSIFIED",
    "UNKNOWN_FAULT",
    "CellSummary",
    "FailureCount",
    "RecoveryStats",
    "AgentTotals",
    "ReportMeta",
    "Summary",
    "agent_totals",
    "duration",
    "md",
    "md_table",
    "milliseconds",
    "nice_ceiling",
    "ordered",
    "outcomes_chart",
    "percent",
    "percentile",
    "print_model_usage",
    "print_outcomes",
    "print_summary",
    "recovery_chart",
    "render_charts",
    "render_markdown",
    "silent_chart",
    "success_cell",
    "summarize",
    "usd",
    "write_report",
    "xml",
]

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
    # Sessions that broke, as (profile, agent, session, what broke): a banner, and their cells marked.
    broken: tuple[tuple[str, str, int, str], ...] = ()
    session_tasks: int | None = None  # tasks per session (each a fresh proxy and server)
    trials: int = 1  # bench --trials K
    profile_order: tuple[str, ...] = ()  # the report's rows in the order bench --profiles gave them
    task_deadline_s: float | None = None  # bench --task-deadline-s (None: a report merged from older runs)
    warnings: tuple[str, ...] = ()  # faults.profile_warnings: where a profile may not do what it was meant to
    seeds: int = 1  # bench --seeds N: the matrix under seed .. seed+N-1
    fixed_profiles: tuple[str, ...] = ()  # profiles with nothing random (Profile.is_fixed): no interval


def _fence(text: str) -> str:
    # A fence must be longer than any backtick run inside the command, or the block ends early.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def render_markdown(
    summary: Summary,
    meta: ReportMeta,
    *,
    records: Sequence[TaskRecord] = (),
    servers: Sequence[ServerAccount] = (),
    sessions_dir: Path | None = None,
) -> str:
    """The report; ``records`` (those ``summary`` came from) and ``servers`` (each session's server
    account) give the process-fault table, left out without them; ``sessions_dir`` (a bench's session
    directories) which rule fired how often in each cell (harness/exposure.py)."""
    from mcpfault.harness.exposure import exposure_section
    from mcpfault.harness.lies import lies_section
    from mcpfault.harness.reliability_report import reliability_section

    sections = [
        _header(summary, meta),
        _success_section(summary, meta),
        _intervals_section(summary, meta),
        seeds_section(records, _fixed_rows(meta)),
        _trials_section(summary),
        _coping_section(summary),
        _counts_section(summary, meta),
        exposure_section(records, sessions_dir),
        lies_section(records),
        models_section(summary),
        reliability_section(records),
        _cost_section(summary),
        _recovery_section(summary),
        _process_section(summary.agents, records, servers),
        _http_faults_section(summary),
        _failures_section(summary),
        _overhead_section(meta),
        _charts_section(),
    ]
    return "\n\n".join("\n".join(lines) for lines in sections if lines) + "\n"


def _header(summary: Summary, meta: ReportMeta) -> list[str]:
    fence = _fence(meta.command)
    cells = len(summary.cells)
    trials = f", each run {meta.trials} times (trials with derived fault seeds)" if meta.trials > 1 else ""
    if meta.seeds > 1:
        trials += f", under each of {meta.seeds} seeds ({meta.seed} to {meta.seed + meta.seeds - 1})"
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
        f"- **Tasks per cell:** {meta.tasks_per_cell}{trials} ({len(summary.profiles)} profiles x "
        f"{len(summary.agents)} agents = {cells} cells, {summary.total_tasks:,} tasks recorded)",
        *_session_length(meta),
        *_task_deadline(meta),
        f"- **Jobs:** {meta.jobs}",
        f"- **Wall time:** {duration(meta.wall_s)}",
        f"- **Machine:** {md(meta.machine)}",
        f"- **Started:** {md(meta.started_at)}",
    ]
    if meta.broken:
        lines += ["", *_broken_banner(meta)]
    if meta.warnings:
        lines += ["", *_warnings_banner(meta)]
    expected = meta.tasks_per_cell * max(1, meta.trials) * max(1, meta.seeds)
    short = [c for c in summary.cells if c.tasks != expected]
    if short:
        listed = ", ".join(f"{md(c.profile)}/{md(c.agent)} ({c.tasks})" for c in short)
        lines += ["", f"**Note:** {len(short)} cell(s) do not have {expected} task runs: {listed}."]
    lines += [
        "",
        "Each task ends in exactly one outcome: **success** (correct, and no fault changed what its client "
        "received), **recovered** (correct although at least one injected fault did: dropped, delayed past the "
        "deadline, an error, corrupted, stale and different, a drift not translated), **failed_detected** (the "
        "agent gave up or raised), "
        "**failed_silent** (a wrong answer, or wrong state left on the server).",
    ]
    return lines


def _session_length(meta: ReportMeta) -> list[str]:
    if meta.session_tasks is None:
        return []
    return [
        f"- **Session length:** {meta.session_tasks} tasks per session, each session a fresh proxy and mock "
        "server. A rule's `after` and `limit` count calls per session, so the session length shapes the "
        "faults: drift_input and drift_output start renaming after the 3rd call of every session, and the "
        "shorter the sessions, the more tasks finish before the drift, and the better an agent without "
        "reconciliation looks (`docs/results/session-length.md` has a sweep of the session length). "
        "The outage and the bursts likewise sit at fixed calls of each session.",
    ]


def _task_deadline(meta: ReportMeta) -> list[str]:
    if meta.task_deadline_s is None:
        return []
    return [
        f"- **Task deadline:** {meta.task_deadline_s:g} s per task (`--task-deadline-s`): no agent sends an "
        "attempt past it; one bench second stands for a minute of production (README, time in the bench).",
    ]


BROKEN_MARK = " (broken)"


def _broken_banner(meta: ReportMeta) -> list[str]:
    listed = [
        f"> - {md(profile)}/{md(agent)} session {session}: {md(error)}"
        for profile, agent, session, error in sorted(meta.broken)
    ]
    return [
        f"> **Warning: {len(meta.broken)} session(s) broke.** The cells below marked `{BROKEN_MARK.strip()}` hold "
        "only the tasks those sessions judged (or none), or faults the two joins saw differently: do not read "
        "their figures as results. The bench exited 1.",
        ">",
        *listed,
    ]


def _warnings_banner(meta: ReportMeta) -> list[str]:
    return [
        f"> **Warning: {len(meta.warnings)} warning(s) about the profiles** (the same the bench printed, and "
        "`mcpfault validate` prints): the rows they name may measure the machine's speed more than the agents, "
        "or a rule that never fires.",
        ">",
        *(f"> - {md(warning)}" for warning in meta.warnings),
    ]


def _broken_cells(meta: ReportMeta) -> set[tuple[str, str]]:
    return {(profile, agent) for profile, agent, _session, _error in meta.broken}


def _success_section(summary: Summary, meta: ReportMeta | None = None) -> list[str]:
    lines = [
        "## Success rate",
        "",
        "Each cell: tasks that ended correct (success + recovered) as a share of the cell's tasks, and in "
        "parentheses the share that failed silently. Higher first, lower second is better; `-` means not run. "
        "A share that is neither none nor all never shows as 0% or 100% (it shows `<1%` or `>99%`).",
    ]
    groups = _profile_groups(summary.profiles)
    for title, profiles in groups:
        broken = _broken_cells(meta) if meta is not None else set()
        rows = [
            [
                md(profile),
                *(
                    _maybe(summary.cell(profile, agent), success_cell)
                    + (BROKEN_MARK if (profile, agent) in broken else "")
                    for agent in summary.agents
                ),
            ]
            for profile in profiles
        ]
        if len(groups) > 1:
            lines += ["", f"**{title}**"]
        lines += ["", *md_table(["profile", *map(md, summary.agents)], rows)]
    return lines


HTTP_ROW_SUFFIX = row_name("", "http")  # what ends the name of a row run over HTTP


def _profile_groups(profiles: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The profiles that ran: the stress matrix apart from the rest (the gentle matrix, any others), and
    the rows over Streamable HTTP apart from those over stdio (bench --transport both)."""
    http = [p for p in profiles if p.endswith(HTTP_ROW_SUFFIX)]
    stress = [p for p in profiles if p in STRESS_PROFILES]
    rest = [p for p in profiles if p not in STRESS_PROFILES and p not in http]
    groups = [
        ("Gentle profiles: independent faults at p <= 0.2, a bad day in production", rest),
        ("Stress profiles: an outage of 12 calls, outages of 1 s and 10 s, bursts, a storm at p = 0.5", stress),
        ("Over Streamable HTTP: the same seeds through the HTTP proxy in front of the mock", http),
    ]
    return [(title, members) for title, members in groups if members]


def _fixed_rows(meta: ReportMeta) -> set[str]:
    return {row_name(profile, transport) for profile in meta.fixed_profiles for transport in ("stdio", "http")}


def _intervals_section(summary: Summary, meta: ReportMeta | None = None) -> list[str]:
    fixed = _fixed_rows(meta) if meta is not None else set()

    def bounds(cell: CellSummary, of: tuple[float, float]) -> str:
        return "fixed" if cell.profile in fixed else interval(of)

    rows = [
        [
            md(c.profile),
            md(c.agent),
            str(c.tasks),
            percent(c.correct, c.tasks),
            bounds(c, c.success_interval),
            percent(c.failed_silent, c.tasks),
            bounds(c, c.silent_interval),
        ]
        for c in summary.cells
    ]
    return [
        "## Rates with 95% intervals",
        "",
        "Every rate of the success table with its Wilson score interval (95%), over the cell's task runs. "
        "With trials, the runs of one task are not independent draws (the task is the same), so the interval "
        "is narrower than it would be over as many distinct tasks; pass^k below is the measure across runs. "
        "`fixed`: the profile has nothing random in it, so its row is one scenario, not a sample: no interval.",
        "",
        *md_table(["profile", "agent", "runs", "correct", "95% interval", "silent", "95% interval"], rows, 2),
    ]


def _trials_section(summary: Summary) -> list[str]:
    trials = min((c.trials for c in summary.cells), default=1)
    if trials < 2:
        return []
    ks = range(1, trials + 1)
    rows = [
        [
            md(c.profile),
            md(c.agent),
            str(c.distinct_tasks),
            *(_share_with_interval(share, c.distinct_tasks) for share in c.pass_k),
            *(_share_with_interval(share, c.distinct_tasks) for share in c.never_silent_k),
        ]
        for c in summary.cells
    ]
    return [
        f"## Consistency over {trials} trials",
        "",
        "pass^k as tau-bench defines it (Yao et al. 2024): for each task, with c correct runs of n, the chance "
        "C(c,k)/C(n,k) that k runs drawn from its n are all correct, averaged over tasks. pass^1 is the plain "
        "success rate; a falling pass^k means an agent that copes on some runs of a task and not on others. "
        "`never silent^k`: the same estimator for runs without a silent failure (the share of tasks that "
        "would show no silent failure in k runs). In parentheses: a Wilson "
        "95% interval over the cell's distinct tasks (an approximation: each task's share is not a coin flip).",
        "",
        *md_table(
            ["profile", "agent", "tasks", *(f"pass^{k}" for k in ks), *(f"never silent^{k}" for k in ks)],
            rows,
            left_columns=2,
        ),
    ]


def _share_with_interval(share: float, count: int) -> str:
    return f"{100 * share:.0f}% ({interval(wilson_of(share, count))})"


def wilson_of(share: float, count: int) -> tuple[float, float]:
    """A Wilson interval for a share of ``count`` items that need not be a whole number of them."""
    return wilson(round(share * count), count) if count else (0.0, 1.0)


def _coping_section(summary: Summary) -> list[str]:
    """Per cell, what its failures were: where each agent stops coping, and why."""
    failing = [c for c in summary.cells if c.failed_detected or c.failed_silent]
    lines = [
        "## Where each agent stops coping",
        "",
        "Every cell with a failure: the share of tasks that ended correct, the failed_detected tasks by the "
        "failure class that ended them (`circuit_open`: refused by the resilient agent's breaker; "
        "`retry_budget`: its retry budget was spent; `task_deadline`: the task's deadline passed; "
        "`protocol_error`, `timeout`, `malformed`, `tool_error`, "
        "`stale`: the last attempt's failure; `task_crashed`: the task code broke on an answer), and the "
        "failed_silent count.",
        "",
    ]
    if not failing:
        return [*lines, "No task failed."]
    rows = [
        [
            md(c.profile),
            md(c.agent),
            md(", ".join(f"{name} {count}" for name, count in c.failure_classes)) or "-",
            percent(c.correct, c.tasks),
            str(c.failed_silent),
        ]
        for c in failing
    ]
    return [*lines, *md_table(["profile", "agent", "failed_detected by class", "correct", "silent"], rows, 3)]


def _maybe(cell: CellSummary | None, render: Callable[[CellSummary], str]) -> str:
    return "-" if cell is None else render(cell)


def _counts_section(summary: Summary, meta: ReportMeta) -> list[str]:
    broken = _broken_cells(meta)
    rows = [
        [
            md(c.profile),
            md(c.agent) + (BROKEN_MARK if (c.profile, c.agent) in broken else ""),
            str(c.tasks),
            *(str(c.count(o)) for o in OUTCOMES),
            str(c.touched_no_effect),
        ]
        for c in summary.cells
    ]
    return [
        "## Outcome counts",
        "",
        "`touched, no effect`: success tasks that faults reached without changing what the client received "
        "(a delay within the deadline, a stale answer equal to the fresh one, a call the proxy translated to "
        "the drifted names, a renamed field the task never reads); they are counted under success, not recovered.",
        "",
        *md_table(["profile", "agent", "tasks", *OUTCOMES, "touched, no effect"], rows, left_columns=2),
    ]


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
        "Over recovered tasks: time from the first attempt a fault affected to the task's correct completion. "
        "A task counts under each fault type that affected it (not one that only touched it). "
        "Each cell is `median / p95 (n)`; `-` means no recovered task. "
        "Percentiles interpolate linearly between closest ranks (numpy's default): "
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


PROCESS_FAULT_TYPES = tuple(kind.type_name for kind in CATALOG if kind.needs_process)


def _process_section(
    agents: Sequence[str], records: Sequence[TaskRecord], servers: Sequence[ServerAccount]
) -> list[str]:
    """Per agent and process fault type (and the server's own deaths): what the supervisor recorded
    (crashes, restarts, downtime) beside how the agent's tasks fared."""
    causes = {c for account in servers for part in _account_parts(account) for c in part}
    touched = {t for r in records for t in r.fault_types if t in PROCESS_FAULT_TYPES}
    kinds = ordered(causes | touched, (*PROCESS_FAULT_TYPES, OWN_EXIT))
    if not kinds:
        return []
    lines = [
        "## The server process: downtime and recovery by fault type",
        "",
        "What the proxy's supervisor recorded in each session's events file: **crashes** (deaths with a "
        "non-zero status or caused by a fault), **restarts** after them, and **server downtime**, from a "
        "death to the first answer of the restarted server (`p50 / max (n)`; `lost` counts windows the "
        f"session ended in). `{OWN_EXIT}` is a server that died by itself; `control` one the control API ended; "
        "a stall or a starved CPU leaves the server alive, so it has no downtime here, only the client's cost. "
        "**Client recovery** is over the recovered tasks the fault type affected: from the first affected "
        "attempt to the task's correct completion. The outcome columns count the tasks it touched.",
        "",
    ]
    rows = []
    for agent in agents:
        mine = [a for a in servers if a.agent == agent]
        for kind in kinds:
            tasks = [r for r in records if r.agent == agent and kind in r.fault_types]
            crashes = sum(a.crashes.get(kind, 0) for a in mine)
            restarts = sum(a.restarts.get(kind, 0) for a in mine)
            downtimes = [d for a in mine for d in a.downtimes_s.get(kind, [])]
            lost = sum(a.lost.get(kind, 0) for a in mine)
            if not tasks and not crashes and not downtimes and not lost:
                continue
            recoveries = [
                r.recovery_s
                for r in tasks
                if r.outcome == "recovered" and r.recovery_s is not None and kind in r.affected_types
            ]
            outcomes = Counter(r.outcome for r in tasks)
            rows.append(
                [
                    md(agent),
                    md(kind),
                    str(len(tasks)),
                    *(str(outcomes[o]) for o in OUTCOMES),
                    str(crashes),
                    str(restarts),
                    _p50_max(downtimes) + (f", lost {lost}" if lost else ""),
                    _p50_max(recoveries),
                ]
            )
    header = ["agent", "fault type", "tasks", *OUTCOMES, "crashes", "restarts", "server downtime", "client recovery"]
    return [*lines, *md_table(header, rows, left_columns=2)]


def _account_parts(account: ServerAccount) -> tuple[Iterable[str], ...]:
    return (account.crashes, account.restarts, account.downtimes_s, account.lost)


def _p50_max(seconds: Sequence[float]) -> str:
    if not seconds:
        return "-"
    return f"{milliseconds(percentile(seconds, 50))} / {milliseconds(max(seconds))} ({len(seconds)})"


def _http_faults_section(summary: Summary) -> list[str]:
    """What each agent does with the faults only Streamable HTTP has (none ran: no section)."""
    http_types = {name for name in summary.fault_types if _http_only(name)}
    rows = [
        [md(f.fault_type), md(f.agent), str(f.tasks), str(f.recovered), str(f.failed_detected), str(f.failed_silent)]
        for f in summary.by_fault
        if f.fault_type in http_types
    ]
    if not rows:
        return []
    return [
        "## HTTP faults, by agent",
        "",
        "Tasks that each fault only HTTP has affected, by how they ended (a task counts under every type that "
        "affected it). `naive` gives up on each. `retry-only` retries them all with its own short backoff, "
        "writes included, and never starts a new session (after a 404 every retry on the lost session fails "
        "too). `resilient` waits what Retry-After says, starts a new session after a 404 (2025-11-25), "
        "re-issues a request whose stream was cut under a new id, and re-sends a non-idempotent write only "
        "under its idempotency key.",
        "",
        *md_table(["fault type", "agent", "tasks", "recovered", "failed_detected", "failed_silent"], rows, 2),
    ]


def _http_only(fault_type: str) -> bool:
    known = CATALOG.get(fault_type)
    return known is not None and known.transports == frozenset({HTTP})


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
        "Not the proxy's overhead: these are timed under the bench's own load "
        f"({meta.jobs} sessions at a time on {meta.machine.split(',')[0]}), so `added_*` is mostly waiting for a "
        "CPU. Over tool calls no fault touched: `client_*` is the round trip the agent saw, `upstream_*` the time "
        "the proxy waited for the server, `added_*` their difference per call (the proxy, its two pipe hops, and "
        "the queue for a core). The proxy's own cost is measured alone by the overhead benchmark "
        "(`make bench`, `benchmarks/stdio_overhead.py`; figures in `docs/results/performance.md`)."
    )
    return ["## Proxy time under the bench's load", "", intro, "", *md_table(["figure", "value"], rows)]


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


def write_report(
    records: Sequence[TaskRecord],
    out_dir: Path,
    meta: ReportMeta,
    servers: Sequence[ServerAccount] = (),
    sessions_dir: Path | None = None,
) -> Path:
    """Write out_dir/report.md and out_dir/charts/*.svg; return the report path. ``servers``: each
    session's server account (crashes, restarts, downtime), for the process-fault table;
    ``sessions_dir``: the session directories (default out_dir/sessions, when there is one).

    Raises ValueError before touching the disk when there are no records.
    """
    summary = summarize(records, meta.profile_order)
    charts = out_dir / "charts"
    charts.mkdir(parents=True, exist_ok=True)
    # newline="\n" keeps the bytes identical on Windows, where text mode would write CRLF.
    for name, svg in render_charts(summary).items():
        (charts / name).write_text(svg, encoding="utf-8", newline="\n")
    from mcpfault.harness.reliability_report import write_reliability_chart

    write_reliability_chart(records, charts)
    report = out_dir / "report.md"
    if sessions_dir is None and (out_dir / "sessions").is_dir():
        sessions_dir = out_dir / "sessions"
    rendered = render_markdown(summary, meta, records=records, servers=servers, sessions_dir=sessions_dir)
    report.write_text(rendered, encoding="utf-8", newline="\n")
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

    from mcpfault.harness.claims_report import is_claims_run, print_claims

    if is_claims_run(records):
        print_claims(records, console, title=title)
        return
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
