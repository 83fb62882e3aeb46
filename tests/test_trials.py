"""bench --trials K: derived seeds per trial, pass^k as tau-bench defines it, Wilson intervals everywhere."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.analysis.records import TaskRecord, read_records
from mcpfault.analysis.summary import pass_hat_k, wilson
from mcpfault.harness.bench import BenchConfig, fault_seed, plan_sessions
from mcpfault.harness.report import ReportMeta, render_charts, render_markdown, summarize
from mcpfault.mock.world import World

META = ReportMeta("mcpfault bench --trials 3", 0, 2, 1.0, 1, "2026-01-01T00:00:00+00:00", "2 CPUs", trials=3)


def test_wilson_interval_matches_published_values():
    # Newcombe (1998), table I: 0/10 -> 0.0000-0.2775; 5/10 -> 0.2366-0.7634; 81/263 -> 0.2553-0.3662.
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert wilson(10, 10)[1] == 1.0 and wilson(0, 0) == (0.0, 1.0)


def test_pass_hat_k_is_the_mean_over_tasks_of_c_choose_k_over_n_choose_k():
    tasks = [(3, 3), (1, 3), (0, 3)]
    assert pass_hat_k(tasks, 1) == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert pass_hat_k(tasks, 2) == pytest.approx(1 / 3)  # C(1,2) = 0: one success in three is never two
    assert pass_hat_k(tasks, 3) == pytest.approx(1 / 3)
    assert pass_hat_k([(2, 4)], 2) == pytest.approx(1 / 6)  # C(2,2)/C(4,2)
    with pytest.raises(ValueError):
        pass_hat_k([(1, 1)], 2)


def trial_records() -> list[TaskRecord]:
    """Task 0 correct in all three trials; task 1 correct once, silent once, detected once."""
    outcomes = {0: ["success", "recovered", "success"], 1: ["failed_silent", "success", "failed_detected"]}
    return [
        TaskRecord("mixed", "naive", 0, task, "site_triage", outcome, trial=trial)  # type: ignore[arg-type]
        for task, runs in outcomes.items()
        for trial, outcome in enumerate(runs)
    ]


def test_summary_gives_pass_k_and_never_silent_k_per_cell():
    (cell,) = summarize(trial_records()).cells
    assert (cell.tasks, cell.distinct_tasks, cell.trials) == (6, 2, 3)
    assert cell.pass_k == pytest.approx((4 / 6, (1 + 0) / 2, (1 + 0) / 2))
    # Task 1 avoided a silent failure in 2 of 3 runs: C(2,k)/C(3,k) = 2/3, 1/3, 0.
    assert cell.never_silent_k == pytest.approx(((1 + 2 / 3) / 2, (1 + 1 / 3) / 2, 1 / 2))


def test_report_shows_pass_k_and_every_rate_with_its_interval():
    summary = summarize(trial_records())
    text = render_markdown(summary, META)
    assert "each run 3 times" in text
    trials = text.split("## Consistency over 3 trials")[1].split("\n## ")[0]
    assert "| mixed   | naive |     2 | 67% (" in trials and "pass^3" in trials and "never silent^3" in trials
    rates = text.split("## Rates with 95% intervals")[1].split("\n## ")[0]
    assert wilson(4, 6) == pytest.approx((0.29999, 0.90323), abs=1e-5)
    assert "|    6 |     67% |   30.0-90.3% |    17% |    3.0-56.4% |" in rates, (
        rates
    )  # the exact bounds, to one decimal
    charts = render_charts(summary)
    assert 'class="interval"' in charts["outcomes.svg"] and 'class="interval"' in charts["silent.svg"]


def test_trials_derive_their_own_seeds_and_trial_0_keeps_todays():
    config = BenchConfig(profiles=(Path("profiles/error.toml"),), agents=("naive",), out_dir=Path("o"), tasks=4)
    world = World.generate(0)
    one = plan_sessions(dataclasses.replace(config, session_tasks=2), world)
    three = plan_sessions(dataclasses.replace(config, session_tasks=2, trials=3), world)
    assert [p.proxy_seed for p in one] == [p.proxy_seed for p in three if p.trial == 0]
    assert len({p.proxy_seed for p in three}) == 6 and len({p.out_dir for p in three}) == 6
    assert {p.tasks for p in three if p.session == 0} == {one[0].tasks}  # the same tasks in every trial
    assert fault_seed(4, 0, 1, 0) != fault_seed(4, 0, 0, 1)


@pytest.mark.slow
def test_bench_trials_writes_every_trials_records_with_its_number(tmp_path: Path):
    out = tmp_path / "bench"
    command = ["bench", "--profiles", "error", "--agents", "naive", "--tasks", "4", "--session-tasks", "4"]
    done = subprocess.run(
        [sys.executable, "-m", "mcpfault", *command, "--trials", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    records = list(read_records(out / "records.jsonl"))
    assert sorted((r.trial, r.task_index) for r in records) == [(t, i) for t in (0, 1) for i in range(4)]
    assert json.loads((out / "bench.json").read_text())["trials"] == 2
    assert "## Consistency over 2 trials" in (out / "report.md").read_text()
