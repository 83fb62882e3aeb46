"""Assembling and running ``mcpfault proxy`` from a typed configuration, so the command line only parses
and prints.

``ProxyConfig`` holds every option of the command; ``check()`` refuses what is wrong with it before
anything is read or started. ``build(config, say)`` loads the profile and opens what the proxy needs
beside its transport (the events file, the probe's sidecar, spans, /metrics, the control API's
controller) and returns a ``BuiltProxy``, not relaying yet; ``run(config, say)`` builds one, relays until
it ends and returns the exit status. The options choose one of four transport forms:

* stdio: this process's stdin/stdout in front of a stdio server the proxy starts (``command``);
* Streamable HTTP in front of ``upstream``, a server someone else runs;
* HTTP in front of ``command``, a stdio server behind the bridge (one per protocol era);
* HTTP in front of ``upstream`` served by ``command``, which the proxy starts, waits for and supervises.

This module prints nothing: what a proxy has to tell its user reaches an ``Announcements`` at the
moment it happens (the CLI prints it; the default says nothing). Everything heavy is imported when a
proxy is built, not here: the CLI imports this module for every command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from mcpfault.errors import UsageError
from mcpfault.loopback import require_token_beyond_loopback

if TYPE_CHECKING:
    from yarl import URL

    from mcpfault.control.controller import Controller, Counters
    from mcpfault.faults.live import LiveRules
    from mcpfault.faults.profile import Profile, Rule
    from mcpfault.faults.profile_warnings import ProfileWarning
    from mcpfault.probe.observer import ProbeObserver
    from mcpfault.protocol.eras import EraTracker
    from mcpfault.proxy.core import Stats
    from mcpfault.proxy.dry_run import DryRun
    from mcpfault.proxy.events import JsonlEventSink
    from mcpfault.proxy.http.process import HttpServerProcess
    from mcpfault.proxy.http.serve import HttpProxy, ListenAddress
    from mcpfault.proxy.http.stdio_eras import AllEras, EraRouter
    from mcpfault.proxy.process.supervisor import ServerObserver, StartHook, Supervisor
    from mcpfault.proxy.setup import ProxyTelemetry
    from mcpfault.proxy.summary import Decider
    from mcpfault.telemetry.logging import LogFormat

Transport = Literal["stdio", "http"]
LogLevel = Literal["debug", "info", "warning", "error"]
PROXY_TOKEN_VARIABLE = "MCPFAULT_PROXY_TOKEN"
# The proxy's part once it handles SIGINT and SIGTERM itself: it calls the function it is given then
# (the control API's line is said at that moment), and returns the exit status.
Relay = Callable[[Callable[[], None]], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Every option of ``mcpfault proxy``, typed, with the command line's defaults (``--help`` says
    each). The tokens are read from the environment, as the command documents them."""

    profile: str  # a .toml path or a bundled name
    command: tuple[str, ...] = ()  # the server to start (what follows '--'); none in front of upstream
    events: Path | None = None  # appended to: a proxy_started line, one line per request, proxy_stopped
    seed: int | None = None  # instead of the profile's
    shutdown_timeout_s: float = 5.0  # after the client leaves or a signal arrives, for the server to exit
    summary: bool = True  # give Announcements.summary the fault summary at exit
    dry_run: bool = False  # match the rules against what the server offers instead of relaying
    spans: Path | None = None  # one OTLP JSON line per span batch
    otlp_endpoint: str | None = None
    client_spans: bool = False  # the leg to the server as a CLIENT span under the SERVER span
    propagate: bool = True  # put the proxy's trace context into requests
    metrics_addr: str | None = None  # HOST:PORT for Prometheus /metrics
    control: str | None = None  # HOST:PORT for the control API (port 0 picks one)
    ready_file: Path | None = None  # the readiness record (app/ready.py), while the proxy serves
    probe: str | None = None  # "ebpf" or "fake:EVENTS.json": the side-effect probe
    probe_policy: Path | None = None  # its allow-lists (default: the profile's [probe] table)
    listen: str | None = None  # HOST:PORT: serve Streamable HTTP here
    upstream: str | None = None  # the server's MCP endpoint URL
    max_body_bytes: int = 16 * 1024 * 1024  # a larger request body is answered 413
    hold_s: float = 300.0  # how long a request whose answer a fault lost stays open
    log_level: LogLevel | None = None  # None: the process's logging stays as it is
    log_format: LogFormat = "auto"
    # Where a stdio proxy's client is: this process's stdin and stdout, or the pipes of a program that
    # runs the proxy in its own process.
    stdin_fd: int = 0
    stdout_fd: int = 1

    @property
    def transport(self) -> Transport:
        """HTTP once ``listen`` or ``upstream`` is given (``check`` refuses ``upstream`` alone)."""
        return "http" if self.listen is not None or self.upstream is not None else "stdio"

    def check(self) -> None:
        """A ``UsageError`` naming the option for what is wrong before anything is read or started; the
        first problem found is the one said, in the order the command line always said them."""
        if self.dry_run:
            if not self.command:
                raise UsageError(
                    "--dry-run needs the server command after '--', e.g. --dry-run -c P -- uvx mcp-server-time"
                )
        elif self.transport == "http":
            self._check_http()
        elif not self.command:
            raise UsageError(
                "no server command; put it after '--', e.g. mcpfault proxy -c P.toml -- mcpfault mock-server"
            )
        elif self.shutdown_timeout_s < 0:
            raise UsageError(f"--shutdown-timeout {self.shutdown_timeout_s} is negative; give seconds >= 0")

    def _check_http(self) -> None:
        from mcpfault.proxy.http import serve as http
        from mcpfault.proxy.http.exchange import TOKEN_HEADER

        if self.listen is None:
            raise UsageError("--upstream needs --listen HOST:PORT, where clients connect, e.g. --listen 127.0.0.1:8080")
        listen = http.parse_listen(self.listen)
        if not self.command and self.upstream is None:
            raise UsageError(
                "--listen needs --upstream URL (the server's MCP endpoint, e.g. http://127.0.0.1:3000/mcp) "
                "or a stdio server command after '--'"
            )
        if self.upstream is not None:
            http.parse_upstream(self.upstream)
        if self.probe is not None and (not self.command or self.upstream is not None):
            raise UsageError(
                "--probe watches a stdio server's processes: give its command after '--' without --upstream"
            )
        if self.max_body_bytes < 1:
            raise UsageError(f"--max-body-bytes {self.max_body_bytes}: give a positive number of bytes")
        if self.hold_s < 0:
            raise UsageError(f"--hold {self.hold_s} is negative; give seconds >= 0")
        require_token_beyond_loopback(
            f"--listen {self.listen}",
            listen.host,
            _proxy_token(),
            f"set {PROXY_TOKEN_VARIABLE} and have clients send it in the {TOKEN_HEADER} header",
        )


