"""``mcpfault audit``: is each tool of a server safe to retry, and do its annotations tell the truth?"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mcpfault.cli.common import EXIT_CHECK_FAILED, EXIT_OK
from mcpfault.errors import UsageError


def add_parser(commands: Any) -> None:
    from mcpfault.audit import plan as plans

    audit = commands.add_parser(
        "audit",
        help="call each tool of a server, lose its reply, retry: is it retry-safe, do its hints tell the truth?",
        description="For each tool of tools/list (or those --tools selects): arguments from its inputSchema\n"
        "(hypothesis-jsonschema, seeded) or --examples; a plain call, then the same call with its reply lost\n"
        "after the server acted (--lose drop: the proxy drops it; crash: the server is killed and restarted),\n"
        "then the same arguments again, as a retrying client does; and with an idempotency key when the\n"
        "schema offers one. What each call did is seen by the eBPF probe (--probe ebpf, root) and/or a state\n"
        "probe (--state-tool or --state-resource, read before and after, diffed). Grades: lying (readOnlyHint\n"
        "with effects), not idempotent (idempotentHint, the retry added effects), flagged (destructiveHint\n"
        "false, effects outside --workdir), retry-safe yes / no / only-with-key / unknown.\n\n"
        "SAFE BY DEFAULT: without --confirm this is a dry run that prints the plan and calls nothing.\n"
        "Destructive tools (annotated so, or by MCP's default) also need --confirm-destructive.\n"
        "Run it against staging, never against production data.",
        epilog="examples:\n"
        "  mcpfault audit -- python server.py                      # the plan only\n"
        "  mcpfault audit --confirm --state-tool list_items -- python /abs/server.py\n"
        "  sudo mcpfault audit --confirm --probe ebpf --tools 'create_*' -- python /abs/server.py\n"
        "  mcpfault audit --confirm --upstream http://127.0.0.1:8000/mcp --state-resource app://items\n"
        "exit status: 0 passed (or a dry run); 1 a finding at or above --fail-on; 2 bad input;\n"
        "127 the server could not be started or listed",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    audit.add_argument("--upstream", metavar="URL", help="audit the Streamable HTTP server at URL, not a command")
    audit.add_argument(
        "--tools", action="append", metavar="GLOB", help="only the tools whose names match (repeatable); default: all"
    )
    audit.add_argument("--examples", type=Path, metavar="FILE.toml", help="arguments per tool: [tools.NAME.arguments]")
    audit.add_argument("--seed", type=int, default=0, help="the argument generator's seed (default: 0)")
    audit.add_argument("--probe", metavar="ebpf", help="observe each call's writes, execs, connects (root)")
    audit.add_argument("--state-tool", metavar="NAME", help="a read-only tool called before and after each call")
    audit.add_argument(
        "--state-args", metavar="JSON", default="{}", help="the state tool's arguments, a JSON object (default: {})"
    )
    audit.add_argument("--state-resource", metavar="URI", help="a resource read before and after each call")
    audit.add_argument(
        "--lose", choices=["drop", "crash"], default="drop", help="how the reply is lost (default: drop)"
    )
    audit.add_argument("--confirm", action="store_true", help="call the tools (without it: a dry run)")
    audit.add_argument(
        "--confirm-destructive", action="store_true", help="call the tools annotated (or defaulted) destructive too"
    )
    audit.add_argument("--workdir", type=Path, metavar="DIR", help="where the server runs (default: OUT/workdir)")
    audit.add_argument(
        "--out", type=Path, default=Path("mcpfault-audit"), metavar="DIR", help="audit.json, events, spans"
    )
    audit.add_argument(
        "--fail-on", choices=plans.FAIL_ON, default="medium", help="exit 1 at or above (default: medium)"
    )
    audit.add_argument("--max-calls", type=int, default=200, help="tools/call requests in all (default: 200)")
    audit.add_argument(
        "--max-time-s", type=float, default=600.0, help="time for the calls; no tool starts after it (default: 600)"
    )
    audit.add_argument("--call-timeout-s", type=float, default=30.0, help="a call that should answer (default: 30)")
    audit.add_argument(
        "--lost-wait-s", type=float, default=3.0, help="how long the client waits for a lost reply (default: 3)"
    )
    audit.add_argument("--json", action="store_true", help="print audit.json's document instead of the table")
    audit.add_argument("server", nargs=argparse.REMAINDER, metavar="-- SERVER_COMMAND [ARGS...]")
    audit.set_defaults(handler=_audit)


def settings_from(args: argparse.Namespace) -> Any:
    from mcpfault.audit.plan import Settings

    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    try:
        state_args = json.loads(args.state_args)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--state-args {args.state_args!r}: not JSON ({exc.msg}); give an object, e.g. '{{}}'"
        ) from None
    if not isinstance(state_args, dict):
        raise UsageError(f"--state-args {args.state_args!r}: give a JSON object, e.g. '{{\"limit\": 10}}'")
    return Settings(
        command=tuple(command),
        upstream=args.upstream,
        tools=tuple(args.tools or ("*",)),
        examples=args.examples,
        seed=args.seed,
        probe=args.probe,
        state_tool=args.state_tool,
        state_args=state_args,
        state_resource=args.state_resource,
        lose=args.lose,
        confirm=args.confirm,
        confirm_destructive=args.confirm_destructive,
        workdir=args.workdir,
        out=args.out,
        fail_on=args.fail_on,
        max_calls=args.max_calls,
        max_time_s=args.max_time_s,
        call_timeout_s=args.call_timeout_s,
        lost_wait_s=args.lost_wait_s,
    )


def _audit(args: argparse.Namespace) -> int:
    from mcpfault.audit import report, runner

    result = runner.run(settings_from(args))
    if result.out is not None:
        written = report.write(result, result.out / "audit.json")
    if args.json:
        print(json.dumps(report.document(result), indent=2))
    elif result.dry_run:
        report.render_plan(result, sys.stdout)
    else:
        report.render(result, sys.stdout)
        print(f"audit.json: {written}; spans and events beside it")
    return EXIT_CHECK_FAILED if result.exit_code else EXIT_OK
