"""``mcpfault run``, ``bench`` and ``report``: agents through the proxy against the mock server, judged."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcpfault.cli import external_agents
from mcpfault.cli.common import EXIT_CHECK_FAILED, EXIT_OK, announce_metrics, stdout_console
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
    _add_report(commands)


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
    _llm_options(run, bench=False)
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
    _llm_options(bench, bench=True)
    external_agents.add_options(bench, bench=True)
    bench.set_defaults(handler=_bench)


def _add_report(commands: Any) -> None:
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


def _llm_options(parser: argparse.ArgumentParser, *, bench: bool) -> None:
    group = parser.add_argument_group(
        "the llm agent", "a model solves the tasks from prompts (needs the llm extra and ANTHROPIC_API_KEY; see README)"
    )
    if bench:
        group.add_argument(
            "--models", "--model", dest="models", metavar="A,B", help="comma-separated models for the llm agent"
        )
    else:
        group.add_argument(
            "--model",
            metavar="NAME",
            help="the model of the llm agent: anthropic:MODEL (a bare name is Anthropic's) or openai:MODEL "
            "(default claude-sonnet-4-5)",
        )
    group.add_argument(
        "--reliability-hints",
        nargs="?",
        const="on",
        default="off",
        choices=["on", "off", "both"] if bench else ["on", "off"],
        help="tell the model the connection is unreliable and what as_of means"
        + ("; both: run every model with and without" if bench else ""),
    )
    group.add_argument("--max-turns", type=int, default=24, help="model turns per task (24)")
    group.add_argument(
        "--llm-base-url",
        metavar="URL",
        help="the model API's base URL (an OpenAI-compatible server for openai:MODEL: vLLM, Ollama, llama.cpp, "
        "LiteLLM, mcpfault fake-llm); default OPENAI_BASE_URL / ANTHROPIC_BASE_URL, else the provider's",
    )
    group.add_argument(
        "--llm-price", metavar="IN,OUT", help="USD per million input and output tokens, over the price table (0,0)"
    )
    group.add_argument("--record", type=Path, metavar="DIR", help="save every model exchange under DIR")
    group.add_argument("--replay", type=Path, metavar="DIR", help="answer from a recording: no API, no key")


def _llm_variants(args: argparse.Namespace, models_option: str | None) -> tuple[Any, ...]:
    """The llm agent's model variants (model x hints), checked before any work: SDK, key, directories."""
    from mcpfault.harness.agents.llm.agent import LLMConfig, check_config
    from mcpfault.harness.agents.llm.backend import DEFAULT_MODEL
    from mcpfault.harness.agents.llm.prices import parse_price

    models = [m.strip() for m in (models_option or DEFAULT_MODEL).split(",") if m.strip()]
    if not models:
        raise UsageError("--models: give at least one model name")
    _check_distinct_models(models)
    hints = {"off": (False,), "on": (True,), "both": (False, True)}[args.reliability_hints]
    price = parse_price(args.llm_price) if args.llm_price is not None else None
    variants = tuple(
        LLMConfig(
            model=m,
            hints=h,
            max_turns=args.max_turns,
            record_dir=args.record,
            replay_dir=args.replay,
            base_url=args.llm_base_url,
            price=price,
        )
        for m in models
        for h in hints
    )
    for variant in variants:
        check_config(variant)
    return variants


def _check_distinct_models(models: Sequence[str]) -> None:
    """Each model once: its records and report rows are labelled by it (``anthropic:x`` and ``x`` are one model)."""
    from mcpfault.harness.agents.llm.backend import provider_of

    seen: dict[tuple[str, str], str] = {}
    for model in models:
        key = provider_of(model)
        if key in seen:
            same = f"{seen[key]!r} and {model!r} are" if seen[key] != model else f"{model!r} is"
            raise UsageError(f"--models: {same} the same model twice; name each model once")
        seen[key] = model


