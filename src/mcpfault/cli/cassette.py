"""``mcpfault record``, ``mcpfault replay`` and ``mcpfault cassette show|diff``: cassettes of MCP sessions."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from mcpfault.app.argv import mcpfault_argv
from mcpfault.cli.common import EXIT_USAGE

EXIT_BREAKING = 1


def add_parsers(commands: Any) -> None:
    _add_record(commands)
    _add_replay(commands)
    _add_cassette(commands)


def _add_record(commands: Any) -> None:
    record = commands.add_parser(
        "record",
        help="record every message of an MCP session into a cassette (a transparent stdio proxy)",
        description="Run CMD as the MCP server and relay stdio between it and the client, writing every message\n"
        "(direction, time, era, session), redacted, to FILE.cassette when the session ends. No faults\n"
        "unless --config PROFILE is given (then the profile's faults are recorded as the client saw them).",
        epilog="examples:\n  mcpfault record --out time.cassette -- uvx mcp-server-time\n"
        "  mcpfault record --out s.cassette --redact api_key --redact password -- python server.py\n"
        "  mcpfault record --out remote.cassette --listen 127.0.0.1:8080 --upstream https://staging.example/mcp\n"
        "exit status: the server's; 2 bad usage",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    record.add_argument("--out", type=Path, required=True, metavar="FILE.cassette", help="the cassette to write")
    record.add_argument(
        "--redact",
        action="append",
        default=[],
        metavar="NAME",
        help="also redact the value of every key NAME (a tool argument); repeatable",
    )
    record.add_argument("--config", metavar="PROFILE", help="inject this fault profile's faults while recording")
    record.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="take the client over Streamable HTTP (via 'mcpfault proxy --listen'); the server's stdio is recorded",
    )
    record.add_argument(
        "--upstream",
        metavar="URL",
        help="with --listen: record in front of this remote Streamable HTTP server (its HTTP status and headers too)",
    )
    # The recorders of one `record --listen -- CMD` (one per protocol era behind the HTTP bridge): the
    # recording they join, and when it started, so that their sessions land in one cassette.
    record.add_argument("--recording", help=argparse.SUPPRESS)
    record.add_argument("--recording-epoch", type=float, help=argparse.SUPPRESS)
    record.add_argument("command", nargs=argparse.REMAINDER, help="-- the server's command")
    record.set_defaults(handler=_record)


def _add_replay(commands: Any) -> None:
    replay = commands.add_parser(
        "replay",
        help="serve a cassette as an MCP server on stdio (answers matched to the recorded requests)",
        description="Answer MCP requests from FILE.cassette: initialize/server-discover, listings and calls, each\n"
        "matched to a recorded request. An unmatched request gets a JSON-RPC error (-32602) naming the\n"
        "closest recorded request and how it differs. --config PROFILE is a shortcut for\n"
        "'mcpfault proxy --config PROFILE -- mcpfault replay FILE'; --listen HOST:PORT serves it over\n"
        "Streamable HTTP the same way (the baseline profile, no faults, unless --config).",
        epilog="matchers:\n  method+params  method and canonical params equal, ignoring _meta and ids (default)\n"
        "  sequential     the next recorded request of the same method\n"
        "  strict         the next recorded request, which must equal this one\n"
        "examples:\n  mcpfault replay time.cassette\n  mcpfault replay time.cassette --config flaky --seed 7\n"
        "exit status: 0 when the client closes stdin; 2 bad usage or not a cassette",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument("cassette", type=Path, metavar="FILE.cassette")
    replay.add_argument(
        "--match",
        choices=["method+params", "sequential", "strict"],
        default="method+params",
        help="how a request finds its recorded answer (default: method+params)",
    )
    replay.add_argument(
        "--timing",
        choices=["recorded", "none"],
        default="none",
        help="recorded: wait as the server did; none: answer at once (default)",
    )
    replay.add_argument("--config", metavar="PROFILE", help="inject this fault profile's faults (runs mcpfault proxy)")
    replay.add_argument("--seed", type=int, help="with --config: the faults' seed")
    replay.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="serve Streamable HTTP (both eras) instead of stdio, through 'mcpfault proxy --listen'",
    )
    replay.set_defaults(handler=_replay)


def _add_cassette(commands: Any) -> None:
    cassette = commands.add_parser(
        "cassette",
        help="show a cassette, or diff two cassettes' listings (a CI gate on server upgrades)",
        description="show: a cassette as a table. diff: the tool, resource and prompt changes from A to B,\n"
        "each breaking or compatible.",
        epilog="examples:\n  mcpfault cassette show time.cassette\n  mcpfault cassette diff old.cassette new.cassette\n"
        "exit status: 0; diff: 1 when a change is breaking; 2 bad usage",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = cassette.add_subparsers(dest="action", metavar="ACTION")
    show = actions.add_parser("show", help="print a cassette as a readable table")
    show.add_argument("cassette", type=Path, metavar="FILE.cassette")
    show.set_defaults(handler=_show)
    compare = actions.add_parser("diff", help="breaking and compatible listing changes from A to B; exit 1 if breaking")
    compare.add_argument("old", type=Path, metavar="A.cassette")
    compare.add_argument("new", type=Path, metavar="B.cassette")
    compare.add_argument("--json", action="store_true", help="print the changes as JSON")
    compare.set_defaults(handler=_diff)
    cassette.set_defaults(handler=lambda args: (cassette.print_help(sys.stderr), EXIT_USAGE)[1])


def _command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    return command[1:] if command[:1] == ["--"] else command


def _record(args: argparse.Namespace) -> int:
    from mcpfault.cassette.record import Joining, record_stdio

    command = _command(args)
    if args.upstream is not None:
        return _record_upstream(args, command)
    if args.listen is not None:
        # The project's HTTP endpoint in front, this recorder behind it on stdio: one proxy, not two.
        redact = [option for name in args.redact for option in ("--redact", name)]
        # Clients of both eras reach a recorder each: they join one recording, whose id and start they share.
        joined = ["--recording", uuid.uuid4().hex, "--recording-epoch", repr(time.time())]
        recording = mcpfault_argv("record", "--out", str(args.out), *redact, *joined, "--", *command)
        profile = args.config if args.config is not None else "baseline"
        proxy = mcpfault_argv("proxy", "--config", profile, "--listen", args.listen, "--")
        os.execv(sys.executable, [*proxy, *recording])
    joining = None
    if args.recording is not None:
        joining = Joining(args.recording, args.recording_epoch if args.recording_epoch is not None else time.time())
    return record_stdio(args.out, command, args.redact, args.config, joining)


def _record_upstream(args: argparse.Namespace, command: list[str]) -> int:
    from mcpfault.cassette.record_http import record_http
    from mcpfault.errors import UsageError
    from mcpfault.proxy.http.serve import parse_listen, parse_upstream

    if args.listen is None:
        raise UsageError("record --upstream URL needs --listen HOST:PORT: where the client connects instead of URL")
    if command:
        raise UsageError(f"record --upstream records a remote server: drop the command after '--' ({command[0]!r})")
    if args.config is not None:
        raise UsageError(
            "record --upstream does not inject faults; put 'mcpfault proxy --config PROFILE --listen ... "
            "--upstream' between the recorder and the server instead"
        )
    return record_http(args.out, parse_listen(args.listen), parse_upstream(args.upstream), list(args.redact))


def _replay(args: argparse.Namespace) -> int:
    from mcpfault.cassette.format import load
    from mcpfault.cassette.replay import serve_stdio

    load(args.cassette)  # a bad file is refused here, before any proxy starts
    if args.config is not None or args.listen is not None:
        # The replaying server behind the project's proxy: its faults, its HTTP endpoint; no second copy.
        seed = ["--seed", str(args.seed)] if args.seed is not None else []
        listen = ["--listen", args.listen] if args.listen is not None else []
        replaying = mcpfault_argv("replay", str(args.cassette), "--match", args.match, "--timing", args.timing)
        profile = args.config if args.config is not None else "baseline"
        command = mcpfault_argv("proxy", "--config", profile, *seed, *listen, "--")
        os.execv(sys.executable, [*command, *replaying])
    return serve_stdio(args.cassette, args.match, args.timing)


def _show(args: argparse.Namespace) -> int:
    from mcpfault.cassette.format import load

    cassette = load(args.cassette)
    header = cassette.header
    info = header.get("server_info") or {}
    eras = ", ".join(header.get("eras", [])) or "?"
    versions = ", ".join(header.get("protocol_versions", [])) or "?"
    print(
        f"cassette {args.cassette}: server {info.get('name', '?')} {info.get('version', '')}".rstrip()
        + f", eras {eras}, protocol {versions}, {len(cassette.entries)} messages,"
        + f" recorded {header.get('recorded_at', '?')}"
    )
    for session in cassette.sessions():
        print(_session_line(cassette, session))
    print(f"{'t (s)':>9}  {'session':<8} {'dir':<6} {'id':<6} what")
    for entry in cassette.entries:
        message = entry.message
        what = str(
            message.get("method") or ("error " + json.dumps(message["error"])[:60] if "error" in message else "result")
        )
        params = message.get("params")
        if message.get("method") == "tools/call" and isinstance(params, dict):
            what += f" {params.get('name')}"
        arrow = "->" if entry.direction == "client" else "<-"
        print(f"{entry.t:>9.3f}  {entry.session:<8} {arrow:<6} {message.get('id', '')!s:<6} {what}")
    return 0


def _session_line(cassette: Any, session: str) -> str:
    """``session 2: legacy, 9 messages, 4 requests, client mcp 1.0, from 1.204 s``."""
    entries = [entry for entry in cassette.entries if entry.session == session]
    eras = ", ".join(sorted({entry.era for entry in entries} - {"unknown"})) or "era unknown"
    requests = sum(
        entry.direction == "client" and "id" in entry.message and "method" in entry.message for entry in entries
    )
    client = "?"
    for entry in entries:
        params = entry.message.get("params")
        if entry.message.get("method") == "initialize" and isinstance(params, dict):
            info = params.get("clientInfo")
            if isinstance(info, dict):
                client = f"{info.get('name', '?')} {info.get('version', '')}".rstrip()
            break
    return (
        f"session {session}: {eras}, {len(entries)} messages, {requests} requests, client {client},"
        f" from {entries[0].t:.3f} s"
    )


def _diff(args: argparse.Namespace) -> int:
    from mcpfault.cassette.diff import diff
    from mcpfault.cassette.format import load

    changes = diff(load(args.old), load(args.new))
    if args.json:
        print(json.dumps([{"kind": c.kind, "where": c.where, "what": c.what} for c in changes], indent=2))
    else:
        for change in changes:
            print(f"{change.kind:<10} {change.where}: {change.what}")
        breaking = sum(c.kind == "breaking" for c in changes)
        print(f"{len(changes)} changes, {breaking} breaking" if changes else "no listing changes")
    return EXIT_BREAKING if any(c.kind == "breaking" for c in changes) else 0