# Ended, DryRunReport and _Control are NamedTuples, not frozen dataclasses: every mcpfault command imports
# this module (cli/proxy.py does, so the bench's fork server has it before it forks a proxy), and a frozen
# dataclass costs ~0.5 ms of CPU to define, a NamedTuple ~0.05 ms.
class Ended(NamedTuple):
    """A proxy that ran to its end: its exit status, and what its exit summary reads."""

    status: int
    stats: Stats
    decider: Decider  # the engine, or the HTTP sessions' engines together
    era: EraTracker
    supervisor: Supervisor | AllEras | None  # the server the proxy started, if it did
    probe: ProbeObserver | None


class DryRunReport(NamedTuple):
    """A dry run: the profile's rules matched against what the server offered."""

    profile: Profile
    server: str  # the name the server gave, else its command
    found: DryRun

    @property
    def status(self) -> int:
        """1 (a check failed) when a rule matches nothing, else 0."""
        return 1 if self.found.idle else 0


class Announcements:
    """What a proxy tells its user as it starts, serves and ends, each at its moment; these say nothing.
    The command line prints them (cli/proxy.py). A program that needs where the proxy is reads its
    readiness record instead (``ready_file``)."""

    def profile_warning(self, warning: ProfileWarning) -> None:
        """A profile that may change nothing: said before anything starts."""

    def rule_not_carried(self, rule: Rule, *, owns_process: bool) -> None:
        """A rule that cannot fire here: it acts on HTTP only, or on a server process the proxy did not
        start (``owns_process`` false)."""

    def metrics(self, url: str) -> None:
        """/metrics is served at ``url`` (the bound port, when port 0 was asked for)."""

    def control(self, url: str) -> None:
        """The control API is at ``url``; said once the proxy handles SIGINT and SIGTERM itself."""

    def serving(self, url: str, upstream: str, profile: str) -> None:
        """The HTTP proxy serves ``url`` in front of ``upstream`` (a URL, or the stdio server's label)."""

    def ready_file_failed(self, path: Path, error: OSError) -> None:
        """The readiness record could not be written; the proxy serves its client regardless."""

    def dry_run(self, report: DryRunReport) -> None:
        """What a dry run found."""

    def summary(self, ended: Ended) -> None:
        """The proxy ended (``config.summary`` only): the faults it injected, the server's account."""


