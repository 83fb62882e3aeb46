"""OpenAI-compatible models: mcpfault fake-llm under the real openai SDK, the openai backend's error mapping,
the llm agent on openai:MODEL end to end (recorded, replayed), and the example agents judged through faults."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall

from mcpfault.errors import UsageError
from mcpfault.harness.agents.external import ExternalConfig
from mcpfault.harness.agents.llm import openai_wire, prompts
from mcpfault.harness.agents.llm.agent import LLMConfig, check_config
from mcpfault.harness.agents.llm.backend import ChatRequest, ModelMalformed, ModelRetryable, ModelUnavailable
from mcpfault.harness.agents.llm.fakemodel import FakeFault, FakeMessagesServer
from mcpfault.harness.agents.llm.openai_backend import OpenAIBackend
from mcpfault.harness.agents.llm.prices import cost_usd, parse_price
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.session import SessionPlan, run_session
from mcpfault.mock.world import World
from mcpfault.telemetry import names
from mcpfault.telemetry.tracing import read_spans
from tests.conftest import write_profile

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
OPENAI_AGENT = str(ROOT / "examples" / "agents" / "openai_agent.py")
WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]
SECRET = "sk-proj-test-0123456789-DO-NOT-LEAK"
SPEC = TaskSpec(0, "interface_check", DEVICE, "task-o-0")
METRICS_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_interface_metrics",
        "description": "Interface metrics of a device",
        "parameters": {"type": "object", "properties": {"device_id": {"type": "string"}}, "required": ["device_id"]},
    },
}
FIRST_CALLS_ERROR = '[[faults]]\ntype = "error"\nmode = "protocol"\nlimit = 2\n'


@pytest.fixture(autouse=True)
def openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def fake_llm() -> Iterator[str]:
    """``mcpfault fake-llm`` as a user runs it; its base URL (ending /v1)."""
    process = subprocess.Popen(
        [PYTHON, "-m", "mcpfault", "fake-llm", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), process.stderr
        yield url
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0


def function_calls(completion: ChatCompletion) -> list[ChatCompletionMessageFunctionToolCall]:
    calls = completion.choices[0].message.tool_calls or []
    return [c for c in calls if isinstance(c, ChatCompletionMessageFunctionToolCall)]


def answer_tool(workflow: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": prompts.ANSWER_TOOL, "parameters": prompts.answer_schema(workflow)},
    }


def test_fake_llm_speaks_chat_completions_to_the_openai_sdk(fake_llm):
    client = openai.OpenAI(base_url=fake_llm, api_key="anything")
    messages: list[Any] = [{"role": "user", "content": prompts.task_prompt(SPEC)}]
    tools: Any = [METRICS_TOOL, answer_tool(SPEC.workflow)]
    first = client.chat.completions.create(model="whatever-model-name", messages=messages, tools=tools)
    assert first.model == "whatever-model-name" and first.choices[0].finish_reason == "tool_calls"
    (call,) = function_calls(first)
    assert call.function.name == "get_interface_metrics"
    assert json.loads(call.function.arguments) == {"device_id": DEVICE}
    assert first.usage is not None and first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0
    interfaces = [{"name": "eth0", "oper_status": "up", "utilization_pct": 91.0, "errors_per_min": 0}]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"interfaces": interfaces})},
    ]
    second = client.chat.completions.create(model="x", messages=messages, tools=tools)
    (answer,) = function_calls(second)
    assert answer.function.name == prompts.ANSWER_TOOL
    assert json.loads(answer.function.arguments) == {"hot_interfaces": ["eth0"]}


def test_a_failed_tool_result_is_text_and_the_gives_up_model_reports_failure(fake_llm):
    client = openai.OpenAI(base_url=fake_llm, api_key="anything")
    failure_tool = {"type": "function", "function": {"name": prompts.FAILURE_TOOL, "parameters": {"type": "object"}}}
    tools: Any = [METRICS_TOOL, answer_tool(SPEC.workflow), failure_tool]
    messages: list[Any] = [{"role": "user", "content": prompts.task_prompt(SPEC)}]
    first = client.chat.completions.create(model="fake-gives-up", messages=messages, tools=tools)
    (call,) = function_calls(first)
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "ERROR: JSON-RPC error -32603: Internal error"},
    ]
    second = client.chat.completions.create(model="fake-gives-up", messages=messages, tools=tools)
    (gave_up,) = function_calls(second)
    assert gave_up.function.name == prompts.FAILURE_TOOL and "Internal error" in gave_up.function.arguments


def test_fake_llm_refuses_to_listen_beyond_loopback():
    done = subprocess.run(
        [PYTHON, "-m", "mcpfault", "fake-llm", "--listen", "0.0.0.0:0"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "loopback only" in done.stderr


def chat_request() -> ChatRequest:
    metrics = {
        "name": "get_interface_metrics",
        "description": "Metrics",
        "input_schema": METRICS_TOOL["function"]["parameters"],
    }
    return ChatRequest(
        model="openai:gpt-test",
        system=prompts.system_prompt(False),
        messages=[{"role": "user", "content": prompts.task_prompt(SPEC)}],
        tools=[metrics, *prompts.answer_tools(SPEC.workflow)],
    )


def backend_answers(base_url: str, count: int) -> list[Any]:
    async def main() -> list[Any]:
        backend = OpenAIBackend(base_url=base_url, api_key=SECRET)
        out: list[Any] = []
        try:
            with anyio.fail_after(30):
                for _ in range(count):
                    try:
                        out.append(await backend.create(chat_request()))
                    except Exception as exc:
                        out.append(exc)
        finally:
            await backend.aclose()
        return out

    return anyio.run(main)


def test_the_openai_backend_maps_errors_onto_the_backend_tree():
    faults = [
        FakeFault.rate_limited(0.25),
        FakeFault(500, "server_error"),
        FakeFault.not_json(),
        FakeFault.no_content(),  # a Messages answer where a chat completion belongs
        FakeFault(400, "invalid_request_error"),
    ]
    with FakeMessagesServer("careful", faults=faults) as server:
        limited, failed, not_json, wrong_shape, bad_request, answered = backend_answers(f"{server.base_url}/v1", 6)
        sent = server.requests[-1]
    assert isinstance(limited, ModelRetryable) and limited.status == 429 and limited.retry_after_s == 0.25
    assert isinstance(failed, ModelRetryable) and failed.status == 500
    assert isinstance(not_json, ModelMalformed) and isinstance(wrong_shape, ModelMalformed)
    assert isinstance(bad_request, ModelUnavailable) and "400" in str(bad_request)
    assert answered.stop_reason == "tool_use" and answered.tool_uses[0]["name"] == "get_interface_metrics"
    assert answered.usage.input_tokens > 0
    assert sent["model"] == "gpt-test"  # the provider prefix is ours, not the server's
    assert server.state.api_keys[0] == SECRET


def test_a_lost_connection_is_retryable():
    with FakeMessagesServer("careful") as server:
        url = f"{server.base_url}/v1"
    (lost,) = backend_answers(url, 1)  # the server is gone: nothing listens there
    assert isinstance(lost, ModelRetryable) and lost.error_type == "connection_error"


def test_parallel_tool_calls_and_finish_reasons_map_to_messages():
    response = {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "x", "arguments": '{"k": 1}'}},
                        {"id": "b", "type": "function", "function": {"name": "y", "arguments": "{}"}},
                    ],
                },
                "finish_reason": "stop",  # what some servers say with tool calls
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3},
    }
    message = openai_wire.chat_response_to_messages(response)
    assert [b["id"] for b in message["content"]] == ["a", "b"] and message["stop_reason"] == "tool_use"
    assert message["usage"] == {"input_tokens": 7, "output_tokens": 3}
    length = {**response, "choices": [{"message": {"content": "cut"}, "finish_reason": "length"}]}
    assert openai_wire.chat_response_to_messages(length)["stop_reason"] == "max_tokens"
    # Both results of the parallel calls go back as tool messages, an error marked as such.
    chat = openai_wire.messages_request_to_chat(
        {
            "model": "m",
            "system": "s",
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": message["content"]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": '{"ok": true}'},
                        {"type": "tool_result", "tool_use_id": "b", "content": "timeout", "is_error": True},
                    ],
                },
            ],
            "tools": [],
        }
    )
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    assert chat["messages"][4]["content"] == "ERROR: timeout"
    with pytest.raises(openai_wire.WireError):
        openai_wire.chat_response_to_messages({"choices": []})


def llm_session(tmp_path: Path, profile: Path, config: LLMConfig, specs: list[TaskSpec], name: str = "s") -> Any:
    plan = SessionPlan(
        profile=profile,
        profile_name=profile.stem,
        agent=config.label,
        tasks=tuple(specs),
        out_dir=tmp_path / name,
        llm=config,
    )

    async def main() -> Any:
        with anyio.fail_after(120):
            return await run_session(plan, WORLD)

    result = anyio.run(main)
    assert result.error is None, result.error
    return result.records, plan.out_dir


@pytest.mark.slow
def test_the_llm_agent_on_openai_retries_429_and_500_records_and_replays_and_keeps_the_key(tmp_path, monkeypatch):
    specs = [TaskSpec(i, w, DEVICE, f"task-o-{i}") for i, w in enumerate(["interface_check", "open_incident"])]
    profile = write_profile(tmp_path, FIRST_CALLS_ERROR, "first_errors.toml")
    faults = [FakeFault.rate_limited(0.05), FakeFault(500, "server_error")]
    with FakeMessagesServer("careful", faults=faults) as server:
        config = LLMConfig(
            model="openai:local-model", base_url=f"{server.base_url}/v1", record_dir=tmp_path / "rec", price=(1.0, 2.0)
        )
        records, out = llm_session(tmp_path, profile, config, specs, "live")
    assert [r.outcome for r in records] == ["recovered", "success"]
    assert records[0].model_calls == 2 + 4  # the 429, the 500; a call, its two retries (two errors), the answer
    assert records[0].cost_usd == round(
        cost_usd("x", records[0].input_tokens, records[0].output_tokens, (1.0, 2.0)) or 0, 6
    )
    chats = [s for s in read_spans(out / "client-spans.jsonl") if s.name == "chat openai:local-model"]
    assert chats and {s.attributes[names.GEN_AI_PROVIDER_NAME] for s in chats} == {"openai"}
    assert [s.attributes.get(names.ERROR_TYPE) for s in chats[:2]] == ["rate_limit_error", "server_error"]
    # No server now, no key: the recording answers, and the outcomes are the same.
    monkeypatch.delenv("OPENAI_API_KEY")
    replayed, _ = llm_session(
        tmp_path, profile, LLMConfig(model="openai:local-model", replay_dir=tmp_path / "rec"), specs, "replay"
    )
    assert [(r.outcome, r.model_calls) for r in replayed] == [(r.outcome, r.model_calls) for r in records]
    for path in [*out.rglob("*"), *(tmp_path / "rec").rglob("*")]:
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_model_options_are_checked_before_any_work(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(UsageError, match="needs OPENAI_API_KEY, or --llm-base-url"):
        check_config(LLMConfig(model="openai:gpt-4o"))
    check_config(LLMConfig(model="openai:llama3", base_url="http://127.0.0.1:11434/v1"))  # a local server: no key
    check_config(LLMConfig(model="openai:fake-careful"))
    with pytest.raises(UsageError, match="give the model's name"):
        check_config(LLMConfig(model="openai:"))
    assert parse_price("2.5,10") == (2.5, 10.0) and parse_price("0,0") == (0.0, 0.0)
    for bad in ("1", "a,b", "-1,2", "inf,1"):
        with pytest.raises(UsageError, match="--llm-price"):
            parse_price(bad)
    assert cost_usd("openai:gpt-4o", 1_000_000, 0) == 2.5 and cost_usd("openai:unknown", 1, 1) is None


def external_session(tmp_path: Path, profile: Path, command: list[str], name: str) -> Any:
    specs = tuple(
        TaskSpec(i, w, DEVICE, f"task-e-{i}") for i, w in enumerate(["interface_check", "maintenance_roundtrip"])
    )
    plan = SessionPlan(
        profile=profile,
        profile_name=profile.stem,
        agent=f"cmd:{name}",
        tasks=specs,
        out_dir=tmp_path / name,
        external=ExternalConfig(name, tuple(command), 90.0),
    )

    async def main() -> Any:
        with anyio.fail_after(240):
            return await run_session(plan, WORLD)

    result = anyio.run(main)
    assert result.error is None, result.error
    return result.records


@pytest.mark.slow
def test_the_openai_example_agent_is_judged_through_real_faults_over_http_and_stdio(tmp_path, fake_llm, monkeypatch):
    profile = write_profile(tmp_path, FIRST_CALLS_ERROR, "first_errors.toml")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm)  # what the example agent's SDK reads
    monkeypatch.setenv("MCPFAULT_MODEL", "fake-careful")
    over_http = external_session(tmp_path, profile, [PYTHON, OPENAI_AGENT], "http")
    over_stdio = external_session(tmp_path, profile, [PYTHON, OPENAI_AGENT, "--via", "command"], "stdio")
    for records in (over_http, over_stdio):
        assert [r.outcome for r in records] == ["recovered", "success"]  # the careful model retried the failed call
        assert records[0].fault_types == ("error",) and records[0].retries >= 1
    monkeypatch.setenv("MCPFAULT_MODEL", "fake-gives-up")
    gave_up = external_session(tmp_path, profile, [PYTHON, OPENAI_AGENT], "gives-up")
    assert gave_up[0].outcome == "failed_detected" and gave_up[0].failure == "agent_reported_failure"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
