"""``mcpfault experiment validate`` and ``experiment run``: a hypothesis, actions on a timeline, stop conditions."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mcpfault.cli.common import EXIT_OK, check_files, stdout_console, usage

EXIT_INVALID = 2

EPILOG = """exit codes of run:
  0  completed, and the hypothesis held
  1  completed, and the hypothesis deviated (or did not hold before the method, which then did not run)
  2  an invalid experiment file (every problem is named)
  3  stopped by a stop condition (every fault was switched off at once)
  4  failed: something could not start (the proxy, the target server, the load)

examples:
  mcpfault experiment list                                 (the bundled experiments, by name)
  mcpfault experiment validate experiments/*.toml
  mcpfault experiment run error-burst-stops --dry-run      (a bundled experiment, by name)
  mcpfault experiment run experiments/error-burst-stops.toml --out results/burst"""


def add_parser(commands: Any) -> None:
    experiment = commands.add_parser(
        "experiment",
        help="run a chaos experiment: steady-state hypothesis, timed actions, stop conditions",
        description="An experiment file states a steady-state hypothesis (probes with tolerances), a method (fault "
        "rules and process actions on a timeline) and stop conditions, as AWS FIS and Chaos Toolkit do. run "
        "starts a proxy with its control API, drives the load, performs the method, and writes journal.jsonl "
        "(FIS log schema v2), spans, metrics and report.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = experiment.add_subparsers(dest="experiment_command", metavar="ACTION")
    listing = actions.add_parser(
        "list",
        help="list the bundled experiments, one line each",
        description="List the experiments that ship with mcpfault: give a name to validate and run "
        "(experiment run server-killed); --path prints where each file is, to copy one as a starting point.",
    )
    listing.add_argument("--path", action="store_true", help="also print each experiment's file")
    listing.set_defaults(handler=_list)
    validate = actions.add_parser("validate", help="check experiment files and name every problem")
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE.toml|NAME")
    validate.set_defaults(handler=_validate)
    run = actions.add_parser(
        "run", help="run an experiment", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    run.add_argument("file", type=Path, metavar="FILE.toml|NAME")
    run.add_argument("--out", type=Path, metavar="DIR", help="where results go (default results/experiment-NAME)")
    run.add_argument("--dry-run", action="store_true", help="validate and print the timeline; start nothing")
    run.set_defaults(handler=_run)
    experiment.set_defaults(handler=lambda _args: usage(experiment))


def _load(path: Path) -> Any:
    from mcpfault.experiments.plan import ExperimentError, load

    try:
        return load(path)
    except ExperimentError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return None


def _list(args: argparse.Namespace) -> int:
    import tomllib

    from mcpfault.experiments.plan import bundled

    found = bundled()
    width = max((len(name) for name in found), default=0)
    for name, path in found.items():
        try:
            title = tomllib.loads(path.read_text(encoding="utf-8")).get("title", "")
        except (OSError, tomllib.TOMLDecodeError) as exc:
            title = f"(unreadable: {exc})"
        print(f"{name:<{width}}  {title}" + (f"  [{path}]" if args.path else ""))
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    from mcpfault.experiments.plan import load

    def describe(plan: Any) -> str:
        return f"{plan.source}: ok ({plan.title!r}: {len(plan.method)} action(s), {plan.total_s:g} s)"

    return EXIT_INVALID if check_files(args.files, load, describe, "experiment file") else EXIT_OK


def _run(args: argparse.Namespace) -> int:
    plan = _load(args.file)
    if plan is None:
        return EXIT_INVALID
    _print_timeline(plan)
    if args.dry_run:
        print("dry run: nothing started")
        return EXIT_OK
    import anyio

    from mcpfault.experiments.runner import run

    out = args.out or Path("results") / f"experiment-{args.file.stem}"
    outcome = anyio.run(run, plan, out)
    from mcpfault.harness.report_html import write_html

    write_html(out)  # report.html beside report.md
    print(f"verdict: {outcome.verdict} (state {outcome.state}); report, journal, events and spans in {out}/")
    return int(outcome.exit_code)


def _print_timeline(plan: Any) -> None:
    from rich.table import Table

    console = stdout_console(140, highlight=False)
    table = Table(title=f"{plan.title} ({plan.total_s:g} s)", title_justify="left")
    for column in ("t (s)", "what", "until (s)"):
        table.add_column(column)
    warmup = plan.warmup_s
    table.add_row("0", "proxy up, load starts; hypothesis measured before the method", f"{warmup:g}")
    for action in sorted(plan.method, key=lambda a: a.start_after_s):
        start = warmup + action.start_after_s
        table.add_row(f"{start:g}", f"{action.name}: {action.describe()}", f"{start + action.duration_s:g}")
    end = warmup + plan.method_s
    table.add_row(f"{end:g}", "method over; hypothesis measured after it", f"{end + plan.cooldown_s:g}")
    console.print(table)
    for spec in plan.hypothesis:
        when = "before, during and after" if spec.during else "before and after"
        console.print(f"hypothesis {spec.name!r}: {_probe(spec)} {spec.tolerance.describe()}, {when}")
    for spec in plan.stop_conditions:
        console.print(
            f"stop condition {spec.name!r}: {_probe(spec)} {spec.tolerance.describe()}, every {spec.interval_s:g} s"
        )


def _probe(spec: Any) -> str:
    if spec.probe == "metric":
        return f"{spec.metric} over {spec.window_s:g} s"
    if spec.probe == "promql":
        return f"PromQL {spec.query!r}"
    if spec.probe == "http":
        return f"HTTP status of {spec.url}"
    return f"exit status of {' '.join(spec.command)}"
