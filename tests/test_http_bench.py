"""The agent benchmark over Streamable HTTP: real proxies (the bridge) in front of real mock servers.

What each policy does with HTTP's own failures, judged end to end and read back off the trace: the
resilient agent waits what Retry-After says, starts a new session after a 404 for its session and
re-issues a request whose stream was cut; naive does none of it. A bench over HTTP is as reproducible
as one over stdio: the same seed gives the same outcome counts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpfault.analysis import traces
from mcpfault.analysis.records import TaskRecord, read_records
from mcpfault.analysis.summary import summarize
from mcpfault.harness.agents.tasks import TaskSpec, plan_tasks
from mcpfault.harness.bench import BenchConfig, plan_sessions, run_bench
from mcpfault.harness.client import Era
from mcpfault.harness.session import SessionPlan, SessionResult, run_session
from mcpfault.mock.world import World
from mcpfault.protocol.jsonlines import read_jsonl
from mcpfault.telemetry import names
from mcpfault.telemetry.tracing import SpanView
from tests.conftest import write_profile

pytestmark = pytest.mark.slow
WORLD = World.generate(0)


def triage_tasks(count: int) -> tuple[TaskSpec, ...]:
    return tuple(t for t in plan_tasks(WORLD, 40, 0) if t.workflow == "site_triage")[:count]


def run_http(
    tmp_path: Path, profile_text: str, agent: str, tasks: tuple[TaskSpec, ...], era: Era = "legacy"
) -> SessionResult:
    tmp_path.mkdir(parents=True, exist_ok=True)
    plan = SessionPlan(
        profile=write_profile(tmp_path, profile_text),
        profile_name="profile",
        agent=agent,
        tasks=tasks,
        out_dir=tmp_path / agent,
        transport="http",
        era=era,
        deadline_s=2.0,
    )

    async def main() -> SessionResult:
        with anyio.fail_after(90):
            return await run_session(plan, WORLD)

    result: SessionResult = anyio.run(main)
    assert result.error is None, result.error
    return result


def client_spans(result: SessionResult) -> list[SpanView]:
    return sorted(traces.read_session_spans(result.plan.out_dir).client, key=lambda s: s.start_unix_nano)


def task_span(spans: list[SpanView], index: int) -> SpanView:
    return next(s for s in spans if s.attributes.get(names.TASK_INDEX) == index)


def attempts_of(spans: list[SpanView], task: SpanView) -> list[SpanView]:
    """The task's requests, in the order they were sent (tools/call and any handshake)."""
    return [s for s in spans if s.parent_span_id == task.span_id and names.MCP_METHOD_NAME in s.attributes]


def failed(spans: list[SpanView], failure: str) -> list[SpanView]:
    return [s for s in spans if s.attributes.get(names.FAILURE) == failure]


# Every fault fires once, on the third tools/call of the session (after two let through).
def once(fault: str) -> str:
    return f'[[faults]]\nname = "once"\n{fault}\nafter = 2\nlimit = 1\n'


def test_resilient_waits_what_retry_after_says_and_recovers(tmp_path: Path) -> None:
    profile = once('type = "http_status"\nstatus = 503\nretry_after_s = 1')
    result = run_http(tmp_path, profile, "resilient", triage_tasks(1))
    (record,) = result.records
    assert record.outcome == "recovered" and record.transport == "http"
    assert "http_status" in record.affected_types
    spans = client_spans(result)
    calls = attempts_of(spans, task_span(spans, record.task_index))
    (refused,) = failed(calls, "http_status")
    retry = calls[calls.index(refused) + 1]
    # The next try waited the server's second, not the 10-200 ms of the agent's own backoff.
    assert retry.attributes[names.ATTEMPT] == 2 and retry.attributes[names.BACKOFF_S] == pytest.approx(1.0)
    assert retry.attributes[names.NETWORK_TRANSPORT] == names.NETWORK_TRANSPORT_TCP
    assert names.FAILURE not in retry.attributes
    assert retry.start_unix_nano - refused.end_unix_nano >= 0.95e9


def test_naive_fails_on_the_same_503(tmp_path: Path) -> None:
    profile = once('type = "http_status"\nstatus = 503\nretry_after_s = 1')
    (record,) = run_http(tmp_path, profile, "naive", triage_tasks(1)).records
    assert record.outcome == "failed_detected" and record.failure == "http_status"


def test_resilient_starts_a_new_session_after_a_404_and_recovers(tmp_path: Path) -> None:
    profile = once('type = "session_expired"')
    result = run_http(tmp_path, profile, "resilient", triage_tasks(2))
    # A new session gets a new engine (seeded from the profile alone), so the rule may fire in it again.
    assert result.records[0].outcome == "recovered"
    assert all(r.outcome in ("success", "recovered") for r in result.records)
    spans = client_spans(result)
    calls = attempts_of(spans, task_span(spans, 0))
    lost = failed(calls, "session_lost")[0]
    after = calls[calls.index(lost) + 1 :]
    # In the trace: the 404, then a new handshake under the same task, then the call again.
    assert after[0].attributes[names.MCP_METHOD_NAME] == "initialize" and names.FAILURE not in after[0].attributes
    assert after[1].attributes[names.MCP_METHOD_NAME] == "tools/call" and after[1].attributes[names.ATTEMPT] == 2
    # The proxy saw the lost session's last request, and the new session's handshake.
    events = read_jsonl(result.plan.out_dir / "events.jsonl", strict=True)
    assert sum(1 for e in events if e.get("method") == "initialize") >= 2


