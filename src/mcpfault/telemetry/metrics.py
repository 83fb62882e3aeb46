"""Prometheus metrics for the proxy and the harness, and the endpoint that serves them.

Each metrics object owns its own ``CollectorRegistry``: the global one would collect whatever any
library registers there, and two proxies in one test process would collide on it.

Exemplars carry the trace id of one request that landed in a bucket (``{"trace_id": hex}``), so a
latency spike on a Grafana panel links to the very trace that caused it. They are exposed only in
the OpenMetrics format, which Prometheus asks for.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Histogram, push_to_gateway
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

from mcpfault.loopback import check_http_url, parse_host_port, require_token_beyond_loopback
from mcpfault.telemetry import names
from mcpfault.telemetry.tallies import CounterChild, HistogramChild, Tallies

_INVALID_TRACE_ID = "0" * 32

# WSGI plumbing, typed loosely on purpose: the stdlib's wsgiref types live in _typeshed only.
_StartResponse = Callable[..., Any]
_WsgiApp = Callable[[dict[str, Any], _StartResponse], Iterable[bytes]]


def normalize_method(method: str) -> str:
    """``method`` if it is a known MCP method, else ``_OTHER``: a peer must not mint label values."""
    return method if method in names.KNOWN_MCP_METHODS else names.OTHER


def _trace_id(trace_id_hex: str | None) -> str | None:
    """The trace an exemplar may point at: None for no trace or the invalid all-zero id."""
    return trace_id_hex if trace_id_hex and trace_id_hex != _INVALID_TRACE_ID else None


def _exemplar(trace_id_hex: str | None) -> dict[str, str] | None:
    trace_id = _trace_id(trace_id_hex)
    return {names.EXEMPLAR_TRACE_ID: trace_id} if trace_id is not None else None


class _Metrics:
    """Metrics declared in one registry: the one given, or a new one of their own."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)

    def _counter(self, name: str, documentation: str, labels: Sequence[str]) -> Counter:
        return Counter(name, documentation, labels, registry=self.registry)

    def _histogram(self, name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float]) -> Histogram:
        return Histogram(name, documentation, labels, registry=self.registry, buckets=buckets)


