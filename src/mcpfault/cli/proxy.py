"""``mcpfault proxy``: the stdio proxy, and the Streamable HTTP proxy (``--listen``)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from mcpfault.cli.common import announce_metrics, logging_options, stdout_console
from mcpfault.errors import UsageError
from mcpfault.loopback import require_token_beyond_loopback


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
    logging_options(proxy)
    proxy.add_argument("server", nargs=argparse.REMAINDER, metavar="-- SERVER_COMMAND [ARGS...]")
    proxy.set_defaults(handler=_proxy)


def _proxy(args: argparse.Namespace) -> int:
    import anyio

    from mcpfault.faults.engine import Engine, rules_not_carried
    from mcpfault.faults.live import LiveRules
    from mcpfault.proxy import summary
    from mcpfault.proxy.core import ProxyCore
    from mcpfault.proxy.stdio import Lifecycle, run_stdio, server_observers
    from mcpfault.proxy.supervisor import Supervisor
    from mcpfault.telemetry.logging import configure

    configure(args.log_level, args.log_format)
    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    if args.dry_run:
        return _dry_run(args, command)
    if args.listen is not None or args.upstream is not None:
        return _proxy_http(args, command)
    if not command:
        raise UsageError("no server command; put it after '--', e.g. mcpfault proxy -c P.toml -- mcpfault mock-server")
    if args.shutdown_timeout < 0:
        raise UsageError(f"--shutdown-timeout {args.shutdown_timeout} is negative; give seconds >= 0")
    loaded = _proxy_profile(args)
    live = LiveRules.of(loaded)
    engine = Engine(loaded, live=live)
    _say_not_carried(rules_not_carried(loaded, "stdio"), owns_process=True)
    events = _proxy_events(args, loaded, "stdio")
    probe = _proxy_probe(args, events, loaded)
    telemetry, observers = _telemetry(args, probe)
    metrics_url = telemetry.server.url if telemetry.server is not None else None
    announce_metrics(metrics_url)
    observers += [telemetry.observer] if telemetry.observer is not None else []
    core = ProxyCore(engine, events=events, observers=observers, propagate=not args.no_propagate)
    controller = _controller(args, live, transport="stdio", counters=engine.counters, stats=core.stats, events=events)
    supervisor = Supervisor(command, loaded.server, observers=[*server_observers(core), *_server_events(events)])
    if probe is not None:
        supervisor.start_hooks.append(probe.on_start)  # the sidecar is scoped to every generation
    if controller is not None:
        controller.server = supervisor  # crash, stall and restart through the control API
    lifecycle = Lifecycle(shutdown_timeout_s=args.shutdown_timeout)
    announcer = _Announcer(args.ready_file, "stdio", loaded.name, lambda: supervisor.generation)
    announcer.metrics = metrics_url
    supervisor.start_hooks.append(announcer.restarted)

    async def relay(ready: Callable[[], None]) -> int:
        def handling_signals() -> None:
            ready()
            announcer.ready()  # the stdio proxy serves from its first line on

        return await run_stdio(command, core, lifecycle, supervisor=supervisor, on_ready=handling_signals)

    try:
        with announcer, _flushed_at_exit(events, telemetry, probe, core.stats) as ending:
            status = ending["exit_code"] = anyio.run(_with_control, args, controller, announcer, relay)
        if not args.no_summary:
            summary.render(core.stats, engine, core.era, sys.stderr, supervisor=supervisor)
            if probe is not None:
                probe.render(sys.stderr)
    finally:
        if probe is not None:
            probe.close()  # last: a client that gives the proxy two seconds to exit has its summary
    return status


def _say_not_carried(rules: list[Any], *, owns_process: bool) -> None:
    """Name each rule that cannot fire here, and why (said at start, so nobody waits for it)."""
    for rule in rules:
        if rule.fault.needs_process and not owns_process:
            why = "acts on the server process, which the proxy did not start (give the command after '--')"
        else:
            why = "acts on HTTP only"
        print(f"mcpfault proxy: rule {rule.name!r} ({rule.type_name}) {why}; not here", file=sys.stderr)


def _dry_run(args: argparse.Namespace, command: list[str]) -> int:
    import anyio
    from rich.table import Table

    from mcpfault.cli.common import EXIT_CHECK_FAILED, EXIT_OK
    from mcpfault.faults.base import HTTP, STDIO
    from mcpfault.proxy import dry_run

    if not command:
        raise UsageError("--dry-run needs the server command after '--', e.g. --dry-run -c P -- uvx mcp-server-time")
    loaded = _proxy_profile(args)
    inventory = anyio.run(dry_run.read_inventory, command)
    report = dry_run.match(loaded, inventory, HTTP if args.listen is not None else STDIO)
    console = stdout_console(120, highlight=False)

    def offered(kind: str, names: tuple[str, ...] | None) -> str:
        return f"{kind}: not offered" if names is None else f"{kind}: {len(names)}"

    server = inventory.server or command[0]
    console.print(
        f"profile {loaded.name!r} against {server}: {len(inventory.tools)} tool(s), "
        f"{offered('resources', inventory.resources)}, {offered('prompts', inventory.prompts)}"
    )
    rules = Table(title="rules", title_justify="left")
    for column in ("rule", "type", "methods", "names", "read_only", "matches"):
        rules.add_column(column)
    for found in report.rules:
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
        acting = [m.rule.name for m in report.rules if name in m.tools]
        tools.add_row(name, str(annotations.get("readOnlyHint", "-")).lower(), ", ".join(acting) or "-")
    console.print(tools)
    if any(found.fields for found in report.rules):
        fields = Table(title="fields each rule may change", title_justify="left")
        for column in ("rule", "tool", "fields by mode"):
            fields.add_column(column)
        for found in report.rules:
            for tool_name, by_mode in found.fields:
                fields.add_row(found.rule.name, tool_name, by_mode)
        console.print(fields)
    if (inventory.resources or inventory.prompts) and all(r.methods == {"tools/call"} for r in loaded.rules):
        console.print("these rules act on tools/call only; name resources/read or prompts/get in a rule's methods")
    for idle in report.idle:
        console.print(f"rule {idle.rule.name!r} matches nothing: {idle.why_none}")
    return EXIT_CHECK_FAILED if report.idle else EXIT_OK


def _proxy_probe(args: argparse.Namespace, events: Any, loaded: Any) -> Any:
    """The --probe observer, started (its sidecar ready) before the server; None without --probe."""
    if args.probe is None:
        if args.probe_policy is not None:
            raise UsageError("--probe-policy needs --probe ebpf or --probe fake:EVENTS.json")
        return None
    from mcpfault.probe import setup

    try:
        return setup.start(args.probe, policy_file=args.probe_policy, profile=Path(loaded.source), events=events)
    except BaseException:
        if events is not None:
            events.close()
        raise


def _telemetry(args: argparse.Namespace, probe: Any, **options: Any) -> tuple[Any, list[Any]]:
    """Spans and metrics (the probe's report joins each span), and the probe as the first observer:
    its window closes, and its report is due, before the span is written."""
    from mcpfault.proxy.setup import ProxyTelemetry

    try:
        telemetry = ProxyTelemetry.start(
            spans=args.spans,
            otlp_endpoint=args.otlp_endpoint,
            metrics_addr=args.metrics_addr,
            annotate=probe.annotate if probe is not None else None,
            client_spans=args.client_spans,
            **options,
        )
    except BaseException:
        if probe is not None:
            probe.close()
        raise
    if probe is None:
        return telemetry, []
    if telemetry.recorder is not None:
        probe.enable_annotations()
    probe.attach_metrics(telemetry.metrics)
    return telemetry, [probe]


def _proxy_profile(args: argparse.Namespace) -> Any:
    from mcpfault.faults import profile
    from mcpfault.faults.profile_warnings import warnings_of

    loaded = profile.load(profile.resolve(args.config))
    for warning in warnings_of(loaded):  # said at start: a proxy that will change nothing looks like one that works
        print(f"mcpfault proxy: {warning}", file=sys.stderr)
    return dataclasses.replace(loaded, seed=args.seed) if args.seed is not None else loaded


def _proxy_events(args: argparse.Namespace, loaded: Any, transport: str) -> Any:
    """The --events sink (appended to, after a line marking this start), or None; a clear error when the
    file cannot be written."""
    from mcpfault import __version__
    from mcpfault.proxy.events import JsonlEventSink

    if args.events is None:
        return None
    start = {"profile": loaded.name, "seed": loaded.seed, "transport": transport, "mcpfault_version": __version__}
    try:
        return JsonlEventSink(args.events, start=start)
    except OSError as exc:
        raise UsageError(f"--events {args.events}: cannot open for writing ({exc.strerror})") from None


def _server_events(events: Any) -> list[Any]:
    """The supervised server's deaths, restarts and downtime as lines of the --events file (when given)."""
    from mcpfault.proxy.supervisor import ServerEvents

    return [ServerEvents(events)] if events is not None else []


def _controller(args: argparse.Namespace, live: Any, *, transport: str, counters: Any, stats: Any, events: Any) -> Any:
    """The controller behind ``--control``, or None; the address is checked before anything starts."""
    if args.control is None:
        return None
    import os

    from mcpfault.control.access import TOKEN_VARIABLE, Access
    from mcpfault.control.controller import Controller
    from mcpfault.telemetry.metrics import parse_metrics_addr

    try:
        host, port = parse_metrics_addr(args.control, "--control")
        args.control_address = (host, port, os.environ.get(TOKEN_VARIABLE) or None)
        Access.for_address(*args.control_address)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return Controller(live, transport=transport, counters=counters, stats=stats, events=events)


class _Announcer:
    """Where the proxy can be reached, said once it serves: the ``--ready-file`` record (app/ready.py),
    rewritten with the new generation at each server restart, and removed at exit."""

    def __init__(self, path: Path | None, transport: str, profile: str, generation: Callable[[], int | None]) -> None:
        self._path = path
        self._transport = transport
        self._profile = profile
        self._generation = generation
        self._serving = False
        self.listen: str | None = None
        self.control: str | None = None
        self.metrics: str | None = None

    def __enter__(self) -> _Announcer:
        if self._path is not None:
            self._path.unlink(missing_ok=True)  # a record left by an earlier run is not this one's
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._path is not None and self._serving:
            self._path.unlink(missing_ok=True)

    def ready(self) -> None:
        self._serving = True
        self._write()

    def restarted(self, _pid: int, _pgid: int, _generation: int) -> None:
        if self._serving:  # the first start comes before the proxy serves: ready() writes that one
            self._write()

    def _write(self) -> None:
        if self._path is None:
            return
        import os

        from mcpfault.app import ready

        record = ready.Readiness(
            pid=os.getpid(),
            transport=self._transport,
            profile=self._profile,
            listen=self.listen,
            control=self.control,
            metrics=self.metrics,
            generation=self._generation(),
        )
        try:
            ready.write(self._path, record)
        except OSError as exc:  # said, not raised: the proxy serves its client regardless
            print(f"mcpfault proxy: --ready-file {self._path}: cannot write ({exc.strerror})", file=sys.stderr)


async def _with_control(
    args: argparse.Namespace,
    controller: Any,
    announcer: _Announcer,
    body: Callable[[Callable[[], None]], Awaitable[int]],
) -> int:
    """Run ``body`` (the proxy) with the control API served beside it, in the same event loop. The
    API's URL is printed when ``body`` calls the function it is given: once the proxy handles SIGINT
    and SIGTERM itself, so that a signal sent as soon as the line appears ends it cleanly."""
    if controller is None:
        return await body(lambda: None)
    import anyio

    from mcpfault.control.api import ControlServer

    server = ControlServer(controller, *args.control_address)
    try:
        url = await server.start()
    except OSError as exc:
        raise UsageError(f"--control {args.control}: cannot listen ({exc.strerror})") from None
    announcer.control = url

    def ready() -> None:
        print(f"mcpfault: control API on {url}", file=sys.stderr)
        sys.stderr.flush()

    try:
        return await body(ready)
    finally:
        with anyio.CancelScope(shield=True):
            await server.close()


@contextlib.contextmanager
def _flushed_at_exit(events: Any, telemetry: Any, probe: Any = None, stats: Any = None) -> Iterator[dict[str, int]]:
    """Events and spans reach their files however the proxy ends (a signal, a dead server, an error).
    The caller puts the exit status in the dict it is given; the events file's last line says it."""
    ending: dict[str, int] = {}
    try:
        yield ending
    finally:
        if probe is not None:
            probe.drain()  # first: its last reports go to the events and the spans
        if events is not None:
            if stats is not None:
                from mcpfault.proxy.events import stop_record

                events.write(
                    stop_record(
                        ending.get("exit_code"),
                        stats.ended_by,
                        requests=sum(stats.requests.values()),
                        faults=sum(stats.faults.values()),
                        client_write_failed=stats.client_write_failed,
                    )
                )
            events.close()
        telemetry.close()


def _proxy_http(args: argparse.Namespace, command: list[str]) -> int:
    import os

    import anyio

    from mcpfault.proxy import http, summary
    from mcpfault.proxy.http_exchange import Limits
    from mcpfault.proxy.http_sessions import Sessions
    from mcpfault.proxy.http_stdio_eras import EraRouter
    from mcpfault.telemetry import names

    if args.listen is None:
        raise UsageError("--upstream needs --listen HOST:PORT, where clients connect, e.g. --listen 127.0.0.1:8080")
    listen = http.parse_listen(args.listen)
    if not command and args.upstream is None:
        raise UsageError(
            "--listen needs --upstream URL (the server's MCP endpoint, e.g. http://127.0.0.1:3000/mcp) "
            "or a stdio server command after '--'"
        )
    upstream: Any = http.parse_upstream(args.upstream) if args.upstream is not None else None
    if args.probe is not None and (not command or upstream is not None):
        raise UsageError("--probe watches a stdio server's processes: give its command after '--' without --upstream")
    if args.max_body_bytes < 1:
        raise UsageError(f"--max-body-bytes {args.max_body_bytes}: give a positive number of bytes")
    if args.hold < 0:
        raise UsageError(f"--hold {args.hold} is negative; give seconds >= 0")
    token = os.environ.get("MCPFAULT_PROXY_TOKEN") or None
    require_token_beyond_loopback(
        f"--listen {args.listen}",
        listen.host,
        token,
        f"set MCPFAULT_PROXY_TOKEN and have clients send it in the {http.TOKEN_HEADER} header",
    )
    loaded = _proxy_profile(args)
    from mcpfault.faults.engine import rules_not_carried

    # Process rules fire only on a server the proxy started (a stdio server behind the bridge).
    _say_not_carried(rules_not_carried(loaded, "http", owns_process=bool(command)), owns_process=bool(command))
    events = _proxy_events(args, loaded, "http")
    probe = _proxy_probe(args, events, loaded)
    proxy: http.HttpProxy | None = None

    def generation() -> int | None:
        owned = proxy.owned if proxy is not None else None
        return owned.supervisor.generation if owned is not None else None

    announcer = _Announcer(args.ready_file, "http", loaded.name, generation)
    hooks = [probe.on_start] if probe is not None else []
    hooks.append(announcer.restarted)
    attributes = {} if upstream is None else {names.SERVER_ADDRESS: upstream.host, names.SERVER_PORT: upstream.port}
    telemetry, probed = _telemetry(args, probe, transport=names.TRANSPORT_HTTP, attributes=attributes)
    metrics_url = telemetry.server.url if telemetry.server is not None else None
    announce_metrics(metrics_url)
    server_watchers = [telemetry.observer] if telemetry.observer is not None else []
    server_watchers += _server_events(events)
    process = None
    if command and upstream is None:  # stdio servers behind the bridge, one per protocol era
        upstream = EraRouter(command, settings=loaded.server, observers=server_watchers, on_start=hooks)
    elif command:  # an HTTP server the proxy starts, waits for and supervises
        from mcpfault.proxy.http_process import HttpServerProcess

        process = HttpServerProcess(command, upstream, settings=loaded.server, observers=server_watchers)
        process.supervisor.start_hooks.append(announcer.restarted)
    sessions = Sessions(
        loaded,
        events=events,
        observers_for=lambda session_id: [*probed, *telemetry.observers_for(session_id)],
        propagate=not args.no_propagate,
        owns_process=bool(command),
    )
    controller = _controller(
        args, sessions.live, transport="http", counters=sessions.counters, stats=sessions.stats, events=events
    )
    limits = Limits(max_body_bytes=args.max_body_bytes, hold_s=args.hold)
    proxy = http.HttpProxy(sessions, upstream, limits=limits, token=token, process=process)
    announcer.metrics = metrics_url
    announced: list[Callable[[], None]] = []

    def announce(url: str) -> None:
        for ready in announced:
            ready()  # the control API's URL: the proxy handles signals by now
        owned = proxy.owned
        if controller is not None and owned is not None:
            controller.server = owned.supervisor  # the HTTP server, or every era's stdio server as one
        print(f"mcpfault: serving {url} -> {proxy.upstream_label} (profile {loaded.name!r})", file=sys.stderr)
        sys.stderr.flush()
        announcer.listen = url
        announcer.ready()

    async def relay(ready: Callable[[], None]) -> int:
        announced.append(ready)
        return await http.serve(proxy, listen, announce)

    try:
        with announcer, _flushed_at_exit(events, telemetry, probe, sessions.stats) as ending:
            status = anyio.run(_with_control, args, controller, announcer, relay, backend_options=http.loop_options())
            ending["exit_code"] = status
        if not args.no_summary:
            owned = proxy.owned
            supervisor = owned.supervisor if owned is not None else None
            summary.render(sessions.stats, sessions, sessions.era, sys.stderr, supervisor=supervisor)
            if probe is not None:
                probe.render(sys.stderr)
    finally:
        if probe is not None:
            probe.close()
    return status
