"""``mcpfault proxy``: the stdio proxy, and the Streamable HTTP proxy (``--listen``)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mcpfault.cli.common import logging_options
from mcpfault.errors import UsageError


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
        "  mcpfault proxy --config profiles/mixed.toml --events events.jsonl -- mcpfault mock-server\n"
        "  mcpfault proxy --config profiles/http.toml --listen 127.0.0.1:8080 --upstream http://127.0.0.1:3000/mcp\n"
        "  mcpfault proxy --config profiles/http.toml --listen 127.0.0.1:8080 -- mcpfault mock-server",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    proxy.add_argument("--config", "-c", required=True, type=Path, metavar="PROFILE.toml", help="fault profile")
    proxy.add_argument("--events", type=Path, metavar="FILE.jsonl", help="write one JSON line per request")
    proxy.add_argument("--seed", type=int, help="use this seed instead of the profile's")
    proxy.add_argument(
        "--shutdown-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="after the client leaves or a signal arrives, how long the server gets to exit (default 5)",
    )
    proxy.add_argument("--no-summary", action="store_true", help="do not print the fault summary at exit")
    proxy.add_argument("--spans", type=Path, metavar="FILE.jsonl", help="write one OTLP JSON line per span batch")
    proxy.add_argument(
        "--otlp-endpoint", metavar="URL", help="export spans over OTLP/HTTP (also OTEL_EXPORTER_OTLP_ENDPOINT)"
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
    from mcpfault.proxy import summary
    from mcpfault.proxy.core import ProxyCore
    from mcpfault.proxy.stdio import Lifecycle, run_stdio
    from mcpfault.telemetry.logging import configure

    configure(args.log_level, args.log_format)
    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    if args.listen is not None or args.upstream is not None:
        return _proxy_http(args, command)
    if not command:
        raise UsageError("no server command; put it after '--', e.g. mcpfault proxy -c P.toml -- mcpfault mock-server")
    if args.shutdown_timeout < 0:
        raise UsageError(f"--shutdown-timeout {args.shutdown_timeout} is negative; give seconds >= 0")
    loaded = _proxy_profile(args)
    engine = Engine(loaded)
    for rule in rules_not_carried(loaded, "stdio"):
        print(f"mcpfault proxy: rule {rule.name!r} ({rule.type_name}) acts on HTTP only; not here", file=sys.stderr)
    events = _proxy_events(args)

    probe = _proxy_probe(args, events)
    telemetry, observers = _telemetry(args, probe)
    observers += [telemetry.observer] if telemetry.observer is not None else []
    core = ProxyCore(engine, events=events, observers=observers, propagate=not args.no_propagate)
    lifecycle = Lifecycle(shutdown_timeout_s=args.shutdown_timeout)
    hooks = [probe.on_start] if probe is not None else []
    try:
        with _flushed_at_exit(events, telemetry, probe):
            status = anyio.run(functools.partial(run_stdio, command, core, lifecycle, on_start=hooks))
        if not args.no_summary:
            summary.render(core.stats, engine, core.era, sys.stderr)
            if probe is not None:
                probe.render(sys.stderr)
    finally:
        if probe is not None:
            probe.close()  # last: a client that gives the proxy two seconds to exit has its summary
    return status


def _proxy_probe(args: argparse.Namespace, events: Any) -> Any:
    """The --probe observer, started (its sidecar ready) before the server; None without --probe."""
    if args.probe is None:
        if args.probe_policy is not None:
            raise UsageError("--probe-policy needs --probe ebpf or --probe fake:EVENTS.json")
        return None
    from mcpfault.probe import setup

    try:
        return setup.start(args.probe, policy_file=args.probe_policy, profile=args.config, events=events)
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

    loaded = profile.load(args.config)
    return dataclasses.replace(loaded, seed=args.seed) if args.seed is not None else loaded


def _proxy_events(args: argparse.Namespace) -> Any:
    """The --events sink, or None; a clear error when the file cannot be written."""
    from mcpfault.proxy.events import JsonlEventSink

    if args.events is None:
        return None
    try:
        return JsonlEventSink(args.events)
    except OSError as exc:
        raise UsageError(f"--events {args.events}: cannot open for writing ({exc.strerror})") from None


@contextlib.contextmanager
def _flushed_at_exit(events: Any, telemetry: Any, probe: Any = None) -> Iterator[None]:
    """Events and spans reach their files however the proxy ends (a signal, a dead server, an error)."""
    try:
        yield
    finally:
        if probe is not None:
            probe.drain()  # first: its last reports go to the events and the spans
        if events is not None:
            events.close()
        telemetry.close()


def _proxy_http(args: argparse.Namespace, command: list[str]) -> int:
    import os

    import anyio

    from mcpfault.proxy import http, summary
    from mcpfault.proxy.http_exchange import Limits
    from mcpfault.proxy.http_sessions import Sessions
    from mcpfault.proxy.http_stdio import StdioBridge
    from mcpfault.telemetry import names

    if args.listen is None:
        raise UsageError("--upstream needs --listen HOST:PORT, where clients connect, e.g. --listen 127.0.0.1:8080")
    listen = http.parse_listen(args.listen)
    if command and args.upstream is not None:
        raise UsageError("give either --upstream URL or a stdio server command after '--', not both")
    if not command and args.upstream is None:
        raise UsageError(
            "--listen needs --upstream URL (the server's MCP endpoint, e.g. http://127.0.0.1:3000/mcp) "
            "or a stdio server command after '--'"
        )
    if args.probe is not None and not command:
        raise UsageError("--probe watches a stdio server's processes: give its command after '--', not --upstream")
    if args.max_body_bytes < 1:
        raise UsageError(f"--max-body-bytes {args.max_body_bytes}: give a positive number of bytes")
    if args.hold < 0:
        raise UsageError(f"--hold {args.hold} is negative; give seconds >= 0")
    token = os.environ.get("MCPFAULT_PROXY_TOKEN") or None
    if not listen.loopback and token is None:
        raise UsageError(
            f"--listen {args.listen} is beyond loopback: set MCPFAULT_PROXY_TOKEN and have clients send it "
            f"in the {http.TOKEN_HEADER} header, or listen on 127.0.0.1"
        )
    loaded = _proxy_profile(args)
    events = _proxy_events(args)
    probe = _proxy_probe(args, events)
    hooks = [probe.on_start] if probe is not None else []
    upstream: Any = StdioBridge(command, on_start=hooks) if command else http.parse_upstream(args.upstream)
    attributes = {} if command else {names.SERVER_ADDRESS: upstream.host, names.SERVER_PORT: upstream.port}
    telemetry, probed = _telemetry(args, probe, transport=names.TRANSPORT_HTTP, attributes=attributes)
    sessions = Sessions(
        loaded,
        events=events,
        observers_for=lambda session_id: [*probed, *telemetry.observers_for(session_id)],
        propagate=not args.no_propagate,
    )
    limits = Limits(max_body_bytes=args.max_body_bytes, hold_s=args.hold)
    proxy = http.HttpProxy(sessions, upstream, limits=limits, token=token)

    def announce(url: str) -> None:
        print(f"mcpfault: serving {url} -> {proxy.upstream_label} (profile {loaded.name!r})", file=sys.stderr)
        sys.stderr.flush()

    try:
        with _flushed_at_exit(events, telemetry, probe):
            status = anyio.run(http.serve, proxy, listen, announce, backend_options=http.loop_options())
        if not args.no_summary:
            summary.render(sessions.stats, sessions, sessions.era, sys.stderr)
            if probe is not None:
                probe.render(sys.stderr)
    finally:
        if probe is not None:
            probe.close()
    return status
