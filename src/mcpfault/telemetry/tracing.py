"""Tracer set-up, and where the rest of mcpfault imports the tracing API from.

Spans go to two places, either or both: a local file (the embedded default, no services needed;
the analysis layer joins traces from these files) and an OTLP/HTTP endpoint (a collector, Jaeger).
Both get the same OTLP data model, so whatever reads one can read the other.

This module owns the provider set-up (resource, endpoint, exporters). The rest lives in modules
of its own and is re-exported here (see ``__all__``):

- ``otlp_json``: SDK spans as OTLP JSON.
- ``span_files``: the OTLP JSON-lines span files, written (``OtlpJsonLinesExporter``) and read
  back (``read_spans`` -> ``SpanView``).
- ``propagation``: W3C trace context in ``params._meta``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from mcpfault.telemetry import otel_env, otlp_lines
from mcpfault.telemetry.names import span_name
from mcpfault.telemetry.otel_env import redact_userinfo
from mcpfault.telemetry.otlp_json import encode_otlp_json
from mcpfault.telemetry.propagation import extract_context, inject_context
from mcpfault.telemetry.span_files import (
    AttributeValue,
    OtlpJsonLinesExporter,
    SpanEvent,
    SpanLink,
    SpanView,
    read_spans,
)

__all__ = [
    # provider set-up (this module)
    "configure_tracing",
    "redact_userinfo",
    "service_resource",
    "span_name",
    # OTLP JSON (otlp_json)
    "encode_otlp_json",
    # span files (span_files)
    "AttributeValue",
    "OtlpJsonLinesExporter",
    "SpanEvent",
    "SpanLink",
    "SpanView",
    "read_spans",
    # W3C trace context in params._meta (propagation)
    "extract_context",
    "inject_context",
]

# --- tracer provider --------------------------------------------------------------------------


def configure_tracing(
    service_name: str,
    *,
    spans_file: Path | None = None,
    otlp_endpoint: str | None = None,
    resource_attributes: Mapping[str, str] | None = None,
    max_links: int | None = None,
) -> TracerProvider | None:
    """A TracerProvider exporting to ``spans_file`` and/or OTLP/HTTP, or None when there is nowhere to export.

    Precedence, highest first: the explicit arguments, then the ``OTEL_*`` environment, then
    ``service_name``. ``service_name`` is the program's own default, so ``OTEL_SERVICE_NAME`` (or
    ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``) renames the service as operators expect, while a
    ``service.name`` in ``resource_attributes`` wins over both. ``otlp_endpoint`` wins over
    ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``. The exporter's other settings (protocol, headers, timeout,
    compression, TLS files) and the sampler come from ``otel_env``, as for the proxy's recorder; headers
    are credentials and never reach the resource, a span or a log. Raises ``OtelConfigError`` (a
    ``ValueError``) for a value that cannot be honoured.

    ``max_links`` raises the SDK's limit of links per span (128 by default): a session span links to
    every task it ran.

    Does not install the provider globally: the caller owns it and must ``shutdown()`` it to flush.
    """
    settings = otel_env.read(otlp_endpoint)
    if spans_file is None and settings.export is None:
        return None

    provider = TracerProvider(
        resource=service_resource(service_name, resource_attributes),
        sampler=sdk_sampler(settings.sampler),
        span_limits=SpanLimits(max_links=max_links),
    )
    if spans_file is not None:
        provider.add_span_processor(BatchSpanProcessor(OtlpJsonLinesExporter(spans_file)))
    if settings.export is not None:
        # Imported here: the protobuf modules cost ~70 ms, which a process writing only span files
        # should not pay at start-up.
        from mcpfault.telemetry.export import OtlpHttpSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OtlpHttpSpanExporter(settings.export)))
    return provider


def sdk_sampler(sampler: otel_env.Sampler) -> sampling.Sampler:
    """The SDK's sampler for ``OTEL_TRACES_SAMPLER``/``_ARG`` as ``otel_env`` validated them."""
    root: sampling.Sampler
    if sampler.root == "on":
        root = sampling.ALWAYS_ON
    elif sampler.root == "off":
        root = sampling.ALWAYS_OFF
    else:
        root = sampling.TraceIdRatioBased(sampler.ratio)
    return sampling.ParentBased(root) if sampler.parent_based else root


def service_resource(service_name: str, explicit: Mapping[str, str] | None = None) -> Resource:
    """The resource of a process's spans, with the precedence ``configure_tracing`` describes
    (built by ``otlp_lines.service_resource``, which the fast span recorder uses too)."""
    found = otlp_lines.service_resource(service_name, explicit)
    return Resource(found.attributes, found.schema_url)
