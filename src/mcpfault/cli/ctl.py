"""``mcpfault ctl``: the control API's command-line client (a live proxy started with --control)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

from mcpfault.cli.common import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, stdout_console, usage
from mcpfault.errors import UsageError

EXIT_UNREACHABLE = 3
EXIT_DENIED = 4

EPILOG = """exit codes:
  0  done
  1  the proxy refused the request (an invalid rule, no such rule, a duplicate name, no process to act on)
  2  bad command-line input, or PROFILE is not a valid profile (or no such bundled name)
  3  nothing answered at the control URL
  4  access denied (a missing or wrong MCPFAULT_CONTROL_TOKEN, or a Host/Origin refused)

examples (error and baseline are bundled profiles: mcpfault profiles lists them; a .toml path works too):
  mcpfault proxy -c baseline --control 127.0.0.1:8474 -- mcpfault mock-server
  mcpfault ctl list
  mcpfault ctl add error
  mcpfault ctl off"""


def add_parser(commands: Any) -> None:
    from mcpfault.control.client import DEFAULT_URL, URL_VARIABLE

    ctl = commands.add_parser(
        "ctl",
        help="change the faults of a running proxy (its --control API)",
        description="Talk to the control API of a proxy started with --control HOST:PORT: list and change its "
        "fault rules, switch every fault off or on, act on its server process. The token, when the proxy "
        "has one, comes from MCPFAULT_CONTROL_TOKEN.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ctl.add_argument(
        "--control",
        default=os.environ.get(URL_VARIABLE, DEFAULT_URL),
        metavar="URL",
        help=f"the control API's URL, as the proxy printed it (default ${URL_VARIABLE} or {DEFAULT_URL})",
    )
    actions = ctl.add_subparsers(dest="ctl_command", metavar="ACTION")
    actions.add_parser("status", help="requests, faults, server process, whether faults are on")
    actions.add_parser("list", help="the live rules with their matched and injected counts")
    add = actions.add_parser("add", help="add the [[faults]] rules of a profile (a .toml path or a bundled name)")
    add.add_argument("file", metavar="PROFILE", help="a .toml path or a bundled profile's name (as proxy --config)")
    remove = actions.add_parser("remove", help="remove a rule")
    remove.add_argument("name", metavar="NAME")
    actions.add_parser("off", help="switch every fault off at once (the kill switch)")
    actions.add_parser("on", help="switch faults back on")
    actions.add_parser("reset", help="back to the profile as loaded (run-time rules removed; counters kept)")
    crash = actions.add_parser("crash", help="crash the server process (SIGKILL unless --signal)")
    crash.add_argument("--signal", default="SIGKILL", help="e.g. SIGTERM, SIGSEGV (default SIGKILL)")
    stall = actions.add_parser("stall", help="freeze the server process for SECONDS (SIGSTOP, then SIGCONT)")
    stall.add_argument("seconds", type=float, metavar="SECONDS")
    actions.add_parser("restart", help="restart the server process (where the proxy supervises it)")
    ctl.set_defaults(handler=lambda args: _ctl(args, ctl))


def _ctl(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from mcpfault.control.client import ApiError, BadUrl, Control, Unreachable

    if args.ctl_command is None:
        return usage(parser)
    try:
        client = Control(args.control, token=os.environ.get("MCPFAULT_CONTROL_TOKEN") or None)
    except BadUrl as exc:
        raise UsageError(f"--control: {exc}") from None
    try:
        return _run(args, client)
    except Unreachable as exc:
        print(
            f"mcpfault ctl: {exc}; is the proxy running with --control? (give its URL with --control)", file=sys.stderr
        )
        return EXIT_UNREACHABLE
    except ApiError as exc:
        print(f"mcpfault ctl {args.ctl_command}: the proxy refused: {exc.message}", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem.get('text', problem)}", file=sys.stderr)
        return EXIT_DENIED if exc.status in (401, 403) else EXIT_CHECK_FAILED


def _run(args: argparse.Namespace, client: Any) -> int:
    command = args.ctl_command
    if command == "status":
        _print_status(client.status())
    elif command == "list":
        _print_rules(client.faults())
    elif command == "add":
        return _add(client, args.file)
    elif command == "remove":
        client.remove(args.name)
        print(f"removed rule {args.name!r}")
    elif command in ("off", "on", "reset"):
        getattr(client, command)()
        print({"off": "faults off", "on": "faults on", "reset": "back to the profile as loaded"}[command])
    elif command == "crash":
        answer = client.crash(args.signal)
        print(f"sent {answer['signal']} to the server (pid {answer['crashed']}, generation {answer['generation']})")
    elif command == "stall":
        if not math.isfinite(args.seconds) or args.seconds <= 0:
            print(f"mcpfault ctl stall: got {args.seconds}; give SECONDS, a finite number > 0", file=sys.stderr)
            return EXIT_USAGE
        answer = client.stall(args.seconds)
        print(f"server (pid {answer['stalled']}) frozen for {answer['duration_s']:g} s")
    elif command == "restart":
        answer = client.restart()
        print(f"server restarted: generation {answer['generation']}, pid {answer['pid']}")
    return EXIT_OK


def _add(client: Any, given: str) -> int:
    """Validate the profile as ``validate`` does (messages name the file), then add each rule."""
    import tomllib

    from mcpfault.errors import ProfileError
    from mcpfault.faults import profile

    path = profile.resolve(given)  # a bundled name as proxy --config takes it; a UsageError says what exists
    try:
        loaded = profile.load(path)
    except ProfileError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_USAGE
    if not loaded.rules:
        print(f"mcpfault ctl add: {path} has no [[faults]] rules", file=sys.stderr)
        return EXIT_USAGE
    tables = tomllib.loads(path.read_text(encoding="utf-8"))["faults"]
    for table, rule in zip(tables, loaded.rules, strict=True):
        added = client.add({**table, "name": rule.name})  # a nameless rule keeps the name validate gives it
        print(f"added rule {added['name']!r} ({added['type']}, probability {added['probability']:g})")
    return EXIT_OK


def _print_status(status: dict[str, Any]) -> None:
    from rich.table import Table

    console = _console()
    server = status.get("server")
    facts = Table(title="mcpfault proxy", title_justify="left", show_header=False)
    facts.add_column("what")
    facts.add_column("value")
    facts.add_row("faults", "on" if status["faults_enabled"] else "OFF")
    facts.add_row("rules", f"{status['rules']} (rule set version {status['version']})")
    facts.add_row("uptime", f"{status['uptime_s']:.1f} s")
    facts.add_row("transport", status["transport"])
    facts.add_row(
        "server",
        "not owned by this proxy" if server is None else f"pid {server['pid']}, generation {server['generation']}",
    )
    facts.add_row("requests", str(status["requests_total"]))
    facts.add_row("faults injected", str(status["faults_total"]))
    console.print(facts)
    counts = Table(title="by method and fault type", title_justify="left")
    counts.add_column("kind")
    counts.add_column("name")
    counts.add_column("count", justify="right")
    for method, count in sorted(status["requests"].items(), key=lambda item: -item[1]):
        counts.add_row("request", method, str(count))
    for fault_type, count in sorted(status["faults"].items(), key=lambda item: -item[1]):
        counts.add_row("fault", fault_type, str(count))
    if status["requests"] or status["faults"]:
        console.print(counts)


def _print_rules(answer: dict[str, Any]) -> None:
    from rich.table import Table

    state = "on" if answer["faults_enabled"] else "OFF (kill switch)"
    table = Table(title=f"fault rules (faults {state}, version {answer['version']})", title_justify="left")
    for column in ("name", "type", "origin", "active", "probability", "limit", "window", "matched", "injected"):
        table.add_column(column, justify="right" if column in ("probability", "matched", "injected") else "left")
    for rule in answer["faults"]:
        table.add_row(
            rule["name"],
            rule["type"],
            rule["origin"],
            "yes" if rule["active"] else "no",
            f"{rule['probability']:g}",
            "-" if rule["limit"] is None else str(rule["limit"]),
            _window(rule),
            str(rule["matched"]),
            str(rule["injected"]),
        )
    if not answer["faults"]:
        table.add_row("(none)", *["-"] * 8)
    _console().print(table)


def _console() -> Any:

    return stdout_console(160, highlight=False)  # a pipe gets whole names


def _window(rule: dict[str, Any]) -> str:
    start, duration = rule.get("start_after_s"), rule.get("duration_s")
    if start is None and duration is None:
        return "always"
    begin = start or 0.0
    return f"{begin:g}-{begin + duration:g} s" if duration is not None else f"from {begin:g} s"
