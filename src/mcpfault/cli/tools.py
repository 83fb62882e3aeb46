"""``mcpfault validate``, ``faults``, ``traces export`` and ``mock-server``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from mcpfault.cli.common import EXIT_CHECK_FAILED, EXIT_OK, check_files, stdout_console, usage
from mcpfault.errors import UsageError


def add_checks(commands: Any) -> None:
    validate = commands.add_parser(
        "validate",
        help="check fault profiles and report every problem",
        description="Check each profile and report every problem at once: file, rule, field and what is "
        "allowed. Exit 1 when any profile has a problem. Also warns (on stderr, exit status unchanged) where a "
        "valid profile's outcome would depend on timing: a time window shorter than a session, or opening "
        "after it ends; delays within scheduling noise of the call deadline.",
    )
    validate.add_argument("profiles", nargs="+", metavar="PROFILE", help="a .toml path or a bundled profile's name")
    validate.add_argument(
        "--session-tasks",
        type=int,
        default=20,
        help="tasks per session the warnings assume, as bench --session-tasks (20)",
    )
    validate.add_argument(
        "--deadline", type=float, default=0.5, metavar="SECONDS", help="the per-call deadline the warnings assume (0.5)"
    )
    validate.set_defaults(handler=_validate)

    listing = commands.add_parser(
        "profiles",
        help="list the bundled fault profiles, one line each",
        description="List the profiles that ship with mcpfault. Give a name wherever a profile is asked for "
        "(proxy --config NAME, run --profile NAME, bench --profiles A,B); --path prints where each file is, "
        "to copy one as a starting point.",
    )
    listing.add_argument("--path", action="store_true", help="also print each profile's file")
    listing.set_defaults(handler=_profiles)

    faults = commands.add_parser(
        "faults",
        help="list the fault types and their settings",
        description="List every fault type a profile's [[faults]] rule can have, what it does, and its settings "
        "with their defaults, written as in a profile (TOML).",
    )
    faults.set_defaults(handler=_faults)


def add_tools(commands: Any) -> None:
    traces = commands.add_parser("traces", help="work with the spans a run wrote to files")
    traces_commands = traces.add_subparsers(dest="traces_command", metavar="SUBCOMMAND")
    export = traces_commands.add_parser(
        "export",
        help="send a past run's spans to an OpenTelemetry collector (OTLP/HTTP protobuf)",
        description="Find every *spans.jsonl under RUN_DIR and send the spans to a collector over OTLP/HTTP, so a "
        "run done offline can be looked at in Jaeger. Headers come from OTEL_EXPORTER_OTLP_HEADERS.",
    )
    export.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    export.add_argument(
        "--otlp-endpoint", metavar="URL", help="collector base URL (default: OTEL_EXPORTER_OTLP_ENDPOINT)"
    )
    export.set_defaults(handler=_traces_export, command="traces export")
    show = traces_commands.add_parser(
        "show",
        help="print a run's trace trees in the terminal (no Jaeger needed)",
        description="Read every *spans.jsonl under RUN_DIR and print the trace tree of a task (--task N) or a "
        "trace (--trace ID): the task with its outcome, each attempt, the proxy's span with its faults and what "
        "the client received, the server's span with its state changes. Without either: one line per task "
        "(profile, agent, session, outcome, faults, trace id; each task is the root of its own trace), sorted "
        "by profile, agent, session and task, to pick one. --outcome, --profile and --agent keep the tasks "
        "that match (with --task too). Exit 2 when RUN_DIR is not a run's directory.",
    )
    show.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the --out directory of a run, bench or experiment")
    which = show.add_mutually_exclusive_group()
    which.add_argument("--task", type=int, metavar="N", help="the task with this index (every cell's, in a bench)")
    which.add_argument("--trace", metavar="ID", help="the trace with this id (32 hex digits, or its start)")
    from mcpfault.analysis.records import ALL_OUTCOMES

    show.add_argument("--outcome", choices=ALL_OUTCOMES, help="only tasks with this outcome (e.g. failed_silent)")
    show.add_argument("--profile", metavar="NAME", help="only tasks run under this profile")
    show.add_argument("--agent", metavar="NAME", help="only tasks of this agent")
    show.set_defaults(handler=_traces_show, command="traces show")
    traces.set_defaults(handler=lambda _args: usage(traces))

    mock = commands.add_parser(
        "mock-server",
        help="run the bundled mock MCP server (a network-operations world) on stdio",
        description="A deterministic network-operations world served over stdio MCP (both protocol eras). "
        "Its final state is written at exit for judging.",
    )
    mock.add_argument("--seed", type=int, default=0, help="world seed (default 0)")
    mock.add_argument("--state", type=Path, metavar="FILE.json", help="write the final state here at exit")
    mock.add_argument(
        "--spans", type=Path, metavar="FILE.jsonl", help="a SERVER span per request, as OTLP JSON lines (appended)"
    )
    mock.add_argument(
        "--otlp-endpoint", metavar="URL", help="export spans over OTLP/HTTP (also OTEL_EXPORTER_OTLP_ENDPOINT)"
    )
    from mcpfault.mock.__main__ import JOURNAL_HELP

    mock.add_argument("--journal", type=Path, metavar="FILE.jsonl", help=JOURNAL_HELP)
    mock.set_defaults(handler=_mock_server)


def _validate(args: argparse.Namespace) -> int:
    from mcpfault.faults import profile
    from mcpfault.faults.profile_warnings import Timing, warnings_of

    if args.session_tasks < 1 or not args.deadline > 0:
        raise UsageError("--session-tasks must be at least 1 and --deadline more than 0 seconds")

    def load(given: str) -> profile.Profile:
        return profile.load(profile.resolve(given))

    def describe(loaded: profile.Profile) -> str:
        found = warnings_of(loaded, Timing(args.session_tasks, args.deadline))
        for warning in found:
            print(warning, file=sys.stderr)
        noted = f", {len(found)} warning(s)" if found else ""
        return f"{loaded.source}: ok (profile {loaded.name!r}, seed {loaded.seed}, {len(loaded.rules)} rule(s){noted})"

    failed = check_files(args.profiles, load, describe, "profile")
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def _profiles(args: argparse.Namespace) -> int:
    from mcpfault.faults import profile

    found = profile.bundled()
    width = max((len(name) for name in found), default=0)
    for name, path in found.items():
        print(f"{name:<{width}}  {profile.first_line(path)}" + (f"  [{path}]" if args.path else ""))
    return EXIT_OK


def _faults(_args: argparse.Namespace) -> int:
    import typing

    from mcpfault.faults import settings
    from mcpfault.faults.base import SERVER_REQUESTS
    from mcpfault.faults.catalog import CATALOG
    from mcpfault.faults.profile import GENERIC_KEYS

    for fault_type in CATALOG:
        doc = (sys.modules[fault_type.__module__].__doc__ or "").strip().splitlines()[0].replace("``", "")
        only = "" if "stdio" in fault_type.transports else " (HTTP only)"
        print(f"{fault_type.type_name}{only}: {doc.split(': ', 1)[-1]}")
        follows = f" (and follows {', '.join(sorted(fault_type.follows))})" if fault_type.follows else ""
        print(f"    methods: {', '.join(_in_method_order(fault_type.targets - SERVER_REQUESTS))}{follows}")
        if fault_type.targets & SERVER_REQUESTS:
            print(
                f"    server_to_client: {', '.join(sorted(fault_type.targets & SERVER_REQUESTS))} (the client's answer)"
            )
        hints = typing.get_type_hints(fault_type)
        for field in dataclasses.fields(fault_type):  # type: ignore[arg-type]
            default = "(required)" if field.default is dataclasses.MISSING else settings.toml_value(field.default)
            print(f"    {field.name} = {default}  ({settings.describe(hints[field.name], settings.toml_value)})")
    print(
        f"every rule also takes: {', '.join(GENERIC_KEYS)}; methods are the requests it acts on "
        '["tools/call"] (each one its type takes); tools, resources (URIs) and prompts are globs over '
        "the names of each kind of request [all], direction = client_to_server or server_to_client (the "
        "server's requests, acted on in the client's answer) [client_to_server], read_only = true or false "
        "(from the tools' readOnlyHint) [any], probability [1.0], after [0], limit [not set], "
        "start_after_s and duration_s (seconds since the proxy started) [always in force], "
        "sessions (the share of HTTP sessions it acts in) [all]"
    )
    return EXIT_OK


def _in_method_order(methods: frozenset[str]) -> list[str]:
    """tools/call first, then the rest by name: how a person scans the list."""
    return sorted(methods, key=lambda method: (method != "tools/call", method))


def _traces_export(args: argparse.Namespace) -> int:
    from mcpfault.telemetry import otel_env
    from mcpfault.telemetry.export import ExportError, export_run

    try:
        url = otel_env.traces_url(args.otlp_endpoint)
        export = otel_env.otlp_export(url) if url else None  # protocol, headers, gzip, TLS, timeout
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if export is None:
        raise UsageError("no collector given: pass --otlp-endpoint http://HOST:4318 or set OTEL_EXPORTER_OTLP_ENDPOINT")
    if not args.run_dir.is_dir():
        raise UsageError(f"{args.run_dir} is not a directory; give the --out directory of a run or bench")
    try:
        summary = export_run(args.run_dir, export, timeout_s=None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except ExportError as exc:
        print(f"mcpfault traces export: {exc}", file=sys.stderr)
        if exc.summary is not None:
            print(exc.summary.describe(), file=sys.stderr)
        return EXIT_CHECK_FAILED
    print(summary.describe(), file=sys.stderr)
    for error in summary.errors:
        print(f"  {error}", file=sys.stderr)
    return EXIT_OK if summary.ok else EXIT_CHECK_FAILED


def _traces_show(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.tree import Tree

    from mcpfault.analysis import trace_tree

    try:
        trace_tree.check_run_dir(args.run_dir)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    spans = trace_tree.read_run(args.run_dir)
    if not spans:
        raise UsageError(f"no spans under {args.run_dir}: it holds no *spans.jsonl (was it run with traces off?)")
    roots = trace_tree.trees(spans)
    console = stdout_console(160, highlight=False)
    rows = trace_tree.task_rows(roots, outcome=args.outcome, profile=args.profile, agent=args.agent)
    filters = " ".join(
        f"--{name} {value}"
        for name, value in (("outcome", args.outcome), ("profile", args.profile), ("agent", args.agent))
        if value is not None
    )
    if args.trace is not None:
        chosen = [r for r in roots if r.span.trace_id.startswith(args.trace.lower())]
        if not chosen:
            raise UsageError(f"no trace {args.trace!r} under {args.run_dir}")
    elif args.task is not None:
        chosen = [row.node for row in rows if row.index == args.task]
        if not chosen:
            matching = f" matching {filters}" if filters else ""
            raise UsageError(f"no task {args.task}{matching} under {args.run_dir}; run without --task to list them")
    else:
        table = Table(title=f"tasks under {args.run_dir}" + (f" ({filters})" if filters else ""), title_justify="left")
        for column in ("profile", "agent", "session", "task", "workflow", "outcome", "faults", "trace"):
            table.add_column(column, justify="right" if column in ("session", "task") else "left")
        for row in rows:
            table.add_row(
                row.profile,
                row.agent,
                "-" if row.session is None else str(row.session),
                str(row.index),
                row.workflow,
                row.outcome,
                ", ".join(row.faults) or "-",
                row.trace_id,
            )
        console.print(table)
        if not rows:
            console.print(f"no task matches {filters}" if filters else "no task spans (a run without tasks?)")
        console.print("show one: mcpfault traces show RUN_DIR --task N (or --trace ID)")
        return EXIT_OK

    def grow(branch: Tree, node: trace_tree.Node) -> None:
        for child in node.children:
            grow(branch.add(trace_tree.label(child.span)), child)

    for node in chosen:
        tree = Tree(f"{trace_tree.label(node.span)}  [dim]trace {node.span.trace_id}[/dim]")
        grow(tree, node)
        console.print(tree)
    return EXIT_OK


def _mock_server(args: argparse.Namespace) -> int:
    from mcpfault.mock.server import serve

    serve(
        seed=args.seed,
        state_path=args.state,
        spans_path=args.spans,
        otlp_endpoint=args.otlp_endpoint,
        journal_path=args.journal,
    )
    return EXIT_OK
