"""Process faults measured, not lost: a write the server made before a SIGKILL is judged from its write
journal (which survives the kill; its unflushed spans do not), and the session is not broken."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mcpfault.analysis.journal import duplicates_by_task, read_journal, spans_may_be_lost
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.session import SessionPlan, SessionResult, run_session
from mcpfault.harness.session_judge import SERVER_JOURNAL, STATE_FILE, judge_session
from mcpfault.mock.world import World
from mcpfault.protocol.jsonlines import read_jsonl
from tests.conftest import write_profile

WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]
KILL_AFTER_WRITE = """
[server]
restart = "on-crash"
restart_delay_s = 0.05
hold_s = 5

[[faults]]
name = "killed-after-write"
type = "crash"
signal = "SIGKILL"
when = "after"
tools = ["open_incident"]
limit = 1
"""


def test_a_torn_last_line_is_dropped_and_a_damaged_middle_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    assert read_journal(path) is None
    path.write_text('{"tool":"open_incident","arguments":{"summary":"x (task-1)"}}\n{"tool":"open_')
    assert read_journal(path) == [{"tool": "open_incident", "arguments": {"summary": "x (task-1)"}}]
    path.write_text('{"tool":\n{"tool":"open_incident"}\n')
    with pytest.raises(ValueError, match="line 1"):
        read_journal(path)


def test_duplicates_count_the_journaled_creations_of_each_task_by_its_tag() -> None:
    entries = [
        {"tool": "open_incident", "arguments": {"summary": "High error rate (task-0-1)"}},
        {"tool": "open_incident", "arguments": {"summary": "High error rate (task-0-1)"}},
        {"tool": "open_incident", "arguments": {"summary": "High error rate (task-0-11)"}},
        {"tool": "set_maintenance", "arguments": {"reason": "task-0-2"}},
    ]
    tasks = [
        (1, "open_incident", "task-0-1"),
        (11, "open_incident", "task-0-11"),
        (2, "maintenance_roundtrip", "task-0-2"),
    ]
    assert duplicates_by_task(entries, tasks) == {1: 1, 11: 0, 2: 0}


def test_only_a_death_the_mock_cannot_handle_loses_its_spans() -> None:
    exited = {"event": "server_exited", "crashed": True}
    assert spans_may_be_lost([{**exited, "exit_status": 137}])  # SIGKILL
    assert spans_may_be_lost([{**exited, "exit_status": -11}])  # SIGSEGV
    assert not spans_may_be_lost([{**exited, "exit_status": 143}, {**exited, "exit_status": -2}])  # TERM, INT
    assert not spans_may_be_lost([{**exited, "exit_status": 0}, {"event": "server_back"}])


@pytest.mark.slow
def test_a_sigkill_after_a_write_is_judged_from_the_journal_and_the_session_is_not_broken(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, KILL_AFTER_WRITE)
    specs = tuple(TaskSpec(i, "open_incident", DEVICE, f"task-k-{i}") for i in range(3))
    plan = SessionPlan(profile=profile, profile_name="kill", agent="retry-only", tasks=specs, out_dir=tmp_path / "s")

    async def main() -> SessionResult:
        with anyio.fail_after(60):
            return await run_session(plan, WORLD)

    result = anyio.run(main)
    assert result.error is None, result.error
    first = result.records[0]
    # The killed server had written the incident; its answer was lost; retry-only wrote it again.
    assert (first.outcome, first.duplicates) == ("failed_silent", 1), first
    assert "crash" in first.fault_types
    journal = read_journal(plan.out_dir / SERVER_JOURNAL)
    assert journal is not None and sum("task-k-0" in json.dumps(e) for e in journal) == 2
    assert [r.outcome for r in result.records[1:]] == ["success", "success"]

    # The journal alone is enough: without the state file the same verdicts come from its replay.
    (plan.out_dir / STATE_FILE).unlink()
    attempts = read_jsonl(plan.out_dir / "attempts.jsonl", strict=True)
    again = judge_session(plan, WORLD, result.runs, attempts)
    assert [(r.outcome, r.duplicates) for r in again.records] == [(r.outcome, r.duplicates) for r in result.records]
