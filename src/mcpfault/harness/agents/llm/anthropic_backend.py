"""The Anthropic backend: the official ``anthropic`` SDK (the ``llm`` extra), imported only when used.

The key comes from ``ANTHROPIC_API_KEY`` (or the SDK's own configuration: ``ANTHROPIC_AUTH_TOKEN``,
``ANTHROPIC_BASE_URL``); mcpfault never reads it into anything it logs, traces or writes. The SDK's
own retries are off (``max_retries=0``): the agent retries 429/529/5xx itself, waiting what the
server's ``retry-after`` says, so every try is a span and counts in the task's account.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

from mcpfault.errors import UsageError
from mcpfault.harness.agents.llm.backend import (
    ChatRequest,
    ChatResponse,
    ModelMalformed,
    ModelRetryable,
    ModelUnavailable,
    parse_response,
    provider_of,
)

if TYPE_CHECKING:
    import anthropic

KEY_VARIABLES: Final = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
INSTALL_HINT: Final = "pip install 'mcpfault[llm]' (or pip install anthropic)"
RETRYABLE_STATUS: Final = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def check_available(*, need_key: bool = True) -> None:
    """Raise UsageError (one line: what to install or set) unless the SDK imports and a key is configured."""
    try:
        import anthropic  # noqa: F401
    except ImportError:
        raise UsageError(f"the llm agent needs the anthropic package: {INSTALL_HINT}") from None
    if need_key and not any(os.environ.get(name) for name in KEY_VARIABLES):
        raise UsageError(
            "the llm agent needs an API key: set ANTHROPIC_API_KEY (or replay a recording with --replay DIR)"
        )


class AnthropicBackend:
    name = "anthropic"

    def __init__(self, *, base_url: str | None = None, api_key: str | None = None, timeout_s: float = 120.0) -> None:
        import anthropic

        self._sdk = anthropic
        # None: the SDK reads ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL itself.
        self._client: anthropic.AsyncAnthropic = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s
        )

    async def create(self, request: ChatRequest) -> ChatResponse:
        sdk = self._sdk
        body = request.body()
        try:
            raw = await self._client.messages.with_raw_response.create(
                model=provider_of(body["model"])[1],  # anthropic:claude-... is claude-...
                max_tokens=body["max_tokens"],
                system=body["system"],
                messages=body["messages"],
                tools=body["tools"],
            )
            data: Any = raw.http_response.json()
        except sdk.APIStatusError as exc:
            raise _status_error(exc) from None
        except sdk.APITimeoutError:
            raise ModelRetryable(
                "the model API did not answer in time", status=None, error_type="timeout", retry_after_s=None
            ) from None
        except sdk.APIConnectionError as exc:
            raise ModelRetryable(
                f"cannot reach the model API ({exc})", status=None, error_type="connection_error", retry_after_s=None
            ) from None
        except sdk.APIResponseValidationError as exc:
            raise ModelMalformed(f"the model API's answer is not valid ({exc})") from None
        except ValueError as exc:  # a 2xx body that is not JSON
            raise ModelMalformed(f"the model API's answer is not JSON ({exc})") from None
        return parse_response(data)

    async def aclose(self) -> None:
        await self._client.close()


def _status_error(exc: anthropic.APIStatusError) -> ModelRetryable | ModelUnavailable:
    status = exc.status_code
    error_type, message = _error_body(exc.body)
    text = f"the model API answered {status} {error_type}: {message}"
    if status in RETRYABLE_STATUS:
        return ModelRetryable(
            text, status=status, error_type=error_type, retry_after_s=retry_after(exc.response.headers)
        )
    return ModelUnavailable(text)


def _error_body(body: object) -> tuple[str, str]:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("type", "error")), str(error.get("message", ""))[:300]
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
