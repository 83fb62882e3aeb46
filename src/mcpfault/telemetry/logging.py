"""Structured logs to stderr, configured in one place.

stdout is the MCP wire when the proxy runs on stdio, so nothing but protocol bytes may go there:
every log line goes to stderr.

One chain of small processors serves both structlog's loggers and the standard library's (the
OpenTelemetry SDK and a few of our modules log through ``logging``), so every line has the same
shape, carries the current trace and span ids (the SDK's current span, else the request the proxy is
handling: ``CURRENT_SPAN``, set by its span recorder), and has its secrets redacted before it is rendered:

    merge_contextvars -> add_log_level -> TimeStamper -> add_trace_context
        -> [format_exc_info, JSON only] -> redact_secrets -> renderer

``fmt="auto"`` (the default) writes JSON lines when stderr is not a terminal (a file, a pipe, a
log collector) and the human console rendering when it is.
"""

from __future__ import annotations

import io
import logging
import re
import sys
from collections.abc import Mapping
from typing import Any, Final, Literal, TextIO

import structlog
from opentelemetry import trace
from structlog.typing import EventDict, ExcInfo, Processor, WrappedLogger

from mcpfault.telemetry.current_span import CURRENT_SPAN

LogFormat = Literal["auto", "console", "json"]
LOG_FORMATS: Final[tuple[LogFormat, ...]] = ("auto", "console", "json")

REDACTED: Final = "[redacted]"
TRACE_ID_KEY: Final = "trace_id"
SPAN_ID_KEY: Final = "span_id"


# --- processors ---------------------------------------------------------------------------------


def add_trace_context(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Add ``trace_id`` (32 hex digits) and ``span_id`` (16) of the current span: the SDK's, else the
    proxy's (``CURRENT_SPAN``).

    Nothing is added outside a span or when the current span is invalid (no SDK installed, a
    non-recording placeholder). Ids a caller bound explicitly are kept.
    """
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event_dict.setdefault(TRACE_ID_KEY, format(context.trace_id, "032x"))
        event_dict.setdefault(SPAN_ID_KEY, format(context.span_id, "016x"))
        return event_dict
    current = CURRENT_SPAN.get()
    if current is not None:
        event_dict.setdefault(TRACE_ID_KEY, current[0])
        event_dict.setdefault(SPAN_ID_KEY, current[1])
    return event_dict


# Keys whose values are secrets, compared after lowercasing and mapping '-' to '_'; a key also
# matches when it ends with '_' + one of these (x_api_key, access_token, proxy_authorization).
_SECRET_KEYS: Final = frozenset(
    {
        "authorization",
        "api_key",
        "apikey",
        "password",
        "passwd",
        "secret",
        "token",
        "cookie",
        "credentials",
        "private_key",
    }
)
# Keys holding HTTP headers (also *_headers): the header names stay (they say what was sent), every value goes.
_HEADER_KEYS: Final = frozenset({"headers", "header"})
# 'Bearer <token>' (RFC 6750 b64token) and Anthropic/OpenAI-style keys (sk-..., sk-ant-..., sk-proj-...).
_SECRET_PATTERN: Final = re.compile(
    r"\bbearer\s+[A-Za-z0-9\-._~+/]+=*|(?<![A-Za-z0-9_\-])sk-[A-Za-z0-9_\-]{16,}",
    re.IGNORECASE,
)
_MAX_DEPTH: Final = 8  # nested containers deeper than this are replaced whole: no unbounded recursion


def is_secret_key(key: object) -> bool:
    if not isinstance(key, str):
        return False
    normalized = key.strip().lower().replace("-", "_")
    return normalized in _SECRET_KEYS or any(normalized.endswith("_" + word) for word in _SECRET_KEYS)


def is_header_key(key: object) -> bool:
    if not isinstance(key, str):
        return False
    normalized = key.strip().lower().replace("-", "_")
    return normalized in _HEADER_KEYS or any(normalized.endswith("_" + word) for word in _HEADER_KEYS)


def redact_text(text: str) -> str:
    """``text`` with every bearer token and ``sk-`` key in it replaced by ``[redacted]``."""
    return _SECRET_PATTERN.sub(REDACTED, text)


def redact_value(value: Any, depth: int = 0) -> Any:
    """A redacted copy of ``value``: strings scanned, mappings and sequences walked.

    Containers are copied, never changed in place: a headers dict bound to a log line may be the
    very dict an HTTP request is about to send.
    """
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping | list | tuple | set | frozenset) and depth >= _MAX_DEPTH:
        return REDACTED
    if isinstance(value, Mapping):
        return {key: _redact_item(key, item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [redact_value(item, depth + 1) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


def _redact_item(key: object, value: Any, depth: int) -> Any:
    if is_secret_key(key):
        return REDACTED
    if is_header_key(key):
        return _redact_headers(value)
    return redact_value(value, depth)


def _redact_headers(headers: Any) -> Any:
    if isinstance(headers, Mapping):
        return dict.fromkeys(headers, REDACTED)
    if isinstance(headers, list | tuple) and all(isinstance(h, list | tuple) and len(h) == 2 for h in headers):
        return [(name, REDACTED) for name, _ in headers]
    return REDACTED  # a header string ("authorization=Bearer x,..."), or a shape we cannot split safely


def redact_secrets(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Replace secrets anywhere in the event with ``[redacted]``.

    By key: authorization, api_key, x-api-key, password, token, cookie, ... (and ``*_token`` etc.);
    the values under ``headers``. By value: any string containing ``Bearer <token>`` or an
    ``sk-...`` key, the message itself and a formatted exception included.
    """
    return {key: _redact_item(key, value, 0) for key, value in event_dict.items()}


def _redacted_traceback(sio: TextIO, exc_info: ExcInfo) -> None:
    # Plain tracebacks, never rich's with local variables: locals are where secrets live.
    buffer = io.StringIO()
    structlog.dev.plain_traceback(buffer, exc_info)
    sio.write(redact_text(buffer.getvalue()))


# --- configuration ------------------------------------------------------------------------------


def resolve_format(fmt: str, stream: TextIO | None = None) -> Literal["console", "json"]:
    """``auto`` becomes ``console`` on a terminal and ``json`` anywhere else."""
    if fmt == "auto":
        target = sys.stderr if stream is None else stream
        try:
            return "console" if target is not None and target.isatty() else "json"
        except (AttributeError, ValueError):  # no isatty, or a closed stream
            return "json"
    if fmt in ("console", "json"):
        return "json" if fmt == "json" else "console"
    raise ValueError(f"unknown log format {fmt!r}; use {', '.join(LOG_FORMATS)}")


def shared_processors(fmt: Literal["console", "json"]) -> list[Processor]:
    """Every processor but the renderer, in order (also run on standard-library records)."""
    chain: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        add_trace_context,
    ]
    if fmt == "json":
        chain.append(structlog.processors.format_exc_info)  # a string, so redaction can scan it
    chain.append(redact_secrets)
    return chain


