"""OpenAI Chat Completions <-> the Messages API wire types the LLM agent and the fake model speak.

Both directions of both halves, pure functions over JSON:

- ``chat_request_to_messages`` and ``messages_response_to_chat``: what ``fake-llm`` does with a Chat
  Completions request (answer it with the scripted policy, which reads Messages requests);
- ``messages_request_to_chat`` and ``chat_response_to_messages``: what the ``openai`` backend does (the
  agent's loop builds Messages requests and reads Messages responses, whichever provider answers).

The mapping: ``system`` is the first message of role ``system``; a ``tool_use`` block is an entry of the
assistant message's ``tool_calls`` (its ``input`` JSON-encoded in ``function.arguments``); each
``tool_result`` is a message of role ``tool`` with its ``tool_call_id``; a tool is ``{"type": "function",
"function": {"name", "description", "parameters"}}``. ``finish_reason`` ``tool_calls`` is ``stop_reason``
``tool_use``, ``length`` is ``max_tokens``, anything else ``end_turn``; ``usage.prompt_tokens`` and
``completion_tokens`` are ``input_tokens`` and ``output_tokens``.

Chat Completions has no ``is_error`` on a tool result. The convention (README, "fake-llm"): a successful
call's result is its JSON (the structured content); anything else is a failed call's, best written as
``ERROR: what went wrong`` (which the backend sends for a Messages ``is_error`` result).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from mcpfault.errors import MCPFaultError

ERROR_PREFIX: Final = "ERROR: "
_FINISH_TO_STOP: Final = {"tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens"}
_STOP_TO_FINISH: Final = {"tool_use": "tool_calls", "max_tokens": "length"}


class WireError(MCPFaultError, ValueError):
    """A body that is not what its format says (a malformed answer)."""


# -- fake-llm: Chat Completions in, Chat Completions out -------------------------------------------


def chat_request_to_messages(request: Mapping[str, Any]) -> dict[str, Any]:
    """A Chat Completions request as the Messages request the scripted policy reads."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("messages: a non-empty list is required")
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict):
            raise WireError("messages: every entry is an object")
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
        elif role == "user":
            out.append({"role": "user", "content": _text(message.get("content"))})
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if message.get("content"):
                blocks.append({"type": "text", "text": _text(message.get("content"))})
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id")),
                        "name": str(function.get("name")),
                        "input": _arguments(function.get("arguments")),
                    }
                )
            out.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            text = _text(message.get("content"))
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id")),
                "content": text,
            }
            if not _is_json(text):  # ERROR: ..., or any text that is not a result
                result = {**result, "content": text.removeprefix(ERROR_PREFIX), "is_error": True}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(result)  # parallel calls' results: one user turn, as Messages has it
            else:
                out.append({"role": "user", "content": [result]})
        else:
            raise WireError(f"messages: unknown role {role!r}")
    tools = []
    for tool in request.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict):
            schema = function.get("parameters") or {"type": "object"}
            description = function.get("description", "")
            tools.append({"name": function.get("name"), "description": description, "input_schema": schema})
    return {"model": request.get("model", ""), "system": "\n\n".join(system), "messages": out, "tools": tools}


def messages_response_to_chat(response: Mapping[str, Any], model: str) -> dict[str, Any]:
    """A Messages response as a ``chat.completion`` object."""
    text = "".join(b.get("text", "") for b in response.get("content", []) if b.get("type") == "text")
    calls = [
        {
            "id": str(b.get("id")),
            "type": "function",
            "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})},
        }
        for b in response.get("content", [])
        if b.get("type") == "tool_use"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    usage = response.get("usage") or {}
    prompt, completion = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    return {
        "id": "chatcmpl-" + str(response.get("id", "")).removeprefix("msg_"),
        "object": "chat.completion",
        "created": 0,  # the fake answers the same way every time; so does its clock
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _STOP_TO_FINISH.get(str(response.get("stop_reason")), "stop"),
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


# -- the openai backend: Messages in, Messages out --------------------------------------------------


def messages_request_to_chat(request: Mapping[str, Any]) -> dict[str, Any]:
    """The agent's Messages request as Chat Completions keyword arguments (model, messages, tools, ...)."""
    messages: list[dict[str, Any]] = []
    system = request.get("system")
    if system:
        messages.append({"role": "system", "content": system if isinstance(system, str) else _text(system)})
    for message in request.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            messages.append({"role": message["role"], "content": content})
            continue
        blocks = list(content or [])
        if message.get("role") == "assistant":
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {})},
                }
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = calls
            messages.append(entry)
            continue
        texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
        for block in blocks:
            if block.get("type") == "tool_result":
                result = _text(block.get("content"))
                if block.get("is_error") is True:
                    result = ERROR_PREFIX + result
                messages.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": result})
        if texts:
            messages.append({"role": "user", "content": "\n".join(texts)})
    chat: dict[str, Any] = {"model": request.get("model"), "messages": messages}
    if request.get("max_tokens"):
        chat["max_tokens"] = request["max_tokens"]
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {"type": "object"},
            },
        }
        for t in request.get("tools") or []
    ]
    if tools:
        chat["tools"] = tools
    return chat


def chat_response_to_messages(response: Mapping[str, Any]) -> dict[str, Any]:
    """A ``chat.completion`` as a Messages response; ``WireError`` when it is not one."""
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise WireError("the answer has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise WireError("the answer's first choice has no message")
    content: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise WireError("a tool call without a function name")
        content.append(
            {
                "type": "tool_use",
                "id": str(call.get("id") or _call_id(function)),
                "name": function["name"],
                "input": _arguments(function.get("arguments")),
            }
        )
    if not content:
        raise WireError("the answer's message has neither content nor tool calls")
    usage = response.get("usage") or {}
    finish = str(choices[0].get("finish_reason") or "stop")
    stop = _FINISH_TO_STOP.get(finish, "end_turn")
    if stop == "end_turn" and any(b["type"] == "tool_use" for b in content):
        stop = "tool_use"  # some servers (older vLLM, llama.cpp) say "stop" with tool calls
    return {
        "id": str(response.get("id", "")),
        "type": "message",
        "role": "assistant",
        "model": str(response.get("model", "")),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": int((usage or {}).get("prompt_tokens") or 0),
            "output_tokens": int((usage or {}).get("completion_tokens") or 0),
        },
    }


def _call_id(function: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(function, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"call_{digest}"


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except (TypeError, ValueError):
        raise WireError(f"tool call arguments are not JSON: {str(value)[:80]!r}") from None
    if not isinstance(parsed, dict):
        raise WireError("tool call arguments are not a JSON object")
    return parsed


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)
