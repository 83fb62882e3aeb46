"""``mcpfault proxy``: the stdio proxy, and the Streamable HTTP proxy (``--listen``).

The flags become an ``app.proxy.ProxyConfig``, which ``app.proxy.run`` assembles and runs; this module
prints what the running proxy announces."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcpfault.app import proxy as app_proxy
from mcpfault.cli.common import announce_metrics, logging_options, stdout_console

if TYPE_CHECKING:
    from mcpfault.faults.profile import Rule
    from mcpfault.faults.profile_warnings import ProfileWarning


def add_parser(commands: Any) -> None:
    proxy = commands.add_parser(
        "proxy",
        help="relay an MCP server (stdio or Streamable HTTP), injecting faults",
        description="Start SERVER_COMMAND and relay newline-delimited JSON-RPC between it and this process's\n"
        "stdin/stdout, or with --listen serve Streamable HTTP in front of --upstream URL (or of\n"
        "SERVER_COMMAND), injecting the faults of the profile. Everything the profile leaves alone\n"
        "crosses byte for byte. Exits with the server's exit status (0 after SIGINT/SIGTERM in front\n"
        "of --upstream).",
        epilog="examples:\n"
        "  mcpfault proxy --config mixed --events events.jsonl -- mcpfault mock-server\n"
        "  mcpfault proxy --config my-profile.toml -- uvx mcp-server-time\n"
        "  mcpfault proxy --config http --listen 127.0.0.1:8080 --upstream http://127.0.0.1:3000/mcp\n"
        "  mcpfault proxy --config http --listen 127.0.0.1:8080 -- mcpfault mock-server\n"
        "  mcpfault proxy --config crash_restart --listen 127.0.0.1:8080 \\\n"
        "      --upstream http://127.0.0.1:3000/mcp -- node server.js   (starts, waits for, supervises it)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    proxy.add_argument(
        "--config",
        "-c",
        required=True,
        metavar="PROFILE",
        help="fault profile: a .toml path or a bundled name (see 'mcpfault profiles')",
    )
    proxy.add_argument(
        "--events",
        type=Path,
        metavar="FILE.jsonl",
        help="append one JSON line per request (after a proxy_started line marking this launch)",
    )
    proxy.add_argument("--seed", type=int, help="use this seed instead of the profile's")
    proxy.add_argument(
        "--shutdown-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="after the client leaves or a signal arrives, how long the server gets to exit (default 5)",
    )
    proxy.add_argument("--no-summary", action="store_true", help="do not print the fault summary at exit")
    proxy.add_argument(
        "--dry-run",
        action="store_true",
        help="start the server, read its tools, resources and prompts, print which rule matches which tool "
        "and which rules match nothing, then exit (1 when a rule matches nothing)",
    )
    _telemetry_options(proxy)
    proxy.add_argument(
        "--control",
        metavar="HOST:PORT",
        help="serve the control API here (JSON over HTTP: change faults live; see 'mcpfault ctl'); "
        "127.0.0.1 unless MCPFAULT_CONTROL_TOKEN is set; port 0 picks one (printed at start)",
    )
    proxy.add_argument(
        "--ready-file",
        type=Path,
        metavar="FILE.json",
        help="once serving, write where the proxy is (MCP endpoint, control API, /metrics, pid, the "
        "server's generation) as one JSON object, again at each server restart; removed at exit "
        "(for programs: parse this, not the lines on stderr)",
    )
    _probe_options(proxy)
    _http_options(proxy)
    logging_options(proxy)
    proxy.add_argument("server", nargs=argparse.REMAINDER, metavar="-- SERVER_COMMAND [ARGS...]")
    proxy.set_defaults(handler=_proxy)


def _telemetry_options(proxy: argparse.ArgumentParser) -> None:
    proxy.add_argument("--spans", type=Path, metavar="FILE.jsonl", help="write one OTLP JSON line per span batch")
    proxy.add_argument(
        "--otlp-endpoint", metavar="URL", help="export spans over OTLP/HTTP (also OTEL_EXPORTER_OTLP_ENDPOINT)"
    )
    proxy.add_argument(
        "--client-spans",
        action="store_true",
        help="record the proxy's leg to the server as a CLIENT span under its SERVER span, and give the server "
        "that span as parent (client -> proxy SERVER -> proxy CLIENT -> server, as Envoy's traces read)",
    )
    proxy.add_argument(
        "--no-propagate",
        action="store_true",
        help="do not put the proxy's trace context into requests (they cross byte for byte)",
    )
    proxy.add_argument(
        "--metrics-addr",
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here (127.0.0.1 unless a token is set: MCPFAULT_METRICS_TOKEN)",
    )


def _probe_options(proxy: argparse.ArgumentParser) -> None:
    probe = proxy.add_argument_group(
        "side effects", "what the server's processes did during each tool call (mcpfz-probe's sidecar protocol)"
    )
    probe.add_argument(
        "--probe",
        metavar="ebpf|fake:EVENTS.json",
        help="watch the server with the eBPF sidecar (root, bpftrace) or replay scripted events; "
        "a stdio server only (MCPFZ_PROBE_BIN: another sidecar)",
    )
    probe.add_argument(
        "--probe-policy",
        type=Path,
        metavar="POLICY.toml",
        help="allow-lists for findings (RuntimePolicy's keys; default: the profile's [probe] table)",
    )


def _http_options(proxy: argparse.ArgumentParser) -> None:
    http = proxy.add_argument_group(
        "Streamable HTTP", "serve MCP over HTTP instead of stdin/stdout (a reverse proxy in front of --upstream)"
    )
    http.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="serve the MCP endpoint here (beyond loopback only with MCPFAULT_PROXY_TOKEN set)",
    )
    http.add_argument("--upstream", metavar="URL", help="the server's MCP endpoint, e.g. http://127.0.0.1:3000/mcp")
    http.add_argument(
        "--max-body-bytes",
        type=int,
        default=16 * 1024 * 1024,
        metavar="N",
        help="largest request body accepted; more is answered 413 (default 16 MiB)",
    )
    http.add_argument(
        "--hold",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long a request whose answer a fault lost stays open before the proxy closes it (default 300)",
    )


def _proxy(args: argparse.Namespace) -> int:
    return app_proxy.run(_config(args), _Printed())


def _config(args: argparse.Namespace) -> app_proxy.ProxyConfig:
    """The flags as the proxy's configuration (``app_proxy.run`` checks it)."""
    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    return app_proxy.ProxyConfig(
        profile=args.config,
        command=tuple(command),
        events=args.events,
        seed=args.seed,
        shutdown_timeout_s=args.shutdown_timeout,
        summary=not args.no_summary,
        dry_run=args.dry_run,
        spans=args.spans,
        otlp_endpoint=args.otlp_endpoint,
        client_spans=args.client_spans,
        propagate=not args.no_propagate,
        metrics_addr=args.metrics_addr,
        control=args.control,
        ready_file=args.ready_file,
        probe=args.probe,
        probe_policy=args.probe_policy,
        listen=args.listen,
        upstream=args.upstream,
        max_body_bytes=args.max_body_bytes,
        hold_s=args.hold,
        log_level=args.log_level,
        log_format=args.log_format,
    )


