"""Outcomes from traces: real sessions (harness, proxy, mock server as processes), their three span files joined.

The trace join (task -> attempt -> proxy -> server spans, by parent span id) is what the judge reads; the
request-id join of attempts with the proxy's events must agree with it on every task, and the incidents
the server's spans say it created must agree with the server's final state.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.trace import SpanKind, StatusCode

from mcpfault.analysis import traces
from mcpfault.analysis.join import Touch, faults_by_request, touches_by_task
from mcpfault.analysis.judge import mentions
from mcpfault.analysis.records import TaskRecord, read_records
from mcpfault.analysis.traces import AttemptTrace, SessionSpans, TaskTrace
from mcpfault.faults.error import Error
from mcpfault.faults.malformed import Malformed
from mcpfault.faults.schema_drift import SchemaDrift
from mcpfault.harness.agents.tasks import TaskSpec, plan_tasks
from mcpfault.harness.session import SessionPlan, SessionResult, run_session
from mcpfault.mock.world import World
from mcpfault.protocol.jsonlines import read_jsonl
from mcpfault.proxy.events import read_events
from mcpfault.telemetry import names
from mcpfault.telemetry import names as span_names
from mcpfault.telemetry.tracing import SpanEvent, SpanView
from tests.conftest import PROFILES, write_profile

WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]
SITE = WORLD.site_ids()[0]


def run_sessions(plans: Sequence[SessionPlan], seconds: float = 90) -> list[SessionResult]:
    """Sessions side by side, as the bench runs them; each result in the order of ``plans``."""
    results: dict[int, SessionResult] = {}

    async def one(index: int, plan: SessionPlan) -> None:
        results[index] = await run_session(plan, WORLD)

    async def main() -> None:
        with anyio.fail_after(seconds):
            async with anyio.create_task_group() as tg:
                for index, plan in enumerate(plans):
                    tg.start_soon(one, index, plan)

    anyio.run(main)
    for result in results.values():
        assert result.error is None, result.error
    return [results[i] for i in range(len(plans))]


def from_files(out: Path) -> tuple[dict[int, TaskTrace], dict[int, Touch], dict[int, TaskRecord]]:
    """Everything again from what the session left on disk: its task trees, the request-id join, its records."""
    tasks = traces.task_traces(traces.read_session_spans(out))
    by_request = touches_by_task(
        read_jsonl(out / "attempts.jsonl"), faults_by_request(read_events(out / "events.jsonl"))
    )
    records = {r.task_index: r for r in read_records_of(out)}
    return tasks, by_request, records


def read_records_of(out: Path) -> list[TaskRecord]:
    return list(read_records(out / "records.jsonl")) if (out / "records.jsonl").exists() else []


# ---- the cross-check on a real mixed session --------------------------------------------------------


@pytest.mark.slow
def test_trace_join_agrees_with_the_request_id_join_and_the_server_state(tmp_path: Path) -> None:
    specs = tuple(plan_tasks(WORLD, 40, 0))
    plans = [
        SessionPlan(PROFILES / "mixed.toml", "mixed", agent, specs, tmp_path / agent)
        for agent in ("resilient", "retry-only")
    ]
    results = run_sessions(plans)
    seen_types: set[str] = set()
    duplicates = 0
    for plan, result in zip(plans, results, strict=True):
        assert result.join_mismatches == []
        tasks, by_request, _ = from_files(plan.out_dir)
        assert sorted(tasks) == [s.index for s in specs]  # every task has its span, read back from the file
        by_trace = traces.touches(tasks)
        assert traces.compare_touches(by_trace, by_request) == []
        assert set(by_trace) == set(by_request) and len(by_trace) >= 8
        state = json.loads((plan.out_dir / "server-state.json").read_text())
        records = {r.task_index: r for r in result.records}
        for index, task in tasks.items():
            record, touch = records[index], by_trace.get(index)
            expected = by_request.get(index)
            # Both joins: the same fault types, modes and first faulted attempt.
            assert (touch is None) == (expected is None)
            if touch is not None and expected is not None:
                assert (touch.fault_types, touch.fault_modes) == (expected.fault_types, expected.fault_modes)
                assert touch.first_fault_request == str(expected.first_fault_request)
                seen_types.update(touch.fault_types)
            # The judge's record is the trace's: faults, retries, recovery time; the outcome is on the span.
            assert record.fault_types == tuple(touch.fault_types if touch else ())
            assert (record.attempts, record.retries) == (len(task.tool_calls), task.retries)
            assert record.trace_id == task.span.trace_id != result.trace_id  # each task its own trace
            assert task.span.attributes[span_names.TASK_OUTCOME] == record.outcome
            failed = record.outcome in ("failed_detected", "failed_silent")
            assert task.span.status_code is (StatusCode.ERROR if failed else StatusCode.UNSET)
            if record.recovery_s is not None:
                assert task.recovery_s == pytest.approx(record.recovery_s, abs=1e-5)
            # Duplicates: incidents created under the task in the server's spans = in the server's state.
            mine = [
                i for i in state["incidents"] if mentions(i["summary"], str(task.span.attributes[span_names.TASK_TAG]))
            ]
            assert task.duplicates == record.duplicates == max(0, len(mine) - 1)
            assert sorted(task.incidents_created) == sorted(i["incident_id"] for i in mine)
            duplicates += task.duplicates
    assert seen_types >= {"timeout", "error", "latency", "malformed"}
    assert duplicates >= 1  # retry-only's blind retry of a lost open_incident response


# ---- the tree's shape, fault by fault ---------------------------------------------------------------

FAULTS_ONCE_EACH = """
[[faults]]
name = "lost"
type = "timeout"
tools = ["open_incident"]
limit = 1

