"""The mcp SDK's ``Client`` side of the interop tests: callbacks (a progress recorder, a fake sampling
model, a log recorder) and the tour of ``@modelcontextprotocol/server-everything`` run over every transport."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import anyio
import mcp.types as types
from mcp import Client
from mcp.client.context import ClientRequestContext


class ProgressUpdate(NamedTuple):
    """One progress notification as the client saw it."""

    progress: float
    total: float | None
    elapsed: float  # seconds since the recorder was made


class Progress:
    """A ``progress_callback`` that remembers what arrived and when."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.updates: list[ProgressUpdate] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.updates.append(ProgressUpdate(progress, total, time.monotonic() - self.started))

    def values(self) -> list[float]:
        """The progress value of every update, in order of arrival."""
        return [update.progress for update in self.updates]


class SamplingModel:
    """The client's side of ``sampling/createMessage``: a fake model that records the requests and
    always answers ``ANSWER``."""

    ANSWER = "sampled-answer-42"

    def __init__(self) -> None:
        self.requests: list[types.CreateMessageRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.requests.append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=self.ANSWER),
            model="fake-model",
            stop_reason="endTurn",
        )

    @property
    def prompts(self) -> list[Any]:
        """The content of each request's first message (a content block of the SDK's types)."""
        return [request.messages[0].content for request in self.requests]


class LogRecorder:
    """A ``logging_callback`` that keeps every log notification; ``arrived`` is set by the first."""

    def __init__(self) -> None:
        self.messages: list[types.LoggingMessageNotificationParams] = []
        self.arrived = anyio.Event()

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        self.messages.append(params)
        self.arrived.set()


class EverythingTour(NamedTuple):
    """What ``everything_tour`` got back."""

    tools: list[types.Tool]
    echo: types.CallToolResult
    long_op: types.CallToolResult
    sampled: types.CallToolResult
    structured: types.CallToolResult
    progress: Progress  # of the long operation
    answered_after: float  # seconds from the progress recorder's start to the long operation's answer


async def everything_tour(client: Client, echo_text: str, logs: LogRecorder, log_timeout: float) -> EverythingTour:
    """The same calls to server-everything whatever the transport: list the tools, echo ``echo_text``,
    a long operation in four progress steps, a tool that makes the server ask the client for a sample
    (the client's ``SamplingModel`` answers), simulated logging switched on until ``logs`` got a
    notification (within ``log_timeout`` seconds) and off again, and structured content."""
    listing = await client.list_tools()
    echo = await client.call_tool("echo", {"message": echo_text})
    progress = Progress()
    long_op = await client.call_tool(
        "trigger-long-running-operation", {"duration": 1, "steps": 4}, progress_callback=progress
    )
    answered_after = time.monotonic() - progress.started
    sampled = await client.call_tool("trigger-sampling-request", {"prompt": "ping", "maxTokens": 16})
    await client.call_tool("toggle-simulated-logging", {})
    with anyio.fail_after(log_timeout):
        await logs.arrived.wait()
    await client.call_tool("toggle-simulated-logging", {})
    structured = await client.call_tool("get-structured-content", {"location": "Chicago"})
    return EverythingTour(listing.tools, echo, long_op, sampled, structured, progress, answered_after)