def run(config: ProxyConfig, say: Announcements | None = None) -> int:
    """Run the proxy ``config`` describes until it ends: the server's exit status (0 after SIGINT or
    SIGTERM in front of an upstream the proxy did not start); for a dry run, ``DryRunReport.status``."""
    say = say if say is not None else Announcements()
    if config.log_level is not None:
        from mcpfault.telemetry.logging import configure

        configure(config.log_level, config.log_format)
    if config.dry_run:
        report = dry_run(config, say)
        say.dry_run(report)
        return report.status
    return build(config, say).run()


def dry_run(config: ProxyConfig, say: Announcements | None = None) -> DryRunReport:
    """Start the server, read its tools, resources and prompts, stop it, and match the rules to them."""
    import anyio

    from mcpfault.faults.base import HTTP, STDIO
    from mcpfault.proxy import dry_run as matching

    config.check()
    loaded = _profile(config, say if say is not None else Announcements())
    inventory = anyio.run(matching.read_inventory, config.command)
    found = matching.match(loaded, inventory, HTTP if config.listen is not None else STDIO)
    return DryRunReport(loaded, inventory.server or config.command[0], found)


def build(config: ProxyConfig, say: Announcements | None = None) -> BuiltProxy:
    """Check ``config``, load its profile and open what the proxy needs beside its transport; nothing
    relays yet. A failure closes again what was opened before it."""
    if config.dry_run:
        raise ValueError("a dry run builds no proxy: call run() or dry_run()")
    say = say if say is not None else Announcements()
    config.check()
    with contextlib.ExitStack() as opened:
        built = (_build_http if config.transport == "http" else _build_stdio)(config, say, opened)
        opened.pop_all()  # built: its run() closes them, however it ends
    return built


@dataclass(eq=False)
class BuiltProxy:
    """A proxy assembled from its configuration, its files and listeners open: ``run()`` it once."""

    config: ProxyConfig
    profile: Profile
    say: Announcements
    relay: Relay
    record: _ReadyRecord
    events: JsonlEventSink | None
    probe: ProbeObserver | None
    telemetry: ProxyTelemetry
    control: _Control | None
    # What the exit summary reads.
    stats: Stats
    decider: Decider
    era: EraTracker
    supervisor: Supervisor | AllEras | None
    backend_options: dict[str, object] | None = None  # anyio.run's (uvloop for HTTP)

    def run(self) -> int:
        """Relay until the proxy ends; its exit status. Events and spans reach their files however it ends."""
        import anyio

        try:
            with self.record, _flushed_at_exit(self.events, self.telemetry, self.probe, self.stats) as ending:
                status = ending["exit_code"] = anyio.run(
                    _with_control, self.control, self.record, self.say, self.relay, backend_options=self.backend_options
                )
            if self.config.summary:
                self.say.summary(Ended(status, self.stats, self.decider, self.era, self.supervisor, self.probe))
        finally:
            if self.probe is not None:
                self.probe.close()  # last: a client that gives the proxy two seconds to exit has its summary
        return status