[[faults]]
name = "boom"
type = "error"
tools = ["get_interface_metrics"]
limit = 1

[[faults]]
name = "cut"
type = "malformed"
modes = ["truncate"]
tools = ["list_devices"]
limit = 1

[[faults]]
name = "old"
type = "stale"
tools = ["get_device_status"]
after = 1
limit = 1
"""

DRIFT = """
[[faults]]
name = "renamed"
type = "schema_drift"
tools = ["get_interface_metrics"]
after = 1
rename_args = { device_id = "device" }
reject = "invalid_params"  # as the mock itself answers arguments that do not fit: -32602
"""


def faulted(task: TaskTrace, fault_type: str) -> list[AttemptTrace]:
    return [a for a in task.attempts if any(t == fault_type for t, _ in a.faults)]


def only(items: Sequence[Any]) -> Any:
    assert len(items) == 1, items
    return items[0]


def assert_nested(attempt: AttemptTrace) -> None:
    """Each proxy span is the attempt's child, each server span a proxy span's, all in the attempt's trace."""
    assert attempt.span.kind is SpanKind.CLIENT
    for proxy in attempt.proxy:
        assert proxy.kind is SpanKind.SERVER and proxy.service_name == "mcpfault-proxy"
        assert (proxy.trace_id, proxy.parent_span_id) == (attempt.span.trace_id, attempt.span.span_id)
        assert proxy.attributes[names.JSONRPC_REQUEST_ID] == attempt.request_id
    proxy_ids = {p.span_id for p in attempt.proxy}
    for server in attempt.server:
        assert server.kind is SpanKind.SERVER and server.service_name == span_names.MOCK_SERVICE
        assert server.trace_id == attempt.span.trace_id and server.parent_span_id in proxy_ids