def renderer(fmt: Literal["console", "json"], stream: TextIO) -> Processor:
    if fmt == "json":
        return structlog.processors.JSONRenderer()
    colors = False
    try:
        colors = stream.isatty()
    except (AttributeError, ValueError):
        pass
    return structlog.dev.ConsoleRenderer(colors=colors, exception_formatter=_redacted_traceback)


class _StdlibHandler(logging.StreamHandler[TextIO]):
    """Marks the root handler ``configure`` installed, so a second call or ``reset`` can find it."""


_installed: list[tuple[_StdlibHandler, int]] = []  # (our root handler, the root level before it)
# What ``configure`` set last (the level, the resolved format): a child process of ours logs alike.
_configured: list[tuple[str, Literal["console", "json"]]] = []


def configure(level: str = "warning", fmt: LogFormat = "auto") -> None:
    """Send structlog's and the standard library's logs at ``level`` and above to stderr as ``fmt``.

    ``fmt``: ``auto`` (JSON lines unless stderr is a terminal), ``json`` (one object per line) or
    ``console``. Calling it again replaces the previous configuration.
    """
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}; use debug, info, warning or error")
    stream = sys.stderr
    resolved = resolve_format(fmt, stream)
    chain = shared_processors(resolved)
    render = renderer(resolved, stream)
    structlog.configure(
        processors=[*chain, render],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )

    _remove_stdlib_handler()
    handler = _StdlibHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *chain[:-1]],  # redaction runs below
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, redact_secrets, render],
        )
    )
    handler.setLevel(numeric)
    root = logging.getLogger()
    _installed.append((handler, root.level))
    root.addHandler(handler)
    root.setLevel(numeric)
    _configured[:] = [(level, resolved)]


def configured() -> tuple[str, Literal["console", "json"]] | None:
    """The level and format ``configure`` set (None before it ran): for a child process to log alike."""
    return _configured[0] if _configured else None


def _remove_stdlib_handler() -> None:
    root = logging.getLogger()
    while _installed:
        handler, previous_level = _installed.pop()
        root.removeHandler(handler)
        handler.close()
        root.setLevel(previous_level)


def reset() -> None:
    """Back to structlog's defaults and the root logger as it was (for tests)."""
    _remove_stdlib_handler()
    _configured.clear()
    structlog.reset_defaults()
