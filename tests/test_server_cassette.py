"""run/bench --server-cassette: a recorded session replayed under faults, judged without ground truth.

The cassette is recorded for real (the example agent, examples/agents/time_agent.py, on the official SDK
client, through `mcpfault record` against mcp-server-time); the agents are real external processes on the
SDK client, reaching the replay through the harness's gateway and the fault proxy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpfault.protocol.jsonlines import read_jsonl
from tests.test_interop import TIME_SERVER

ROOT = Path(__file__).resolve().parents[1]
MCPFAULT = [sys.executable, "-m", "mcpfault"]
TIME_AGENT = ROOT / "examples" / "agents" / "time_agent.py"
TASK = "What time is it in Paris? Answer with the time the server gives."
# The agent the user recorded: asks the time in Paris, says "done" with it; when the call fails it says
# "failed" (honest) or "done" anyway (a liar: without ground truth both claims stay unjudged or detected).
AGENT = """
import json, os, sys
import anyio
from mcp import Client

async def main() -> None:
    task = json.load(open(os.environ["MCPFAULT_TASK"], encoding="utf-8"))
    assert task["workflow"] == "cassette" and task["answer_schema"] == {"type": "object"}, task
    assert task["instruction"] == sys.argv[2], task["instruction"]
    async with Client(os.environ["MCPFAULT_MCP_URL"], mode="legacy", read_timeout_seconds=10) as client:
        result = await client.call_tool("get_current_time", {"timezone": "Europe/Paris"})
    if result.is_error and sys.argv[1] == "honest":
        answer = {"status": "failed", "reason": "get_current_time failed"}
    else:
        answer = {"status": "done", "answer": {"time": str(result.structured_content)}}
    json.dump(answer, open(os.environ["MCPFAULT_ANSWER"], "w", encoding="utf-8"))

