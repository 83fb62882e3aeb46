"""What the LLM agent needs from a model: one Messages API call, its errors as a small tree.

The wire format is the Anthropic Messages API's, kept as plain JSON values (content blocks,
``tool_use`` / ``tool_result``, ``stop_reason``, ``usage``), so a recording is exactly what crossed
the wire and any backend (the SDK, a replay, a test double) speaks the same thing.

ModelError (a CallError: it ends a task as failed_detected, never silently)
├── ModelRetryable     429, 529, 5xx, a lost connection: worth another try after ``retry_after_s``
├── ModelUnavailable   retries spent, or an error no retry fixes (authentication, a bad request)
├── ModelMalformed     a 2xx answer that is not a Messages API response
└── ReplayMissing      replaying, and the recording has no (or another) exchange for this request
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from mcpfault.errors import CallError

DEFAULT_MODEL: Final = "claude-sonnet-4-5"
# --model PROVIDER:MODEL; a bare model name is Anthropic's, as it always was.
PROVIDERS: Final = ("anthropic", "openai")
DEFAULT_PROVIDER: Final = "anthropic"
STOP_REASONS: Final = frozenset({"end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal"})


def provider_of(model: str) -> tuple[str, str]:
    """(provider, the model's own name) of a --model value: ``openai:gpt-4o`` -> ("openai", "gpt-4o")."""
    provider, sep, name = model.partition(":")
    if sep and provider in PROVIDERS:
        return provider, name
    return DEFAULT_PROVIDER, model


class ModelError(CallError):
    failure = "model_error"


class ModelRetryable(ModelError):
    failure = "model_unavailable"

    def __init__(self, message: str, *, status: int | None, error_type: str, retry_after_s: float | None) -> None:
        self.status = status
        self.error_type = error_type  # rate_limit_error, overloaded_error, api_error, connection_error
        self.retry_after_s = retry_after_s  # the server's retry-after, when it sent one
        super().__init__(message)


class ModelUnavailable(ModelError):
    failure = "model_unavailable"


class ModelMalformed(ModelError):
    failure = "model_malformed"


class ReplayMissing(ModelError):
    failure = "replay_missing"


# Statuses worth another try (Anthropic's 529 is "overloaded"); a provider may say any 5xx is transient.
RETRYABLE_STATUS: Final = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def sdk_error(sdk: Any, exc: Exception, *, any_5xx: bool = False) -> ModelError | None:
    """The model error for what a Stainless-made SDK raised (``anthropic`` and ``openai`` share the
    exception classes: a status, a timeout, no connection, an invalid answer), or a 2xx body that is not
    JSON (``ValueError``); None for anything else. The one mapper both backends use."""
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        error_type, message = error_of(exc.body)
        text = f"the model API answered {status} {error_type}: {message}"
        if status in RETRYABLE_STATUS or (any_5xx and status >= 500):
            return ModelRetryable(
                text, status=status, error_type=error_type, retry_after_s=retry_after(exc.response.headers)
            )
        return ModelUnavailable(text)
    if isinstance(exc, sdk.APITimeoutError):  # before APIConnectionError, whose subclass it is
        return ModelRetryable(
            "the model API did not answer in time", status=None, error_type="timeout", retry_after_s=None
        )
    if isinstance(exc, sdk.APIConnectionError):
        return ModelRetryable(
            f"cannot reach the model API ({exc})", status=None, error_type="connection_error", retry_after_s=None
        )
    if isinstance(exc, sdk.APIResponseValidationError):
        return ModelMalformed(f"the model API's answer is not valid ({exc})")
    if isinstance(exc, ValueError):
        return ModelMalformed(f"the model API's answer is not JSON ({exc})")
    return None


def error_of(body: object) -> tuple[str, str]:
    """(type, message) of an error body: Anthropic's ``{"type": "error", "error": {...}}``, OpenAI's
    ``{"error": {"type", "code", "message"}}``, or the inner object alone (an SDK may hand over that)."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict):
        kind = error.get("type") or error.get("code") or "error"
        return str(kind), str(error.get("message", ""))[:300]
    return "error", str(body)[:300]


def retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds; an HTTP date is not waited for)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if seconds >= 0:
            return seconds
    return None


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One Messages API request body."""

    model: str
    system: str
    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]]
    max_tokens: int = 2048
    key: str = ""  # where it sits in the run ("task0003/turn02/try1"): what a recording files it under; not sent

    def body(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": self.system,
            "messages": [dict(m) for m in self.messages],
            "tools": [dict(t) for t in self.tools],
        }

    def digest(self) -> str:
        """sha256 of the canonical JSON body: what a replay checks it is answering the same request."""
        canonical = json.dumps(self.body(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """The parts of a Messages API response the agent uses; ``raw`` is the whole body."""

    id: str
    model: str
    content: tuple[Mapping[str, Any], ...]
    stop_reason: str
    usage: Usage
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tool_uses(self) -> list[Mapping[str, Any]]:
        return [block for block in self.content if block.get("type") == "tool_use"]


class LLMBackend(Protocol):
    """A model behind the Messages API. ``create`` raises ModelError subclasses, nothing else."""

    name: str  # for spans: the provider ("anthropic"), "replay" when answers come from a recording

    async def create(self, request: ChatRequest) -> ChatResponse: ...

    async def aclose(self) -> None: ...


def parse_response(body: Any) -> ChatResponse:
    """A Messages API response body, checked; raises ModelMalformed naming what is wrong."""
    if not isinstance(body, Mapping):
        raise ModelMalformed(f"the model's answer is a JSON {type(body).__name__}, not a message object")
    if body.get("type") != "message":
        raise ModelMalformed(f"the model's answer has type {body.get('type')!r}, not 'message'")
    content = body.get("content")
    if not isinstance(content, list) or not all(isinstance(b, Mapping) and "type" in b for b in content):
        raise ModelMalformed("the model's answer has no list of content blocks")
    for block in content:
        if block["type"] == "tool_use" and not (
            isinstance(block.get("id"), str)
            and isinstance(block.get("name"), str)
            and isinstance(block.get("input"), dict)
        ):
            raise ModelMalformed("a tool_use block lacks its id, name or input object")
    stop_reason = body.get("stop_reason")
    if stop_reason not in STOP_REASONS:
        raise ModelMalformed(f"the model's answer has stop_reason {stop_reason!r}")
    usage = body.get("usage")
    if not isinstance(usage, Mapping):
        raise ModelMalformed("the model's answer has no usage")
    tokens_in, tokens_out = usage.get("input_tokens"), usage.get("output_tokens")
    if not isinstance(tokens_in, int) or not isinstance(tokens_out, int):
        raise ModelMalformed("the model's answer has no token counts in its usage")
    return ChatResponse(
        id=str(body.get("id", "")),
        model=str(body.get("model", "")),
        content=tuple(dict(b) for b in content),
        stop_reason=str(stop_reason),
        usage=Usage(tokens_in, tokens_out),
        raw=dict(body),
    )