class ProxyMetrics(_Metrics):
    """The proxy's metrics for one transport.

    ``fault_types`` and ``fault_modes`` are the label values allowed (the fault catalog's names and
    modes, passed in because telemetry sits below the fault layer); anything else is recorded as
    ``_OTHER``. Child metrics are cached per label combination because ``.labels()`` costs a lock and
    a dict lookup with tuple building on every call; the cache key is the normalized label values,
    so its size is bounded by the fixed label sets.
    """

    def __init__(
        self,
        transport: str,
        *,
        fault_types: Iterable[str],
        fault_modes: Iterable[str],
        registry: CollectorRegistry | None = None,
    ) -> None:
        if transport not in names.TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r} for metrics; use one of {', '.join(names.TRANSPORTS)}")
        super().__init__(registry)
        self.transport = transport
        self._fault_types = frozenset(fault_types) | {names.FAULT_TYPE_NONE}
        self._fault_modes = frozenset(fault_modes)

        # The four a request touches are tallies (telemetry/tallies.py): a fraction of the library's cost.
        tallies = Tallies(self.registry)
        self._requests = tallies.counter(
            names.REQUESTS_TOTAL,
            "MCP messages from the client, by method and by the fault injected (none when untouched).",
            names.REQUESTS_TOTAL_LABELS,
        )
        self._faults = self._counter(
            names.FAULTS_INJECTED_TOTAL,
            "Faults injected, by fault type and mode.",
            names.FAULTS_INJECTED_TOTAL_LABELS,
        )
        self._duration = tallies.histogram(
            names.REQUEST_DURATION_SECONDS,
            "End-to-end request duration through the proxy, as the client sees it (injected delays included).",
            names.REQUEST_DURATION_SECONDS_LABELS,
            names.MCP_DURATION_BUCKETS,
        )
        self._added = tallies.histogram(
            names.PROXY_ADDED_SECONDS,
            "Time the proxy itself adds to a request (parsing, deciding, relaying; injected delays excluded).",
            names.PROXY_ADDED_SECONDS_LABELS,
            names.PROXY_ADDED_BUCKETS,
        )
        self._in_flight = tallies.gauge(
            names.REQUESTS_IN_FLIGHT,
            "Requests forwarded or held by the proxy and not yet answered.",
            names.REQUESTS_IN_FLIGHT_LABELS,
        )
        tallies.register()
        self._tallies_lock = tallies.lock
        self._exits = self._counter(
            names.UPSTREAM_EXITS_TOTAL,
            "Times the upstream MCP server exited or its connection closed.",
            names.UPSTREAM_EXITS_TOTAL_LABELS,
        )
        self._restarts = self._counter(
            names.SERVER_RESTARTS_TOTAL, "Times the proxy restarted the MCP server it supervises.", ()
        )
        self._crashes = self._counter(
            names.SERVER_CRASHES_TOTAL,
            "Deaths of the supervised MCP server, by the fault that caused them (none: it died by itself).",
            names.SERVER_CRASHES_TOTAL_LABELS,
        )
        self._downtime = self._histogram(
            names.SERVER_DOWNTIME_SECONDS,
            "From the supervised server's crash to its first answer after the restart.",
            (),
            names.MCP_DURATION_BUCKETS,
        )
        # Every cause exported from the start (at 0), so a panel has a series before the first crash.
        for cause in sorted(self._fault_types):
            self._crashes.labels(cause)
        # One transport per object, so these children never change.
        self._added_child = self._added.labels(transport)
        self._in_flight_child = self._in_flight.labels(transport)
        self._exits_child = self._exits.labels(transport)
        self._request_children: dict[tuple[str, str], tuple[CounterChild, HistogramChild]] = {}
        self._fault_children: dict[tuple[str, str], Counter] = {}

    def fault_label(self, fault_type: str | None) -> str:
        if fault_type is None:
            return names.FAULT_TYPE_NONE
        return fault_type if fault_type in self._fault_types else names.OTHER

    def observe_request(
        self,
        method: str,
        fault_type: str | None,
        duration_s: float,
        added_s: float | None,
        trace_id_hex: str | None = None,
    ) -> None:
        """One finished request: counts it and records its durations, with the trace as exemplar.

        ``added_s`` is None when the proxy's own share is not meaningful (the request was dropped).
        """
        key = (normalize_method(method), self.fault_label(fault_type))
        children = self._request_children.get(key)
        if children is None:
            children = (
                self._requests.labels(key[0], key[1], self.transport),
                self._duration.labels(key[0], self.transport),
            )
            # A race here only looks the same children up twice; labels() itself is thread-safe.
            self._request_children[key] = children
        trace_id = _trace_id(trace_id_hex)
        now = time.time() if trace_id is not None else 0.0
        with self._tallies_lock:  # once for the three (a request's metrics cost as much again, locked one by one)
            children[0].add(1.0, trace_id, now)
            children[1].add(duration_s, trace_id, now)
            if added_s is not None:
                self._added_child.add(added_s, trace_id, now)

    def fault_injected(self, fault_type: str, mode: str, trace_id_hex: str | None = None) -> None:
        key = (self.fault_label(fault_type), mode if mode in self._fault_modes else names.OTHER)
        child = self._fault_children.get(key)
        if child is None:
            child = self._fault_children[key] = self._faults.labels(*key)
        child.inc(1, _exemplar(trace_id_hex))

    def request_started(self) -> None:
        self._in_flight_child.inc()

    def request_finished(self) -> None:
        self._in_flight_child.dec()

    def upstream_exited(self) -> None:
        self._exits_child.inc()

    def server_crashed(self, cause: str) -> None:
        self._crashes.labels(self.fault_label(cause if cause != names.FAULT_TYPE_NONE else None)).inc()

    def server_restarted(self) -> None:
        self._restarts.inc()

    def server_downtime(self, seconds: float) -> None:
        self._downtime.observe(seconds)


