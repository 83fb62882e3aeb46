"""The LLM agent: a model solves the same four tasks through the same proxy, from natural-language prompts.

Its tools are those ``tools/list`` advertises (re-read when the server says the list changed), in
the Messages API's format, plus ``submit_answer`` (the task's answer schema) and ``report_failure``.
Every failure of a tool call reaches the model as an ``is_error`` tool result carrying the failure's
text; what to do about it is left entirely to the model. A task ends:

- with an answer (``submit_answer``, valid against its schema), judged like a scripted agent's;
- failed_detected when the model reports failure (``model_gave_up``), stops without answering
  (``no_answer``), runs out of turns (``max_turns``), or the model API cannot be had
  (``model_unavailable``, ``model_malformed``, ``replay_missing``).

Model calls are retried on 429, 529, 5xx and lost connections, waiting what ``retry-after`` says
(capped), else exponential backoff. Each try is a CLIENT span per the GenAI conventions, a child of
the task span beside the task's tool attempts; tokens and the estimated cost are counted per task.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
from anyio.abc import Process

from mcpfault.errors import CallError, UsageError
from mcpfault.harness.agents import schema
from mcpfault.harness.agents.llm import prompts
from mcpfault.harness.agents.llm.backend import (
    DEFAULT_MODEL,
    ChatRequest,
    ChatResponse,
    LLMBackend,
    ModelError,
    ModelRetryable,
    ModelUnavailable,
    provider_of,
)
from mcpfault.harness.agents.llm.prices import FAKE_PREFIX, cost_usd
from mcpfault.harness.agents.policies import TaskStats
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.telemetry import names

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from mcpfault.harness.client import StdioClient

AGENT_NAME: Final = "llm"
# The GenAI conventions' gen_ai.provider.name of each --model provider.
_PROVIDER_NAMES: Final = {"anthropic": names.GEN_AI_PROVIDER_ANTHROPIC, "openai": names.GEN_AI_PROVIDER_OPENAI}


class ModelGaveUp(CallError):
    failure = "model_gave_up"


class NoAnswer(CallError):
    failure = "no_answer"


class TurnsExhausted(CallError):
    failure = "max_turns"


@dataclass(frozen=True, slots=True)
class LLMConfig:
    """One model variant of the llm agent."""

    model: str = DEFAULT_MODEL
    hints: bool = False  # tell the model the connection is unreliable, and what as_of means
    max_turns: int = 24  # model calls per task, retries of a call aside
    max_tokens: int = 2048  # per model call
    max_retries: int = 4  # per model call, on 429/529/5xx/connection errors
    max_wait_s: float = 60.0  # the longest retry-after honoured; longer waits are capped
    record_dir: Path | None = None
    replay_dir: Path | None = None
    base_url: str | None = None  # None: the SDK's (ANTHROPIC_BASE_URL or OPENAI_BASE_URL, else the provider's API)
    price: tuple[float, float] | None = None  # --llm-price: USD per million tokens (input, output); None: the table

    @property
    def label(self) -> str:
        """The agent's name in records and reports: llm-<model>[-hints]."""
        return f"{AGENT_NAME}-{self.model}" + ("-hints" if self.hints else "")


@dataclass(slots=True)
class TaskUsage:
    model: str
    model_calls: int = 0  # requests sent to the model, retries included
    input_tokens: int = 0
    output_tokens: int = 0
    price: tuple[float, float] | None = None  # --llm-price, over the table's

    @property
    def cost_usd(self) -> float | None:
        return cost_usd(self.model, self.input_tokens, self.output_tokens, self.price)


@dataclass(slots=True)
class _Call:
    """A tool call the model made in this task, to tell a repeat of a failed call (a retry) from a new call."""

    attempts: int
    failed_at: float | None


