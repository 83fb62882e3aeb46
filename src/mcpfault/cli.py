"""The one entry point: ``mcpfault COMMAND``. Parses, wires, prints; the work happens elsewhere.

Exit codes: 0 success; 1 a check failed (``validate`` found problems); 2 bad command-line input or an
invalid profile; 127 the MCP server command could not be started; otherwise ``proxy`` exits with
the server's own status (128+N when a signal N ended it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mcpfault import __version__
from mcpfault.errors import ProfileError, UpstreamError, UsageError

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_STARTED = 127


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = args.handler(args)
    except UsageError as exc:
        print(f"mcpfault {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ProfileError as exc:
        print(f"mcpfault {args.command}: refusing an invalid profile.\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    except UpstreamError as exc:
        print(f"mcpfault {args.command}: {exc}", file=sys.stderr)
        return EXIT_NOT_STARTED
    except KeyboardInterrupt:
        return 130
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcpfault",
        description="Chaos engineering for AI agents that use the Model Context Protocol.",
        epilog="Run 'mcpfault COMMAND --help' for the options of each command.",
    )
    parser.add_argument("--version", action="version", version=f"mcpfault {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    proxy = commands.add_parser(
        "proxy",
        help="relay a stdio MCP server to this process's stdin/stdout, injecting faults",
        description="Start SERVER_COMMAND and relay newline-delimited JSON-RPC between it and this process's "
        "stdin/stdout, injecting the faults of the profile. Everything the profile leaves alone crosses byte "
        "for byte. Exits with the server's exit status.",
        epilog="example: mcpfault proxy --config profiles/mixed.toml --events events.jsonl -- mcpfault mock-server",
    )
    proxy.add_argument("--config", "-c", required=True, type=Path, metavar="PROFILE.toml", help="fault profile")
    proxy.add_argument("--events", type=Path, metavar="FILE.jsonl", help="write one JSON line per request")
    proxy.add_argument(
        "--shutdown-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="after the client leaves or a signal arrives, how long the server gets to exit (default 5)",
    )
    proxy.add_argument("--no-summary", action="store_true", help="do not print the fault summary at exit")
    _logging_options(proxy)
    proxy.add_argument("server", nargs=argparse.REMAINDER, metavar="-- SERVER_COMMAND [ARGS...]")
    proxy.set_defaults(handler=_proxy)

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

    run = commands.add_parser(
        "run",
        help="one session through the proxy to the bundled mock server, with a summary",
        description="Start the proxy with PROFILE in front of the bundled mock server, drive a scripted session "
        "of tool calls through it, and print what the client saw and what the proxy injected. Writes attempts, "
        "proxy events, the proxy's log and the server's final state under --out.",
    )
    run.add_argument("--profile", type=Path, default=Path("profiles/mixed.toml"), help="default profiles/mixed.toml")
    run.add_argument("--calls", type=int, default=200, help="tool calls after discovery (default 200)")
    run.add_argument("--seed", type=int, default=0, help="mock world seed (default 0)")
    run.add_argument("--era", choices=["legacy", "modern"], default="legacy", help="protocol era of the client")
    run.add_argument("--deadline", type=float, default=0.5, metavar="SECONDS", help="per-call deadline (0.5)")
    run.add_argument("--out", type=Path, help="output directory (default runs/<time>-<profile>)")
    run.set_defaults(handler=_run)

    mock = commands.add_parser(
        "mock-server",
        help="run the bundled mock MCP server (a network-operations world) on stdio",
        description="A deterministic network-operations world served over stdio MCP (both protocol eras). "
        "Its final state is written at exit for judging.",
    )
    mock.add_argument("--seed", type=int, default=0, help="world seed (default 0)")
    mock.add_argument("--state", type=Path, metavar="FILE.json", help="write the final state here at exit")
    mock.set_defaults(handler=_mock_server)
    return parser


def _logging_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", default="console", choices=["console", "json"])


def _proxy(args: argparse.Namespace) -> int:
    import anyio

    from mcpfault.faults import profile
    from mcpfault.faults.engine import Engine
    from mcpfault.proxy import summary
    from mcpfault.proxy.core import ProxyCore
    from mcpfault.proxy.events import EventSink, JsonlEventSink
    from mcpfault.proxy.stdio import Lifecycle, run_stdio
    from mcpfault.telemetry.logging import configure

    configure(args.log_level, args.log_format)
    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    if not command:
        raise UsageError("no server command; put it after '--', e.g. mcpfault proxy -c P.toml -- mcpfault mock-server")
    if args.shutdown_timeout < 0:
        raise UsageError(f"--shutdown-timeout {args.shutdown_timeout} is negative; give seconds >= 0")
    engine = Engine(profile.load(args.config))
    events: EventSink | None = None
    if args.events is not None:
        try:
            events = JsonlEventSink(args.events)
        except OSError as exc:
            raise UsageError(f"--events {args.events}: cannot open for writing ({exc.strerror})") from None
    core = ProxyCore(engine, events=events)
    try:
        status = anyio.run(run_stdio, command, core, Lifecycle(shutdown_timeout_s=args.shutdown_timeout))
    finally:
        if events is not None:
            events.close()
    if not args.no_summary:
        summary.render(core.stats, engine, core.era, sys.stderr)
    return status


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
    import dataclasses

    from mcpfault.faults import settings
    from mcpfault.faults.catalog import CATALOG

    for fault_type in CATALOG:
        doc = ((fault_type.__module__ and sys.modules[fault_type.__module__].__doc__) or "").strip().splitlines()[0]
        print(f"{fault_type.type_name}: {doc.split(': ', 1)[-1]}")
        hints = __import__("typing").get_type_hints(fault_type)
        for field in dataclasses.fields(fault_type):  # type: ignore[arg-type]
            default = field.default if field.default is not dataclasses.MISSING else "(required)"
            print(f"    {field.name} = {default!r}  ({settings.describe(hints[field.name])})")
    print("every rule also takes: name, tools (globs), probability [1.0], after [0], limit [none]")
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    import time

    import anyio
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from mcpfault.faults import profile
    from mcpfault.harness.session import SessionConfig, run_session

    profile.load(args.profile)  # refuse an invalid profile before anything starts
    if args.calls < 1:
        raise UsageError(f"--calls {args.calls}: give at least 1")
    if args.deadline <= 0:
        raise UsageError(f"--deadline {args.deadline}: give seconds > 0")
    out = args.out or Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{args.profile.stem}"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create the directory ({exc.strerror}); choose another") from None
    config = SessionConfig(args.profile, out, args.calls, args.seed, args.era, args.deadline)
    # Wide enough for the tables even when stdout is a pipe (rich would assume 80 columns).
    console = Console(width=None if sys.stdout.isatty() else 110)
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"session: {args.profile.stem}", total=args.calls)
        result = anyio.run(run_session, config, lambda n: bar.advance(task, n))
    outcomes = sorted({o for counts in result.by_tool().values() for o in counts})
    table = Table(title=f"client view: {args.calls} calls, profile {args.profile.stem!r}, era {args.era}")
    table.add_column("tool")
    for outcome in outcomes:
        table.add_column(outcome, justify="right")
    for tool, counts in sorted(result.by_tool().items()):
        table.add_row(tool, *(str(counts.get(o, 0)) for o in outcomes))
    console.print(table)
    proxy_log = (out / "proxy.log").read_text(errors="replace")
    console.print(proxy_log.rstrip(), markup=False, highlight=False)
    console.print(
        f"wall time {result.wall_s:.1f} s; files in {out}/ (attempts.jsonl, events.jsonl, proxy.log, server-state.json)"
    )
    return EXIT_OK


def _mock_server(args: argparse.Namespace) -> int:
    from mcpfault.mock import serve

    serve(seed=args.seed, state_path=args.state)
    return EXIT_OK
