"""Structured logs: trace context from the current span, secret redaction, JSON lines vs console."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from opentelemetry.sdk.trace import TracerProvider

from mcpfault.telemetry.logging import (
    REDACTED,
    configure,
    is_secret_key,
    redact_secrets,
    redact_text,
    reset,
    resolve_format,
)

BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig-nature_x"
ANTHROPIC_KEY = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcdef"
OPENAI_KEY = "sk-proj-ZYXWVUTSRQPONMLKJIHGFEDCBA9876543210"


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    reset()
    yield
    reset()


def json_lines(text: str) -> list[dict[str, Any]]:
    lines = text.splitlines()
    assert lines, "nothing was logged"
    return [json.loads(line) for line in lines]  # every line must be a whole JSON object


def log_one(capsys: pytest.CaptureFixture[str], **fields: Any) -> dict[str, Any]:
    configure("info", "json")
    structlog.get_logger("test").info("event", **fields)
    (line,) = json_lines(capsys.readouterr().err)
    return line


# --- trace context -----------------------------------------------------------------------------


def test_a_line_inside_a_span_carries_its_ids(capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", "json")
    log = structlog.get_logger("test")
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("outer") as outer:
        log.info("in outer")
        with tracer.start_as_current_span("inner") as inner:
            log.info("in inner")
    log.info("outside")

    first, second, third = json_lines(capsys.readouterr().err)
    outer_ctx, inner_ctx = outer.get_span_context(), inner.get_span_context()
    assert first["trace_id"] == format(outer_ctx.trace_id, "032x")
    assert first["span_id"] == format(outer_ctx.span_id, "016x")
    assert second["trace_id"] == first["trace_id"]
    assert second["span_id"] == format(inner_ctx.span_id, "016x")
    assert len(second["trace_id"]) == 32 and len(second["span_id"]) == 16
    assert "trace_id" not in third and "span_id" not in third


def test_no_ids_outside_a_span_or_in_an_invalid_one(capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", "json")
    log = structlog.get_logger("test")
    log.info("no span")
    # The API's default tracer (no SDK provider) hands out invalid, non-recording spans.
    from opentelemetry.trace import NoOpTracerProvider

    with NoOpTracerProvider().get_tracer("test").start_as_current_span("noop"):
        log.info("noop span")
    for line in json_lines(capsys.readouterr().err):
        assert "trace_id" not in line and "span_id" not in line


def test_explicitly_bound_ids_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", "json")
    with TracerProvider().get_tracer("test").start_as_current_span("s"):
        structlog.get_logger("test").info("about another trace", trace_id="ab" * 16)
    (line,) = json_lines(capsys.readouterr().err)
    assert line["trace_id"] == "ab" * 16
    assert len(line["span_id"]) == 16


def test_stdlib_records_get_the_same_chain(capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", "json")
    with TracerProvider().get_tracer("test").start_as_current_span("s") as span:
        logging.getLogger("some.library").warning("sent %s to the collector", BEARER)
    (line,) = json_lines(capsys.readouterr().err)
    assert line["event"] == f"sent {REDACTED} to the collector"
    assert line["logger"] == "some.library"
    assert line["level"] == "warning"
    assert line["trace_id"] == format(span.get_span_context().trace_id, "032x")


def test_reset_removes_the_stdlib_handler() -> None:
    root = logging.getLogger()
    before = list(root.handlers), root.level
    configure("debug", "json")
    assert len(root.handlers) == len(before[0]) + 1
    configure("info", "json")  # again: replaces, never stacks
    assert len(root.handlers) == len(before[0]) + 1
    reset()
    assert (list(root.handlers), root.level) == before


# --- redaction ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["authorization", "Authorization", "api_key", "x-api-key", "X-Api-Key", "password", "token", "access_token"]
)
def test_secret_keys_are_redacted(capsys: pytest.CaptureFixture[str], key: str) -> None:
    line = log_one(capsys, **{key: "hunter2-value", "tool": "get_device_status"})
    assert line[key] == REDACTED
    assert line["tool"] == "get_device_status"
    assert "hunter2" not in json.dumps(line)


def test_header_values_are_redacted_names_kept(capsys: pytest.CaptureFixture[str]) -> None:
    headers = {"Authorization": BEARER, "Content-Type": "application/x-protobuf", "x-tenant": "t1"}
    line = log_one(capsys, headers=headers, request_headers=[("Cookie", "session=1")], env_headers="authorization=x")
    assert line["headers"] == {"Authorization": REDACTED, "Content-Type": REDACTED, "x-tenant": REDACTED}
    assert line["env_headers"] == REDACTED
    assert line["request_headers"] == [["Cookie", REDACTED]]
    assert headers["Authorization"] == BEARER  # the caller's dict is untouched


@pytest.mark.parametrize("secret", [BEARER, "bearer abc.def", ANTHROPIC_KEY, OPENAI_KEY, "sk-" + "a" * 48])
def test_secret_looking_values_are_redacted_anywhere(capsys: pytest.CaptureFixture[str], secret: str) -> None:
    line = log_one(
        capsys,
        whole=secret,
        sentence=f"calling the API with {secret} now",
        nested={"config": {"list": ["x", secret]}},
    )
    assert line["whole"] == REDACTED
    assert line["sentence"] == f"calling the API with {REDACTED} now"
    assert line["nested"] == {"config": {"list": ["x", REDACTED]}}
    assert secret not in json.dumps(line)


def test_the_message_and_exceptions_are_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", "json")
    log = structlog.get_logger("test")
    log.info(f"key is {ANTHROPIC_KEY}")
    try:
        raise RuntimeError(f"upstream said {BEARER}")
    except RuntimeError:
        log.exception("call failed")
        logging.getLogger("lib").exception("stdlib call failed")
    text = capsys.readouterr().err
    message, structured, stdlib = json_lines(text)
    assert message["event"] == f"key is {REDACTED}"
    assert "RuntimeError: upstream said [redacted]" in structured["exception"]
    assert "RuntimeError: upstream said [redacted]" in stdlib["exception"]
    assert ANTHROPIC_KEY not in text and "eyJhbGci" not in text


def test_console_exceptions_are_redacted_too(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = FakeTty()
    monkeypatch.setattr(sys, "stderr", stream)
    configure("info", "console")
    try:
        raise RuntimeError(f"upstream said {BEARER}")
    except RuntimeError:
        structlog.get_logger("test").exception("call failed", password="p4ss")
    text = stream.getvalue()
    assert "call failed" in text and "RuntimeError: upstream said [redacted]" in text
    assert "eyJhbGci" not in text and "p4ss" not in text


def test_harmless_values_are_left_alone() -> None:
    event = {
        "event": "task done",
        "idempotency_key": "task-17",
        "max_tokens": 512,
        "tool": "open_incident",
        "note": "ask-for-help sk-short",  # too short to be a key
        "bearer_count": 3,
        "size": 12.5,
    }
    assert redact_secrets(None, "info", dict(event)) == event
    assert not is_secret_key("idempotency_key")
    assert is_secret_key("proxy-authorization")
    assert redact_text("task-abcdefghijklmnopqrstuvwxyz") == "task-abcdefghijklmnopqrstuvwxyz"


def test_deeply_nested_values_are_bounded() -> None:
    value: Any = BEARER
    for _ in range(50):
        value = {"x": value}
    out = redact_secrets(None, "info", {"deep": value})
    assert BEARER not in json.dumps(out)


# --- formats -----------------------------------------------------------------------------------


def test_json_is_one_object_per_line_when_stderr_is_not_a_tty(capsys: pytest.CaptureFixture[str]) -> None:
    configure("info")  # the default is auto; pytest's captured stderr is not a terminal
    log = structlog.get_logger("test")
    log.info("first", text="with\nnewlines\ninside", count=1)
    log.warning("second", data={"a": [1, 2]})
    log.debug("below the level")
    first, second = json_lines(capsys.readouterr().err)
    assert first["event"] == "first" and first["text"] == "with\nnewlines\ninside" and first["level"] == "info"
    assert second["event"] == "second" and second["data"] == {"a": [1, 2]}
    assert "timestamp" in first


def test_auto_is_console_on_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = FakeTty()
    monkeypatch.setattr(sys, "stderr", stream)
    configure("info", "auto")
    structlog.get_logger("test").info("hello console", device="edge-1")
    text = stream.getvalue()
    assert "hello console" in text and "edge-1" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.splitlines()[0])


def test_resolve_format() -> None:
    assert resolve_format("auto", FakeTty()) == "console"
    assert resolve_format("auto", io.StringIO()) == "json"
    closed = io.StringIO()
    closed.close()
    assert resolve_format("auto", closed) == "json"
    assert resolve_format("console", io.StringIO()) == "console"
    assert resolve_format("json", FakeTty()) == "json"
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        resolve_format("xml")


def test_bad_level_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        configure("loud", "json")