class _Printed(app_proxy.Announcements):
    """What the proxy announces, on stderr (the dry run's tables on stdout)."""

    def profile_warning(self, warning: ProfileWarning) -> None:
        print(f"mcpfault proxy: {warning}", file=sys.stderr)

    def rule_not_carried(self, rule: Rule, *, owns_process: bool) -> None:
        """Said at start, so nobody waits for it."""
        if rule.fault.needs_process and not owns_process:
            why = "acts on the server process, which the proxy did not start (give the command after '--')"
        else:
            why = "acts on HTTP only"
        print(f"mcpfault proxy: rule {rule.name!r} ({rule.type_name}) {why}; not here", file=sys.stderr)

    def metrics(self, url: str) -> None:
        announce_metrics(url)

    def control(self, url: str) -> None:
        _said(f"mcpfault: control API on {url}")

    def serving(self, url: str, upstream: str, profile: str) -> None:
        _said(f"mcpfault: serving {url} -> {upstream} (profile {profile!r})")

    def ready_file_failed(self, path: Path, error: OSError) -> None:
        print(f"mcpfault proxy: --ready-file {path}: cannot write ({error.strerror})", file=sys.stderr)

    def dry_run(self, report: app_proxy.DryRunReport) -> None:
        _print_dry_run(report)

    def summary(self, ended: app_proxy.Ended) -> None:
        from mcpfault.proxy import summary

        summary.render(ended.stats, ended.decider, ended.era, sys.stderr, supervisor=ended.supervisor)
        if ended.probe is not None:
            ended.probe.render(sys.stderr)


