"""Telemetry: logging, tracing and metrics set-up, and the names every signal uses.

- ``names``: every span attribute, span event, metric and label name (the one place to rename).
- ``tracing``: the tracer provider, and where the rest of mcpfault imports the tracing API from; it re-exports
  ``otlp_json`` (SDK spans as OTLP JSON), ``span_files`` (the OTLP JSON-lines span files, written and
  read back) and ``propagation`` (W3C trace context in ``params._meta``).
- ``fastspans``: the proxy's own span recorder, with no SDK objects per span.
- ``export``: sends a finished run's span files to an OTLP collector.
- ``metrics``: Prometheus metrics for the proxy and the harness, and the /metrics endpoint.
- ``logging``: structured logs to stderr.

Submodules are not imported here: the OpenTelemetry SDK costs start-up time a proxy without
tracing should not pay.
"""
