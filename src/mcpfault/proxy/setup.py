"""The proxy's spans and metrics, set up from its options; nothing is imported unless asked for.

An untraced proxy is on every call an agent makes: it pays neither the span recorder nor
prometheus_client at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpfault.errors import UsageError

OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


@dataclass
class ProxyTelemetry:
    observer: Any = None  # a proxy.observe.TelemetryObserver, or None: the core observes nothing
    recorder: Any = None
    server: Any = None
    metrics: Any = None  # the telemetry.metrics.ProxyMetrics behind /metrics, or None
    _observer_args: tuple[Any, str, dict[str, Any], Any] = (None, "", {}, None)

    @classmethod
    def start(
        cls,
        *,
        spans: Path | None,
        otlp_endpoint: str | None,
        metrics_addr: str | None,
        transport: str = "stdio",
        attributes: Mapping[str, Any] | None = None,
        annotate: Any = None,  # a proxy.observe.Annotate: more for each span (the side-effect probe's)
    ) -> ProxyTelemetry:
        traced = (
            spans is not None or otlp_endpoint is not None or any(os.environ.get(v) for v in OTLP_ENDPOINT_VARIABLES)
        )
        if not traced and metrics_addr is None:
            return cls()
        from mcpfault import __version__
        from mcpfault.faults.catalog import CATALOG
        from mcpfault.proxy.observe import TelemetryObserver, fault_label_sets
        from mcpfault.telemetry import metrics, names
        from mcpfault.telemetry.fastspans import SpanRecorder

        result = cls()
        if traced:
            try:
                result.recorder = SpanRecorder(
                    "mcpfault-proxy",
                    spans_file=spans,
                    otlp_endpoint=otlp_endpoint,
                    scope_name="mcpfault.proxy",
                    scope_version=__version__,
                )
            except (ValueError, OSError) as exc:
                raise UsageError(f"tracing: {exc}") from None
        proxy_metrics = None
        if metrics_addr is not None:
            types, modes = fault_label_sets(CATALOG)
            proxy_metrics = metrics.ProxyMetrics(transport, fault_types=types, fault_modes=modes)
            token = os.environ.get("MCPFAULT_METRICS_TOKEN") or None
            try:
                result.server, _ = metrics.start_metrics_server(metrics_addr, proxy_metrics.registry, token=token)
            except (ValueError, OSError) as exc:
                raise UsageError(f"--metrics-addr {metrics_addr}: {exc}") from None
        network = names.NETWORK_TRANSPORT_TCP if transport == "http" else names.NETWORK_TRANSPORT_PIPE
        result.metrics = proxy_metrics
        annotate = annotate if result.recorder is not None else None
        result.observer = TelemetryObserver(
            result.recorder, proxy_metrics, transport=network, attributes=attributes, annotate=annotate
        )
        result._observer_args = (proxy_metrics, network, dict(attributes or {}), annotate)
        return result

    def observers_for(self, session_id: str | None) -> list[Any]:
        """The observers of one HTTP session's requests: its spans carry ``mcp.session.id``."""
        if self.observer is None:
            return []
        if session_id is None or self.recorder is None:
            return [self.observer]
        from mcpfault.proxy.observe import TelemetryObserver
        from mcpfault.telemetry import names

        proxy_metrics, network, attributes, annotate = self._observer_args
        attributes = {**attributes, names.MCP_SESSION_ID: session_id}
        return [
            TelemetryObserver(self.recorder, proxy_metrics, transport=network, attributes=attributes, annotate=annotate)
        ]

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.shutdown()  # flushes the spans still queued
        if self.server is not None:
            self.server.shutdown()
