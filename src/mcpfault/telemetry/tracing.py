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

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.sdk.environment_variables import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
)
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from mcpfault.telemetry.otlp_json import encode_otlp_json
from mcpfault.telemetry.propagation import extract_context, inject_context
from mcpfault.telemetry.span_files import AttributeValue, OtlpJsonLinesExporter, SpanEvent, SpanView, read_spans

__all__ = [
    # provider set-up (this module)
    "configure_tracing",
    "redact_userinfo",
    "service_resource",
    "span_name",
    "traces_endpoint",
    # OTLP JSON (otlp_json)
    "encode_otlp_json",
    # span files (span_files)
    "AttributeValue",
    "OtlpJsonLinesExporter",
    "SpanEvent",
    "SpanView",
    "read_spans",
    # W3C trace context in params._meta (propagation)
    "extract_context",
    "inject_context",
]

_TRACES_PATH: Final = "v1/traces"
_USERINFO: Final = re.compile(r"//[^/@]*@")  # credentials in a URL, kept out of error messages


# --- span names -------------------------------------------------------------------------------


def span_name(method: str, target: str | None) -> str:
    """``{mcp.method.name} {target}`` per the MCP conventions, or the bare method without a target.

    ``target`` is the tool name of a tools/call or the prompt name of a prompts/get.
    """
    return f"{method} {target}" if target else method


# --- tracer provider --------------------------------------------------------------------------


def configure_tracing(
    service_name: str,
    *,
    spans_file: Path | None = None,
    otlp_endpoint: str | None = None,
    resource_attributes: Mapping[str, str] | None = None,
) -> TracerProvider | None:
    """A TracerProvider exporting to ``spans_file`` and/or OTLP/HTTP, or None when there is nowhere to export.

    Precedence, highest first: the explicit arguments, then the ``OTEL_*`` environment, then
    ``service_name``. ``service_name`` is the program's own default, so ``OTEL_SERVICE_NAME`` (or
    ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``) renames the service as operators expect, while a
    ``service.name`` in ``resource_attributes`` wins over both. ``otlp_endpoint`` wins over
    ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``. Headers come only from ``OTEL_EXPORTER_OTLP_[TRACES_]HEADERS``,
    read by the exporter itself: they are credentials and never reach the resource, a span or a log.

    Does not install the provider globally: the caller owns it and must ``shutdown()`` it to flush.
    """
    endpoint = traces_endpoint(otlp_endpoint) if otlp_endpoint else None
    env_endpoint = bool(
        os.environ.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or os.environ.get(OTEL_EXPORTER_OTLP_ENDPOINT)
    )
    if spans_file is None and endpoint is None and not env_endpoint:
        return None

    provider = TracerProvider(resource=service_resource(service_name, resource_attributes))
    if spans_file is not None:
        provider.add_span_processor(BatchSpanProcessor(OtlpJsonLinesExporter(spans_file)))
    if endpoint is not None or env_endpoint:
        # Imported here: the exporter pulls in requests and the protobuf modules (~70 ms), which a
        # proxy writing only span files should not pay at start-up.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # endpoint=None lets the exporter resolve the environment itself, signal path included.
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


def service_resource(service_name: str, explicit: Mapping[str, str] | None = None) -> Resource:
    """The resource of a process's spans, with the precedence ``configure_tracing`` describes."""
    attributes: dict[str, str] = {}
    # Resource.create merges our attributes over the environment's, so service_name would always
    # win; pass it only when the environment names no service.
    if not OTELResourceDetector().detect().attributes.get(SERVICE_NAME):
        attributes[SERVICE_NAME] = service_name
    if explicit:
        attributes.update(explicit)
    return Resource.create(attributes)


def traces_endpoint(endpoint: str) -> str:
    """The full traces URL for an endpoint given as a base (``http://host:4318``) or in full.

    The exporter takes its ``endpoint`` argument verbatim, but people pass the collector's base URL
    as they would in ``OTEL_EXPORTER_OTLP_ENDPOINT``; append the signal path as the spec does there.
    Raises ``ValueError`` (credentials left out of the message) for anything but an http(s) URL with a host.
    """
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"OTLP endpoint {redact_userinfo(endpoint)!r} is not an http(s) URL with a host; "
            "give the collector's OTLP/HTTP address, for example http://127.0.0.1:4318"
        )
    path = parts.path.rstrip("/")
    if not path.endswith("/" + _TRACES_PATH):
        path = f"{path}/{_TRACES_PATH}"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def redact_userinfo(text: str) -> str:
    """``text`` with the credentials of any URL in it (``//user:pass@``) replaced by ``//***@``."""
    return _USERINFO.sub("//***@", text)
