"""W3C trace context (``traceparent``, ``tracestate``, ``baggage``) carried in ``params._meta``.

The one ``traceparent`` parser (``parse_traceparent``) serves both the proxy's hot path (the fast
span recorder) and the SDK users (``extract_context``: the harness, the mock server); the SDK's
propagators do the rest (``tracestate``, ``baggage``, injection) over a JSON object instead of HTTP
headers, as the MCP conventions ask.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_TRACEPARENT: Final = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16
_MAX_TRACESTATE: Final = 512  # the W3C limit on the header's length


class ParentContext:
    """A valid W3C ``traceparent``: the trace, the parent span and its flags, all as received."""

    __slots__ = ("flags", "span_id", "trace_id")

    def __init__(self, trace_id: str, span_id: str, flags: str) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.flags = flags

    @property
    def sampled(self) -> bool:
        return bool(int(self.flags, 16) & 1)


def parse_traceparent(value: object) -> ParentContext | None:
    """``00-{32 hex}-{16 hex}-{2 hex}``, lowercase, ids not all zeros; anything else is None.

    Stricter than the SDK's propagator on purpose: only version 00 is accepted, so an unknown future
    version starts a new trace rather than being half understood.
    """
    if not isinstance(value, str) or len(value) != 55:
        return None
    found = _TRACEPARENT.fullmatch(value)
    if found is None:
        return None
    trace_id, span_id, flags = found.groups()
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return ParentContext(trace_id, span_id, flags)


def valid_tracestate(value: object) -> str | None:
    """A ``tracestate`` worth passing on (printable ASCII, within the W3C length), trimmed; else None."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    if not value or len(value) > _MAX_TRACESTATE or any(not 0x20 <= ord(c) <= 0x7E for c in value):
        return None
    return value


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