class LLMAgent:
    name = AGENT_NAME

    def __init__(
        self, client: StdioClient, backend: LLMBackend, config: LLMConfig, tracer: Tracer | None = None
    ) -> None:
        self.client = client
        self.backend = backend
        self.config = config
        self.name = config.label
        self.stats = TaskStats()
        self.usage: dict[int, TaskUsage] = {}
        self._tracer = tracer
        self._tools: list[dict[str, Any]] = []
        self._calls: dict[str, _Call] = {}

    async def start(self) -> None:
        await self._refresh_tools()

    def begin_task(self, spec: TaskSpec) -> None:
        self.stats = TaskStats()
        self.client.current_task = spec.index
        self.usage[spec.index] = TaskUsage(self.config.model, price=self.config.price)
        self._calls = {}

    async def solve(self, spec: TaskSpec) -> Any:
        """The task's answer as the scripted task code would return it; raises a CallError when it has none."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompts.task_prompt(spec)}]
        answer_schema = prompts.answer_schema(spec.workflow)
        nudged = False
        for turn in range(1, self.config.max_turns + 1):
            if self.client.tools_changed:
                await self._refresh_tools()
            request = ChatRequest(
                model=self.config.model,
                system=prompts.system_prompt(self.config.hints, spec.workflow),
                messages=list(messages),
                tools=[*self._tools, *prompts.answer_tools(spec.workflow)],
                max_tokens=self.config.max_tokens,
            )
            response = await self._chat(spec, turn, request)
            messages.append({"role": "assistant", "content": [dict(b) for b in response.content]})
            if not response.tool_uses:
                if nudged or response.stop_reason == "refusal":
                    raise NoAnswer(f"the model stopped ({response.stop_reason}) without calling {prompts.ANSWER_TOOL}")
                nudged = True
                reminder = f"Finish by calling {prompts.ANSWER_TOOL}, or {prompts.FAILURE_TOOL} if you cannot."
                messages.append({"role": "user", "content": reminder})
                continue
            results: list[dict[str, Any]] = []
            for use in response.tool_uses:
                name, arguments, use_id = str(use["name"]), dict(use["input"]), str(use["id"])
                if name == prompts.ANSWER_TOOL:
                    problem = schema.validate(arguments, answer_schema)
                    if problem is None:
                        return prompts.to_task_answer(spec.workflow, arguments)
                    results.append(_result(use_id, f"the answer does not match its schema: {problem}", error=True))
                elif name == prompts.FAILURE_TOOL:
                    raise ModelGaveUp(f"the model gave up: {str(arguments.get('reason', ''))[:300]}")
                else:
                    results.append(await self._call_tool(use_id, name, arguments))
            messages.append({"role": "user", "content": results})
        raise TurnsExhausted(f"no answer after {self.config.max_turns} model turns")

    # -- tools ------------------------------------------------------------------------------------

    async def _refresh_tools(self) -> None:
        reserved = {prompts.ANSWER_TOOL, prompts.FAILURE_TOOL}
        listed = await self.client.list_tools()
        self._tools = [prompts.mcp_tool(t) for t in listed if t.get("name") not in reserved]

    async def _call_tool(self, use_id: str, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if name not in {t["name"] for t in self._tools}:
            return _result(use_id, f"there is no tool named {name!r}", error=True)
        # The same call again after it failed is a retry (attempt 2, 3, ...); anything else a new logical call.
        signature = json.dumps([name, arguments], sort_keys=True, default=str)
        previous = self._calls.get(signature)
        retry = previous is not None and previous.failed_at is not None
        attempt = previous.attempts + 1 if retry and previous is not None else 1
        waited = time.monotonic() - previous.failed_at if retry and previous and previous.failed_at else 0.0
        if not retry:
            self.stats.calls += 1
        try:
            result = await self.client.call_tool(name, arguments, attempt=attempt, backoff_s=waited)
        except CallError as exc:
            self._calls[signature] = _Call(attempt, time.monotonic())
            return _result(use_id, f"{exc.failure}: {exc}", error=True)
        self._calls[signature] = _Call(attempt, None)
        return _result(use_id, json.dumps(result, ensure_ascii=False))

    # -- the model --------------------------------------------------------------------------------

    async def _chat(self, spec: TaskSpec, turn: int, request: ChatRequest) -> ChatResponse:
        usage = self.usage[spec.index]
        tries = self.config.max_retries + 1
        for attempt in range(1, tries + 1):
            keyed = dataclasses.replace(request, key=f"task{spec.index:04d}/turn{turn:02d}/try{attempt}")
            span = self._start_span(keyed, turn, attempt)
            usage.model_calls += 1
            try:
                response = await self.backend.create(keyed)
            except ModelRetryable as exc:
                # The server's retry-after when it sent one, else exponential backoff; capped either way.
                wait = exc.retry_after_s if exc.retry_after_s is not None else min(8.0, 0.5 * 2 ** (attempt - 1))
                wait = min(wait, self.config.max_wait_s)
                if span is not None and attempt < tries:
                    span.set_attribute(names.LLM_RETRY_AFTER_S, wait)
                self._end_span(span, None, exc)
                if attempt == tries:
                    raise ModelUnavailable(f"{exc} (gave up after {tries} tries)") from None
                await anyio.sleep(wait)
                continue
            except ModelError as exc:
                self._end_span(span, None, exc)
                raise
            usage.input_tokens += response.usage.input_tokens
            usage.output_tokens += response.usage.output_tokens
            self._end_span(span, response, None)
            return response
        raise AssertionError("unreachable")

    def _start_span(self, request: ChatRequest, turn: int, attempt: int) -> Span | None:
        if self._tracer is None:
            return None
        from opentelemetry.trace import SpanKind

        attributes: dict[str, Any] = {
            names.GEN_AI_OPERATION_NAME: names.GEN_AI_OPERATION_CHAT,
            names.GEN_AI_PROVIDER_NAME: _PROVIDER_NAMES[provider_of(self.config.model)[0]],
            names.GEN_AI_SYSTEM: _PROVIDER_NAMES[provider_of(self.config.model)[0]],
            names.GEN_AI_REQUEST_MODEL: request.model,
            names.GEN_AI_REQUEST_MAX_TOKENS: request.max_tokens,
            names.LLM_TURN: turn,
            names.ATTEMPT: attempt,
            names.LLM_HINTS: self.config.hints,
            names.LLM_REPLAYED: self.backend.name == "replay",
        }
        name = f"{names.GEN_AI_OPERATION_CHAT} {request.model}"
        return self._tracer.start_span(
            name, context=self.client.span_parent, kind=SpanKind.CLIENT, attributes=attributes
        )

    def _end_span(self, span: Span | None, response: ChatResponse | None, error: ModelError | None) -> None:
        if span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        if response is not None:
            span.set_attribute(names.GEN_AI_RESPONSE_MODEL, response.model)
            span.set_attribute(names.GEN_AI_RESPONSE_ID, response.id)
            span.set_attribute(names.GEN_AI_RESPONSE_FINISH_REASONS, [response.stop_reason])
            span.set_attribute(names.GEN_AI_USAGE_INPUT_TOKENS, response.usage.input_tokens)
            span.set_attribute(names.GEN_AI_USAGE_OUTPUT_TOKENS, response.usage.output_tokens)
            cost = cost_usd(
                self.config.model, response.usage.input_tokens, response.usage.output_tokens, self.config.price
            )
            if cost is not None:
                span.set_attribute(names.LLM_COST_USD, round(cost, 8))
        if error is not None:
            kind = error.error_type if isinstance(error, ModelRetryable) else error.failure
            span.set_attribute(names.ERROR_TYPE, kind or names.OTHER)
            span.set_attribute(names.FAILURE, error.failure)
            span.set_status(Status(StatusCode.ERROR, str(error)[:300]))
        span.end()


def _result(use_id: str, text: str, *, error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use_id, "content": text}
    if error:
        block["is_error"] = True
    return block


@dataclass(slots=True)
class _FakeBackend:
    """The SDK talking to a scripted fake Messages API this session started (a ``fake-*`` model).

    The server is a process of its own, as a real API would be: in this process its threads would
    compete with the harness's event loop, whose tool-call deadlines must not depend on that load.
    """

    inner: LLMBackend
    server: Process
    name: str = field(default="anthropic")

    async def create(self, request: ChatRequest) -> ChatResponse:
        return await self.inner.create(request)

    async def aclose(self) -> None:
        await self.inner.aclose()
        with anyio.CancelScope(shield=True):
            self.server.terminate()
            with anyio.move_on_after(5):
                await self.server.wait()
            if self.server.returncode is None:
                self.server.kill()
                await self.server.wait()


async def _start_fake_server(behaviour: str) -> tuple[Process, str]:
    """The fake model in a process of its own; its base URL (it serves the Messages API and Chat Completions)."""
    command = [sys.executable, "-m", "mcpfault.harness.agents.llm.fakemodel", "--behaviour", behaviour]
    process = await anyio.open_process(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None)
    assert process.stdout is not None
    line = b""
    with anyio.move_on_after(15):
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive(256)
            line += chunk
    base_url = line.decode(errors="replace").strip()
    if not base_url.startswith("http://127.0.0.1:"):
        process.kill()
        await process.wait()
        raise ModelUnavailable(f"the fake model server did not start (it printed {base_url[:200]!r})")
    return process, base_url


async def make_backend(config: LLMConfig, *, profile: str, agent: str, session: int) -> LLMBackend:
    """The backend a session's llm agent talks to: a replay, or the SDK (recording when asked)."""
    from mcpfault.harness.agents.llm import recording

    if config.replay_dir is not None:
        path = recording.session_file(config.replay_dir, profile, agent, session)
        return recording.ReplayBackend(config.replay_dir, path)
    provider, model = provider_of(config.model)
    backend: LLMBackend
    if model.startswith(FAKE_PREFIX):
        server, base_url = await _start_fake_server(model.removeprefix(FAKE_PREFIX))
        # Not a credential: the fake server only checks that one is sent, as the real API would.
        sdk = _sdk_backend(provider, base_url=base_url, api_key="fake-model-needs-no-key")
        backend = _FakeBackend(sdk, server, name=sdk.name)
    else:
        backend = _sdk_backend(provider, base_url=config.base_url)
    if config.record_dir is not None:
        backend = recording.RecordingBackend(
            backend, recording.session_file(config.record_dir, profile, agent, session)
        )
    return backend