def _build_stdio(config: ProxyConfig, say: Announcements, opened: contextlib.ExitStack) -> BuiltProxy:
    from mcpfault.faults.engine import Engine, rules_not_carried
    from mcpfault.faults.live import LiveRules
    from mcpfault.proxy.core import ProxyCore
    from mcpfault.proxy.process.supervisor import Supervisor
    from mcpfault.proxy.stdio import Lifecycle, run_stdio, server_observers

    loaded = _profile(config, say)
    live = LiveRules.of(loaded)
    engine = Engine(loaded, live=live)
    for rule in rules_not_carried(loaded, "stdio"):
        say.rule_not_carried(rule, owns_process=True)
    events = _events(config, loaded, "stdio", opened)
    probe = _probe(config, events, loaded, opened)
    telemetry, observers = _telemetry(config, probe, opened)
    metrics_url = _metrics_url(telemetry, say)
    if telemetry.observer is not None:
        observers.append(telemetry.observer)
    core = ProxyCore(engine, events=events, observers=observers, propagate=config.propagate)
    control = _control(config, live, transport="stdio", counters=engine.counters, stats=core.stats, events=events)
    supervisor = Supervisor(config.command, loaded.server, observers=[*server_observers(core), *_server_events(events)])
    if probe is not None:
        supervisor.start_hooks.append(probe.on_start)  # the sidecar is scoped to every generation
    if control is not None:
        control.controller.server = supervisor  # crash, stall and restart through the control API
    lifecycle = Lifecycle(shutdown_timeout_s=config.shutdown_timeout_s)
    record = _ReadyRecord(config.ready_file, "stdio", loaded.name, say, lambda: supervisor.generation)
    record.metrics = metrics_url
    supervisor.start_hooks.append(record.restarted)

    async def relay(ready: Callable[[], None]) -> int:
        def handling_signals() -> None:
            ready()
            record.ready()  # the stdio proxy serves from its first line on

        return await run_stdio(
            config.command,
            core,
            lifecycle,
            stdin_fd=config.stdin_fd,
            stdout_fd=config.stdout_fd,
            supervisor=supervisor,
            on_ready=handling_signals,
        )

    return BuiltProxy(
        config=config,
        profile=loaded,
        say=say,
        relay=relay,
        record=record,
        events=events,
        probe=probe,
        telemetry=telemetry,
        control=control,
        stats=core.stats,
        decider=engine,
        era=core.era,
        supervisor=supervisor,
    )


def _build_http(config: ProxyConfig, say: Announcements, opened: contextlib.ExitStack) -> BuiltProxy:
    from mcpfault.faults.engine import rules_not_carried
    from mcpfault.proxy.http import serve as http
    from mcpfault.proxy.http.exchange import Limits
    from mcpfault.proxy.http.sessions import Sessions
    from mcpfault.telemetry import names

    assert config.listen is not None  # check() refused HTTP without it
    listen = http.parse_listen(config.listen)
    url = http.parse_upstream(config.upstream) if config.upstream is not None else None
    owns_process = bool(config.command)
    loaded = _profile(config, say)
    # Process rules fire only on a server the proxy started (a stdio server behind the bridge).
    for rule in rules_not_carried(loaded, "http", owns_process=owns_process):
        say.rule_not_carried(rule, owns_process=owns_process)
    events = _events(config, loaded, "http", opened)
    probe = _probe(config, events, loaded, opened)
    record = _ReadyRecord(config.ready_file, "http", loaded.name, say)
    hooks: list[StartHook] = [probe.on_start] if probe is not None else []
    hooks.append(record.restarted)
    attributes = {} if url is None else {names.SERVER_ADDRESS: url.host, names.SERVER_PORT: url.port}
    telemetry, probed = _telemetry(config, probe, opened, transport=names.TRANSPORT_HTTP, attributes=attributes)
    record.metrics = _metrics_url(telemetry, say)
    watchers: list[ServerObserver] = [telemetry.observer] if telemetry.observer is not None else []
    watchers += _server_events(events)
    upstream, process = _http_upstream(config, url, loaded, watchers=watchers, hooks=hooks, record=record)
    sessions = Sessions(
        loaded,
        events=events,
        observers_for=lambda session_id: [*probed, *telemetry.observers_for(session_id)],
        propagate=config.propagate,
        owns_process=owns_process,
    )
    control = _control(
        config, sessions.live, transport="http", counters=sessions.counters, stats=sessions.stats, events=events
    )
    limits = Limits(max_body_bytes=config.max_body_bytes, hold_s=config.hold_s)
    proxy = http.HttpProxy(sessions, upstream, limits=limits, token=_proxy_token(), process=process)
    owned = proxy.owned
    supervisor = owned.supervisor if owned is not None else None
    if supervisor is not None:
        record.generation = lambda: supervisor.generation
    return BuiltProxy(
        config=config,
        profile=loaded,
        say=say,
        relay=_http_relay(proxy, listen, loaded.name, control=control, record=record, say=say),
        record=record,
        events=events,
        probe=probe,
        telemetry=telemetry,
        control=control,
        stats=sessions.stats,
        decider=sessions,
        era=sessions.era,
        supervisor=supervisor,
        backend_options=http.loop_options(),
    )


