"""``mcpfault run`` and ``bench``: agents through the proxy against the mock server, judged."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcpfault.cli import external_agents, llm_agents
from mcpfault.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    announce_metrics,
    output_dir,
    output_path,
    table_console,
    writable,
)
from mcpfault.cli.progress import progress
from mcpfault.errors import UsageError

if TYPE_CHECKING:  # imported where used: a command pays only for what it runs
    from rich.console import Console

    from mcpfault.analysis.records import TaskRecord
    from mcpfault.app.bench import BenchOutcome
    from mcpfault.harness.session import SessionResult


def add_parsers(commands: Any) -> None:
    _add_run(commands)
    _add_bench(commands)


def _add_run(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="one session: an agent runs tasks through the proxy against the bundled mock server",
        description="Start the proxy with PROFILE in front of the bundled mock server and let AGENT run TASKS "
        "tasks through it, one after another. Judges every task (success, recovered, failed_detected, "
        "failed_silent) and prints a summary. Writes attempts, proxy events, the proxy's log, the server's final "
        "state, the task records, the spans of all three processes (client-, proxy-, server-spans.jsonl, a trace "
        "per task, linked to its session's) and report.html under --out.",
    )
    run.add_argument(
        "--profile",
        default="mixed",
        help="a bundled profile's name (mcpfault profiles) or a .toml path (default mixed)",
    )
    run.add_argument(
        "--agent",
        default="naive",
        help="naive, retry-only, resilient, resilient-no-<mechanism>, llm (a model), or cmd:NAME (your agent, with "
        "--agent-command) (default naive)",
    )
    run.add_argument("--tasks", type=int, default=40, help="tasks in the session (default 40)")
    run.add_argument(
        "--era",
        choices=["legacy", "modern"],
        default="legacy",
        help="protocol era of the client: legacy 2025-11-25, modern 2026-07-28 (default legacy)",
    )
    run.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="how the agent reaches the proxy: stdio, or http (Streamable HTTP: the proxy listens on "
        "127.0.0.1, a port the OS picks, in front of the mock) (default stdio)",
    )
    _task_options(run, "runs/<time>-<profile>-<agent>")
    llm_agents.add_options(run, bench=False)
    external_agents.add_options(run, bench=False)
    run.set_defaults(handler=_run)


def _add_bench(commands: Any) -> None:
    bench = commands.add_parser(
        "bench",
        help="the matrix of profiles x agents; outcomes, retries, duplicates, recovery time; report.md and charts",
        description="Run every agent under every profile (TASKS tasks per cell, in sessions of SESSION_TASKS run "
        "JOBS at a time), judge every task, and write records.jsonl, report.md, report.html and SVG charts under "
        "--out. "
        "With no arguments: the ten stdio profiles of the benchmark x naive, retry-only, resilient x 100 tasks.",
    )
    bench.add_argument(
        "--profiles",
        help="comma-separated bundled names or .toml paths; 'gentle' for the ten stdio profiles of the "
        "benchmark (the default), 'stress' for outage, outage_1s, outage_10s, burst, storm and lies_storm, "
        "'process' for crash_restart, stall and cpu_starve",
    )
    bench.add_argument(
        "--agents",
        help="comma-separated agent names; llm for the models of --models; cmd:NAME for your agent (with "
        "--agent-command NAME=...) (default: naive,retry-only,resilient)",
    )
    bench.add_argument("--tasks", "--iterations", type=int, default=100, dest="tasks", help="tasks per cell (100)")
    bench.add_argument("--session-tasks", type=int, default=20, help="tasks per session (20)")
    bench.add_argument("--jobs", type=int, default=24, help="sessions at a time (24)")
    bench.add_argument(
        "--plain-spans",
        action="store_true",
        help="keep each session's span files as written; by default they are gzipped once the session is judged "
        "(*-spans.jsonl.gz, a fifth of the size; traces show and traces export read both; zcat for jq)",
    )
    bench.add_argument(
        "--trials",
        type=int,
        default=1,
        metavar="K",
        help="run every cell K times, each with its own derived fault seeds; the report adds pass^k for "
        "k = 1..K and the share of tasks never silent across k runs (1)",
    )
    bench.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="run the whole matrix under N seeds, --seed to --seed+N-1 (each its own world, tasks and faults); "
        "the report gives every cell's rate per seed and the spread across seeds (1)",
    )
    bench.add_argument(
        "--shard", metavar="I/N", help="run only the I-th of N disjoint slices of the sessions (I from 0)"
    )
    bench.add_argument(
        "--transport",
        choices=["stdio", "http", "both"],
        default="stdio",
        help="how agents reach the proxy: stdio, http (Streamable HTTP on 127.0.0.1; the matrix gains the "
        "http profile there, and runs it only there), or both (a report row per transport) (default stdio)",
    )
    bench.add_argument(
        "--era",
        choices=["legacy", "modern"],
        default="legacy",
        help="protocol era of the clients: legacy 2025-11-25 (over HTTP: sessions), modern 2026-07-28 "
        "(stateless) (default legacy)",
    )
    _task_options(bench, "runs/<time>-bench")
    llm_agents.add_options(bench, bench=True)
    external_agents.add_options(bench, bench=True)
    bench.set_defaults(handler=_bench)


def _task_options(parser: argparse.ArgumentParser, default_out: str) -> None:
    parser.add_argument(
        "--workflows",
        help="comma-separated workflows of the task suite (default: the four tool workflows; config_audit also "
        "reads resources and a prompt)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds the world, the task plan and the faults (derived from it and the profile's seed; the "
        "summary shows the one used) (default 0)",
    )
    parser.add_argument("--deadline", type=float, default=0.5, metavar="SECONDS", help="per-call deadline (0.5)")
    parser.add_argument(
        "--task-deadline-s",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="each task's deadline for the scripted agents: no attempt is sent past it, and resilient spends it "
        "on backoff and on waiting for its breaker's probe (5.0; one bench second stands for a production minute, "
        "see README); the llm agent is bounded by --max-turns instead, your agent (cmd:NAME) by --agent-timeout",
    )
    parser.add_argument("--out", type=Path, help=f"output directory (default {default_out})")
    parser.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="also export the spans of the harness, the proxy and the mock server over OTLP/HTTP "
        "(each session writes them to client-, proxy- and server-spans.jsonl regardless)",
    )
    parser.add_argument(
        "--metrics-addr",
        metavar="HOST:PORT",
        help="serve the task metrics on /metrics while running (127.0.0.1 unless MCPFAULT_METRICS_TOKEN is set)",
    )
    parser.add_argument(
        "--pushgateway",
        metavar="URL",
        help="push task outcomes, recovery times, retries, duplicates and silent failures to a Pushgateway at the end",
    )
    parser.add_argument(
        "--server-cassette",
        type=Path,
        metavar="FILE",
        help="the server is 'mcpfault replay FILE' (a session you recorded with mcpfault record) instead of the "
        "mock, behind the same proxy; for cmd:NAME and llm agents, with --cassette-task. No ground truth: "
        "tasks are judged failed_detected or unjudged from the agent's claim, with no success rate",
    )
    parser.add_argument(
        "--cassette-task",
        metavar="TEXT",
        help="with --server-cassette: the instruction your agent ran when you recorded (every task is a trial "
        "of it; the task file's workflow is 'cassette', its answer schema any object)",
    )
    parser.add_argument(
        "--probe",
        metavar="ebpf|fake:EVENTS.json",
        help="run each proxy with the side-effect probe (eBPF: root and bpftrace); the probe's duplicate side "
        "effects must agree with the judge's duplicates, else the session is reported broken (exit 1)",
    )


def _check_task_deadline(args: argparse.Namespace) -> None:
    """--task-deadline-s must leave room for at least one call of --deadline seconds."""
    if not args.task_deadline_s > 0:
        raise UsageError(f"--task-deadline-s {args.task_deadline_s}: give seconds > 0")
    if args.task_deadline_s < args.deadline:
        raise UsageError(
            f"--task-deadline-s {args.task_deadline_s:g} is shorter than one call's --deadline {args.deadline:g}: "
            "a task would end before its first call could time out; give a task deadline of at least the call's"
        )


def _server_cassette(args: argparse.Namespace, agents: Sequence[str]) -> Path | None:
    """--server-cassette, checked before anything starts: a readable cassette with tools, agents that can
    use a server they were not written for (cmd:NAME, llm), and the instruction they run."""
    cassette: Path | None = args.server_cassette
    if cassette is None:
        if args.cassette_task is not None:
            raise UsageError("--cassette-task applies with --server-cassette FILE only; give both or neither")
        return None
    from mcpfault.cassette.format import load
    from mcpfault.harness.agents.external import is_external

    scripted = [a for a in agents if a != "llm" and not is_external(a)]
    if scripted:
        raise UsageError(
            f"--server-cassette: agent(s) {', '.join(scripted)} run the mock server's task code and need its "
            "tools; against a cassette use your agent (--agent cmd:NAME --agent-command NAME=...) or llm"
        )
    try:
        recorded = load(cassette)
    except UsageError as exc:
        raise UsageError(f"--server-cassette: {exc}") from None
    eras = recorded.header.get("eras")
    if isinstance(eras, list) and eras and args.era not in eras:
        # Replay answers the handshake as recorded: a legacy recording has no server/discover to give back.
        raise UsageError(
            f"--server-cassette {cassette}: recorded in the {', '.join(map(str, eras))} era, and replay answers "
            f"the handshake as recorded; run with --era {eras[0]} (or record a session in the {args.era} era)"
        )
    if not recorded.listing("tools/list"):
        raise UsageError(
            f"--server-cassette {cassette}: no tools: the cassette holds no answered tools/list with a tool in it; "
            "record a session in which the client lists the tools (mcpfault record --out FILE -- CMD)"
        )
    if args.cassette_task is None or not args.cassette_task.strip():
        raise UsageError(
            f"--server-cassette {cassette}: give --cassette-task TEXT, the instruction your agent ran when you "
            "recorded (the mock's tasks name the mock's ids, which a cassette does not know)"
        )
    if args.workflows is not None:
        raise UsageError("--workflows names the mock's task suite; with --server-cassette the task is --cassette-task")
    if args.probe is not None:
        raise UsageError("--probe cross-checks the mock server's write journal; a cassette keeps none")
    if args.reliability_hints != "off":
        raise UsageError(
            "--reliability-hints tell the model about the mock server (as_of, idempotency_key); a cassette's "
            "server is yours: leave them off with --server-cassette"
        )
    return cassette.absolute()


def _probe(option: str | None) -> str | None:
    """--probe, checked before anything starts (exit 2 with one line); a fake events file made absolute."""
    if option is None:
        return None
    from mcpfault.probe import setup

    backend, events_file = setup.check(option)
    return f"fake:{events_file.absolute()}" if events_file is not None else backend


def _workflows(option: str | None) -> tuple[str, ...]:
    from mcpfault.harness.agents.tasks import WORKFLOWS, check_workflows

    if option is None:
        return WORKFLOWS
    return check_workflows([w.strip() for w in option.split(",") if w.strip()])


def _run(args: argparse.Namespace) -> int:
    from mcpfault.app.run import plan_session, run_session_dir
    from mcpfault.faults import profile
    from mcpfault.harness.bench import resolve_profile
    from mcpfault.harness.report import print_outcomes

    loaded = profile.load(resolve_profile(args.profile))
    agent, llm, external = _run_agent(args)
    if args.tasks < 1:
        raise UsageError(f"--tasks {args.tasks}: give at least 1")
    cassette = _server_cassette(args, (args.agent,))
    if args.deadline <= 0:
        raise UsageError(f"--deadline {args.deadline}: give seconds > 0")
    _check_task_deadline(args)
    endpoint = _otlp_endpoint(args.otlp_endpoint)
    _check_pushgateway(args.pushgateway)
    probe = _probe(args.probe)
    from mcpfault.faults.profile_warnings import Timing, warnings_of

    for warning in warnings_of(loaded, Timing(args.tasks, args.deadline)):
        print(f"mcpfault run: warning: {warning.located()}", file=sys.stderr)
    out = output_dir(args.out, f"{loaded.name}-{agent}")
    planned = plan_session(
        args.profile,
        agent,
        out,
        tasks=args.tasks,
        seed=args.seed,
        workflows=_workflows(args.workflows),
        server_cassette=cassette,
        cassette_task=args.cassette_task or "",
        deadline_s=args.deadline,
        task_deadline_s=args.task_deadline_s,
        era=args.era,
        transport=args.transport,
        proxy_summary=True,
        otlp_endpoint=endpoint,
        llm=llm,
        probe=probe,
        external=external[0] if external else None,
    )
    if llm is not None:
        import shlex

        llm_agents.write_manifest(args, shlex.join(["mcpfault", *sys.argv[1:]]), [llm])
    console = table_console()
    from mcpfault.harness.metrics_push import LiveMetrics

    live = LiveMetrics.start(args.metrics_addr)
    announce_metrics(live.url)
    try:
        with progress(f"{loaded.name} / {agent}", args.tasks, console) as advance:
            result = run_session_dir(planned, on_task_done=advance)
        live.record(result.records)
    finally:
        live.close()
    over = " over Streamable HTTP" if args.transport == "http" else ""
    print_outcomes(result.records, console, title=f"{args.tasks} tasks, profile {loaded.name!r}, agent {agent!r}{over}")
    _print_run_files(result, out, console, cassette=cassette is not None)
    pushed = _push(args.pushgateway, result.records, out, "run")
    if result.error:
        print(f"mcpfault run: {result.error}", file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_OK if pushed else EXIT_CHECK_FAILED


def _run_agent(args: argparse.Namespace) -> tuple[str, Any, tuple[Any, ...]]:
    """``run --agent``: its label, the model variant of ``llm`` (else None), and the external agent's
    configuration (a list of at most one)."""
    from mcpfault.harness.agents.roster import check_agent_name

    external = external_agents.configs(args, (args.agent,), _workflows(args.workflows))
    if args.agent == "llm":
        (llm,) = llm_agents.variants(args, args.model)
        return llm.label, llm, external
    llm_agents.refuse_options(args, args.model)
    return (args.agent if external else check_agent_name(args.agent)), None, external


def _print_run_files(result: SessionResult, out: Path, console: Console, *, cassette: bool) -> None:
    """After ``run``'s outcome table: the model's usage, the proxy's log, and where everything is."""
    from mcpfault.harness.model_usage import print_model_usage

    if result.records:
        print_model_usage(result.records, console)
    console.print((out / "proxy.log").read_text(errors="replace").rstrip(), markup=False, highlight=False)
    console.print(
        f"wall time {result.wall_s:.1f} s; records, attempts, events, spans"
        + (" and proxy log" if cassette else ", proxy log and server state")  # a cassette keeps no state
        + f" in {out}/"
        + (f"; session trace {result.trace_id}, a trace per task (traces show {out})" if result.trace_id else "")
    )


