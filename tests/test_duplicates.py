"""Duplicates are counted from the mock server's spans; its state file is the cross-check."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.session import SessionPlan, SessionResult, run_session
from mcpfault.harness.session_judge import judge_session
from mcpfault.mock.world import World
from mcpfault.protocol.jsonlines import read_jsonl
from tests.conftest import write_profile

pytestmark = pytest.mark.slow
WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]
LOST_FIRST_INCIDENT = '[[faults]]\ntype = "timeout"\ntools = ["open_incident"]\nlimit = 1\n'


def blind_retry(tmp_path: Path) -> tuple[SessionPlan, SessionResult]:
    specs = tuple(TaskSpec(i, "open_incident", DEVICE, f"task-d-{i}") for i in range(2))
    plan = SessionPlan(
        profile=write_profile(tmp_path, LOST_FIRST_INCIDENT),
        profile_name="lost",
        agent="retry-only",
        tasks=specs,
        out_dir=tmp_path / "s",
    )

    async def main() -> SessionResult:
        with anyio.fail_after(60):
            return await run_session(plan, WORLD)

    return plan, anyio.run(main)


def test_a_blind_retry_is_a_duplicate_in_the_spans_and_the_state_agrees(tmp_path: Path):
    _plan, result = blind_retry(tmp_path)
    assert result.error is None, result.error
    assert [r.duplicates for r in result.records] == [1, 0]
    assert result.records[0].outcome == "failed_silent"


def test_spans_count_the_duplicate_even_when_the_state_file_lost_it(tmp_path: Path):
    from mcpfault.analysis import traces

    plan, result = blind_retry(tmp_path)
    state_path = plan.out_dir / "server-state.json"
    state = json.loads(state_path.read_text())
    first = next(i for i in state["incidents"] if "task-d-0" in i["summary"])
    state["incidents"] = [i for i in state["incidents"] if "task-d-0" not in i["summary"] or i is first]
    state_path.write_text(json.dumps(state))
    attempts = [a for a in read_jsonl(plan.out_dir / "attempts.jsonl") if isinstance(a, dict)]
    judged = judge_session(plan, WORLD, result.runs, attempts, traces.read_session_spans(plan.out_dir))
    assert judged.records[0].duplicates == 1  # from the journal (the spans agree); the doctored state file says 0
    assert judged.mismatches == ["task 0: 1 duplicate(s) in the server's journal, 0 in its state"]
    (plan.out_dir / "server-journal.jsonl").unlink()  # without the journal, the spans are the source
    judged = judge_session(plan, WORLD, result.runs, attempts, traces.read_session_spans(plan.out_dir))
    assert judged.records[0].duplicates == 1
    assert judged.mismatches == ["task 0: 1 duplicate(s) in the server's spans, 0 in its state"]
