"""The proxy's spans and metrics, set up from its options; nothing is imported unless asked for.

An untraced proxy is on every call an agent makes: it pays neither the span recorder nor
prometheus_client at start-up. The ``OTEL_*`` environment is read (``telemetry/otel_env.py``) and
checked once spans are asked for; ``OTEL_SDK_DISABLED=true`` then turns them off, with one warning.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from mcpfault.errors import UsageError

log = structlog.get_logger("mcpfault.proxy")


@dataclass
class ProxyTelemetry:
    observer: Any = None  # a proxy.observe.TelemetryObserver, or None: the core observes nothing
    recorder: Any = None
    server: Any = None
    metrics: Any = None  # the telemetry.metrics.ProxyMetrics behind /metrics, or None
    _observer_args: tuple[Any, str, dict[str, Any], bool, Any, bool] = (None, "", {}, True, None, False)

    @classmethod
    def start(
        cls,
        *,
        spans: Path | None,
        otlp_endpoint: str | None,
        metrics_addr: str | None,
        transport: str = "stdio",
        attributes: Mapping[str, Any] | None = None,
        annotate: Any = None,  # a proxy.span_endings.Annotate: more for each span (the side-effect probe's)
        client_spans: bool = False,  # the leg upstream as a CLIENT span
    ) -> ProxyTelemetry:
        from mcpfault.telemetry import otel_env

        try:
            traced = otel_env.tracing_wanted(spans, otlp_endpoint)
            settings = otel_env.read(otlp_endpoint) if traced else None
        except ValueError as exc:
            raise UsageError(f"tracing: {exc}") from None
        if settings is not None and settings.disabled:
            log.warning(
                "OTEL_SDK_DISABLED=true: the proxy records no spans, though --spans, --otlp-endpoint or "
                "OTEL_EXPORTER_OTLP_*ENDPOINT ask for them"
            )
            traced, settings = False, None
        if settings is not None and settings.ignored:
            log.warning(
                "OTEL_* variables not read by the proxy",
                ignored={name: why for name, why in settings.ignored},
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
                    settings=settings,
                    scope_name="mcpfault.proxy",
                    scope_version=__version__,
                    writer_process=True,  # encoding and I/O off the relay's GIL
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
        if transport == "http":  # on stdio there is no network protocol to name
            attributes = {
                names.NETWORK_PROTOCOL_NAME: names.NETWORK_PROTOCOL_HTTP,
                names.NETWORK_PROTOCOL_VERSION: names.NETWORK_PROTOCOL_HTTP_VERSION,
                **(attributes or {}),
            }
        propagate = settings is None or settings.propagate
        result.metrics = proxy_metrics
        annotate = annotate if result.recorder is not None else None
        result.observer = TelemetryObserver(
            result.recorder,
            proxy_metrics,
            transport=network,
            attributes=attributes,
            propagate=propagate,
            annotate=annotate,
            client_spans=client_spans,
        )
        result._observer_args = (proxy_metrics, network, dict(attributes or {}), propagate, annotate, client_spans)
        return result

    def observers_for(self, session_id: str | None) -> list[Any]:
        """The observers of one HTTP session's requests: their 2025-11-25 spans carry ``mcp.session.id``."""
        if self.observer is None:
            return []
        if session_id is None or self.recorder is None:
            return [self.observer]
        from mcpfault.proxy.observe import TelemetryObserver

        proxy_metrics, network, attributes, propagate, annotate, client_spans = self._observer_args
        observer = TelemetryObserver(
            self.recorder,
            proxy_metrics,
            transport=network,
            attributes=attributes,
            propagate=propagate,
            session_id=session_id,
            annotate=annotate,
            client_spans=client_spans,
        )
        return [observer]

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.shutdown()  # flushes the spans still queued
        if self.server is not None:
            self.server.shutdown()