def _http_upstream(
    config: ProxyConfig,
    url: URL | None,
    loaded: Profile,
    *,
    watchers: list[ServerObserver],
    hooks: list[StartHook],
    record: _ReadyRecord,
) -> tuple[URL | EraRouter, HttpServerProcess | None]:
    """Where the HTTP proxy sends requests: ``url``, a server someone else runs; or servers it starts
    itself: the stdio ones behind the bridge (one per protocol era), or ``command`` serving ``url``,
    started, waited for and supervised."""
    if not config.command:
        assert url is not None  # check() refused neither
        return url, None
    if url is None:
        from mcpfault.proxy.http.stdio_eras import EraRouter

        return EraRouter(config.command, settings=loaded.server, observers=watchers, on_start=hooks), None
    from mcpfault.proxy.http.process import HttpServerProcess

    process = HttpServerProcess(config.command, url, settings=loaded.server, observers=watchers)
    process.supervisor.start_hooks.append(record.restarted)
    return url, process


def _http_relay(
    proxy: HttpProxy,
    listen: ListenAddress,
    profile: str,
    *,
    control: _Control | None,
    record: _ReadyRecord,
    say: Announcements,
) -> Relay:
    from mcpfault.proxy.http import serve as http

    def announce(url: str, ready: Callable[[], None]) -> None:
        ready()  # the control API's URL: the proxy handles signals by now
        owned = proxy.owned
        if control is not None and owned is not None:
            control.controller.server = owned.supervisor  # the HTTP server, or every era's stdio server as one
        say.serving(url, proxy.upstream_label, profile)
        record.listen = url
        record.ready()

    async def relay(ready: Callable[[], None]) -> int:
        return await http.serve(proxy, listen, lambda url: announce(url, ready))

    return relay


def _proxy_token() -> str | None:
    return os.environ.get(PROXY_TOKEN_VARIABLE) or None


def _profile(config: ProxyConfig, say: Announcements) -> Profile:
    from mcpfault.faults import profile
    from mcpfault.faults.profile_warnings import warnings_of

    loaded = profile.load(profile.resolve(config.profile))
    for warning in warnings_of(loaded):  # said at start: a proxy that will change nothing looks like one that works
        say.profile_warning(warning)
    return dataclasses.replace(loaded, seed=config.seed) if config.seed is not None else loaded


def _events(
    config: ProxyConfig, loaded: Profile, transport: Transport, opened: contextlib.ExitStack
) -> JsonlEventSink | None:
    """The events sink (appended to, after a line marking this start), or None; a clear error when the
    file cannot be written."""
    from mcpfault import __version__
    from mcpfault.proxy.events import JsonlEventSink

    if config.events is None:
        return None
    start = {"profile": loaded.name, "seed": loaded.seed, "transport": transport, "mcpfault_version": __version__}
    try:
        events = JsonlEventSink(config.events, start=start)
    except OSError as exc:
        raise UsageError(f"--events {config.events}: cannot open for writing ({exc.strerror})") from None
    opened.callback(events.close)
    return events


def _probe(
    config: ProxyConfig, events: JsonlEventSink | None, loaded: Profile, opened: contextlib.ExitStack
) -> ProbeObserver | None:
    """The probe's observer, started (its sidecar ready) before the server; None without one."""
    if config.probe is None:
        if config.probe_policy is not None:
            raise UsageError("--probe-policy needs --probe ebpf or --probe fake:EVENTS.json")
        return None
    from mcpfault.probe import setup

    probe: ProbeObserver = setup.start(
        config.probe, policy_file=config.probe_policy, profile=Path(loaded.source), events=events
    )
    opened.callback(probe.close)
    return probe


def _telemetry(
    config: ProxyConfig,
    probe: ProbeObserver | None,
    opened: contextlib.ExitStack,
    *,
    transport: str = "stdio",
    attributes: Mapping[str, object] | None = None,
) -> tuple[ProxyTelemetry, list[ProbeObserver]]:
    """Spans and metrics (the probe's report joins each span), and the probe as the first observer:
    its window closes, and its report is due, before the span is written."""
    from mcpfault.proxy.setup import ProxyTelemetry

    telemetry = ProxyTelemetry.start(
        spans=config.spans,
        otlp_endpoint=config.otlp_endpoint,
        metrics_addr=config.metrics_addr,
        transport=transport,
        attributes=attributes,
        annotate=probe.annotate if probe is not None else None,
        client_spans=config.client_spans,
    )
    opened.callback(telemetry.close)
    if probe is None:
        return telemetry, []
    if telemetry.recorder is not None:
        probe.enable_annotations()
    probe.attach_metrics(telemetry.metrics)
    return telemetry, [probe]