@pytest.mark.slow
def test_span_tree_shape_for_each_fault_type(tmp_path: Path) -> None:
    tasks = (
        TaskSpec(0, "open_incident", DEVICE, "t-0"),
        TaskSpec(1, "interface_check", DEVICE, "t-1"),
        TaskSpec(2, "maintenance_roundtrip", DEVICE, "t-2"),
        TaskSpec(3, "maintenance_roundtrip", DEVICE, "t-3"),
        TaskSpec(4, "site_triage", SITE, "t-4"),
    )
    drift_tasks = (TaskSpec(0, "interface_check", DEVICE, "d-0"), TaskSpec(1, "interface_check", DEVICE, "d-1"))
    faults = write_profile(tmp_path, FAULTS_ONCE_EACH, "faults.toml")
    drift = write_profile(tmp_path, DRIFT, "drift.toml")
    # resilient-no-verify: the faults sit at call counts, and verify's cross-check reads would move them.
    plans = [
        SessionPlan(faults, "faults", "resilient-no-verify", tasks, tmp_path / "faults"),
        SessionPlan(drift, "drift", "resilient-no-verify", drift_tasks, tmp_path / "drift"),
        SessionPlan(faults, "faults", "retry-only", tasks[:1], tmp_path / "blind"),
    ]
    results = run_sessions(plans)
    assert [r.outcome for r in results[0].records] == ["recovered", "recovered", "success", "recovered", "recovered"]
    found, _, _ = from_files(plans[0].out_dir)
    for task in found.values():
        for attempt in task.attempts:
            assert_nested(attempt)
            assert attempt.span.parent_span_id == task.span.span_id

    # timeout: the server acted (its span records the incident it created) but the client heard nothing.
    lost = only(faulted(found[0], "timeout"))
    assert lost.span.attributes[span_names.FAILURE] == "timeout"
    assert lost.span.attributes[names.ERROR_TYPE] == names.OTHER
    assert only(lost.proxy).attributes[names.CLIENT_RECEIVED] == "nothing"
    created = only(only(lost.server).events)
    assert created.name == span_names.EVENT_STATE_CHANGE
    assert created.attributes[span_names.STATE_OP] == "open_incident"
    assert created.attributes[span_names.STATE_CHANGED] is True
    assert isinstance(created.attributes[span_names.STATE_REVISION], int)
    # The retry is a sibling under the task span, second try of the same call, after a backoff; its key
    # makes the server hand back the same incident instead of creating another.
    retry = found[0].tool_calls[1]
    backoff = retry.span.attributes[span_names.BACKOFF_S]
    assert retry.number == 2 and isinstance(backoff, float) and 0.0 <= backoff <= 0.01  # full jitter, first step
    assert span_names.FAILURE not in retry.span.attributes
    again = only(only(retry.server).events)
    assert again.attributes[span_names.STATE_CHANGED] is False
    assert again.attributes[span_names.STATE_INCIDENT_ID] == created.attributes[span_names.STATE_INCIDENT_ID]
    assert found[0].duplicates == 0 and found[0].incidents_created == [created.attributes[span_names.STATE_INCIDENT_ID]]

    # error: the proxy answered; no server span under it.
    boom = only(faulted(found[1], "error"))
    assert boom.span.attributes[names.ERROR_TYPE] == "-32603" and boom.span.attributes[span_names.FAILURE] == (
        "protocol_error"
    )
    assert only(boom.proxy).attributes[names.UPSTREAM_CONTACTED] is False and boom.server == ()
    assert only(found[1].tool_calls[1].server).name == "tools/call get_interface_metrics"

    # stale: answered from the proxy's history, no server span; the client saw a (stale) answer.
    stale = only(faulted(found[3], "stale"))
    assert stale.server == () and span_names.FAILURE not in stale.span.attributes
    assert only(stale.proxy).attributes[names.CLIENT_RECEIVED] == "response"

    # malformed: the server answered (its span is there), the client could not read what arrived.
    cut = only(faulted(found[4], "malformed"))
    assert cut.span.attributes[span_names.FAILURE] == "malformed" and len(cut.server) == 1
    assert only(cut.proxy).attributes[names.FAULT_MODE] == "truncate"

    # schema drift: the old argument name is refused by the proxy (no server span); after the agent
    # re-reads tools/list (an attempt under the same task) the new name is translated and reaches the server.
    drifted, _, _ = from_files(plans[1].out_dir)
    attempts = [a for task in drifted.values() for a in task.attempts]
    for attempt in attempts:
        assert_nested(attempt)
    refused = [a for a in attempts if a.faults and a.server == ()]
    translated = [a for a in attempts if a.faults and a.server and a.method == "tools/call"]
    assert refused and translated
    assert all(a.span.attributes[names.ERROR_TYPE] == "-32602" for a in refused)
    assert any(a.method == "tools/list" for a in attempts)

    # A blind retry of the lost write: two server spans under one task, each creating an incident.
    blind, _, _ = from_files(plans[2].out_dir)
    assert blind[0].duplicates == 1 == results[2].records[0].duplicates
    assert len([a for a in blind[0].tool_calls if a.server]) == 2


# ---- pure: the join over hand-made spans ------------------------------------------------------------


def span(span_id: str, parent: str | None, kind: SpanKind, start: int, **attributes: Any) -> SpanView:
    events = attributes.pop("events", ())
    end = attributes.pop("end", start + 10)
    return SpanView("a" * 32, span_id, parent, "s", kind, start, end, attributes, tuple(events))


