"""The reliability surface: pass^k, never-silent^k and cost per agent and profile intensity (harness/reliability.py),
its report section and chart, and a real bench of two fake models over a gentle and a stress profile."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from mcpfault.analysis.records import Outcome, TaskRecord, read_records
from mcpfault.analysis.summary import wilson
from mcpfault.harness.charts import reliability_chart
from mcpfault.harness.reliability import intensity_of, reliability_points
from mcpfault.harness.reliability_report import reliability_section, surface_points


def run(
    agent: str,
    profile: str,
    task: int,
    trial: int,
    outcome: Outcome,
    *,
    cost: float | None = None,
    model: str | None = None,
) -> TaskRecord:
    return TaskRecord(profile, agent, 0, task, "site_triage", outcome, trial=trial, cost_usd=cost, model=model)


def test_intensity_is_the_bundled_set_of_a_profile_or_the_profile_itself():
    assert [intensity_of(p) for p in ("error", "lies_storm", "stall", "mine")] == [
        "gentle",
        "stress",
        "process",
        "mine",
    ]


def test_pass_k_and_its_interval_count_a_task_once_whatever_its_trials():
    # Gentle: 3 tasks x 2 trials over two gentle profiles; task (error, 1) fails once, (timeout, 0) never.
    outcomes: dict[tuple[str, int], list[Outcome]] = {
        ("error", 0): ["success", "recovered"],
        ("error", 1): ["recovered", "failed_detected"],
        ("timeout", 0): ["success", "success"],
    }
    records = [
        run("a", profile, task, trial, outcome)
        for (profile, task), runs in outcomes.items()
        for trial, outcome in enumerate(runs)
    ]
    (point,) = reliability_points(records)
    assert (point.agent, point.intensity, point.profiles) == ("a", "gentle", ("error", "timeout"))
    assert (point.tasks, point.runs, point.k, point.recovered) == (3, 6, 2, 2)
    assert point.pass_k == pytest.approx(2 / 3)
    # Wilson over the three tasks (two of them passed both runs), not over the six runs.
    assert point.pass_k_interval == pytest.approx(wilson(2, 3))
    assert point.pass_k_interval[0] < 2 / 3 < point.pass_k_interval[1]
    assert point.never_silent_k == 1.0
    assert point.never_silent_interval == pytest.approx(wilson(3, 3))
    assert point.never_silent_interval[1] == 1.0 and point.never_silent_interval[0] < 1.0


def test_never_silent_k_falls_when_one_run_of_a_task_is_silent():
    records = [
        run("a", "storm", 0, 0, "success"),
        run("a", "storm", 0, 1, "failed_silent"),
        run("a", "storm", 1, 0, "failed_detected"),
        run("a", "storm", 1, 1, "failed_detected"),
    ]
    (point,) = reliability_points(records)
    assert point.intensity == "stress"
    assert point.pass_k == 0.0  # no task was right in both runs
    assert point.never_silent_k == pytest.approx(1 / 2)  # task 1 failed loudly, twice: never silent
    assert point.pass_k_interval == pytest.approx(wilson(0, 2))
    assert point.pass_k_interval[0] == 0.0


def test_with_more_runs_than_k_a_task_counts_its_share():
    # Task 0 ran three times (two correct), task 1 twice: k = 2; task 0 counts C(2,2)/C(3,2) = 1/3.
    records = [
        run("a", "error", 0, 0, "success"),
        run("a", "error", 0, 1, "success"),
        run("a", "error", 0, 2, "failed_detected"),
        run("a", "error", 1, 0, "success"),
        run("a", "error", 1, 1, "success"),
    ]
    (point,) = reliability_points(records)
    assert point.k == 2
    assert point.pass_k == pytest.approx((1 / 3 + 1) / 2)
    assert point.pass_k_interval == pytest.approx(wilson(round(1 / 3 + 1), 2))


def test_cost_per_task_and_per_recovered_run():
    model = "openai:m"
    records = [
        run("llm-openai:m", "storm", 0, 0, "recovered", cost=0.03, model=model),
        run("llm-openai:m", "storm", 1, 0, "failed_detected", cost=0.01, model=model),
        run("llm-openai:m", "error", 0, 0, "success", cost=0.02, model=model),
        run("llm-openai:m", "error", 1, 0, "failed_silent", cost=0.02, model=model),
    ]
    gentle, stress = reliability_points(records)
    assert (gentle.intensity, stress.intensity) == ("gentle", "stress")  # gentle first, whatever the records' order
    assert stress.cost_usd == pytest.approx(0.04)
    assert stress.cost_per_task == pytest.approx(0.02)
    assert stress.cost_per_recovered == pytest.approx(0.04)  # the whole cost, per the one recovered run
    # Nothing recovered: a cost per recovered run would divide by zero, so there is none.
    assert gentle.recovered == 0 and gentle.cost_per_task == pytest.approx(0.02)
    assert gentle.cost_per_recovered is None


def test_a_scripted_agent_has_no_cost_and_the_surface_needs_a_model():
    scripted = [run("naive", "error", 0, t, "recovered") for t in range(2)]
    (point,) = reliability_points(scripted)
    assert point.cost_usd is None and point.cost_per_task is None and point.cost_per_recovered is None
    assert surface_points(scripted) == () and reliability_section(scripted) == []
    with_model = [*scripted, *(run("llm-x", "error", 0, t, "success", cost=0.5, model="x") for t in range(2))]
    section = "\n".join(reliability_section(with_model))
    naive_row = next(line for line in section.splitlines() if line.startswith("| naive"))
    assert [c.strip() for c in naive_row.split("|")[-3:-1]] == ["-", "-"]


def test_the_chart_draws_one_line_per_agent_with_a_point_per_intensity():
    # Per agent, the outcome of every run on the gentle profile, then on the stress one.
    per_agent: tuple[tuple[str, tuple[Outcome, Outcome]], ...] = (
        ("m1", ("success", "failed_silent")),
        ("m2", ("success", "success")),
    )
    records = [
        run(agent, profile, task, trial, outcome)
        for agent, outcomes in per_agent
        for profile, outcome in zip(("error", "storm"), outcomes, strict=True)
        for task in range(2)
        for trial in range(2)
    ]
    svg = reliability_chart(reliability_points(records))
    assert svg.count('class="line"') == 2
    assert svg.count('class="point"') == 4 and svg.count('class="interval"') == 4
    assert ">m1 pass^2 0% (95% 0.0-65.8%)<" in svg and ">m2 pass^2 100% (95% 34.2-100.0%)<" in svg
    assert ">gentle<" in svg and ">stress<" in svg


# ---------------------------------------------------------------------------------------------
# End to end: a real bench, its records against its report


MODELS = ("openai:fake-recovers", "openai:fake-trusting")


def surface_table(report: str) -> list[list[str]]:
    section = report.split("## Reliability surface", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def expected_row(agent: str, intensity: str, runs: list[TaskRecord]) -> list[str]:
    """The row computed here from the records, independently of harness/reliability.py."""
    tasks: dict[tuple[str, int, int], list[TaskRecord]] = {}
    for record in runs:
        tasks.setdefault((record.profile, record.seed, record.task_index), []).append(record)
    k = min(len(r) for r in tasks.values())
    assert all(len(r) == k for r in tasks.values())  # every task ran --trials times
    passed = sum(all(r.outcome in ("success", "recovered") for r in task_runs) for task_runs in tasks.values())
    clean = sum(all(r.outcome != "failed_silent" for r in task_runs) for task_runs in tasks.values())
    recovered = sum(r.outcome == "recovered" for r in runs)
    cost = math.fsum(r.cost_usd or 0.0 for r in runs)

    def bounds(count: int) -> str:
        low, high = wilson(count, len(tasks))
        return f"{math.floor(1000 * low + 0.5 + 1e-9) / 10:.1f}-{math.floor(1000 * high + 0.5 + 1e-9) / 10:.1f}%"

    def usd(value: float) -> str:
        return f"${value:,.4f}"

    return [
        agent,
        intensity,
        str(len({r.profile for r in runs})),
        str(len(tasks)),
        str(len(runs)),
        f"pass^{k} {100 * passed / len(tasks):.0f}%",
        bounds(passed),
        f"{100 * clean / len(tasks):.0f}%",
        bounds(clean),
        str(recovered),
        usd(cost / len(runs)),
        usd(cost / recovered) if recovered else "-",
    ]


@pytest.mark.slow
def test_a_bench_of_two_fake_models_reports_the_surface_its_records_hold(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "mcpfault",
        "bench",
        "--agents",
        "llm",
        "--models",
        ",".join(MODELS),
        "--profiles",
        "error,lies_storm",
        "--trials",
        "2",
        "--tasks",
        "4",
        "--jobs",
        "2",
        "--out",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    records = list(read_records(out / "records.jsonl"))
    agents = [f"llm-{m}" for m in MODELS]
    assert {r.agent for r in records} == set(agents)  # one label per model, even with one provider
    assert {r.model for r in records} == set(MODELS)
    expected = [
        expected_row(
            agent, intensity, [r for r in records if r.agent == agent and intensity_of(r.profile) == intensity]
        )
        for agent in agents
        for intensity in ("gentle", "stress")
    ]
    assert all(r.cost_usd is not None for r in records)
    assert surface_table((out / "report.md").read_text(encoding="utf-8")) == expected
    svg = (out / "charts" / "reliability.svg").read_text(encoding="utf-8")
    assert svg.count('class="line"') == len(MODELS)
    for agent in agents:
        assert re.search(rf">{re.escape(agent)} pass\^2 \d+% \(95% [\d.]+-[\d.]+%\)<", svg)
    html = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="reliability-table"' in html and html.count('class="line"') == len(MODELS)


def test_models_named_twice_are_refused_before_any_work(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "mcpfault",
        "bench",
        "--agents",
        "llm",
        "--models",
        "fake-careful,anthropic:fake-careful",
    ]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "'fake-careful' and 'anthropic:fake-careful' are the same model twice" in done.stderr
    assert not (out / "records.jsonl").exists()
    assert "Traceback" not in done.stderr
