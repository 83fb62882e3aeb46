"""The stress matrix: bundled outage, burst and storm profiles do what their names say, and the
report shows, per cell, how its failures ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpfault.analysis.records import TaskRecord
from mcpfault.errors import UsageError
from mcpfault.faults import profile
from mcpfault.faults.base import Call
from mcpfault.faults.engine import Engine
from mcpfault.harness.bench import DEFAULT_PROFILES, expand_profile_names
from mcpfault.harness.report import ReportMeta, render_markdown, summarize

ROOT = Path(__file__).resolve().parent.parent
META = ReportMeta("mcpfault bench", 0, 3, 1.0, 1, "2026-01-01T00:00:00+00:00", "2 CPUs")


def faulted(name: str, calls: int = 50) -> list[str | None]:
    """The first fault type the bundled profile applies to each of ``calls`` distinct reads."""
    engine = Engine(profile.load(ROOT / "profiles" / f"{name}.toml"))
    out: list[str | None] = []
    for i in range(calls):
        body = {"jsonrpc": "2.0", "id": i, "method": "tools/call"}
        body["params"] = {"name": "get_device_status", "arguments": {"device_id": f"d{i % 3}"}}
        decision = engine.decide(Call.from_body(body))
        engine.observe_response(Call.from_body(body), b"{}", {"result": {"as_of": 1}})
        out.append(decision.applied[0].type_name if decision.applied else None)
    return out


def test_outage_is_one_run_of_twelve_consecutive_failures():
    seen = faulted("outage")
    assert seen == [None] * 15 + ["error"] * 12 + [None] * 23


def test_bursts_cluster_the_faults_in_the_request_sequence():
    seen = faulted("burst", 60)
    hit = [i for i, t in enumerate(seen) if t is not None]
    assert len(hit) == 6 + 5 + 6 + 5
    assert all(seen[i] is None for i in range(8))  # quiet before the first burst
    # Four bursts of their own type, each over within a dozen calls of its start.
    for kind, start in (("error", 8), ("timeout", 22), ("malformed", 34), ("stale", 44)):
        positions = [i for i, t in enumerate(seen) if t == kind]
        assert positions and min(positions) >= start and max(positions) - start < 12, (kind, positions)


def test_storm_faults_half_the_calls_across_five_types():
    seen = faulted("storm", 2000)
    share = sum(t is not None for t in seen) / len(seen)
    assert 0.45 < share < 0.55, share
    types = {t for t in seen if t is not None}
    assert types == {"error", "timeout", "malformed", "stale", "latency"}
    for kind in types:
        assert 0.07 < seen.count(kind) / len(seen) < 0.13, kind


def test_profile_sets_expand_in_place_and_once():
    assert expand_profile_names(None) == list(DEFAULT_PROFILES)
    assert expand_profile_names("stress") == ["outage", "outage_1s", "outage_10s", "burst", "storm", "lies_storm"]
    assert expand_profile_names("storm,gentle,stress")[:2] == ["storm", "baseline"]
    assert len(expand_profile_names("gentle,stress")) == len(DEFAULT_PROFILES) + 6
    with pytest.raises(UsageError):
        from mcpfault.harness.bench import resolve_profile

        resolve_profile(expand_profile_names("stres")[0])


def rec(profile_name: str, agent: str, outcome: str, index: int, failure: str | None = None) -> TaskRecord:
    return TaskRecord(profile_name, agent, 0, index, "site_triage", outcome, failure=failure)  # type: ignore[arg-type]


def test_report_splits_gentle_from_stress_and_names_each_cells_failure_classes():
    records = [
        rec("outage", "resilient", "failed_detected", 0, "circuit_open"),
        rec("outage", "resilient", "failed_detected", 1, "circuit_open"),
        rec("outage", "resilient", "failed_detected", 2, "protocol_error"),
        rec("storm", "retry-only", "failed_silent", 0),
        rec("storm", "retry-only", "success", 1),
        rec("storm", "retry-only", "success", 2),
        rec("mixed", "naive", "success", 0),
        rec("mixed", "naive", "success", 1),
        rec("mixed", "naive", "success", 2),
    ]
    text = render_markdown(summarize(records), META)
    gentle, stress = text.index("**Gentle profiles"), text.index("**Stress profiles")
    assert gentle < text.index("| mixed ", gentle) < stress < text.index("| outage ", stress)
    coping = text[text.index("## Where each agent stops coping") :]
    assert "| outage  | resilient  | circuit_open 2, protocol_error 1 |      0% |      0 |" in coping
    assert "| storm   | retry-only | -                                |     67% |      1 |" in coping
    assert "| mixed " not in coping.split("## Outcome counts")[0]  # no failure: not listed