def _sdk_backend(provider: str, *, base_url: str | None, api_key: str | None = None) -> LLMBackend:
    if provider == "openai":
        from mcpfault.harness.agents.llm.openai_backend import OpenAIBackend

        # The fake model serves Chat Completions under /v1, as OpenAI does.
        fake_base = base_url is not None and api_key is not None
        return OpenAIBackend(base_url=f"{base_url}/v1" if fake_base else base_url, api_key=api_key)
    from mcpfault.harness.agents.llm.anthropic_backend import AnthropicBackend

    return AnthropicBackend(base_url=base_url, api_key=api_key)


def check_config(config: LLMConfig) -> None:
    """Refuse, before any work, what cannot run: a missing SDK or key, a fake model that does not exist, a bad dir."""
    from mcpfault.harness.agents.llm.anthropic_backend import check_available
    from mcpfault.harness.agents.llm.fakemodel import BEHAVIOURS

    if config.max_turns < 1:
        raise UsageError(f"--max-turns {config.max_turns}: give at least 1")
    if config.record_dir is not None and config.replay_dir is not None:
        raise UsageError("--record and --replay exclude each other: record a run, then replay it")
    if config.replay_dir is not None:
        if not config.replay_dir.is_dir():
            raise UsageError(
                f"--replay {config.replay_dir}: no such directory; give the --record DIR of an earlier run"
            )
        return
    provider, model = provider_of(config.model)
    if not model:
        raise UsageError(f"--model {config.model}: give the model's name after {provider}:")
    if model.startswith(FAKE_PREFIX):
        behaviour = model.removeprefix(FAKE_PREFIX)
        if behaviour not in BEHAVIOURS:
            known = ", ".join(FAKE_PREFIX + b for b in BEHAVIOURS)
            raise UsageError(f"--model {config.model}: no such fake model; the scripted ones are {known}")
        if provider == "openai":
            from mcpfault.harness.agents.llm.openai_backend import check_available as check_openai

            check_openai(base_url="fake")
        else:
            check_available(need_key=False)
        return
    if provider == "openai":
        from mcpfault.harness.agents.llm.openai_backend import check_available as check_openai

        check_openai(base_url=config.base_url)
        return
    check_available(need_key=True)
