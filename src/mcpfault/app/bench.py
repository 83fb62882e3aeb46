"""Running the benchmark and writing its run directory: what ``mcpfault bench``, the MCP server's
``run_bench`` tool and the API share, so none of them starts the command line to get one.

``check(config)`` refuses a bad matrix before anything is written, and says its size and what to warn about;
``run_bench(config, ...)`` runs it into ``config.out_dir`` (``records.jsonl``, ``bench.json``,
``server.jsonl``, ``report.md``, ``report.html``, the charts) and returns a ``BenchOutcome``. The
caller prints: this module writes files and nothing to the terminal.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import anyio

from mcpfault.analysis.records import TaskRecord, write_records
from mcpfault.analysis.server import write_accounts
from mcpfault.harness import bench
from mcpfault.harness.bench import BenchConfig, BrokenSession
from mcpfault.harness.session import SessionPlan
from mcpfault.mock.world import World
from mcpfault.telemetry.names import TRANSPORT_STDIO


@dataclass(frozen=True, slots=True)
class BenchOutcome:
    """A finished bench: its records (judged), where they and the report were written, and what broke."""

    out_dir: Path
    records: tuple[TaskRecord, ...]
    report: Path | None  # report.md; None when no task ran
    rows: tuple[str, ...]  # the report's rows, in the order the profiles were given
    sessions: int
    wall_s: float
    broken: tuple[BrokenSession, ...]
    errors: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def no_ground_truth(self) -> bool:
        """Judged against a server cassette: detected versus unjudged only (harness.claims_report)."""
        return any(record.outcome == "unjudged" or record.no_ground_truth for record in self.records)


def config_for(
    profiles: Sequence[str] | None,
    agents: Sequence[str] | None,
    out_dir: Path,
    *,
    tasks: int = 100,
    session_tasks: int = 20,
    seed: int = 0,
    jobs: int = 24,
    transport: str = TRANSPORT_STDIO,
) -> BenchConfig:
    """A bench of bundled profile names, groups or .toml paths (None: the default matrix) x agent names
    (None: the default agents), with the command line's defaults. ``transport``: stdio, http or both; over
    HTTP the ``http`` profile, whose faults only HTTP has, joins the matrix (and only there)."""
    names = bench.expand_profile_names(",".join(profiles) if profiles is not None else None)
    return BenchConfig(
        profiles=tuple(bench.resolve_profile(name) for name in names),
        agents=tuple(agents) if agents is not None else bench.DEFAULT_AGENTS,
        out_dir=out_dir,
        tasks=tasks,
        session_tasks=session_tasks,
        seed=seed,
        jobs=jobs,
        transports=bench.parse_transports(transport),
        http_only=(bench.resolve_profile("http"),) if transport != TRANSPORT_STDIO else (),
    )


@dataclass(frozen=True, slots=True)
class Checked:
    """A matrix planned and found good: ``run_bench(config, checked=...)`` runs these very plans."""

    config: BenchConfig
    tasks: int  # how many task runs the matrix holds (the progress bar's total)
    warnings: list[str]  # what to tell the user before it runs
    world: World
    plans: tuple[SessionPlan, ...]


def check(config: BenchConfig) -> Checked:
    """Plan the whole matrix (every name and profile checked: a ``UsageError`` says what is wrong);
    nothing is written."""
    world = World.generate(config.seed)
    plans = tuple(bench.plan_sessions(config, world))
    return Checked(config, sum(len(plan.tasks) for plan in plans), bench.bench_warnings(config), world, plans)


def run_bench(
    config: BenchConfig,
    *,
    command: str,
    on_task_done: Callable[[], None] = lambda: None,
    on_session_done: Callable[[Sequence[TaskRecord]], None] = lambda _records: None,
    timeout_s: float | None = None,
    checked: Checked | None = None,
) -> BenchOutcome:
    """Run ``config`` into ``config.out_dir`` and write the run directory; ``command`` is what the report
    says ran it. ``timeout_s``: the sessions still running then are cancelled (and their processes
    ended), and ``TimeoutError`` is raised. ``checked``: what ``check(config)`` planned, run as planned
    rather than planned again."""
    if checked is None:
        checked = check(config)
    elif checked.config != config:
        raise ValueError("run_bench: checked= was planned for another config; check(config) this one")
    warnings, world, plans = checked.warnings, checked.world, checked.plans
    rows = bench.matrix_rows(config)  # the order the profiles were given (the plans run slowest first)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")

    async def main() -> bench.BenchResult:
        with anyio.fail_after(timeout_s):
            return await bench.run_bench(config, plans, world, on_task_done, on_session_done)

    result = anyio.run(main)
    out = config.out_dir
    write_records(out / "records.jsonl", result.records)
    _write_bench_json(out, config, command=command, result=result, started_at=started_at, warnings=warnings)
    write_accounts(out / bench.SERVER_ACCOUNTS, result.servers)
    report = (
        _write_report(config, command=command, result=result, rows=rows, started_at=started_at, warnings=warnings)
        if result.records
        else None
    )
    if report is not None:
        from mcpfault.harness.report_html import write_html

        write_html(out)  # report.html beside report.md
    return BenchOutcome(
        out_dir=out,
        records=tuple(result.records),
        report=report,
        rows=tuple(rows),
        sessions=result.sessions,
        wall_s=result.wall_s,
        broken=tuple(result.broken),
        errors=tuple(result.errors),
        warnings=tuple(warnings),
    )


def _shard(config: BenchConfig) -> str | None:
    return f"{config.shard[0]}/{config.shard[1]}" if config.shard is not None else None


def _write_bench_json(
    out: Path, config: BenchConfig, *, command: str, result: bench.BenchResult, started_at: str, warnings: list[str]
) -> None:
    meta = {
        "command": command,
        "seed": config.seed,
        "tasks_per_cell": config.tasks,
        "task_deadline_s": config.task_deadline_s,
        "session_tasks": config.session_tasks,
        "trials": config.trials,
        "seeds": config.seeds,
        "jobs": config.jobs,
        "shard": _shard(config),
        "rows": list(bench.matrix_rows(config)),  # the report's rows in the order the profiles were given
        "wall_s": round(result.wall_s, 1),
        "started_at": started_at,
        "sessions": result.sessions,
        "broken": [b.as_dict() for b in result.broken],
        "warnings": warnings,
    }
    (out / "bench.json").write_text(json.dumps(meta, indent=2) + "\n")


def _write_report(
    config: BenchConfig,
    *,
    command: str,
    result: bench.BenchResult,
    rows: Sequence[str],
    started_at: str,
    warnings: list[str],
) -> Path:
    if config.server_cassette is not None:
        from mcpfault.harness.claims_report import write_claims_report

        # No ground truth: counts of detected and unjudged, no rates, no charts.
        return write_claims_report(result.records, config.out_dir, command=command, profile_order=rows)
    from mcpfault.harness.report import ReportMeta, write_report

    meta = ReportMeta(
        command=command,
        seed=config.seed,
        tasks_per_cell=config.tasks,
        wall_s=round(result.wall_s, 1),
        jobs=config.jobs,
        started_at=started_at,
        machine=f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()} {platform.release()}",
        proxy_overhead=result.proxy_overhead(),
        broken=tuple((b.profile, b.agent, b.session, b.error) for b in result.broken),
        session_tasks=config.session_tasks,
        trials=config.trials,
        profile_order=tuple(rows),
        task_deadline_s=config.task_deadline_s,
        warnings=tuple(warnings),
        seeds=config.seeds,
        fixed_profiles=bench.fixed_profiles(config),
    )
    return write_report(result.records, config.out_dir, meta, result.servers)