def _bench(args: argparse.Namespace) -> int:
    import shlex

    from mcpfault.app import bench as app_bench
    from mcpfault.harness.bench import DEFAULT_AGENTS, parse_shard

    agents = tuple(a.strip() for a in args.agents.split(",")) if args.agents else DEFAULT_AGENTS
    llm: tuple[Any, ...] = ()
    external = external_agents.configs(args, agents, _workflows(args.workflows))
    if "llm" in agents:
        llm = llm_agents.variants(args, args.models)
    else:
        llm_agents.refuse_options(args, args.models)
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: give at least 1")
    _check_task_deadline(args)
    cassette = _server_cassette(args, agents)
    out = output_path(args.out, "bench")
    config = dataclasses.replace(
        app_bench.config_for(
            [args.profiles] if args.profiles else None,
            agents,
            out,
            tasks=args.tasks,
            session_tasks=args.session_tasks,
            seed=args.seed,
            jobs=args.jobs,
            transport=args.transport,
        ),
        deadline_s=args.deadline,
        task_deadline_s=args.task_deadline_s,
        workflows=_workflows(args.workflows),
        otlp_endpoint=_otlp_endpoint(args.otlp_endpoint),
        shard=parse_shard(args.shard) if args.shard else None,
        trials=args.trials,
        seeds=args.seeds,
        llm=llm,
        probe=_probe(args.probe),
        era=args.era,
        external=external,
        compress_spans=not args.plain_spans,
        server_cassette=cassette,
        cassette_task=args.cassette_task or "",
    )
    _check_pushgateway(args.pushgateway)
    checked = app_bench.check(config)  # every name and profile checked before the directory exists
    for warning in checked.warnings:
        print(f"mcpfault bench: warning: {warning}", file=sys.stderr)
    writable(out)
    command = shlex.join(["mcpfault", *sys.argv[1:]])
    llm_agents.write_manifest(args, command, llm)
    console = table_console()
    from mcpfault.harness.metrics_push import LiveMetrics

    live = LiveMetrics.start(args.metrics_addr)
    announce_metrics(live.url)
    try:
        with progress("bench", checked.tasks, console) as advance:
            done = app_bench.run_bench(
                config, command=command, on_task_done=advance, on_session_done=live.record, checked=checked
            )
    finally:
        live.close()
    records = list(done.records)
    _print_bench(done, records, console, cassette=cassette is not None)
    pushed = _push(args.pushgateway, records, done.out_dir, "bench")
    for error in done.errors:
        print(f"mcpfault bench: {error}", file=sys.stderr)
    return EXIT_CHECK_FAILED if done.errors or not pushed else EXIT_OK


