"""Touched apart from affected: a task is recovered only when a fault changed what its client received."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpfault.analysis.effects import AttemptView, TaskReads, affects
from mcpfault.analysis.records import TaskRecord
from mcpfault.harness.agents.tasks import FIELDS_READ, TaskSpec
from mcpfault.harness.session import SessionPlan, run_session
from mcpfault.mock.world import World
from mcpfault.protocol.jsonlines import read_jsonl
from tests.conftest import write_profile

WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]
SITE = WORLD.site_ids()[0]
ROOT = Path(__file__).resolve().parent.parent


def test_which_faults_change_what_the_client_received():
    ok, failed = AttemptView(tool="get_device_status", server_seen=True), AttemptView(failed=True)
    assert not affects("latency", ok, None)  # within the deadline
    assert affects("latency", failed, None)  # past it
    assert affects("timeout", failed, None)
    # An error or a broken answer always fails the client's attempt: that is its effect.
    assert affects("error", failed, None) and affects("malformed", failed, None)
    # A value of the wrong type matters only in a field the task reads (the proxy's event names it).
    triage_reads = TaskReads(FIELDS_READ["site_triage"])
    listing = AttemptView(tool="list_devices", changed_fields=frozenset({"status"}))
    assert not affects("malformed", listing, triage_reads)  # triage reads no status there
    status = AttemptView(tool="get_device_status", changed_fields=frozenset({"status"}))
    assert affects("malformed", status, triage_reads)
    assert affects("malformed", AttemptView(tool="list_devices"), triage_reads)  # unnamed
    # A stale answer older than a write differs only in what that write changed.
    changed_by = {"set_maintenance": frozenset({"maintenance", "enabled", "reason"})}
    older = AttemptView(tool="get_device_status", as_of=2, revision=3, server_seen=True)
    maintenance = dataclasses.replace(older, changed_ops=frozenset({"set_maintenance"}))
    assert not affects("stale", maintenance, TaskReads(FIELDS_READ["site_triage"], changed_by))
    roundtrip = TaskReads(FIELDS_READ["maintenance_roundtrip"], changed_by)
    assert affects("stale", maintenance, roundtrip)
    unknown_op = dataclasses.replace(older, changed_ops=frozenset({"reboot"}))
    assert affects("stale", unknown_op, TaskReads(FIELDS_READ["site_triage"], changed_by))
    fresh = AttemptView(as_of=3, revision=3, server_seen=True)
    assert not affects("stale", fresh, None)
    assert affects("stale", AttemptView(as_of=2, revision=3, server_seen=True), None)
    assert not affects("stale", AttemptView(as_of=1, revision=None, server_seen=True), None)
    assert affects("stale", AttemptView(as_of=1), None)  # no server spans: cannot tell
    # A drift: the fields its event names as renamed, like any changed answer's.
    assert not affects("schema_drift", ok, None)  # names no renamed field: translated, or none of the old names
    assert affects("schema_drift", failed, None)  # rejected
    renamed_status = dataclasses.replace(ok, changed_fields=frozenset({"status"}))
    roundtrip_reads = TaskReads(FIELDS_READ["maintenance_roundtrip"])
    assert not affects("schema_drift", renamed_status, roundtrip_reads)  # never read there
    assert affects("schema_drift", renamed_status, triage_reads)  # whatever the mode: what the event names
    assert not affects("schema_drift", ok, triage_reads)  # a rename names every change it makes
    assert affects("reset", ok, None)  # a fault this module does not know


def session(tmp_path: Path, profile: Path, agent: str, specs: list[TaskSpec]) -> list[TaskRecord]:
    plan = SessionPlan(
        profile=profile, profile_name=profile.stem, agent=agent, tasks=tuple(specs), out_dir=tmp_path / agent
    )

    async def main() -> list[TaskRecord]:
        with anyio.fail_after(60):
            result = await run_session(plan, WORLD)
        assert result.error is None, result.error
        return result.records

    records: list[TaskRecord] = anyio.run(main)
    return records


def checks(count: int, workflow: str = "interface_check", target: str = DEVICE) -> list[TaskSpec]:
    return [TaskSpec(i, workflow, target, f"task-e-{i}") for i in range(count)]


@pytest.mark.slow
def test_a_delay_within_the_deadline_touches_naive_without_recovering_it(tmp_path: Path):
    profile = write_profile(tmp_path, '[[faults]]\ntype = "latency"\ndelay_s = 0.05\n')
    records = session(tmp_path, profile, "naive", checks(2))
    assert [(r.outcome, r.touched_no_effect, r.fault_types, r.affected_types) for r in records] == [
        ("success", True, ("latency",), ()),
    ] * 2
    assert all(r.recovery_s is None for r in records)


@pytest.mark.slow
def test_a_stale_answer_equal_to_the_fresh_one_has_no_effect(tmp_path: Path):
    # No write happens in between: the cached answer is the one the server would give again.
    profile = write_profile(tmp_path, '[[faults]]\ntype = "stale"\nafter = 1\nlimit = 1\n')
    records = session(tmp_path, profile, "naive", checks(2))
    assert records[1].fault_types == ("stale",)
    assert (records[1].outcome, records[1].touched_no_effect) == ("success", True)


@pytest.mark.slow
def test_a_drift_on_a_field_the_task_never_reads_has_no_effect(tmp_path: Path):
    profile = write_profile(tmp_path, '[[faults]]\ntype = "schema_drift"\nrename_fields = { status = "state" }\n')
    roundtrip = session(tmp_path, profile, "naive", checks(1, "maintenance_roundtrip"))[0]
    assert (roundtrip.outcome, roundtrip.touched_no_effect, roundtrip.affected_types) == ("success", True, ())
    triage = session(tmp_path / "t", profile, "naive", checks(1, "site_triage", SITE))[0]
    assert triage.affected_types == ("schema_drift",)  # site_triage reads status: renamed away
    assert triage.outcome in ("recovered", "failed_silent")


@pytest.mark.slow
def test_a_drift_that_renames_every_field_affects_what_the_task_reads(tmp_path: Path):
    # "auto" names no field in the profile: the fault's own event says which it renamed in each answer.
    profile = write_profile(tmp_path, '[[faults]]\ntype = "schema_drift"\nrename_fields = "auto"\n')
    roundtrip = session(tmp_path, profile, "naive", checks(1, "maintenance_roundtrip"))[0]
    assert roundtrip.affected_types == ("schema_drift",), roundtrip
    assert not roundtrip.touched_no_effect


@pytest.mark.slow
def test_drift_input_translated_calls_do_not_count_as_recoveries(tmp_path: Path):
    # The 4th call is rejected for its old argument name; the resilient agent reconciles, and from then
    # on the proxy translates every call: touched, never affected.
    # resilient-no-verify: the rule counts calls, and verify's cross-check read would move the 4th call.
    records = session(tmp_path, ROOT / "profiles" / "drift_input.toml", "resilient-no-verify", checks(6))
    assert [r.outcome for r in records] == ["success"] * 3 + ["recovered"] + ["success"] * 2
    assert [r.touched_no_effect for r in records] == [False] * 4 + [True] * 2
    assert records[3].affected_types == ("schema_drift",)


@pytest.mark.slow
def test_recovery_time_runs_from_the_first_affecting_fault(tmp_path: Path):
    # A delay within the deadline on the first call, then the second call's answer is lost and retried.
    profile = write_profile(
        tmp_path,
        '[[faults]]\ntype = "latency"\ndelay_s = 0.3\nlimit = 1\n\n'
        '[[faults]]\ntype = "timeout"\nafter = 1\nlimit = 1\n',
    )
    (record,) = session(tmp_path, profile, "resilient", checks(1, "site_triage", SITE))
    assert record.outcome == "recovered" and record.fault_types == ("latency", "timeout")
    assert record.affected_types == ("timeout",)
    assert record.recovery_s is not None and record.recovery_s < record.duration_s - 0.25


class Reads(dict[str, object]):
    """A result that notes every key the task code reads from it, at any depth."""

    def __init__(self, data: dict[str, object], seen: set[str]) -> None:
        super().__init__({k: wrap(v, seen) for k, v in data.items()})
        self._seen = seen

    def __getitem__(self, key: str) -> object:
        self._seen.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: object = None) -> object:
        self._seen.add(key)
        return super().get(key, default)


def wrap(value: object, seen: set[str]) -> object:
    if isinstance(value, dict):
        return Reads(value, seen)
    if isinstance(value, list):
        return [wrap(v, seen) for v in value]
    return value


def test_fields_read_lists_exactly_what_each_workflows_code_reads():
    from mcpfault.harness.agents.tasks import ALL_WORKFLOWS, plan_tasks, run_task
    from mcpfault.mock import resources

    world = World.generate(0)
    for workflow in ALL_WORKFLOWS:
        seen: dict[str, set[str]] = {}

        class Tools:
            def __init__(self, seen: dict[str, set[str]]) -> None:
                self.seen = seen

            async def call(self, tool: str, arguments: Mapping[str, Any]) -> Any:
                answer = getattr(world, tool)(**{k: v for k, v in arguments.items() if k != "idempotency_key"})
                return wrap(answer, self.seen.setdefault(tool, set()))

            async def read(self, uri: str) -> Any:  # a resource, not a tool result: not in FIELDS_READ
                return json.loads(resources.read(world, uri)["contents"][0]["text"])

            async def prompt(self, name: str, arguments: Mapping[str, str]) -> str:
                return str(resources.get_prompt(world, arguments)["messages"][0]["content"]["text"])

        for spec in plan_tasks(world, 8, 0, workflows=(workflow,)):
            anyio.run(run_task, Tools(seen), spec)
        assert {tool: frozenset(keys) for tool, keys in seen.items() if keys} == FIELDS_READ[workflow], workflow


@pytest.mark.slow
def test_a_wrong_type_in_a_field_the_task_never_reads_has_no_effect(tmp_path: Path):
    """Real proxy and mock: the proxy's event names the field it corrupted, and the judge compares it
    with what site_triage reads of list_devices (devices, device_id)."""
    profile = write_profile(
        tmp_path, '[[faults]]\ntype = "malformed"\nmodes = ["wrong_type"]\ntools = ["list_devices"]\n'
    )
    specs = [TaskSpec(i, "site_triage", site, f"task-w-{i}") for i, site in enumerate(WORLD.site_ids()[:6])]
    records = session(tmp_path, profile, "naive", specs)
    events = [e for e in read_jsonl(tmp_path / "naive" / "events.jsonl") if e.get("fault_type") == "malformed"]
    corrupted = [frozenset(e["fields"]) for e in events]
    assert len(corrupted) == len(records) == len(specs)
    read = FIELDS_READ["site_triage"]["list_devices"]
    for record, fields in zip(records, corrupted, strict=True):
        assert record.fault_types == ("malformed",)
        assert bool(record.affected_types) == bool(fields & read), (record, fields)
        if not fields & read:
            assert record.outcome == "success" and record.touched_no_effect
    assert any(not fields & read for fields in corrupted)  # the seed corrupts some field triage never reads
