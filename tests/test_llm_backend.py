"""The Anthropic backend against a real HTTP server speaking the Messages API, and the pieces around it."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mcpfault.harness.agents.llm import fakemodel, prices, prompts, recording
from mcpfault.harness.agents.llm.anthropic_backend import AnthropicBackend
from mcpfault.harness.agents.llm.backend import (
    ChatRequest,
    ChatResponse,
    ModelMalformed,
    ModelRetryable,
    ModelUnavailable,
    ReplayMissing,
    parse_response,
    retry_after,
)
from mcpfault.harness.agents.llm.fakemodel import FakeFault, FakeMessagesServer
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.protocol.jsonlines import read_jsonl

SPEC = TaskSpec(0, "interface_check", "dev-x", "task-t-0")
DEVICE_TOOL = {
    "name": "get_interface_metrics",
    "description": "Metrics",
    "input_schema": {"type": "object", "properties": {"device_id": {"type": "string"}}},
}


def request(key: str = "task0000/turn01/try1", messages: list | None = None) -> ChatRequest:
    return ChatRequest(
        model="claude-test",
        system=prompts.system_prompt(False),
        messages=messages or [{"role": "user", "content": prompts.task_prompt(SPEC)}],
        tools=[DEVICE_TOOL, *prompts.answer_tools(SPEC.workflow)],
        key=key,
    )


def exchange(server: FakeMessagesServer, count: int, req: ChatRequest | None = None) -> list:
    async def main() -> list:
        backend = AnthropicBackend(base_url=server.base_url, api_key="sk-test-not-secret")
        out: list = []
        try:
            with anyio.fail_after(20):
                for _ in range(count):
                    try:
                        out.append(await backend.create(req or request()))
                    except Exception as exc:
                        out.append(exc)
        finally:
            await backend.aclose()
        return out

    return anyio.run(main)


def test_the_sdk_reads_a_tool_use_turn_off_the_wire():
    with FakeMessagesServer("recovers") as server:
        (response,) = exchange(server, 1)
    assert isinstance(response, ChatResponse)
    assert response.stop_reason == "tool_use" and response.model == "claude-test"
    (use,) = response.tool_uses
    assert use["name"] == "get_interface_metrics" and use["input"] == {"device_id": "dev-x"}
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    body = server.requests[0]
    assert body["model"] == "claude-test" and body["tools"][0]["name"] == "get_interface_metrics"
    assert server.state.api_keys == ["sk-test-not-secret"]  # the SDK sent the key; the server only checks it came


def test_rate_limits_and_overloads_carry_the_servers_retry_after():
    faults = [FakeFault.rate_limited(0.25), FakeFault.overloaded(1.5), FakeFault(500, "api_error")]
    with FakeMessagesServer("recovers", faults=faults) as server:
        limited, overloaded, internal, ok = exchange(server, 4)
    assert isinstance(limited, ModelRetryable) and limited.status == 429 and limited.retry_after_s == 0.25
    assert limited.error_type == "rate_limit_error"
    assert isinstance(overloaded, ModelRetryable) and overloaded.status == 529 and overloaded.retry_after_s == 1.5
    assert overloaded.error_type == "overloaded_error"
    assert isinstance(internal, ModelRetryable) and internal.retry_after_s is None
    assert isinstance(ok, ChatResponse)


def test_malformed_answers_and_fatal_errors_are_told_apart():
    faults = [FakeFault.not_json(), FakeFault.no_content(), FakeFault(400, "invalid_request_error")]
    with FakeMessagesServer("recovers", faults=faults) as server:
        not_json, no_content, bad_request = exchange(server, 3)
    assert isinstance(not_json, ModelMalformed) and "not JSON" in str(not_json)
    assert isinstance(no_content, ModelMalformed) and "content blocks" in str(no_content)
    assert isinstance(bad_request, ModelUnavailable) and "400 invalid_request_error" in str(bad_request)


def test_parse_response_names_what_is_wrong():
    good = {
        "id": "m",
        "type": "message",
        "model": "x",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 2},
    }
    assert parse_response(good).usage.output_tokens == 2
    for broken, words in [
        ([], "JSON list"),
        ({**good, "type": "error"}, "type 'error'"),
        ({**good, "stop_reason": "done"}, "stop_reason"),
        ({**good, "usage": {}}, "token counts"),
        ({**good, "content": [{"type": "tool_use", "name": "x"}]}, "tool_use block"),
    ]:
        with pytest.raises(ModelMalformed, match=words):
            parse_response(broken)


def test_retry_after_headers():
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after-ms": "150", "retry-after": "9"}) == 0.15
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_after({}) is None


def test_prices_come_from_one_table():
    assert prices.cost_usd("claude-sonnet-4-5-20250929", 1_000_000, 0) == pytest.approx(3.0)
    assert prices.cost_usd("claude-haiku-4-5", 0, 1_000_000) == pytest.approx(5.0)
    assert prices.cost_usd("claude-opus-4-1", 1000, 1000) == pytest.approx(0.09)
    assert prices.cost_usd("some-other-model", 1000, 1000) is None
    assert prices.cost_usd("fake-careful", 1_000_000, 0) == pytest.approx(3.0)  # priced like the default model


def conversation(*steps: tuple[str, dict, bool, object], system: str = "") -> dict:
    """A Messages API request body: the task prompt, then each (tool, input, ok, result) as a turn."""
    messages: list[dict] = [{"role": "user", "content": prompts.task_prompt(SPEC)}]
    for number, (tool, arguments, ok, result) in enumerate(steps):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{number}", "name": tool, "input": arguments}],
            }
        )
        block = {
            "type": "tool_result",
            "tool_use_id": f"t{number}",
            "content": result if not ok else json.dumps(result),
        }
        if not ok:
            block["is_error"] = True
        messages.append({"role": "user", "content": [block]})
    return {"model": "m", "system": system, "messages": messages, "tools": request().body()["tools"]}


def next_block(behaviour: str, body: dict) -> dict:
    content = fakemodel.reply(behaviour, body)["content"]
    return next(b for b in content if b["type"] == "tool_use")


METRICS = {"interfaces": [{"name": "eth0", "oper_status": "up", "utilization_pct": 91.0, "errors_per_min": 0}]}


def test_scripted_behaviours_answer_from_the_conversation():
    first = next_block("recovers", conversation())
    assert first["name"] == "get_interface_metrics" and first["input"] == {"device_id": "dev-x"}
    done = next_block("recovers", conversation(("get_interface_metrics", {"device_id": "dev-x"}, True, METRICS)))
    assert done == {**done, "name": "submit_answer", "input": {"hot_interfaces": ["eth0"]}}
    failed = ("get_interface_metrics", {"device_id": "dev-x"}, False, "timeout: no answer in 0.5s")
    assert next_block("recovers", conversation(failed))["name"] == "get_interface_metrics"  # tries again
    gave_up = next_block("gives-up", conversation(failed))
    assert gave_up["name"] == "report_failure" and "timeout" in gave_up["input"]["reason"]
    # Four failures in a row: even a model that retries stops.
    assert next_block("recovers", conversation(*[failed] * 4))["name"] == "report_failure"
    renamed = {"interfaces": [{"name": "eth0", "oper_status": "up", "util_pct": 91.0, "errors_per_min": 0}]}
    step = ("get_interface_metrics", {"device_id": "dev-x"}, True, renamed)
    assert next_block("recovers", conversation(step))["input"] == {"hot_interfaces": ["eth0"]}
    assert next_block("trusting", conversation(step))["input"] == {"hot_interfaces": []}  # silently wrong


class StubBackend:
    name = "stub"

    def __init__(self, outcomes: list) -> None:
        self.outcomes = outcomes

    async def create(self, request: ChatRequest) -> ChatResponse:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return parse_response(outcome)

    async def aclose(self) -> None:
        pass


def test_a_recording_replays_answers_and_errors_and_refuses_what_it_does_not_hold(tmp_path: Path):
    answer = fakemodel.reply("recovers", request().body())
    limited = ModelRetryable("429", status=429, error_type="rate_limit_error", retry_after_s=3.0)
    path = recording.session_file(tmp_path, "baseline", "llm-claude-test", 0)
    first, second = request("task0000/turn01/try1"), request("task0000/turn01/try2")

    async def record() -> None:
        backend = recording.RecordingBackend(StubBackend([limited, answer]), path)
        with pytest.raises(ModelRetryable):
            await backend.create(first)
        await backend.create(second)
        await backend.aclose()

    anyio.run(record)
    lines = read_jsonl(path, strict=True)
    assert [line["key"] for line in lines] == ["task0000/turn01/try1", "task0000/turn01/try2"]
    assert lines[0]["error"]["error_type"] == "rate_limit_error" and lines[1]["response"] == answer
    assert "sk-" not in path.read_text()

    async def replay() -> list:
        backend = recording.ReplayBackend(tmp_path, path)
        out: list = []
        for req in (
            first,
            second,
            request("task0000/turn02/try1"),
            request("task0000/turn01/try2", [{"role": "user", "content": "other"}]),
        ):
            try:
                out.append(await backend.create(req))
            except Exception as exc:
                out.append(exc)
        return out

    error, response, missing, diverged = anyio.run(replay)
    assert isinstance(error, ModelRetryable) and error.retry_after_s == 0.0  # a replay does not wait
    assert isinstance(response, ChatResponse) and response.raw == answer
    assert (
        isinstance(missing, ReplayMissing) and str(tmp_path) in str(missing) and "task0000/turn02/try1" in str(missing)
    )
    assert isinstance(diverged, ReplayMissing) and "different request" in str(diverged)

    async def no_file() -> Exception:
        backend = recording.ReplayBackend(tmp_path, recording.session_file(tmp_path, "timeout", "llm-x", 3))
        try:
            await backend.create(first)
        except ReplayMissing as exc:
            return exc
        raise AssertionError("replayed from nothing")

    problem = str(anyio.run(no_file))
    assert str(tmp_path) in problem and "timeout/llm-x/s003.jsonl" in problem and "task0000/turn01/try1" in problem