class SideEffectMetrics(_Metrics):
    """What the server's processes did during tool calls (``--probe``), beside the proxy's metrics.

    ``types`` and ``categories`` are the allowed label values (the probe protocol's event types and
    the policy's finding categories); anything else is ``_OTHER``: a sidecar must not mint series.
    """

    def __init__(self, registry: CollectorRegistry, *, types: Iterable[str], categories: Iterable[str]) -> None:
        super().__init__(registry)
        self._types = frozenset(types)
        self._categories = frozenset(categories)
        self._side_effects = self._counter(
            names.SIDE_EFFECTS_TOTAL,
            "Side effects of the server's processes during tool calls, by type.",
            names.SIDE_EFFECTS_TOTAL_LABELS,
        )
        self._findings = self._counter(
            names.FINDINGS_TOTAL,
            "Policy findings on those side effects, by category and severity.",
            names.FINDINGS_TOTAL_LABELS,
        )
        self._duplicates = self._counter(
            names.DUPLICATE_SIDE_EFFECTS_TOTAL,
            "Tool calls repeated after a lost response on which the server acted again.",
            (),
        )

    def side_effect(self, kind: str, trace_id_hex: str | None = None) -> None:
        self._side_effects.labels(kind if kind in self._types else names.OTHER).inc(1, _exemplar(trace_id_hex))

    def finding(self, category: str, severity: str, trace_id_hex: str | None = None) -> None:
        category = category if category in self._categories else names.OTHER
        severity = severity if severity in names.FINDING_SEVERITIES else names.OTHER
        self._findings.labels(category, severity).inc(1, _exemplar(trace_id_hex))

    def duplicate_side_effect(self, trace_id_hex: str | None = None) -> None:
        self._duplicates.inc(1, _exemplar(trace_id_hex))


