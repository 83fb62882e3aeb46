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
    parse_response,
    provider_of,
    sdk_error,
)

if TYPE_CHECKING:
    import anthropic

KEY_VARIABLES: Final = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
INSTALL_HINT: Final = "pip install 'mcpfault[llm]' (or pip install anthropic)"


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
        except Exception as exc:
            mapped = sdk_error(sdk, exc)
            if mapped is None:
                raise
            raise mapped from None
        return parse_response(data)

    async def aclose(self) -> None:
        await self._client.close()