def _no_llm_options(args: argparse.Namespace, models_option: str | None) -> None:
    given = [
        flag
        for flag, value in (
            ("--model(s)", models_option),
            ("--record", args.record),
            ("--replay", args.replay),
            ("--reliability-hints", args.reliability_hints != "off" or None),
            ("--llm-base-url", args.llm_base_url),
            ("--llm-price", args.llm_price),
        )
        if value is not None
    ]
    if given:
        raise UsageError(f"{', '.join(given)} apply to the llm agent only; add it with --agent(s) llm")


def _write_llm_manifest(args: argparse.Namespace, command: str, variants: Sequence[Any]) -> None:
    if args.record is None:
        return
    from mcpfault.harness.agents.llm.recording import write_manifest

    fake = all(v.model.startswith("fake-") for v in variants)
    write_manifest(
        args.record,
        {
            "command": command,
            "seed": args.seed,
            "models": sorted({v.model for v in variants}),
            "source": "the scripted fake model (fakemodel.py), not a real model" if fake else "the Anthropic API",
        },
    )


def _output_dir(out: Path | None, default_name: str) -> Path:
    return _writable(_output_path(out, default_name))


def _output_path(out: Path | None, default_name: str) -> Path:
    """--out, or a new directory under runs/ named for the time and the run."""
    import time

    return out or Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{default_name}"


def _writable(path: Path) -> Path:
    """``path``, made if it is not there and checked writable; a UsageError says why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write there ({exc.strerror}); choose another directory") from None
    return path


def _workflows(option: str | None) -> tuple[str, ...]:
    from mcpfault.harness.agents.tasks import WORKFLOWS, check_workflows

    if option is None:
        return WORKFLOWS
    return check_workflows([w.strip() for w in option.split(",") if w.strip()])


def _console() -> Any:

    # Wide enough for the tables even when stdout is a pipe (rich would assume 80 columns).
    return stdout_console(110)


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
    out = _output_dir(args.out, f"{loaded.name}-{agent}")
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

        _write_llm_manifest(args, shlex.join(["mcpfault", *sys.argv[1:]]), [llm])
    console = _console()
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
    from mcpfault.harness.agents.policies import check_agent_name

    external = external_agents.configs(args, (args.agent,), _workflows(args.workflows))
    if args.agent == "llm":
        (llm,) = _llm_variants(args, args.model)
        return llm.label, llm, external
    _no_llm_options(args, args.model)
    return (args.agent if external else check_agent_name(args.agent)), None, external


def _print_run_files(result: SessionResult, out: Path, console: Console, *, cassette: bool) -> None:
    """After ``run``'s outcome table: the model's usage, the proxy's log, and where everything is."""
    from mcpfault.harness.report import print_model_usage

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
        llm = _llm_variants(args, args.models)
    else:
        _no_llm_options(args, args.models)
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: give at least 1")
    _check_task_deadline(args)
    cassette = _server_cassette(args, agents)
    out = _output_path(args.out, "bench")
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
    _writable(out)
    command = shlex.join(["mcpfault", *sys.argv[1:]])
    _write_llm_manifest(args, command, llm)
    console = _console()
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
    from mcpfault.harness.report import print_model_usage, print_summary

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
    out = _output_dir(args.out, "merged")
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
        print_claims(merged.records, _console(), title="tasks per profile and agent against the server cassette")
    else:
        print_summary(merged.records, _console())
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
    out = _output_dir(args.out, "rejudged")
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
        print_claims(result.records, _console(), title="tasks per profile and agent against the server cassette")
    else:
        report = write_report(result.records, out, meta, before.servers, sessions_dir=run_dir / "sessions")
        print_summary(result.records, _console())
    from mcpfault.harness.report_html import write_html

    write_html(out)  # report.html beside the new report.md, as a bench writes it
    for line in describe(result, run_dir):
        print(line)
    print(f"report: {report}")
    return EXIT_CHECK_FAILED if result.unjudgeable else EXIT_OK
