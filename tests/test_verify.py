"""Verification: a value compared with a second source that says it too (harness/agents/verify.py), the
``resilient`` policy's ``verify`` mechanism and its ablation, and the fake model's cross-check when the
reliability hints ask for one. End to end through the real proxy and the mock server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpfault.analysis.records import TaskRecord, read_records
from mcpfault.harness.agents import verify
from mcpfault.harness.agents.llm import prompts
from mcpfault.harness.agents.resilient import MECHANISMS
from mcpfault.harness.agents.roster import AGENT_NAMES
from mcpfault.harness.lies import agent_lies
from mcpfault.protocol.jsonlines import read_jsonl

STATUS = {
    "device_id": "d1",
    "site_id": "s1",
    "status": "ok",
    "interfaces_up": 2,
    "interfaces_total": 3,
    "maintenance": {"enabled": True, "reason": "planned work t-1"},
}
LISTING = {"site_id": "s1", "devices": [{"device_id": "d1", "status": "ok"}, {"device_id": "d2", "status": "down"}]}
SITE = {"site_id": "s1", "device_count": 2, "status_counts": {"ok": 1, "degraded": 0, "down": 1}}
METRICS = {"device_id": "d1", "interfaces": [{"oper_status": "up"}, {"oper_status": "up"}, {"oper_status": "down"}]}


def source_of(check: verify.Check, answer: dict[str, Any]) -> verify.Source:
    source = check.source({}, answer)
    assert source is not None
    return source


def compare(tool: str, source_tool: str, answer: dict[str, Any], other: dict[str, Any]) -> list[str]:
    sources = [(c, c.source({}, answer)) for c in verify.checks_for(tool)]
    (check,) = [c for c, source in sources if source is not None and source.tool == source_tool]
    return check.compare(answer, other)


def config_check() -> verify.Check:
    (check,) = [c for c in verify.checks_for("get_device_status") if source_of(c, STATUS).uri]
    return check


# ---- the checks, pure ----------------------------------------------------------------------------------


def test_each_check_agrees_with_a_consistent_world() -> None:
    site = {**SITE, "devices_in_maintenance": ["d1"]}
    assert compare("list_devices", "get_site", LISTING, SITE) == []
    assert compare("get_device_status", "list_devices", STATUS, LISTING) == []
    assert compare("get_device_status", "get_site", STATUS, site) == []
    assert compare("get_interface_metrics", "get_device_status", METRICS, STATUS) == []
    assert config_check().compare(STATUS, {"maintenance_reason": "planned work t-1"}) == []


def test_each_check_names_the_disagreement_a_lie_makes() -> None:
    contradicted = {**STATUS, "status": "degraded"}
    assert compare("get_device_status", "list_devices", contradicted, LISTING) == [
        "get_device_status says d1 is 'degraded', list_devices says 'ok'"
    ]
    swapped = {"site_id": "s1", "devices": [{"device_id": "d1", "status": "down"}, {"device_id": "d2", "status": "ok"}]}
    assert compare("get_device_status", "list_devices", STATUS, swapped)  # the listing's swap shows at d1
    emptied = {"site_id": "s1", "devices": []}
    assert "lists 0 devices, get_site counts 2" in compare("list_devices", "get_site", emptied, SITE)[0]
    assert "does not list it" in compare("get_device_status", "list_devices", STATUS, emptied)[0]
    shifted = {**LISTING, "devices": [{"device_id": "d1", "status": "degraded"}, {"device_id": "d2", "status": "down"}]}
    assert len(compare("list_devices", "get_site", shifted, SITE)) == 2  # one ok fewer, one degraded more
    out_of_maintenance = {**STATUS, "maintenance": {"enabled": False, "reason": None}}
    assert compare("get_device_status", "get_site", out_of_maintenance, {**SITE, "devices_in_maintenance": ["d1"]})
    truncated = {**METRICS, "interfaces": METRICS["interfaces"][:1]}
    assert len(compare("get_interface_metrics", "get_device_status", truncated, STATUS)) == 2
    assert config_check().compare(STATUS, {"maintenance_reason": "planned"}) == [
        "get_device_status gives d1 the maintenance reason 'planned work t-1', its configuration 'planned'"
    ]


def test_a_check_runs_only_for_values_the_task_reads() -> None:
    by_status = verify.checks_for("get_device_status", frozenset({"status"}))
    assert [source_of(c, STATUS).tool for c in by_status] == ["list_devices"]
    assert len(verify.checks_for("get_device_status", frozenset({"maintenance", "enabled", "reason"}))) == 2
    assert verify.checks_for("open_incident") == []
    # A device not in maintenance has no reason to check: no configuration read for it.
    assert config_check().source({}, {**STATUS, "maintenance": {"enabled": False, "reason": None}}) is None


def test_verify_is_a_mechanism_and_its_ablation_exists() -> None:
    assert "verify" in MECHANISMS and "resilient-no-verify" in AGENT_NAMES


def test_the_hints_ask_for_the_cross_check_the_fake_model_acts_on() -> None:
    from mcpfault.harness.agents.llm.fakemodel import VERIFY_MARKER

    assert prompts.VERIFY_HINT in prompts.system_prompt(True)
    assert VERIFY_MARKER in prompts.system_prompt(True) and VERIFY_MARKER not in prompts.system_prompt(False)


# ---- end to end: the real proxy, the mock server, the lie fault -----------------------------------------

CONTRADICT = """\
name = "contradict_status"
seed = 5
[[faults]]
name = "status-lie"
type = "lie"
tools = ["get_device_status"]
modes = ["contradict"]
fields = ["/status", "/maintenance/enabled"]
probability = 0.3
"""
SWAP = """\
name = "swap_listing"
seed = 11
[[faults]]
name = "listing-lie"
type = "lie"
tools = ["list_devices"]
modes = ["swap"]
fields = ["/devices/*/status"]
probability = 0.5
"""


def mcpfault(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcpfault", *args], capture_output=True, text=True, timeout=300)


def bench(tmp_path: Path, profile: str, agents: str, *extra: str) -> list[TaskRecord]:
    path = tmp_path / "profile.toml"
    path.write_text(profile)
    out = tmp_path / "bench"
    done = mcpfault("bench", "--profiles", str(path), "--agents", agents, "--out", str(out), *extra)
    assert done.returncode == 0, done.stderr
    return list(read_records(out / "records.jsonl"))


def believed(records: list[TaskRecord], agent: str) -> int:
    return sum(r.outcome == "failed_silent" and "lie" in r.affected_types for r in records if r.agent == agent)


@pytest.mark.slow
def test_resilient_catches_a_contradiction_the_others_believe(tmp_path: Path) -> None:
    records = bench(tmp_path, CONTRADICT, "naive,retry-only,resilient,resilient-no-verify", "--tasks", "24")
    for agent in ("naive", "retry-only", "resilient-no-verify"):
        assert believed(records, agent) > 0, agent
        assert all(r.verify_reads == 0 for r in records if r.agent == agent)
    mine = [r for r in records if r.agent == "resilient"]
    assert believed(records, "resilient") == 0
    lied_to = [r for r in mine if "lie" in r.affected_types]
    assert lied_to and all(r.outcome in ("recovered", "failed_detected") for r in lied_to)
    assert any(r.outcome == "recovered" for r in lied_to)  # the re-read told the truth: recovered by action
    assert all(r.failure == "inconsistent" for r in mine if r.outcome == "failed_detected")
    assert sum(r.verify_reads for r in mine) > 0
    # The report's Lies table carries each agent's verify cost, as the records say.
    report = (tmp_path / "bench" / "report.md").read_text()
    table = report[report.index("## Lies") :].split("\n\n")[2].splitlines()
    assert table[0].split("|")[7].strip() == "verify reads/task"
    cost = {row.agent: row.verify_reads_per_task for row in agent_lies(records)}
    for line in table[2:]:
        cells = [cell.strip() for cell in line.split("|")]
        assert cells[7] == f"{cost[cells[1]]:.2f}"
    assert cost["resilient"] == sum(r.verify_reads for r in mine) / len(mine)


@pytest.mark.slow
def test_resilient_rereads_when_a_swapped_listing_disagrees_with_the_device(tmp_path: Path) -> None:
    """A swap in the listing's statuses is nothing site_triage's code reads (it asks each device), so no
    agent is misled by it; resilient sees the two tools disagree, reads both again, and ends right."""
    records = bench(tmp_path, SWAP, "resilient", "--tasks", "16", "--workflows", "site_triage")
    assert [r.outcome for r in records] == ["success"] * 16
    # The one get_site read checks each listing; a listing no lie reached costs nothing more.
    assert {r.verify_reads for r in records if not r.fault_modes} == {1}
    swapped = [r for r in records if "lie:swap" in r.fault_modes]
    assert swapped and any(r.verify_reads >= 3 for r in swapped)  # the status and the listing read again
    attempts = read_jsonl(next((tmp_path / "bench").rglob("attempts.jsonl")), strict=True)
    rereads = {a["task"] for a in attempts if a["tool"] in ("get_device_status", "list_devices") and a["attempt"] > 1}
    assert rereads and rereads <= {r.task_index for r in swapped}


@pytest.mark.slow
def test_the_fake_model_cross_checks_only_when_the_hints_ask(tmp_path: Path) -> None:
    records = bench(
        tmp_path, CONTRADICT, "llm", "--models", "fake-careful", "--reliability-hints", "both", "--tasks", "24"
    )
    assert believed(records, "llm-fake-careful") > 0  # without the hint the lie is believed
    hinted = [r for r in records if r.agent == "llm-fake-careful-hints"]
    assert hinted and believed(records, "llm-fake-careful-hints") == 0
    assert any(r.outcome == "recovered" and "lie" in r.affected_types for r in hinted)
    plain = [r for r in records if r.agent == "llm-fake-careful"]
    assert sum(r.attempts for r in hinted) > sum(r.attempts for r in plain)  # checking costs calls