anyio.run(main)
"""
EVERY_CALL_FAILS = '[[faults]]\nname = "broken-time"\ntype = "error"\nmode = "tool"\nprobability = 1.0\n'


@pytest.fixture(scope="module")
def cassette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example agent's own session with mcp-server-time, recorded through `mcpfault record` (as the
    docs do it: the agent starts its server, the recorder in front)."""
    path = tmp_path_factory.mktemp("cassette") / "time.cassette"
    recorder = [*MCPFAULT, "record", "--out", str(path), "--", *TIME_SERVER]
    done = subprocess.run(
        [sys.executable, str(TIME_AGENT), "--", *recorder], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"]["timezone"] == "Europe/Paris"
    return path


def agent_command(tmp_path: Path, behaviour: str) -> str:
    script = tmp_path / "my_agent.py"
    script.write_text(AGENT, encoding="utf-8")
    return f"{sys.executable} {script} {behaviour} {json.dumps(TASK)}"


def mcpfault(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MCPFAULT, *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def records_of(out: Path) -> list[dict[str, Any]]:
    return read_jsonl(out / "records.jsonl")


def run_on(cassette: Path, profile: str, agent_command: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``mcpfault run`` of two tasks of the user's instruction, one external agent, against the cassette."""
    return mcpfault(
        "run",
        "--server-cassette",
        str(cassette),
        "--cassette-task",
        TASK,
        "--profile",
        profile,
        "--tasks",
        "2",
        "--agent",
        "cmd:mine",
        "--agent-command",
        agent_command,
        "--out",
        str(out),
    )


@pytest.mark.slow
def test_a_done_agent_is_unjudged_and_the_report_says_there_is_no_ground_truth(tmp_path: Path, cassette: Path) -> None:
    out = tmp_path / "run"
    done = run_on(cassette, "baseline", agent_command(tmp_path, "honest"), out)
    assert done.returncode == 0, done.stderr
    records = records_of(out)
    assert [r["outcome"] for r in records] == ["unjudged", "unjudged"]
    assert all("time.cassette: no ground truth" in r["no_ground_truth"] for r in records)
    assert all(r["task"] == "cassette" and "Europe/Paris" in r["answer"]["time"] for r in records)
    assert "NO GROUND TRUTH: JUDGED DETECTED VS UNJUDGED ONLY" in done.stdout
    page = (out / "report.html").read_text()
    assert "No ground truth: judged detected vs unjudged only" in page
    assert "correct (95%)" not in page and "silent (95%)" not in page  # no rate of either kind


@pytest.mark.slow
def test_a_failed_agent_is_detected_with_the_faults_it_met(tmp_path: Path, cassette: Path) -> None:
    profile = tmp_path / "broken_time.toml"
    profile.write_text(EVERY_CALL_FAILS, encoding="utf-8")
    out = tmp_path / "run"
    # The example agent, honest when a call fails.
    failed = run_on(cassette, str(profile), f"{sys.executable} {TIME_AGENT}", out)
    assert failed.returncode == 0, failed.stderr
    records = records_of(out)
    assert [r["outcome"] for r in records] == ["failed_detected", "failed_detected"]
    assert {r["failure"] for r in records} == {"agent_reported_failure"}
    assert all(r["affected_types"] == ["error"] for r in records)


@pytest.mark.slow
def test_bench_over_http_counts_detected_and_unjudged_with_no_success_rate(tmp_path: Path, cassette: Path) -> None:
    profile = tmp_path / "broken_time.toml"
    profile.write_text(EVERY_CALL_FAILS, encoding="utf-8")
    out = tmp_path / "bench"
    bench = mcpfault(
        "bench",
        "--server-cassette",
        str(cassette),
        "--cassette-task",
        TASK,
        "--profiles",
        f"baseline,{profile}",
        "--agents",
        "cmd:liar,cmd:honest",
        "--agent-command",
        f"liar={agent_command(tmp_path, 'liar')}",
        "--agent-command",
        f"honest={agent_command(tmp_path, 'honest')}",
        "--tasks",
        "2",
        "--transport",
        "http",
        "--jobs",
        "2",
        "--out",
        str(out),
    )
    assert bench.returncode == 0, bench.stderr
    records = records_of(out)
    outcomes = {(r["profile"], r["agent"], r["outcome"]) for r in records if r["profile"] != "http"}
    assert outcomes == {
        ("baseline", "cmd:liar", "unjudged"),
        ("baseline", "cmd:honest", "unjudged"),
        ("broken_time", "cmd:liar", "unjudged"),  # a lie nobody can catch without ground truth
        ("broken_time", "cmd:honest", "failed_detected"),
    }
    # The http profile joins the matrix over HTTP; its faults are its own, its outcomes still only these two.
    assert {r["outcome"] for r in records if r["profile"] == "http"} <= {"unjudged", "failed_detected"}
    assert {r["transport"] for r in records} == {"http"}
    report = (out / "report.md").read_text()
    assert "**No ground truth: judged detected vs unjudged only.**" in report
    table = [[cell.strip() for cell in line.strip("|").split("|")] for line in report.splitlines() if "|" in line]
    assert ["profile", "agent", "tasks", "detected", "unjudged", "faults seen", "fault types"] in table
    assert ["broken_time (http)", "cmd:honest", "2", "2", "0", "2", "error"] in table
    assert ["broken_time (http)", "cmd:liar", "2", "0", "2", "2", "error"] in table
    assert ["baseline (http)", "cmd:liar", "2", "0", "2", "0", "-"] in table
    counts = report[report.index("## Outcomes") :]  # after the banner, which says there is no rate
    assert "success" not in counts and "silent" not in counts and "%" not in counts
    again = mcpfault("report", "--rejudge", str(out), "--out", str(tmp_path / "rejudged"))
    assert again.returncode == 0, again.stderr

    def verdicts(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        keys = ("profile", "agent", "session", "task_index", "outcome", "failure", "affected_types", "no_ground_truth")
        return sorted(tuple(json.dumps(row.get(k)) for k in keys) for row in rows)

    assert verdicts(records_of(tmp_path / "rejudged")) == verdicts(records)  # judged again from the claims
    assert "NO GROUND TRUTH" in again.stdout
    merged = mcpfault("report", "--merge", str(out), "--out", str(tmp_path / "merged"))
    assert merged.returncode == 0, merged.stderr
    assert "No ground truth" in (tmp_path / "merged" / "report.md").read_text()
    assert not (out / "charts").exists()
    assert "No ground truth" in (out / "report.html").read_text()


@pytest.mark.slow
def test_scripted_policies_and_bad_cassettes_are_refused_before_any_work(tmp_path: Path, cassette: Path) -> None:
    def refused(*args: str) -> str:
        out = tmp_path / "never"
        done = mcpfault("run", "--tasks", "1", "--out", str(out), *args)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert not out.exists()
        return done.stderr

    task = ("--cassette-task", TASK)
    for agent in ("naive", "resilient", "resilient-no-verify"):
        message = refused("--server-cassette", str(cassette), *task, "--agent", agent)
        assert f"agent(s) {agent} run the mock server's task code" in message and "cmd:NAME" in message
        assert "llm" in message
    bench = mcpfault("bench", "--server-cassette", str(cassette), *task, "--agents", "retry-only")
    assert bench.returncode == 2 and "agent(s) retry-only" in bench.stderr
    mine = ("--agent", "cmd:mine", "--agent-command", agent_command(tmp_path, "honest"))
    missing = tmp_path / "missing.cassette"
    assert f"cannot read the cassette {missing}" in refused("--server-cassette", str(missing), *task, *mine)
    not_one = tmp_path / "notes.cassette"
    not_one.write_text('{"hello": 1}\n', encoding="utf-8")
    assert f"{not_one}:1: not a cassette header" in refused("--server-cassette", str(not_one), *task, *mine)
    no_tools = tmp_path / "no_tools.cassette"
    no_tools.write_text(cassette.read_text().splitlines()[0] + "\n", encoding="utf-8")
    assert f"--server-cassette {no_tools}: no tools" in refused("--server-cassette", str(no_tools), *task, *mine)
    modern = refused("--server-cassette", str(cassette), *task, *mine, "--era", "modern")
    assert "recorded in the legacy era" in modern and "--era legacy" in modern
    assert "give --cassette-task TEXT" in refused("--server-cassette", str(cassette), *mine)
    assert "--workflows names the mock's task suite" in refused(
        "--server-cassette", str(cassette), *task, *mine, "--workflows", "site_triage"
    )
    assert "--cassette-task applies with --server-cassette" in refused(*task, *mine)


def claim_record(outcome: Any, **fields: Any) -> Any:
    from mcpfault.analysis.records import TaskRecord

    return TaskRecord(
        profile="p", agent="cmd:mine", session=0, task_index=0, task="cassette", outcome=outcome, **fields
    )


def test_judge_claim_never_gives_success_or_failed_silent() -> None:
    from mcpfault.analysis.judge import TaskRun, judge_claim

    def judged(failure: str | None) -> Any:
        run = TaskRun(0, "cassette", "", "cassette-0", 1.0, 2.0, answer={"x": 1}, failure=failure, detail="why")
        return judge_claim(run, None, profile="p", agent="cmd:mine", session=0, why_no_truth="server cassette c")

    done, failed = judged(None), judged("agent_timeout")
    assert (done.outcome, done.failure, done.no_ground_truth) == ("unjudged", None, "server cassette c")
    assert (failed.outcome, failed.failure, failed.detail) == ("failed_detected", "agent_timeout", "why")
    assert done.as_dict()["no_ground_truth"] == "server cassette c"
    assert "no_ground_truth" not in claim_record("success").as_dict()  # a judged record stays as it was


def test_no_rate_counts_an_unjudged_task() -> None:
    from mcpfault.analysis.summary import summarize
    from mcpfault.harness.metrics_push import record_bench_metrics
    from mcpfault.harness.reliability import reliability_points
    from mcpfault.telemetry import names
    from mcpfault.telemetry.metrics import HarnessMetrics

    records = [claim_record("unjudged", no_ground_truth="server cassette c")]
    for rate in (summarize, reliability_points):
        with pytest.raises(ValueError, match="judged without ground truth"):
            rate(records)
    metrics = HarnessMetrics()
    record_bench_metrics(records, metrics)
    labels = {"profile": "p", "agent": "cmd:mine"}
    outcome = metrics.registry.get_sample_value(names.TASK_OUTCOMES_TOTAL, {**labels, "outcome": "unjudged"})
    assert outcome == 1  # pushed as what it is
    assert metrics.registry.get_sample_value(names.SILENT_FAILURES_TOTAL, labels) is None  # not even a 0


def test_the_task_file_of_a_cassette_task_carries_the_users_instruction() -> None:
    from mcpfault.harness.agents.external import task_document
    from mcpfault.harness.agents.tasks import cassette_tasks

    spec = cassette_tasks(3, TASK)[2]
    document = task_document(spec)
    assert (document["workflow"], document["task_id"], document["instruction"]) == ("cassette", "cassette-2", TASK)
    assert document["answer_schema"] == {"type": "object"}
    assert "network" not in document["system_prompt"]  # the mock's world is not the recorded server's


@pytest.mark.slow
def test_the_llm_agent_gets_the_users_instruction_and_the_recorded_tools(tmp_path: Path, cassette: Path) -> None:
    import os

    from mcpfault.harness.agents.llm.fakemodel import FakeMessagesServer

    out = tmp_path / "run"
    with FakeMessagesServer("careful") as model:
        done = subprocess.run(
            [
                *MCPFAULT,
                "run",
                "--server-cassette",
                str(cassette),
                "--cassette-task",
                TASK,
                "--agent",
                "llm",
                "--model",
                "openai:local-model",  # any name: the base URL is the scripted model's
                "--llm-base-url",
                f"{model.base_url}/v1",
                "--tasks",
                "1",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            env={**os.environ, "OPENAI_API_KEY": "not-a-real-key"},
        )
        assert done.returncode == 0, done.stderr
        first = model.requests[0]
    text = json.dumps(first)
    assert TASK in text and "get_current_time" in text and "network" not in text  # no word of the mock
    # The scripted fake model knows only the mock's tasks: it stops without an answer, which is detected.
    (record,) = records_of(out)
    assert (record["outcome"], record["failure"]) == ("failed_detected", "no_answer")
    assert record["model_calls"] >= 1 and "no ground truth" in record["no_ground_truth"]
