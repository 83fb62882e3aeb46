"""The one W3C ``traceparent`` parser, and the ``tracestate`` check, with no OpenTelemetry behind them.

Pure string work, so the fast span recorder (``fastspans``: the proxy's hot path, the mock server)
parses trace context without importing the OpenTelemetry API; ``propagation.extract_context`` builds the
SDK's context from the same parse.
"""

from __future__ import annotations

import re
from typing import Final

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
