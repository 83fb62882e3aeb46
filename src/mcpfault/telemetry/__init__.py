"""Telemetry: logging, tracing and metrics set-up, and the names every signal uses.

- ``names``: every span attribute, span event, metric and label name (the one place to rename).
- ``tracing``: the tracer provider, OTLP JSON-lines span files and their reader, W3C trace context
  in ``params._meta``.
- ``metrics``: Prometheus metrics for the proxy and the harness, and the /metrics endpoint.
- ``logging``: structured logs to stderr.

Submodules are not imported here: the OpenTelemetry SDK costs start-up time a proxy without
tracing should not pay.
"""
