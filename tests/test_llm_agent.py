"""The llm agent end to end: the anthropic SDK -> a real Messages API server on 127.0.0.1 (scripted model
behaviours) and the real proxy -> the real mock server, judged by the same ground truth as the scripted agents."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcpfault.harness.agents.llm.agent import LLMConfig
from mcpfault.harness.agents.llm.fakemodel import FakeFault, FakeMessagesServer
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.session import SessionPlan, run_session
from mcpfault.mock.world import World
from mcpfault.telemetry import names
from mcpfault.telemetry.tracing import read_spans
from tests.conftest import PROFILES, write_profile

pytestmark = pytest.mark.slow
WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]
SECRET = "sk-ant-test-0123456789-DO-NOT-LEAK"
LOST_FIRST_INCIDENT = '[[faults]]\ntype = "timeout"\ntools = ["open_incident"]\nlimit = 1\n'
STALE_SECOND_READ = '[[faults]]\ntype = "stale"\ntools = ["get_device_status"]\nafter = 1\nlimit = 1\n'
FIRST_CALL_ERRORS = '[[faults]]\ntype = "error"\nlimit = 1\n'
RENAMED = '[[faults]]\ntype = "schema_drift"\nrename_fields = { status = "state", utilization_pct = "util_pct" }\n'


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)


def llm_session(
    tmp_path: Path,
    profile: Path,
    specs: list[TaskSpec],
    behaviour: str,
    *,
    faults: list[FakeFault] | None = None,
    always: FakeFault | None = None,
    hints: bool = False,
    name: str = "s",
):
    with FakeMessagesServer(behaviour, faults=faults or [], always=always) as server:
        config = LLMConfig(model="claude-test", hints=hints, base_url=server.base_url, max_retries=3)
        plan = SessionPlan(
            profile=profile,
            profile_name=profile.stem,
            agent=config.label,
            tasks=tuple(specs),
            out_dir=tmp_path / name,
            llm=config,
        )

        async def main():
            with anyio.fail_after(60):
                return await run_session(plan, WORLD)

        result = anyio.run(main)
    assert result.error is None, result.error
    return result.records, plan.out_dir, server


def incidents(count: int) -> list[TaskSpec]:
    return [TaskSpec(i, "open_incident", DEVICE, f"task-t-{i}") for i in range(count)]


def roundtrips() -> list[TaskSpec]:
    return [TaskSpec(i, "maintenance_roundtrip", DEVICE, f"task-t-{i}") for i in range(2)]


def test_a_model_that_retries_with_an_idempotency_key_recovers_a_lost_write(tmp_path):
    records, _, _ = llm_session(tmp_path, write_profile(tmp_path, LOST_FIRST_INCIDENT), incidents(1), "recovers")
    (record,) = records
    assert record.outcome == "recovered" and record.duplicates == 0 and record.retries == 1
    assert record.fault_types == ("timeout",)
    assert record.model == "claude-test" and record.model_calls == 3  # call, call again, answer
    assert record.input_tokens > 0 and record.output_tokens > 0 and record.cost_usd is None  # no price for it


def test_a_model_that_repeats_a_non_idempotent_write_leaves_a_duplicate(tmp_path):
    records, _, _ = llm_session(tmp_path, write_profile(tmp_path, LOST_FIRST_INCIDENT), incidents(2), "repeats-writes")
    assert records[0].outcome == "failed_silent" and records[0].duplicates == 1 and records[0].retries == 1
    assert "2 incidents on the server" in records[0].detail
    assert records[1].outcome == "success"


def test_told_the_connection_is_unreliable_the_careful_model_uses_a_key(tmp_path):
    profile = write_profile(tmp_path, LOST_FIRST_INCIDENT)
    plain, _, _ = llm_session(tmp_path, profile, incidents(1), "careful", name="plain")
    hinted, _, server = llm_session(tmp_path, profile, incidents(1), "careful", hints=True, name="hinted")
    assert plain[0].outcome == "failed_silent" and plain[0].duplicates == 1
    assert hinted[0].outcome == "recovered" and hinted[0].duplicates == 0
    assert "unreliable" in server.requests[0]["system"] and "as_of" in server.requests[0]["system"]


def test_a_model_that_gives_up_is_failed_detected(tmp_path):
    records, _, server = llm_session(tmp_path, write_profile(tmp_path, FIRST_CALL_ERRORS), incidents(2), "gives-up")
    assert records[0].outcome == "failed_detected" and records[0].failure == "model_gave_up"
    assert records[0].fault_types == ("error",)
    assert records[1].outcome == "success"
    # The failure reached the model as an is_error tool result carrying its text.
    results = [
        block
        for body in server.requests
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert results[0]["is_error"] is True and "JSON-RPC error -32603" in results[0]["content"]


def test_a_model_that_trusts_a_stale_read_answers_wrongly_and_one_that_checks_as_of_does_not(tmp_path):
    profile = write_profile(tmp_path, STALE_SECOND_READ)
    trusting, _, _ = llm_session(tmp_path, profile, roundtrips(), "trusting", name="trusting")
    assert [r.outcome for r in trusting] == ["success", "failed_silent"] and trusting[1].fault_types == ("stale",)
    checking, _, _ = llm_session(tmp_path, profile, roundtrips(), "recovers", name="checking")
    assert [r.outcome for r in checking] == ["success", "recovered"]


def test_a_model_that_trusts_renamed_fields_answers_wrongly(tmp_path):
    specs = [TaskSpec(0, "site_triage", WORLD.site_ids()[0], "t0"), TaskSpec(1, "interface_check", DEVICE, "t1")]
    profile = write_profile(tmp_path, RENAMED)
    trusting, _, _ = llm_session(tmp_path, profile, specs, "trusting", name="trusting")
    unhealthy = [d for d in WORLD.device_ids(WORLD.site_ids()[0]) if WORLD.device(d).status != "ok"]
    assert unhealthy  # the world of seed 0 has some, so a wrong answer is possible
    assert trusting[0].outcome == "failed_silent"
    inferring, _, _ = llm_session(tmp_path, profile, specs, "recovers", name="inferring")
    assert inferring[0].outcome == "recovered"


def test_rate_limits_and_overloads_are_retried_and_traced_as_genai_spans(tmp_path):
    faults = [FakeFault.rate_limited(0.05), FakeFault.overloaded(0.05)]
    records, out, server = llm_session(tmp_path, PROFILES / "baseline.toml", incidents(1), "recovers", faults=faults)
    assert records[0].outcome == "success" and records[0].model_calls == 4  # 429, 529, the call, the answer
    spans = read_spans(out / "client-spans.jsonl")
    task = next(s for s in spans if s.attributes.get(names.TASK_INDEX) == 0)
    chats = sorted((s for s in spans if s.name == "chat claude-test"), key=lambda s: s.start_unix_nano)
    assert len(chats) == 4 and all(s.parent_span_id == task.span_id for s in chats)
    assert [s.attributes.get(names.ERROR_TYPE) for s in chats] == ["rate_limit_error", "overloaded_error", None, None]
    assert chats[0].attributes[names.LLM_RETRY_AFTER_S] == 0.05
    ok: dict = dict(chats[2].attributes)
    assert ok[names.GEN_AI_OPERATION_NAME] == "chat" and ok[names.GEN_AI_REQUEST_MODEL] == "claude-test"
    assert ok[names.GEN_AI_USAGE_INPUT_TOKENS] > 0 and ok[names.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    assert list(ok[names.GEN_AI_RESPONSE_FINISH_REASONS]) == ["tool_use"]
    tool_calls = [s for s in spans if s.attributes.get(names.MCP_METHOD_NAME) == "tools/call"]
    assert tool_calls and all(s.parent_span_id == task.span_id for s in tool_calls)
    # The key went to the model API and nowhere else: not into spans, records, recordings or logs.
    assert server.state.api_keys[0] == SECRET
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_a_task_that_cannot_get_the_model_is_failed_detected(tmp_path):
    records, _, _ = llm_session(
        tmp_path, PROFILES / "baseline.toml", incidents(1), "recovers", always=FakeFault.overloaded(0.01)
    )
    assert records[0].outcome == "failed_detected" and records[0].failure == "model_unavailable"
    assert records[0].model_calls == 4 and "529 overloaded_error" in records[0].detail


def test_a_malformed_model_answer_is_failed_detected(tmp_path):
    records, _, _ = llm_session(
        tmp_path, PROFILES / "baseline.toml", incidents(2), "recovers", faults=[FakeFault.no_content()]
    )
    assert records[0].outcome == "failed_detected" and records[0].failure == "model_malformed"
    assert records[1].outcome == "success"