class HarnessMetrics(_Metrics):
    """Outcomes of `run`/`bench` tasks; pushed to a Pushgateway since a run ends before any scrape.

    ``profile`` and ``agent`` label values come from the run's own configuration (a handful per
    benchmark matrix), never from a peer, so they are passed through.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        self._outcomes = self._counter(
            names.TASK_OUTCOMES_TOTAL,
            "Agent tasks by judged outcome (success, recovered, failed_detected, failed_silent; unjudged without "
            "ground truth, against a server cassette).",
            names.TASK_OUTCOMES_TOTAL_LABELS,
        )
        self._recovery = self._histogram(
            names.TASK_RECOVERY_SECONDS,
            "Time from the first injected fault in a task to the agent's successful recovery.",
            names.TASK_RECOVERY_SECONDS_LABELS,
            names.MCP_DURATION_BUCKETS,
        )
        self._retries = self._counter(
            names.TASK_RETRIES_TOTAL,
            "Requests the agent re-issued after a failure.",
            names.TASK_RETRIES_TOTAL_LABELS,
        )
        self._duplicates = self._counter(
            names.DUPLICATES_TOTAL,
            "Side effects the server performed more than once for one intended action.",
            names.DUPLICATES_TOTAL_LABELS,
        )
        self._silent = self._counter(
            names.SILENT_FAILURES_TOTAL,
            "Tasks the agent reported as done although the world says otherwise.",
            names.SILENT_FAILURES_TOTAL_LABELS,
        )

    def record_outcome(self, profile: str, agent: str, outcome: str, trace_id_hex: str | None = None) -> None:
        self._outcomes.labels(profile, agent, outcome).inc(1, _exemplar(trace_id_hex))

    def observe_recovery(self, fault_type: str, seconds: float, trace_id_hex: str | None = None) -> None:
        self._recovery.labels(fault_type).observe(seconds, _exemplar(trace_id_hex))

    def add_retries(self, profile: str, agent: str, count: int = 1) -> None:
        self._retries.labels(profile, agent).inc(count)

    def add_duplicates(self, profile: str, agent: str, count: int = 1) -> None:
        self._duplicates.labels(profile, agent).inc(count)

    def add_silent_failures(self, profile: str, agent: str, count: int = 1) -> None:
        self._silent.labels(profile, agent).inc(count)

    def push(self, url: str, job: str, grouping: Mapping[str, str] | None = None, *, timeout_s: float = 10.0) -> None:
        """Replace this job's (and grouping's) metrics on the Pushgateway at ``url`` with ours.

        Raises ``ValueError`` for a URL that is not http(s) and ``OSError`` (``URLError``) when the
        gateway cannot be reached or refuses the push.
        """
        check_http_url(url, "Pushgateway URL", "e.g. http://127.0.0.1:9091")
        push_to_gateway(url, job=job, registry=self.registry, grouping_key=dict(grouping or {}), timeout=timeout_s)


# --- the /metrics endpoint ----------------------------------------------------------------------


def parse_metrics_addr(addr: str, flag: str = "--metrics-addr") -> tuple[str, int]:
    """``HOST:PORT`` as (host, port), by the one rule of every listener (``loopback.parse_host_port``)."""
    return parse_host_port(addr, flag, "127.0.0.1:9464")


class MetricsServer:
    """A running /metrics endpoint. ``shutdown()`` stops it, frees the port and joins its thread."""

    def __init__(self, httpd: ThreadingWSGIServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        self._lock = threading.Lock()
        self._closed = False

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def shutdown(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._httpd.shutdown()  # returns once serve_forever has left its loop
        self._httpd.server_close()
        self._thread.join(timeout_s)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()


def _metrics_app(registry: CollectorRegistry, token: str | None) -> _WsgiApp:
    # prometheus_client's app does the content negotiation (OpenMetrics when Accept asks for it,
    # else text 0.0.4) and gzip; we add only the path check and the bearer token.
    inner: _WsgiApp = make_wsgi_app(registry)
    expected = f"Bearer {token}".encode() if token is not None else None

    def app(environ: dict[str, Any], start_response: _StartResponse) -> Iterable[bytes]:
        if expected is not None:
            given = str(environ.get("HTTP_AUTHORIZATION", "")).encode()
            if not hmac.compare_digest(given, expected):  # constant time: no timing oracle on the token
                start_response(
                    "401 Unauthorized",
                    [("Content-Type", "text/plain; charset=utf-8"), ("WWW-Authenticate", 'Bearer realm="mcpfault"')],
                )
                return [b"401 Unauthorized: send Authorization: Bearer <token>\n"]
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"404 Not Found: metrics are served at /metrics\n"]
        return inner(environ, start_response)

    return app


def start_metrics_server(
    addr: str, registry: CollectorRegistry, *, token: str | None = None
) -> tuple[MetricsServer, threading.Thread]:
    """Serve ``registry`` at ``http://HOST:PORT/metrics`` from a daemon thread.

    A non-loopback host is refused unless ``token`` is given: metrics reveal what a proxy does, and
    anyone on the network could read them. With a token every request needs
    ``Authorization: Bearer <token>`` (401 otherwise), whatever the host. Port 0 picks a free port
    (see ``MetricsServer.port``). The thread is a daemon so it never keeps the process alive, but
    its owner should still call ``shutdown()`` to free the port.
    """
    host, port = parse_metrics_addr(addr)
    require_token_beyond_loopback(
        f"metrics on {addr}", host, token, "set MCPFAULT_METRICS_TOKEN, a bearer token every scrape must send"
    )

    class _Server(ThreadingWSGIServer):
        pass

    # AF_INET6 for an IPv6 host; a local class keeps the change off the shared base class.
    _Server.address_family = _address_family(host)
    try:
        httpd = make_server(host, port, _metrics_app(registry, token), _Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise OSError(
            exc.errno, f"cannot serve metrics on {addr!r}: {exc.strerror}; choose another port or stop what uses it"
        ) from exc
    # The poll interval bounds how long shutdown() waits; 0.1 s keeps a proxy's exit prompt.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.1,), name=f"mcpfault-metrics-{port}", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread), thread


class _QuietHandler(WSGIRequestHandler):
    """Writes no access-log line to stderr per scrape, as the base class would."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _address_family(host: str) -> int:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET  # a name: resolved to IPv4 by the server, like http.server does
