"""`mcpfault run --agent llm` and `bench ... llm` as users run them: real processes, the SDK pointed at a
real Messages API server on 127.0.0.1, record and replay, and the refusals before any work starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.harness.agents.llm.fakemodel import FakeMessagesServer
from mcpfault.protocol.jsonlines import read_jsonl

pytestmark = pytest.mark.slow
SECRET = "sk-ant-test-cli-SECRET-4242"


def mcpfault(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-m", "mcpfault", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **(env or {})},
        cwd=cwd,
    )


def outcomes(directory: Path) -> list[tuple]:
    rows = read_jsonl(directory / "records.jsonl", strict=True)
    return sorted(
        (r["profile"], r["agent"], r["task_index"], r["outcome"], r["duplicates"], r["input_tokens"]) for r in rows
    )


def test_no_key_is_one_line_and_exit_2_before_any_work(tmp_path):
    out = tmp_path / "out"
    result = mcpfault("run", "--agent", "llm", "--tasks", "1", "--out", str(out))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "ANTHROPIC_API_KEY" in result.stderr
    assert not out.exists()
    bench = mcpfault("bench", "--agents", "naive,llm", "--models", "claude-haiku-4-5", "--out", str(out))
    assert bench.returncode == 2 and "ANTHROPIC_API_KEY" in bench.stderr and not out.exists()


def test_no_sdk_is_one_line_saying_what_to_install(tmp_path):
    shadow = tmp_path / "shadow" / "anthropic"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {"ANTHROPIC_API_KEY": SECRET, "PYTHONPATH": str(tmp_path / "shadow")}
    result = mcpfault("run", "--agent", "llm", "--out", str(tmp_path / "out"), env=env)
    assert result.returncode == 2 and "pip install 'mcpfault[llm]'" in result.stderr
    assert result.stderr.strip().count("\n") == 0 and SECRET not in result.stderr


def test_bad_llm_options_are_refused(tmp_path):
    missing = mcpfault("run", "--agent", "llm", "--replay", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"))
    assert missing.returncode == 2 and f"--replay {tmp_path / 'nowhere'}: no such directory" in missing.stderr
    stray = mcpfault("run", "--agent", "naive", "--model", "claude-haiku-4-5", "--out", str(tmp_path / "o"))
    assert stray.returncode == 2 and "llm agent only" in stray.stderr
    unknown = mcpfault("bench", "--agents", "llm", "--models", "fake-genius", "--out", str(tmp_path / "o"))
    assert unknown.returncode == 2 and "fake-careful" in unknown.stderr


def test_run_records_and_a_replay_without_key_or_api_gives_the_same_outcomes(tmp_path):
    record, replay_dir = tmp_path / "recording", tmp_path / "replayed"
    common = ["run", "--agent", "llm", "--model", "claude-test", "--profile", "timeout", "--tasks", "4"]
    with FakeMessagesServer("careful") as server:
        env = {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": server.base_url}
        first = mcpfault(*common, "--out", str(tmp_path / "live"), "--record", str(record), env=env)
        assert first.returncode == 0, first.stderr
    assert "agents and models" in first.stdout and "llm-claude-test" in first.stdout
    assert json.loads((record / "manifest.json").read_text())["format"] == "mcpfault-llm-recording/1"
    session = record / "timeout" / "llm-claude-test" / "s000.jsonl"
    lines = session.read_text().splitlines()
    assert lines and all(SECRET not in line for line in lines)
    for path in [*record.rglob("*"), *(tmp_path / "live").rglob("*")]:
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path

    # No server, no key: the recording answers.
    second = mcpfault(*common, "--out", str(replay_dir), "--replay", str(record))
    assert second.returncode == 0, second.stderr
    assert outcomes(replay_dir) == outcomes(tmp_path / "live")

    # An exchange gone from the recording: that task is failed_detected, naming the directory and the key.
    session.write_text("\n".join(lines[:-1]) + "\n")
    third = mcpfault(*common, "--out", str(tmp_path / "broken"), "--replay", str(record))
    rows = read_jsonl(tmp_path / "broken" / "records.jsonl", strict=True)
    last = max(rows, key=lambda r: r["task_index"])
    # What the agent raised ends the task; when its write had already reached the server, the damage
    # outranks the raise (analysis.judge: write_denied) and the detail keeps what it raised.
    assert (last["outcome"], last["failure"]) in {
        ("failed_detected", "replay_missing"),
        ("failed_silent", "write_denied"),
    }
    assert last["failure"] == "replay_missing" or "replay_missing" in last["detail"]
    key = json.loads(lines[-1])["key"]
    assert str(record) in last["detail"] and key in last["detail"]
    assert third.returncode == 0
    assert "replay_missing 1" in third.stdout or last["failure"] == "write_denied"


def test_bench_runs_the_model_matrix_beside_the_scripted_agents(tmp_path):
    out = tmp_path / "bench"
    args = ["bench", "--profiles", "drift_output,stale", "--agents", "naive,resilient,llm", "--tasks", "4"]
    args += ["--models", "fake-recovers,fake-trusting", "--reliability-hints", "both", "--out", str(out)]
    result = mcpfault(*args)
    assert result.returncode == 0, result.stderr
    report = (out / "report.md").read_text()
    labels = ["llm-fake-recovers", "llm-fake-recovers-hints", "llm-fake-trusting", "llm-fake-trusting-hints"]
    assert "## Agents and models" in report
    for label in labels:
        assert f"| {label} " in report
    rows = read_jsonl(out / "records.jsonl", strict=True)
    agents = {r["agent"] for r in rows}
    assert agents == {"naive", "resilient", *labels}
    llm_rows = [r for r in rows if r["agent"].startswith("llm-")]
    assert len(llm_rows) == 2 * 4 * 4 and all(r["input_tokens"] > 0 and r["cost_usd"] > 0 for r in llm_rows)
    assert all("input_tokens" not in r for r in rows if not r["agent"].startswith("llm-"))
    trusting_drift = [r for r in llm_rows if r["agent"] == "llm-fake-trusting" and r["profile"] == "drift_output"]
    assert any(r["outcome"] == "failed_silent" for r in trusting_drift)


def test_the_committed_recording_still_replays(tmp_path):
    """docs/results/llm/recording answers today's agent: a changed prompt (new hints) would miss every
    exchange (replay_missing), and the committed report would no longer be what its command makes."""
    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "replayed"
    args = ["bench", "--profiles", "stale", "--agents", "llm", "--models", "fake-careful", "--reliability-hints"]
    args += ["both", "--tasks", "8", "--replay", str(root / "docs/results/llm/recording"), "--out", str(out)]
    result = mcpfault(*args)
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(out / "records.jsonl", strict=True)
    assert len(rows) == 16 and not [r for r in rows if r["failure"] == "replay_missing"]
