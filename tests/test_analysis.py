"""The pure analysis layer: renames between schemas, the request-id join, and the judge."""

from __future__ import annotations

from typing import Any

import pytest

from mcpfault.analysis.join import faults_by_request, touches_by_task
from mcpfault.analysis.judge import TaskRun, judge
from mcpfault.errors import ContractChanged
from mcpfault.harness.agents import schema

OLD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "as_of": {"type": "integer"},
        "status": {"type": "string", "enum": ["ok", "down"]},
        "interfaces": {
            "type": "array",
            "items": {"type": "object", "properties": {"utilization_pct": {"type": "number"}}},
        },
    },
    "required": ["as_of", "status"],
    "additionalProperties": False,
}


def renamed(names: dict[str, str]) -> dict:
    return schema.rename_keys(OLD, {**names}) | {"required": [names.get(r, r) for r in OLD["required"]]}


def test_find_renames_at_every_depth() -> None:
    new = renamed({"status": "state", "utilization_pct": "util_pct"})
    assert schema.find_renames(OLD, new) == {"status": "state", "utilization_pct": "util_pct"}
    assert schema.find_renames(OLD, OLD) == {}


def test_ambiguous_or_reshaped_changes_are_contract_changes() -> None:
    two_candidates = {
        **OLD,
        "properties": {
            **{k: v for k, v in OLD["properties"].items() if k != "as_of"},
            "rev": {"type": "integer"},
            "revision": {"type": "integer"},
        },
    }
    with pytest.raises(ContractChanged, match="2 new properties could replace it"):
        schema.find_renames(OLD, two_candidates)
    retyped = {
        **OLD,
        "properties": {
            **{k: v for k, v in OLD["properties"].items() if k != "as_of"},
            "as_of_text": {"type": "string"},
        },
    }
    with pytest.raises(ContractChanged, match="0 new properties"):
        schema.find_renames(OLD, retyped)


def test_validate_reports_where() -> None:
    good = {"as_of": 3, "status": "ok", "interfaces": [{"utilization_pct": 1.5}]}
    assert schema.validate(good, OLD) is None
    problem = schema.validate({**good, "interfaces": [{"utilization_pct": "1.5"}]}, OLD)
    assert problem is not None and problem.startswith("interfaces/0/utilization_pct:")
    assert "'status' is a required property" in (schema.validate({"as_of": 3, "state": "ok"}, OLD) or "")


def test_join_by_request_id() -> None:
    events: list[dict[str, Any]] = [
        {"request_id": 1, "fault_type": None},
        {"request_id": 2, "fault_type": "timeout", "fault_mode": "drop"},
        {
            "request_id": 3,
            "fault_type": "schema_drift",
            "fault_mode": "rename_fields",
            "faults": [{"type": "schema_drift", "mode": "rename_fields"}, {"type": "latency", "mode": "delay"}],
        },
    ]
    attempts: list[dict[str, Any]] = [
        {"request_id": 1, "task": 0, "started": 1.0},
        {"request_id": 2, "task": 0, "started": 2.0},
        {"request_id": 3, "task": 1, "started": 3.0},
        {"request_id": 4, "task": None, "started": 4.0},
    ]
    touches = touches_by_task(attempts, faults_by_request(events))
    assert touches[0].fault_types == ["timeout"] and touches[0].first_fault_at == 2.0
    assert touches[1].fault_types == ["schema_drift", "latency"]
    assert touches[1].fault_modes == ["schema_drift:rename_fields", "latency:delay"]


def run(workflow: str, answer: object, failure: str | None = None) -> TaskRun:
    return TaskRun(
        index=4,
        workflow=workflow,
        target="d1",
        tag="task-0-4",
        started=10.0,
        finished=12.5,
        answer=answer,
        failure=failure,
        attempts=3,
        calls=2,
    )


def verdict(
    task_run: TaskRun, expected: object = None, state: dict | None = None, touched: bool = False, acted: bool = True
):
    from mcpfault.analysis.join import Touch

    touch = Touch(
        ["timeout"],
        ["timeout:drop"],
        11.0,
        affected_types=["timeout"],
        first_affected_at=11.0,
        acted_after_affected=acted,
    )
    return judge(task_run, expected, state or {}, touch if touched else None, profile="p", agent="a", session=0)


