"""The OpenAI backend: the official ``openai`` SDK (the ``llm`` extra), Chat Completions with tools.

Chat Completions is what OpenAI, vLLM, Ollama, llama.cpp's server and LiteLLM all serve, so
``--model openai:MODEL`` with ``--llm-base-url`` (or ``OPENAI_BASE_URL``) reaches any of them. The agent
speaks the Messages wire types whatever the provider; ``openai_wire`` maps a request there and the answer
back (tool calls, parallel ones included, ``finish_reason``, ``usage``), and this module maps the SDK's
errors onto the backend's tree:

- 408, 409, 429, 5xx, a timeout, a lost connection -> ``ModelRetryable`` (with ``retry-after``);
- any other status (401, 400, 404) -> ``ModelUnavailable``: no retry fixes it;
- a 2xx body that is not JSON or not a chat completion -> ``ModelMalformed``.

The key comes from ``OPENAI_API_KEY`` as the SDK reads it; a local server needs none, so with a base URL
and no key the SDK is given a placeholder it requires. mcpfault never writes the key anywhere. The
SDK's own retries are off: the agent retries, so every try is a span and counts in the task's account.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

from mcpfault.errors import UsageError
from mcpfault.harness.agents.llm import openai_wire
from mcpfault.harness.agents.llm.backend import (
    ChatRequest,
    ChatResponse,
    ModelMalformed,
    parse_response,
    provider_of,
    sdk_error,
)

if TYPE_CHECKING:
    import openai

KEY_VARIABLE: Final = "OPENAI_API_KEY"
BASE_URL_VARIABLE: Final = "OPENAI_BASE_URL"
INSTALL_HINT: Final = "pip install 'mcpfault[llm]' (or pip install openai)"
# What the SDK is given when a local server (a base URL, no key) needs no key: not a credential.
NO_KEY: Final = "no-key-needed"


def check_available(*, base_url: str | None) -> None:
    """Raise UsageError unless the SDK imports and there is a key, or a base URL (a local server needs no key)."""
    try:
        import openai  # noqa: F401
    except ImportError:
        raise UsageError(f"--model openai:... needs the openai package: {INSTALL_HINT}") from None
    if not os.environ.get(KEY_VARIABLE) and not (base_url or os.environ.get(BASE_URL_VARIABLE)):
        raise UsageError(
            "--model openai:... needs OPENAI_API_KEY, or --llm-base-url (OPENAI_BASE_URL) for a local server "
            "(or replay a recording with --replay DIR)"
        )


class OpenAIBackend:
    name = "openai"

    def __init__(self, *, base_url: str | None = None, api_key: str | None = None, timeout_s: float = 120.0) -> None:
        import openai

        self._sdk = openai
        key = api_key or os.environ.get(KEY_VARIABLE) or NO_KEY
        self._client: openai.AsyncOpenAI = openai.AsyncOpenAI(
            api_key=key, base_url=base_url, max_retries=0, timeout=timeout_s
        )

    async def create(self, request: ChatRequest) -> ChatResponse:
        sdk = self._sdk
        chat = openai_wire.messages_request_to_chat(request.body())
        chat["model"] = provider_of(str(chat["model"]))[1]  # openai:gpt-4o is gpt-4o to the server
        try:
            raw = await self._client.chat.completions.with_raw_response.create(**chat)
            data: Any = raw.http_response.json()
        except Exception as exc:
            mapped = sdk_error(sdk, exc, any_5xx=True)
            if mapped is None:
                raise
            raise mapped from None
        if not isinstance(data, dict):
            raise ModelMalformed(f"the model API's answer is a JSON {type(data).__name__}, not a chat completion")
        try:
            message = openai_wire.chat_response_to_messages(data)
        except (openai_wire.WireError, TypeError, AttributeError) as exc:
            raise ModelMalformed(f"the model API's answer is not a chat completion ({exc})") from None
        return parse_response(message)

    async def aclose(self) -> None:
        await self._client.close()
