"""Logging (and, later, tracing and metrics) set-up and the names telemetry uses."""
