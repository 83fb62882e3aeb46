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


def verdict(task_run: TaskRun, expected: object = None, state: dict | None = None, touched: bool = False):
    from mcpfault.analysis.join import Touch

    touch = Touch(["timeout"], ["timeout:drop"], 11.0, affected_types=["timeout"], first_affected_at=11.0)
    return judge(task_run, expected, state or {}, touch if touched else None, profile="p", agent="a", session=0)


def test_judge_reads() -> None:
    assert verdict(run("site_triage", ["a"]), ["a"]).outcome == "success"
    recovered = verdict(run("site_triage", ["a"]), ["a"], touched=True)
    assert recovered.outcome == "recovered" and recovered.recovery_s == 1.5 and recovered.retries == 1
    silent = verdict(run("site_triage", []), ["a"], touched=True)
    assert silent.outcome == "failed_silent" and "expected ['a']" in silent.detail
    assert verdict(run("site_triage", None, failure="timeout"), ["a"]).outcome == "failed_detected"


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
    detected = verdict(run("open_incident", None, failure="timeout"), state=two)
    assert detected.outcome == "failed_detected" and detected.duplicates == 1


def test_judge_read_after_write() -> None:
    applied = {"write_log": [{"op": "set_maintenance", "arguments": {"reason": "planned work task-0-4"}}]}
    assert verdict(run("maintenance_roundtrip", {"confirmed": True}), state=applied).outcome == "success"
    stale = verdict(run("maintenance_roundtrip", {"confirmed": False}), state=applied, touched=True)
    assert stale.outcome == "failed_silent" and "was applied" in stale.detail
