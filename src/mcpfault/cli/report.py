"""``mcpfault report``: bench shards merged into one report, a run judged again, report.html for a run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mcpfault.cli.common import EXIT_CHECK_FAILED, EXIT_OK, output_dir, table_console
from mcpfault.errors import UsageError


def add_parser(commands: Any) -> None:
    report = commands.add_parser(
        "report",
        help="merge bench shards into one report, judge a run again, or write report.html for a run",
        description="--merge: read records.jsonl (and bench.json) from each bench output directory given, check "
        "that they are disjoint slices of one matrix, and write one records.jsonl, report.md, report.html and "
        "charts. --rejudge: judge every session of a bench run again with the current judge, from the evidence "
        "its session directories keep (answers, attempts, events, spans, the server's state), and write the new "
        "records.jsonl, report.md and charts; it prints which outcomes changed. Exit 1 when some session "
        "could not be judged again (its old records are kept). --html RUN_DIR: write RUN_DIR/report.html for an "
        "existing run, bench or experiment (exit 2 for a directory that is none of them).",
    )
    which = report.add_mutually_exclusive_group(required=True)
    which.add_argument("--merge", nargs="+", type=Path, metavar="DIR", help="bench output directories")
    which.add_argument("--rejudge", type=Path, metavar="RUN_DIR", help="a bench output directory to judge again")
    which.add_argument(
        "--html", type=Path, metavar="RUN_DIR", help="write report.html for this run's, bench's or experiment's --out"
    )
    report.add_argument("--out", type=Path, help="output directory (default runs/<time>-merged)")
    report.add_argument(
        "--allow-partial",
        action="store_true",
        help="merge even when some shards of the I/N set are missing (the report is marked incomplete)",
    )
    report.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    import os
    import platform
    import shlex

    from mcpfault.harness.report_html import write_html

    if args.html is not None:
        if not args.html.is_dir():
            raise UsageError(
                f"--html {args.html}: not a directory; give the --out directory of a run, bench or experiment"
            )
        try:
            page = write_html(args.html)
        except ValueError as exc:
            raise UsageError(f"--html: {exc}") from None
        print(f"report: {page} ({page.stat().st_size:,} bytes)")
        return EXIT_OK

    from mcpfault.analysis.records import write_records
    from mcpfault.analysis.server import write_accounts
    from mcpfault.harness.bench import SERVER_ACCOUNTS, merge_results
    from mcpfault.harness.claims_report import is_claims_run, print_claims, write_claims_report
    from mcpfault.harness.report import ReportMeta, print_summary, write_report

    if args.rejudge is not None:
        return _rejudge(args)
    merged = merge_results(args.merge, allow_partial=args.allow_partial)
    out = output_dir(args.out, "merged")
    incomplete = ""
    if merged.missing:
        incomplete = f"INCOMPLETE: shard(s) {', '.join(merged.missing)} missing (--allow-partial); "
        print(f"mcpfault report: {incomplete}the counts cover part of the matrix only", file=sys.stderr)
    write_records(out / "records.jsonl", merged.records)
    meta = ReportMeta(
        command=shlex.join(["mcpfault", *sys.argv[1:]]),
        seed=merged.seed,
        tasks_per_cell=merged.tasks_per_cell,
        wall_s=merged.wall_s,
        jobs=merged.jobs,
        started_at=merged.started_at,
        machine=f"{incomplete}{len(args.merge)} shards; merged on {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        broken=tuple((b.profile, b.agent, b.session, b.error) for b in merged.broken),
        trials=merged.trials,
        seeds=len({r.seed for r in merged.records}),
    )
    if merged.servers:
        write_accounts(out / SERVER_ACCOUNTS, merged.servers)
    claims = is_claims_run(merged.records)
    try:
        if claims:  # shards of a bench against a server cassette: no ground truth, no rates
            report = write_claims_report(merged.records, out, command=meta.command)
        else:
            report = write_report(merged.records, out, meta, merged.servers)
    except ValueError as exc:  # records judged with and without ground truth do not make one report
        raise UsageError(f"--merge: {exc}; merge the benches against a server cassette apart") from None
    write_html(out)
    if claims:
        print_claims(merged.records, table_console(), title="tasks per profile and agent against the server cassette")
    else:
        print_summary(merged.records, table_console())
    print(f"{len(merged.records)} tasks from {len(args.merge)} directories; report: {report}")
    return EXIT_OK


def _rejudge(args: argparse.Namespace) -> int:
    import shlex

    from mcpfault.analysis.records import write_records
    from mcpfault.harness.bench import merge_results
    from mcpfault.harness.rejudge import describe, rejudge_run
    from mcpfault.harness.report import ReportMeta, print_summary, write_report

    run_dir: Path = args.rejudge
    result = rejudge_run(run_dir)
    before = merge_results([run_dir], allow_partial=True)  # the run's own meta: seed, cells, wall time
    out = output_dir(args.out, "rejudged")
    write_records(out / "records.jsonl", result.records)
    meta = ReportMeta(
        command=shlex.join(["mcpfault", *sys.argv[1:]]),
        seed=before.seed,
        tasks_per_cell=before.tasks_per_cell,
        wall_s=before.wall_s,
        jobs=before.jobs,
        started_at=before.started_at,
        machine=f"re-judged from {run_dir}",
        broken=tuple((b.profile, b.agent, b.session, b.error) for b in before.broken),
        trials=before.trials,
    )
    from mcpfault.harness.claims_report import is_claims_run, print_claims, write_claims_report

    if is_claims_run(result.records):  # a bench against a server cassette: judged again from the claims
        report = write_claims_report(result.records, out, command=meta.command)
        print_claims(result.records, table_console(), title="tasks per profile and agent against the server cassette")
    else:
        report = write_report(result.records, out, meta, before.servers, sessions_dir=run_dir / "sessions")
        print_summary(result.records, table_console())
    from mcpfault.harness.report_html import write_html

    write_html(out)  # report.html beside the new report.md, as a bench writes it
    for line in describe(result, run_dir):
        print(line)
    print(f"report: {report}")
    return EXIT_CHECK_FAILED if result.unjudgeable else EXIT_OK
