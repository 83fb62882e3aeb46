"""The span ids of the request this thread or task is handling, for log lines: ``CURRENT_SPAN``.

A module of its own, with nothing but ``contextvars`` behind it, so the span recorder (``fastspans``)
sets it without importing the logging set-up (structlog, rich) that reads it (``logging``).
"""

from __future__ import annotations

import contextvars
from typing import Any, Final

# (trace id, span id) in hex of the request this thread or task is handling, when it has a span: the
# tuple's first two items (more may follow: the proxy sets a drawn-ahead root as it is, fastspans.Root).
# The proxy's span recorder (telemetry/fastspans.py) sets it as each request's span starts: its spans
# are no SDK spans, so the SDK's current span knows nothing of them.
CURRENT_SPAN: Final[contextvars.ContextVar[tuple[Any, ...] | None]] = contextvars.ContextVar(
    "mcpfault_current_span", default=None
)