def _said(line: str) -> None:
    """A line a reader may be waiting for: flushed at once."""
    print(line, file=sys.stderr)
    sys.stderr.flush()


def _print_dry_run(report: app_proxy.DryRunReport) -> None:
    from rich.table import Table

    loaded, inventory = report.profile, report.found.inventory
    console = stdout_console(120, highlight=False)

    def offered(kind: str, names: tuple[str, ...] | None) -> str:
        return f"{kind}: not offered" if names is None else f"{kind}: {len(names)}"

    console.print(
        f"profile {loaded.name!r} against {report.server}: {len(inventory.tools)} tool(s), "
        f"{offered('resources', inventory.resources)}, {offered('prompts', inventory.prompts)}"
    )
    rules = Table(title="rules", title_justify="left")
    for column in ("rule", "type", "methods", "names", "read_only", "matches"):
        rules.add_column(column)
    for found in report.found.rules:
        rule = found.rule
        read_only = "-" if rule.read_only is None else str(rule.read_only).lower()
        shown = [*found.tools[:4], f"and {len(found.tools) - 4} more"] if len(found.tools) > 5 else found.tools
        matches = ", ".join(shown) if found.tools else f"NOTHING: {found.why_none}"
        globs = [f"{kind} {', '.join(getattr(rule, kind))}" for kind in ("tools", "resources", "prompts")]
        named = "; ".join(g for g in globs if not g.endswith(" *")) or "*"
        rules.add_row(rule.name, rule.type_name, ", ".join(sorted(rule.methods)), named, read_only, matches)
    console.print(rules)
    tools = Table(title="tools", title_justify="left")
    for column in ("tool", "readOnlyHint", "rules that may act on it"):
        tools.add_column(column)
    for tool in inventory.tools:
        name = str(tool.get("name"))
        annotations = tool.get("annotations")
        annotations = annotations if isinstance(annotations, dict) else {}
        acting = [m.rule.name for m in report.found.rules if name in m.tools]
        tools.add_row(name, str(annotations.get("readOnlyHint", "-")).lower(), ", ".join(acting) or "-")
    console.print(tools)
    if any(found.fields for found in report.found.rules):
        fields = Table(title="fields each rule may change", title_justify="left")
        for column in ("rule", "tool", "fields by mode"):
            fields.add_column(column)
        for found in report.found.rules:
            for tool_name, by_mode in found.fields:
                fields.add_row(found.rule.name, tool_name, by_mode)
        console.print(fields)
    if (inventory.resources or inventory.prompts) and all(r.methods == {"tools/call"} for r in loaded.rules):
        console.print("these rules act on tools/call only; name resources/read or prompts/get in a rule's methods")
    for idle in report.found.idle:
        console.print(f"rule {idle.rule.name!r} matches nothing: {idle.why_none}")
