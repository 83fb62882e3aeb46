"""``mcpfault validate``, ``faults``, ``traces export`` and ``mock-server``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from mcpfault.cli.common import EXIT_CHECK_FAILED, EXIT_OK, usage
from mcpfault.errors import ProfileError, UsageError


def add_checks(commands: Any) -> None:
    validate = commands.add_parser(
        "validate",
        help="check fault profiles and report every problem",
        description="Check each profile and report every problem at once: file, rule, field and what is "
        "allowed. Exit 1 when any profile has a problem.",
    )
    validate.add_argument("profiles", nargs="+", type=Path, metavar="PROFILE.toml")
    validate.set_defaults(handler=_validate)

    faults = commands.add_parser("faults", help="list the fault types and their settings")
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
    mock.set_defaults(handler=_mock_server)


def _validate(args: argparse.Namespace) -> int:
    from mcpfault.faults import profile

    failed = 0
    for path in args.profiles:
        try:
            loaded = profile.load(path)
        except ProfileError as exc:
            failed += 1
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            continue
        print(f"{path}: ok (profile {loaded.name!r}, seed {loaded.seed}, {len(loaded.rules)} rule(s))")
    if failed:
        print(f"{failed} of {len(args.profiles)} profile(s) have problems", file=sys.stderr)
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def _faults(_args: argparse.Namespace) -> int:

    from mcpfault.faults import settings
    from mcpfault.faults.catalog import CATALOG

    for fault_type in CATALOG:
        doc = ((fault_type.__module__ and sys.modules[fault_type.__module__].__doc__) or "").strip().splitlines()[0]
        only = "" if "stdio" in fault_type.transports else " (HTTP only)"
        print(f"{fault_type.type_name}{only}: {doc.split(': ', 1)[-1]}")
        hints = __import__("typing").get_type_hints(fault_type)
        for field in dataclasses.fields(fault_type):  # type: ignore[arg-type]
            default = field.default if field.default is not dataclasses.MISSING else "(required)"
            print(f"    {field.name} = {default!r}  ({settings.describe(hints[field.name])})")
    print(
        "every rule also takes: name, tools (globs), probability [1.0], after [0], limit [none], "
        "start_after_s and duration_s (seconds since the proxy started) [always], "
        "sessions (share of HTTP sessions) [all]"
    )
    return EXIT_OK


def _traces_export(args: argparse.Namespace) -> int:
    import os

    from mcpfault.telemetry.export import ExportError, export_run

    endpoint = (
        args.otlp_endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    if not endpoint:
        raise UsageError("no collector given: pass --otlp-endpoint http://HOST:4318 or set OTEL_EXPORTER_OTLP_ENDPOINT")
    if not args.run_dir.is_dir():
        raise UsageError(f"{args.run_dir} is not a directory; give the --out directory of a run or bench")
    try:
        summary = export_run(args.run_dir, endpoint)
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


def _mock_server(args: argparse.Namespace) -> int:
    from mcpfault.mock.server import serve

    serve(seed=args.seed, state_path=args.state, spans_path=args.spans, otlp_endpoint=args.otlp_endpoint)
    return EXIT_OK