def test_judge_reads() -> None:
    assert verdict(run("site_triage", ["a"]), ["a"]).outcome == "success"
    recovered = verdict(run("site_triage", ["a"]), ["a"], touched=True)
    assert recovered.outcome == "recovered" and recovered.recovery_s == 1.5 and recovered.retries == 1
    silent = verdict(run("site_triage", []), ["a"], touched=True)
    assert silent.outcome == "failed_silent" and "expected ['a']" in silent.detail
    assert verdict(run("site_triage", None, failure="timeout"), ["a"]).outcome == "failed_detected"
    # Right, and a fault affected it, but the agent did nothing after it: absorbed, not recovered.
    absorbed = verdict(run("site_triage", ["a"]), ["a"], touched=True, acted=False)
    assert absorbed.outcome == "success" and absorbed.absorbed and absorbed.recovery_s is None
    assert recovered.answer == ["a"] and recovered.expected == ["a"]


def test_judge_incidents_counts_duplicates() -> None:
    one = {"incidents": [{"incident_id": "INC-1", "summary": "x (task-0-4)"}]}
    two = {
        "incidents": [
            {"incident_id": "INC-1", "summary": "x (task-0-4)"},
            {"incident_id": "INC-2", "summary": "x (task-0-4)"},
            {"incident_id": "INC-3", "summary": "x (task-0-5)"},
        ]
    }
    assert verdict(run("open_incident", {"incident_id": "INC-1"}), state=one).outcome == "success"
    duplicate = verdict(run("open_incident", {"incident_id": "INC-2"}), state=two, touched=True)
    assert duplicate.outcome == "failed_silent" and duplicate.duplicates == 1
    # A raise does not outrank the damage it left: the duplicates make it silent (analysis.judge).
    raised = verdict(run("open_incident", None, failure="timeout"), state=two)
    assert raised.outcome == "failed_silent" and raised.duplicates == 1 and raised.failure == "duplicate_write"
    assert "timeout" in raised.detail
    # Raised, and its one incident was created: a write the agent said failed.
    denied = verdict(run("open_incident", None, failure="timeout"), state=one)
    assert denied.outcome == "failed_silent" and denied.failure == "write_denied"
    assert denied.expected == {"incident_id": "INC-1"}
    # Raised and nothing reached the server: detected.
    none = verdict(run("open_incident", None, failure="timeout"), state={"incidents": []})
    assert none.outcome == "failed_detected" and none.failure == "timeout"


def test_judge_read_after_write() -> None:
    applied = {"write_log": [{"op": "set_maintenance", "arguments": {"reason": "planned work task-0-4"}}]}
    assert verdict(run("maintenance_roundtrip", {"confirmed": True}), state=applied).outcome == "success"
    stale = verdict(run("maintenance_roundtrip", {"confirmed": False}), state=applied, touched=True)
    assert stale.outcome == "failed_silent" and "was applied" in stale.detail and stale.failure == "write_denied"


def test_judge_write_goal_not_achieved() -> None:
    """The ``{"confirmed": false}`` hole: an answer that admits no write is not a success."""
    for workflow, answer in (
        ("maintenance_roundtrip", {"confirmed": False}),
        ("config_audit", {"window_opened": False, "compliant": True, "briefed": True}),
    ):
        expected = {"compliant": True, "briefed": True} if workflow == "config_audit" else {"confirmed": True}
        admitted = verdict(run(workflow, answer), expected, state={"write_log": []})
        assert (admitted.outcome, admitted.failure) == ("failed_detected", "goal_not_achieved"), workflow
        claimed = {"confirmed": True} if workflow == "maintenance_roundtrip" else {**answer, "window_opened": True}
        lied = verdict(run(workflow, claimed), expected, state={"write_log": []})
        assert (lied.outcome, lied.failure) == ("failed_silent", "goal_not_achieved"), workflow
        raised = verdict(run(workflow, None, failure="timeout"), expected, state={"write_log": []})
        assert raised.outcome == "failed_detected", workflow


def test_acted_after_counts_retries_and_relists_only() -> None:
    from mcpfault.analysis.join import Sent, acted_after

    # config_audit's own code reads its resource twice: the second read is the task, not an action.
    task_code = [Sent(1.0, "resources/read", "cfg://d1", 1), Sent(2.0, "tools/call", "set_maintenance", 1)]
    task_code.append(Sent(3.0, "resources/read", "cfg://d1", 1))
    assert not acted_after(task_code, 1.0)
    assert acted_after([*task_code, Sent(4.0, "resources/read", "cfg://d1", 2)], 1.0)  # a retry
    assert acted_after([*task_code, Sent(4.0, "tools/list", None, 1)], 1.0)  # a re-list
    assert not acted_after([Sent(0.5, "tools/list", None, 1), *task_code], 1.0)  # listed before the fault