def _metrics_url(telemetry: ProxyTelemetry, say: Announcements) -> str | None:
    """Where /metrics is served, said: with ``HOST:0`` only the bound port tells."""
    url: str | None = telemetry.server.url if telemetry.server is not None else None
    if url is not None:
        say.metrics(url)
    return url


def _server_events(events: JsonlEventSink | None) -> list[ServerObserver]:
    """The supervised server's deaths, restarts and downtime as lines of the events file (when given)."""
    from mcpfault.proxy.process.supervisor import ServerEvents

    return [ServerEvents(events)] if events is not None else []


class _Control(NamedTuple):
    """The control API's controller and the address it is to listen on (checked before it starts)."""

    controller: Controller
    address: str  # as given, for the error when it cannot listen
    host: str
    port: int
    token: str | None


def _control(
    config: ProxyConfig,
    live: LiveRules,
    *,
    transport: str,
    counters: Counters,
    stats: Stats,
    events: JsonlEventSink | None,
) -> _Control | None:
    """The controller behind the control API, or None; a wide address without a token is refused here."""
    if config.control is None:
        return None
    from mcpfault.control.access import TOKEN_VARIABLE, Access
    from mcpfault.control.controller import Controller
    from mcpfault.telemetry.metrics import parse_metrics_addr

    try:
        host, port = parse_metrics_addr(config.control, "--control")
        token = os.environ.get(TOKEN_VARIABLE) or None
        Access.for_address(host, port, token)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    controller = Controller(live, transport=transport, counters=counters, stats=stats, events=events)
    return _Control(controller, config.control, host, port, token)


async def _with_control(control: _Control | None, record: _ReadyRecord, say: Announcements, body: Relay) -> int:
    """Run ``body`` (the proxy) with the control API served beside it, in the same event loop. The
    API's URL is said when ``body`` calls the function it is given: once the proxy handles SIGINT
    and SIGTERM itself, so that a signal sent as soon as the line appears ends it cleanly."""
    if control is None:
        return await body(lambda: None)
    import anyio

    from mcpfault.control.api import ControlServer

    server = ControlServer(control.controller, control.host, control.port, control.token)
    try:
        url = await server.start()
    except OSError as exc:
        raise UsageError(f"--control {control.address}: cannot listen ({exc.strerror})") from None
    record.control = url
    try:
        return await body(lambda: say.control(url))
    finally:
        with anyio.CancelScope(shield=True):
            await server.close()


class _ReadyRecord:
    """Where the proxy can be reached, once it serves: the readiness record (app/ready.py), rewritten
    with the new generation at each server restart, and removed at exit."""

    def __init__(
        self,
        path: Path | None,
        transport: Transport,
        profile: str,
        say: Announcements,
        generation: Callable[[], int | None] = lambda: None,  # None: the proxy did not start the server
    ) -> None:
        self._path = path
        self._transport = transport
        self._profile = profile
        self._say = say
        self.generation = generation
        self._serving = False
        self.listen: str | None = None
        self.control: str | None = None
        self.metrics: str | None = None

    def __enter__(self) -> _ReadyRecord:
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
        from mcpfault.app import ready

        record = ready.Readiness(
            pid=os.getpid(),
            transport=self._transport,
            profile=self._profile,
            listen=self.listen,
            control=self.control,
            metrics=self.metrics,
            generation=self.generation(),
        )
        try:
            ready.write(self._path, record)
        except OSError as exc:  # said, not raised: the proxy serves its client regardless
            self._say.ready_file_failed(self._path, exc)


@contextlib.contextmanager
def _flushed_at_exit(
    events: JsonlEventSink | None, telemetry: ProxyTelemetry, probe: ProbeObserver | None, stats: Stats
) -> Iterator[dict[str, int]]:
    """Events and spans reach their files however the proxy ends (a signal, a dead server, an error).
    The caller puts the exit status in the dict it is given; the events file's last line says it."""
    ending: dict[str, int] = {}
    try:
        yield ending
    finally:
        if probe is not None:
            probe.drain()  # first: its last reports go to the events and the spans
        if events is not None:
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