def _print_bench(done: BenchOutcome, records: list[TaskRecord], console: Console, *, cassette: bool) -> None:
    """``bench``'s table (claims only, against a server cassette), the model's usage, and where the report is."""
    from mcpfault.analysis.summary import summarize
    from mcpfault.harness.model_usage import print_model_usage
    from mcpfault.harness.report import print_summary

    if done.no_ground_truth or cassette:
        from mcpfault.harness.claims_report import print_claims

        title = "tasks per profile and agent against the server cassette"
        print_claims(records, console, title=title, profile_order=done.rows)
    else:
        print_summary(summarize(records, done.rows) if records else records, console)
    if records:
        print_model_usage(records, console)
    console.print(
        f"{len(records)} tasks in {done.sessions} sessions, wall time {done.wall_s:.1f} s"
        + (f"; report: {done.report}" if done.report else "")
    )


def _check_pushgateway(url: str | None) -> None:
    if url is None:
        return
    from mcpfault.harness.metrics_push import check_pushgateway_url

    try:
        check_pushgateway_url(url)
    except ValueError as exc:
        raise UsageError(f"--pushgateway: {exc}") from None


def _push(url: str | None, records: Any, out: Path, command: str) -> bool:
    """Push the run's metrics; the results on disk stay either way. False when the push failed."""
    if url is None or not records:
        return True
    from mcpfault.harness.metrics_push import push_bench_metrics, trace_ids_of

    try:
        push_bench_metrics(records, url, grouping={"run": out.name}, trace_ids=trace_ids_of(records))
    except OSError as exc:
        print(f"mcpfault {command}: {exc}; the results are in {out}/", file=sys.stderr)
        return False
    return True


def _otlp_endpoint(url: str | None) -> str | None:
    """``--otlp-endpoint`` of run and bench, refused before any session starts if it cannot be a collector."""
    from mcpfault.loopback import check_http_url
    from mcpfault.telemetry.otel_env import COLLECTOR_EXAMPLE

    if url is None:
        return None
    check_http_url(url, "--otlp-endpoint", COLLECTOR_EXAMPLE)  # a UsageError, credentials hidden
    return url.strip()
