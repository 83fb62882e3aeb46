"""W3C trace context (``traceparent``, ``tracestate``, ``baggage``) carried in ``params._meta``.

The one ``traceparent`` parser (``traceparent.parse_traceparent``, re-exported here) serves both the fast
span recorder and the SDK users (``extract_context``: the harness); the SDK's
propagators do the rest (``tracestate``, ``baggage``, injection) over a JSON object instead of HTTP
headers, as the MCP conventions ask.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mcpfault.telemetry.traceparent import ParentContext, parse_traceparent, valid_tracestate

__all__ = ["ParentContext", "extract_context", "inject_context", "parse_traceparent", "valid_tracestate"]


class _MetaGetter(Getter[Mapping[str, Any]]):
    # A peer writes _meta; anything but a string value is treated as absent, never an exception.
    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [k for k in carrier if isinstance(k, str)]


class _MetaSetter(Setter[dict[str, Any]]):
    def set(self, carrier: dict[str, Any], key: str, value: str) -> None:
        carrier[key] = value


_PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
_BAGGAGE = W3CBaggagePropagator()
_GETTER = _MetaGetter()
_SETTER = _MetaSetter()


def extract_context(meta: Mapping[str, Any] | None) -> Context:
    """The trace context a peer sent in ``params._meta`` (``traceparent``, ``tracestate``, ``baggage``).

    Starts from an empty context rather than the current one, so a request without a valid
    ``traceparent`` starts a new trace instead of inheriting whatever the caller had open. Never
    raises: malformed or mistyped values give an empty context.
    """
    if not isinstance(meta, Mapping):
        return Context()
    try:
        context = _BAGGAGE.extract(meta, context=Context(), getter=_GETTER)
        parent = parse_traceparent(meta.get("traceparent"))
        if parent is None:
            return context
        state = valid_tracestate(meta.get("tracestate"))
        span_context = trace.SpanContext(
            trace_id=int(parent.trace_id, 16),
            span_id=int(parent.span_id, 16),
            is_remote=True,
            trace_flags=trace.TraceFlags(int(parent.flags, 16)),
            trace_state=trace.TraceState.from_header([state]) if state else None,
        )
        return trace.set_span_in_context(trace.NonRecordingSpan(span_context), context)
    except Exception:  # a peer's bytes must never crash the proxy
        return Context()


def inject_context(meta: dict[str, Any], context: Context | None = None) -> dict[str, Any]:
    """Write ``context``'s (default: the current) trace context into ``meta`` in place; returns ``meta``.

    With no valid span in the context nothing is written, so a peer's own ``traceparent`` survives.
    """
    _PROPAGATOR.inject(meta, context=context, setter=_SETTER)
    return meta