def test_a_lost_session_stays_lost_for_naive(tmp_path: Path) -> None:
    profile = once('type = "session_expired"')
    result = run_http(tmp_path, profile, "naive", triage_tasks(2))
    # It never starts a new session: every later request on the old one gets 404 too.
    assert [(r.outcome, r.failure) for r in result.records] == [("failed_detected", "session_lost")] * 2
    # ... and the proxy records each of them: the fault's 404, then the lost session's.
    events = read_jsonl(result.plan.out_dir / "events.jsonl", strict=True)
    lost = [e for e in events if e.get("client_received") == "session_expired"]
    assert [e["fault_type"] for e in lost] == ["session_expired", None]
    assert all(e["upstream_contacted"] is False and e["era"] == "legacy" for e in lost)


def test_resilient_reissues_a_cut_stream_with_a_new_id(tmp_path: Path) -> None:
    profile = once('type = "stream_cut"')
    result = run_http(tmp_path, profile, "resilient", triage_tasks(1), era="modern")
    (record,) = result.records
    assert record.outcome == "recovered" and "stream_cut" in record.affected_types
    spans = client_spans(result)
    calls = attempts_of(spans, task_span(spans, 0))
    (cut,) = failed(calls, "stream_cut")
    again = calls[calls.index(cut) + 1]
    assert again.attributes[names.ATTEMPT] == 2 and names.FAILURE not in again.attributes
    assert again.attributes[names.JSONRPC_REQUEST_ID] != cut.attributes[names.JSONRPC_REQUEST_ID]
    assert again.attributes.get(names.GEN_AI_TOOL_NAME) == cut.attributes.get(names.GEN_AI_TOOL_NAME)
    # The proxy's span of the cut request says what the client got: a cut stream.
    proxy = traces.read_session_spans(result.plan.out_dir).proxy
    assert any(s.attributes.get(names.JSONRPC_REQUEST_ID) == cut.attributes[names.JSONRPC_REQUEST_ID] for s in proxy)


def test_a_write_whose_answer_was_lost_goes_again_only_with_its_key(tmp_path: Path) -> None:
    """The connection drops after the server created the incident: resilient re-sends it under its
    idempotency key (the server returns the same incident), retry-only blindly (a duplicate)."""
    profile = '[[faults]]\ntype = "reset"\nmode = "after"\ntools = ["open_incident"]\nlimit = 1\n'
    device = WORLD.device_ids()[0]
    tasks = (TaskSpec(0, "open_incident", device, "task-w-0"),)
    resilient = run_http(tmp_path / "r", profile, "resilient", tasks).records[0]
    assert resilient.outcome == "recovered" and resilient.duplicates == 0
    blind = run_http(tmp_path / "b", profile, "retry-only", tasks).records[0]
    assert blind.outcome == "failed_silent" and blind.duplicates == 1


# Faults that do not depend on timing (no latency near the deadline): the outcome counts of a bench
# with them depend on the seed alone.
HTTP_FAULTS = """
seed = 5
[[faults]]
type = "http_status"
status = 503
retry_after_s = 0
probability = 0.1
[[faults]]
type = "stream_cut"
probability = 0.1
[[faults]]
type = "session_expired"
probability = 0.04
[[faults]]
type = "reset"
mode = "after"
tools = ["open_*", "set_*"]
probability = 0.2
"""


def bench_counts(tmp_path: Path, profile: Path, era: Era) -> tuple[Counter[tuple[str, str, str]], list[TaskRecord]]:
    config = BenchConfig(
        profiles=(profile,),
        agents=("naive", "retry-only", "resilient"),
        out_dir=tmp_path,
        tasks=12,
        session_tasks=6,
        jobs=3,
        deadline_s=2.0,
        transports=("http",),
        era=era,
    )
    plans = plan_sessions(config, WORLD)

    async def main() -> Any:
        with anyio.fail_after(240):
            return await run_bench(config, plans, WORLD, lambda: None)

    result = anyio.run(main)
    assert not result.errors, result.errors
    return Counter((r.profile, r.agent, r.outcome) for r in result.records), result.records


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_bench_over_http_gives_the_same_counts_for_the_same_seed(tmp_path: Path, era: Era) -> None:
    profile = write_profile(tmp_path, HTTP_FAULTS, "http_faults.toml")
    first, records = bench_counts(tmp_path / "one", profile, era)
    second, _ = bench_counts(tmp_path / "two", profile, era)
    assert first == second
    assert {r.transport for r in records} == {"http"} and len(records) == 36
    assert any(r.affected_types for r in records), "the faults reached no task: the check would be empty"
    # What each policy does with HTTP faults differs, and the matrix shows it.
    correct = Counter(r.agent for r in records if r.outcome in ("success", "recovered"))
    assert correct["resilient"] > correct["naive"]


def test_bench_both_reports_a_row_per_transport(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "mcpfault", "bench", "--transport", "both", "--profiles", "error"]
    command += ["--agents", "naive,resilient", "--tasks", "4", "--session-tasks", "4", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    records = list(read_records(out / "records.jsonl"))
    # The http profile joins the matrix over HTTP only: behind the stdio proxy its rules never fire.
    assert Counter(r.transport for r in records) == {"stdio": 8, "http": 16}
    summary = summarize(records)
    assert summary.profiles == ("error", "error (http)", "http (http)")
    # Seed 0 meets HTTP faults in these 4 tasks: the report says what each agent did with them.
    http_section = (out / "report.md").read_text().split("## HTTP faults, by agent", 1)[1]
    assert re.search(r"^\| http_status +\| naive +\| +1 \| +0 \| +1 \|", http_section, re.M)
    assert re.search(r"^\| http_status +\| resilient +\| +1 \| +1 \| +0 \|", http_section, re.M)
    report = (out / "report.md").read_text()
    assert re.search(r"^\| error \(http\) +\|", report, re.M) and re.search(r"^\| error +\|", report, re.M)
    assert (out / "sessions" / "http" / "error" / "naive" / "s000" / "events.jsonl").exists()
