"""A minimal LLM agent for the mcpfault contract: the `openai` SDK for the model, the `mcp` SDK for the tools.

It reads MCPFAULT_TASK (instruction and answer schema), connects to the MCP endpoint (MCPFAULT_MCP_URL,
or with --via command the stdio bridge MCPFAULT_MCP_COMMAND), offers the model the server's tools plus
`submit_answer` and `report_failure`, runs the tool calls the model asks for, and writes what the
model submitted to MCPFAULT_ANSWER. Any OpenAI-compatible server works: OPENAI_BASE_URL and
OPENAI_API_KEY as the SDK reads them, the model from MCPFAULT_MODEL (default gpt-4o-mini).

Without a key, against the fake model:

    mcpfault fake-llm --listen 127.0.0.1:8700 &
    OPENAI_BASE_URL=http://127.0.0.1:8700/v1 OPENAI_API_KEY=unused \
        mcpfault run --profile error --tasks 8 --agent cmd:mine --agent-command "python examples/agents/openai_agent.py"
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageFunctionToolCall

MAX_TURNS = 24


def server(via: str) -> str | StdioServerParameters:
    if via == "url":
        return os.environ["MCPFAULT_MCP_URL"]
    argv = json.loads(os.environ["MCPFAULT_MCP_COMMAND"])
    return StdioServerParameters(command=argv[0], args=argv[1:])


def function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


async def run_tool(client: Client, name: str, arguments: dict[str, Any]) -> str:
    """The tool's result as the model reads it: its JSON, or `ERROR: ...` when the call failed."""
    try:
        result = await client.call_tool(name, arguments, read_timeout_seconds=10)
    except Exception as exc:  # a JSON-RPC error, a timeout, a lost connection
        return f"ERROR: {type(exc).__name__}: {exc}"
    text = " ".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        return f"ERROR: {text or 'the tool reported an error'}"
    return json.dumps(result.structured_content) if result.structured_content is not None else text


async def main(via: str) -> None:
    with open(os.environ["MCPFAULT_TASK"], encoding="utf-8") as task_file:
        task = json.load(task_file)
    model = AsyncOpenAI()  # OPENAI_BASE_URL, OPENAI_API_KEY
    answer: dict[str, Any] = {"status": "failed", "reason": f"no answer in {MAX_TURNS} turns"}
    async with Client(server(via), mode="legacy", read_timeout_seconds=10) as client:
        listing = await client.list_tools()
        tools: list[Any] = [function(t.name, t.description or t.name, dict(t.input_schema)) for t in listing.tools]
        tools.append(function(task["answer_tool"], "Submit the final answer, once, when done.", task["answer_schema"]))
        reason = {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]}
        tools.append(function(task["failure_tool"], "Report that the task cannot be completed, and why.", reason))
        messages: list[Any] = [
            {"role": "system", "content": task["system_prompt"]},
            {"role": "user", "content": task["instruction"]},
        ]
        for _ in range(MAX_TURNS):
            response = await model.chat.completions.create(
                model=os.environ.get("MCPFAULT_MODEL", "gpt-4o-mini"), messages=messages, tools=tools
            )
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                messages.append({"role": "user", "content": f"Call {task['answer_tool']} or {task['failure_tool']}."})
                continue
            done = False
            for call in message.tool_calls:  # parallel tool calls: each gets its own result
                if not isinstance(call, ChatCompletionMessageFunctionToolCall):
                    continue  # a custom (non-function) tool call: this agent offers none
                arguments = json.loads(call.function.arguments or "{}")
                if call.function.name == task["answer_tool"]:
                    answer, done = {"status": "done", "answer": arguments}, True
                elif call.function.name == task["failure_tool"]:
                    answer, done = {"status": "failed", "reason": str(arguments.get("reason", ""))}, True
                else:
                    content = await run_tool(client, call.function.name, arguments)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            if done:
                break
    with open(os.environ["MCPFAULT_ANSWER"], "w", encoding="utf-8") as out:
        json.dump(answer, out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--via", choices=["url", "command"], default="url", help="MCPFAULT_MCP_URL or _COMMAND")
    anyio.run(main, parser.parse_args().via)
