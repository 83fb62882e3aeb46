"""External agents (--agent cmd:NAME): real processes on the official mcp SDK through the real proxy, judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpfault.analysis.records import TaskRecord, read_records
from mcpfault.harness.agents.external import ExternalConfig
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.session import AGENT_SPANS, SessionPlan, run_session
from mcpfault.mock.world import World
from mcpfault.telemetry.tracing import read_spans
from tests.conftest import write_profile

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SCRIPTED = str(ROOT / "examples" / "agents" / "scripted_agent.py")
MISBEHAVING = str(ROOT / "tests" / "agents" / "misbehaving_agent.py")
WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]
SITE = WORLD.site_ids()[0]
# Every write fails loudly (the server never sees it); reads pass.
FAILED_WRITES = '[[faults]]\ntype = "error"\nmode = "protocol"\nread_only = false\nprobability = 1.0\n'


def tasks() -> tuple[TaskSpec, ...]:
    return (
        TaskSpec(0, "site_triage", SITE, "task-x-0"),
        TaskSpec(1, "maintenance_roundtrip", DEVICE, "task-x-1"),
        TaskSpec(2, "open_incident", DEVICE, "task-x-2"),
        TaskSpec(3, "interface_check", DEVICE, "task-x-3"),
    )


def run(
    tmp_path: Path,
    profile: Path,
    command: list[str],
    *,
    specs: tuple[TaskSpec, ...] | None = None,
    timeout_s: float = 60.0,
    name: str = "mine",
    **session: Any,
) -> list[TaskRecord]:
    plan = SessionPlan(
        profile=profile,
        profile_name=profile.stem,
        agent=f"cmd:{name}",
        tasks=specs if specs is not None else tasks(),
        out_dir=tmp_path / name,
        external=ExternalConfig(name, tuple(command), timeout_s),
        **session,
    )

    async def main() -> Any:
        with anyio.fail_after(240):
            return await run_session(plan, WORLD)

    result = anyio.run(main)
    assert result.error is None, result.error
    return result.records


def test_a_lying_agent_is_silent_and_an_honest_one_detected(tmp_path):
    profile = write_profile(tmp_path, FAILED_WRITES, "failed_writes.toml")
    liar = run(tmp_path, profile, [PYTHON, SCRIPTED, "--when-a-call-fails", "lie"], name="liar")
    honest = run(tmp_path, profile, [PYTHON, SCRIPTED, "--when-a-call-fails", "give-up"], name="honest")
    # Reads are untouched: both answer them right.
    assert [r.outcome for r in liar] == ["success", "failed_silent", "failed_silent", "success"]
    assert [r.outcome for r in honest] == ["success", "failed_detected", "failed_detected", "success"]
    assert [r.failure for r in honest] == [None, "agent_reported_failure", "agent_reported_failure", None]
    assert liar[1].answer == {"confirmed": True} and "never reached the server" in liar[1].detail
    assert liar[2].answer == {"incident_id": "INC-0000"}
    for record in (*liar[1:3], *honest[1:3]):
        assert record.fault_types == ("error",), record  # the proxy's fault reached this very task
    assert "a call failed" in (honest[1].agent_stderr or "")
    assert liar[0].answer == {"unhealthy_devices": sorted(world_unhealthy())}


def test_an_agent_is_judged_alike_when_the_session_speaks_the_2026_era(tmp_path):
    """The agent's endpoint speaks 2025-11-25; under --era modern its initialize gets the session's
    server/discover answer as an initialize result, and its calls go on in the 2026-07-28 era."""
    from mcpfault.harness.agents.gateway import initialize_result

    profile = write_profile(tmp_path, FAILED_WRITES, "failed_writes.toml")
    honest = [PYTHON, SCRIPTED, "--when-a-call-fails", "give-up"]
    modern = run(tmp_path, profile, honest, name="modern", era="modern", transport="http")
    assert [r.outcome for r in modern] == ["success", "failed_detected", "failed_detected", "success"], [
        (r.outcome, r.detail, r.agent_stderr) for r in modern
    ]
    assert all(r.failure != "agent_crashed" for r in modern)
    discover = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}, "serverInfo": {"name": "m"}}
    assert initialize_result(discover, "2025-06-18") == {
        "protocolVersion": "2025-06-18",
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "m"},
    }
    assert initialize_result(discover, "1999-01-01")["protocolVersion"] == "2025-11-25"
    legacy = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "m"}}
    assert initialize_result(legacy, "2025-06-18") is legacy  # a legacy session's own answer, as it was


def world_unhealthy() -> list[str]:
    return [d for d in WORLD.device_ids(SITE) if WORLD.device(d).status in ("degraded", "down")]


def test_a_stdio_agent_meets_the_same_faults_as_one_over_http(tmp_path):
    profile = write_profile(tmp_path, '[[faults]]\ntype = "error"\nmode = "tool"\nprobability = 0.3\n', "some.toml")
    specs = tuple(TaskSpec(i, "interface_check", WORLD.device_ids()[i], f"task-s-{i}") for i in range(6))
    over_http = run(tmp_path, profile, [PYTHON, SCRIPTED], specs=specs, name="http")
    over_stdio = run(tmp_path, profile, [PYTHON, SCRIPTED, "--via", "command"], specs=specs, name="stdio")
    assert [(r.outcome, r.fault_types) for r in over_stdio] == [(r.outcome, r.fault_types) for r in over_http]
    assert any(r.fault_types for r in over_http) and any(not r.fault_types for r in over_http)


def test_the_agents_own_spans_join_the_task_trace(tmp_path):
    profile = write_profile(tmp_path, "", "quiet.toml")
    (record,) = run(tmp_path, profile, [PYTHON, MISBEHAVING, "otel"], specs=tasks()[:1])
    assert record.outcome == "failed_detected" and record.failure == "agent_reported_failure"
    spans = read_spans(tmp_path / "mine" / AGENT_SPANS)
    (span,) = [s for s in spans if s.name == "agent.plan"]
    assert span.trace_id == record.trace_id
    task_spans = [s for s in read_spans(tmp_path / "mine" / "client-spans.jsonl") if s.name.startswith("mcpfault.task")]
    assert span.parent_span_id == task_spans[0].span_id
    shown = subprocess.run(
        [PYTHON, "-m", "mcpfault", "traces", "show", str(tmp_path / "mine"), "--task", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "agent.plan" in shown.stdout


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_each_broken_contract_has_its_own_class_and_leaves_no_process(tmp_path):
    profile = write_profile(tmp_path, "", "quiet.toml")
    spec = tasks()[:1]
    pid_file = tmp_path / "child.pid"
    outcomes = {
        mode: run(tmp_path, profile, [PYTHON, MISBEHAVING, mode, str(pid_file)], specs=spec, timeout_s=3, name=mode)[0]
        for mode in ("crash", "hang", "silent", "invalid")
    }
    assert {m: (r.outcome, r.failure) for m, r in outcomes.items()} == {
        "crash": ("failed_detected", "agent_crashed"),
        "hang": ("failed_detected", "agent_timeout"),
        "silent": ("failed_detected", "agent_no_answer"),
        "invalid": ("failed_detected", "answer_invalid"),
    }
    assert "RuntimeError: the agent fell over" in (outcomes["crash"].agent_stderr or "")
    assert "thinking..." in (outcomes["hang"].agent_stderr or "")
    assert "unhealthy_devices" in outcomes["invalid"].detail
    child = int(pid_file.read_text())
    assert not alive(child), "the hung agent's child outlived its task"


def test_run_and_bench_take_external_agents_from_the_command_line(tmp_path):
    profile = write_profile(tmp_path, FAILED_WRITES, "failed_writes.toml")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran = subprocess.run(
        [
            *(
                PYTHON,
                "-m",
                "mcpfault",
                "run",
                "--profile",
                str(profile),
                "--tasks",
                "4",
                "--out",
                str(tmp_path / "run"),
            ),
            *("--agent", "cmd:liar", "--agent-command", f"{PYTHON} {SCRIPTED} --when-a-call-fails lie"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    records = list(read_records(tmp_path / "run" / "records.jsonl"))
    assert {r.agent for r in records} == {"cmd:liar"} and len(records) == 4
    benched = subprocess.run(
        [
            *(PYTHON, "-m", "mcpfault", "bench", "--profiles", str(profile), "--tasks", "4", "--session-tasks", "4"),
            *(
                "--trials",
                "2",
                "--jobs",
                "2",
                "--out",
                str(tmp_path / "bench"),
                "--agents",
                "naive,cmd:liar,cmd:honest",
            ),
            *("--agent-command", f"liar={PYTHON} {SCRIPTED} --when-a-call-fails lie"),
            *("--agent-command", f"honest={PYTHON} {SCRIPTED} --when-a-call-fails give-up"),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    assert benched.returncode == 0, benched.stderr
    records = list(read_records(tmp_path / "bench" / "records.jsonl"))
    by_agent = {a: [r for r in records if r.agent == a] for a in ("naive", "cmd:liar", "cmd:honest")}
    assert all(len(rs) == 8 for rs in by_agent.values())  # 4 tasks x 2 trials each
    assert {r.outcome for r in by_agent["cmd:liar"]} >= {"failed_silent"}
    assert "failed_silent" not in {r.outcome for r in by_agent["cmd:honest"]}
    report = (tmp_path / "bench" / "report.md").read_text()
    assert "cmd:liar" in report and "cmd:honest" in report and "pass^" in report


def test_command_line_mistakes_are_refused_before_any_work(tmp_path):
    def refused(*args: str) -> str:
        done = subprocess.run([PYTHON, "-m", "mcpfault", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        return done.stderr

    assert "has no command" in refused("run", "--agent", "cmd:mine", "--tasks", "1")
    assert "no such cmd:NAME" in refused(
        "bench", "--agents", "cmd:a", "--agent-command", "a=x", "--agent-command", "b=y"
    )
    assert "give NAME=COMMAND" in refused("bench", "--agents", "naive,cmd:a", "--agent-command", "python x.py")
    assert "external agents only" in refused("run", "--agent", "naive", "--agent-command", "python x.py")
    assert "tool workflows only" in refused(
        "run", "--agent", "cmd:a", "--agent-command", "x", "--workflows", "config_audit"
    )


def test_the_pytest_fixture_runs_the_example_ci_test_and_the_api_catches_a_liar(tmp_path):
    example = subprocess.run(
        [
            PYTHON,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "examples" / "agents" / "test_never_silent.py"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert example.returncode == 0, example.stdout + example.stderr
    assert "1 passed" in example.stdout
    from mcpfault.api import agent_bench

    run = agent_bench(
        [PYTHON, SCRIPTED, "--when-a-call-fails", "lie"],
        profile=ROOT / "examples" / "agents" / "failed_writes.toml",
        tasks=4,
        out_dir=tmp_path / "liar",
    )
    assert [t.workflow for t in run.silent] == ["maintenance_roundtrip", "open_incident"]
    assert run.counts() == {"success": 2, "failed_silent": 2} and len(run) == 4
    assert run[3].answer == {"incident_id": "INC-0000"} and run.out_dir == tmp_path / "liar"


def experiment_file(tmp_path: Path, when_a_call_fails: str) -> Path:
    text = (ROOT / "experiments" / "your-agent-writes-fail.toml").read_text()
    command = json.dumps([PYTHON, SCRIPTED, "--when-a-call-fails", when_a_call_fails])
    text = text.replace(
        'command = ["python", "examples/agents/scripted_agent.py", "--when-a-call-fails", "give-up"]',
        f"command = {command}",
    )
    return write_profile(tmp_path, text, f"{when_a_call_fails}.toml")


def test_an_experiments_load_can_be_your_agent(tmp_path):
    def experiment(path: Path, out: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PYTHON, "-m", "mcpfault", "experiment", "run", str(path), "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=180,
        )

    honest = experiment(experiment_file(tmp_path, "give-up"), tmp_path / "honest")
    assert honest.returncode == 0, honest.stdout + honest.stderr
    liar = experiment(experiment_file(tmp_path, "lie"), tmp_path / "liar")
    assert liar.returncode == 1, liar.stdout + liar.stderr
    outcome = json.loads((tmp_path / "liar" / "outcome.json").read_text())
    assert (
        outcome["verdict"] == "deviated: no silent failures (during)"
        and outcome["hypothesis"]["no silent failures"]["during"] > 0
    )
    assert list((tmp_path / "liar" / "agent").glob("answer-*.json"))  # the load was the external agent


def test_an_experiments_external_load_needs_its_command(tmp_path):
    text = (ROOT / "experiments" / "your-agent-writes-fail.toml").read_text()
    path = write_profile(
        tmp_path, "\n".join(line for line in text.splitlines() if not line.startswith("command")), "x.toml"
    )
    done = subprocess.run(
        [PYTHON, "-m", "mcpfault", "experiment", "validate", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "load.command" in done.stdout + done.stderr