def test_proxy_faults_keep_order_and_read_an_error_from_attributes() -> None:
    drift_then_corrupt = span(
        "p1",
        None,
        SpanKind.SERVER,
        0,
        **{names.FAULT_TYPE: "schema_drift", names.FAULT_MODE: "rename_fields", names.FAULT_RULE: "d"},
        events=(
            SpanEvent(SchemaDrift.event_name, {names.FAULT_MODE: "rename_fields", names.FAULT_RULE: "d"}),
            SpanEvent(Malformed.event_name, {names.FAULT_MODE: "truncate", names.FAULT_RULE: "c"}),
        ),
    )
    assert traces.proxy_faults(drift_then_corrupt) == [("schema_drift", "rename_fields"), ("malformed", "truncate")]
    error = span("p2", None, SpanKind.SERVER, 0, **{names.FAULT_TYPE: "error", names.FAULT_MODE: "protocol"})
    assert traces.proxy_faults(error) == [("error", "protocol")]
    assert traces.proxy_faults(span("p3", None, SpanKind.SERVER, 0)) == []
    # An error answer after an active drift: each left its event, and neither is lost.
    drift_then_error = span(
        "p4",
        None,
        SpanKind.SERVER,
        0,
        **{names.FAULT_TYPE: "schema_drift", names.FAULT_MODE: "rename_fields", names.FAULT_RULE: "d"},
        events=(
            SpanEvent(SchemaDrift.event_name, {names.FAULT_MODE: "rename_fields", names.FAULT_RULE: "d"}),
            SpanEvent(Error.event_name, {names.FAULT_MODE: "protocol", names.FAULT_RULE: "e"}),
        ),
    )
    assert traces.proxy_faults(drift_then_error) == [("schema_drift", "rename_fields"), ("error", "protocol")]
    # A span of an older proxy whose first fault left no event: it leads, the evented ones follow.
    older = span(
        "p5",
        None,
        SpanKind.SERVER,
        0,
        **{names.FAULT_TYPE: "error", names.FAULT_MODE: "tool", names.FAULT_RULE: "e"},
        events=(SpanEvent(SchemaDrift.event_name, {names.FAULT_MODE: "rename_args", names.FAULT_RULE: "d"}),),
    )
    assert traces.proxy_faults(older) == [("error", "tool"), ("schema_drift", "rename_args")]


def test_task_trace_from_hand_made_spans() -> None:
    task = span("t0", "s0", SpanKind.INTERNAL, 1_000, end=9_000, **{span_names.TASK_INDEX: 7})
    first = span(
        "c1", "t0", SpanKind.CLIENT, 2_000, **{names.MCP_METHOD_NAME: "tools/call", names.JSONRPC_REQUEST_ID: "5"}
    )
    retry = span("c2", "t0", SpanKind.CLIENT, 3_000, **{names.MCP_METHOD_NAME: "tools/call", span_names.ATTEMPT: 2})
    lost = span("p1", "c1", SpanKind.SERVER, 2_001, **{names.FAULT_TYPE: "timeout", names.FAULT_MODE: "drop"})

    def created(incident: str) -> SpanEvent:
        attributes: dict[str, Any] = {span_names.STATE_OP: "open_incident", span_names.STATE_CHANGED: True}
        return SpanEvent(span_names.EVENT_STATE_CHANGE, attributes | {span_names.STATE_INCIDENT_ID: incident})

    acted = span("v1", "p1", SpanKind.SERVER, 2_002, events=(created("INC-1"),))
    # A retry through a proxy that does not propagate: the server span is the attempt's own child.
    direct = span("v2", "c2", SpanKind.SERVER, 3_001, events=(created("INC-2"),))
    found = traces.task_traces(SessionSpans([task, retry, first], [lost], [direct, acted]))
    trace = found[7]
    assert [a.span.span_id for a in trace.attempts] == ["c1", "c2"]
    assert trace.retries == 1 and trace.incidents_created == ["INC-1", "INC-2"] and trace.duplicates == 1
    touch = trace.touch()
    assert touch is not None and touch.fault_modes == ["timeout:drop"] and touch.first_fault_request == "5"
    assert trace.recovery_s == pytest.approx((9_000 - 2_000) / 1e9)
    by_request = {7: Touch(["timeout"], ["timeout:drop"], 1.0, 5)}
    assert traces.compare_touches({7: touch}, by_request) == []
    disagree = traces.compare_touches({7: touch}, {7: Touch(["error"], ["error:protocol"], 1.0, 6), 8: touch})
    assert len(disagree) == 4 and "only the proxy's events" in disagree[-1]


def test_a_server_span_under_the_proxys_client_span_joins_its_attempt() -> None:
    # proxy --client-spans: attempt (harness CLIENT) -> proxy SERVER -> proxy CLIENT -> server SERVER
    task = span("t0", None, SpanKind.INTERNAL, 1_000, end=9_000, **{span_names.TASK_INDEX: 1})
    attempt = span("c1", "t0", SpanKind.CLIENT, 2_000, **{names.MCP_METHOD_NAME: "tools/call"})
    proxy = span("p1", "c1", SpanKind.SERVER, 2_001)
    leg = span("l1", "p1", SpanKind.CLIENT, 2_002)
    server = span("v1", "l1", SpanKind.SERVER, 2_003)
    trace = traces.task_traces(SessionSpans([task, attempt], [proxy, leg], [server]))[1]
    (found,) = trace.attempts
    assert [s.span_id for s in found.proxy] == ["p1"]  # the leg is not a second proxy span of the attempt
    assert [s.span_id for s in found.server] == ["v1"]
