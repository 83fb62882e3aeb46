"""report.html in a real browser: Debian's chromium, headless, over the DevTools protocol.

A small real bench (tests/bench_support.py: every outcome, a silent failure with a duplicate) writes
report.html beside report.md; the page is opened in chromium and checked for what it shows: the outcome
table's numbers equal records.jsonl's, opening a silent task shows its fault and its duplicate, the
filters keep what they say, and the page makes no request beyond its own file. The same for a
``mcpfault run`` directory and an experiment's. Screenshots of each page are saved under the test's
temporary directory (``<tmp>/screenshots/*.png``; pytest prints the base directory with ``-v``, and
``--basetemp DIR`` puts it where you want it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mcpfault.analysis.records import OUTCOMES, TaskRecord, read_records
from mcpfault.harness import report_html
from mcpfault.protocol.jsonlines import read_jsonl
from tests.bench_support import run_small_bench
from tests.browser_support import CHROMIUM, Page, chromium

MCPFAULT = [sys.executable, "-m", "mcpfault"]
ROOT = Path(__file__).resolve().parent.parent
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="needs /usr/bin/chromium (make test installs Debian's chromium)"
)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_small_bench(tmp_path_factory.mktemp("report-html") / "bench")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as opened:
        yield opened


def records_of(directory: Path) -> list[TaskRecord]:
    return list(read_records(directory / "records.jsonl"))


def open_fresh(page: Page, path: Path) -> None:
    page.events.clear()
    page.open(path.as_uri())


def assert_no_request_and_no_error(page: Page, path: Path) -> None:
    assert page.requests() == [path.as_uri()]  # the page itself, and nothing else
    assert page.errors() == []


def test_bench_writes_a_self_contained_report_html(bench: Path) -> None:
    text = (bench / "report.html").read_text(encoding="utf-8")
    assert (bench / "report.md").is_file()
    for needle in ("http://", "https://", "src=", "@import", "url(", "fetch(", "XMLHttpRequest"):
        # The SVG namespace is a name, not a request; nothing else may point outside the file.
        assert text.replace('xmlns="http://www.w3.org/2000/svg"', "").count(needle) == 0, needle
    assert text.count('<script type="application/json" id="trace-') == len(records_of(bench))


@needs_chromium
def test_the_page_shows_the_records_counts_and_a_silent_tasks_fault_and_duplicate(
    bench: Path, page: Page, tmp_path: Path
) -> None:
    path = bench / "report.html"
    open_fresh(page, path)
    records = records_of(bench)
    shots = tmp_path / "screenshots"
    page.screenshot(shots / "bench.png")
    # The outcome table, cell by cell, equals the records.
    shown = page.evaluate(
        """[...document.querySelectorAll('#outcome-table tbody tr, #stress-table tbody tr')].map(tr => [
             tr.dataset.profile, tr.dataset.agent,
             Object.fromEntries([...tr.querySelectorAll('td[data-outcome]')].map(td =>
               [td.dataset.outcome, Number(td.textContent)]))])"""
    )
    expected: dict[tuple[str, str], Counter[str]] = {}
    for record in records:
        expected.setdefault((record.row, record.agent), Counter())[record.outcome] += 1
    assert len(shown) == len(expected) == 6
    for profile, agent, counts in shown:
        cell = expected[(profile, agent)]
        wanted: dict[str, int] = {"tasks": sum(cell.values()), **{o: cell.get(o, 0) for o in OUTCOMES}}
        assert counts == wanted
    # Silent failures are the first thing the page points at.
    silent = [r for r in records if r.outcome == "failed_silent"]
    # retry-only's blind retry left a duplicate; naive raised after a write the server applied.
    duplicated = [(i, r) for i, r in enumerate(records) if r.outcome == "failed_silent" and r.duplicates == 1]
    assert duplicated and all(r.duplicates == 1 or r.agent == "naive" for r in silent)
    first_section = page.evaluate("document.querySelector('body > section').id")
    assert first_section == "silent"
    assert page.evaluate("document.querySelector('#silent h2').textContent") == f"{len(silent)} silent failures"
    assert (
        page.evaluate("document.getElementById('task-count').textContent") == f"{len(records)} of {len(records)} tasks"
    )
    # Open a silent task with a duplicate from the callout: its waterfall shows the fault and the duplicate.
    index, duplicate = duplicated[0]
    page.evaluate(f"document.querySelector('#silent a[data-open=\"{index}\"]').click()")
    trace = page.evaluate("document.querySelector('tr.trace').innerText")
    assert "failed_silent" in trace and duplicate.trace_id in trace
    assert "fault timeout/drop" in trace and "client received: nothing" in trace
    steps = page.evaluate(
        """[...document.querySelectorAll('tr.trace .step:not(.axis)')].map(s => [s.className,
             [...s.querySelectorAll('.mark')].map(m => m.textContent)])"""
    )
    kinds = [cls.split()[1] for cls, _ in steps]
    assert kinds == ["task", "attempt", "proxy", "server", "attempt", "proxy", "server"]
    assert "fault" in steps[2][1] and "fault" in steps[2][0]  # the proxy span that dropped the answer
    assert "duplicate" in steps[6][1] and "duplicate" not in steps[3][1]  # the second incident only
    assert trace.count("state change {op=open_incident") == 2
    page.screenshot_of("tr.trace", shots / "silent-task-trace.png")
    page.screenshot(shots / "bench-silent-task-open.png")
    assert_no_request_and_no_error(page, path)


@needs_chromium
def test_the_task_list_filters_by_outcome_profile_agent_and_fault_type(bench: Path, page: Page) -> None:
    path = bench / "report.html"
    open_fresh(page, path)
    records = records_of(bench)

    def shown_after(**filters: str) -> int:
        script = "".join(
            f"document.getElementById('filter-{key}').value = {json.dumps(value)};" for key, value in filters.items()
        )
        page.evaluate(
            script + "document.getElementById('filter-outcome').dispatchEvent(new Event('change'));"
            "document.querySelectorAll('#task-table tbody tr.task').length"
        )
        return int(page.evaluate("document.querySelectorAll('#task-table tbody tr.task').length"))

    for outcome in OUTCOMES:
        assert shown_after(outcome=outcome, profile="", agent="", fault="") == sum(
            1 for r in records if r.outcome == outcome
        )
    assert shown_after(outcome="", profile="error", agent="naive", fault="") == 6
    assert shown_after(outcome="", profile="", agent="", fault="timeout") == sum(
        1 for r in records if "timeout" in r.fault_types
    )
    # Failures come first in the list.
    first = page.evaluate(
        "(() => { ['outcome','profile','agent','fault'].forEach(k => document.getElementById('filter-' + k).value = '');"
        "document.getElementById('filter-outcome').dispatchEvent(new Event('change'));"
        "return document.querySelector('#task-table tbody tr.task').dataset.outcome; })()"
    )
    assert first == "failed_silent"
    assert_no_request_and_no_error(page, path)


def test_report_html_rewrites_the_page_of_an_existing_run_and_refuses_what_is_not_one(
    bench: Path, tmp_path: Path
) -> None:
    (bench / "report.html").unlink()
    done = subprocess.run([*MCPFAULT, "report", "--html", str(bench)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (bench / "report.html").is_file() and "report.html" in done.stdout
    for where in (bench / "charts", tmp_path / "missing"):
        refused = subprocess.run(
            [*MCPFAULT, "report", "--html", str(where)], capture_output=True, text=True, timeout=60
        )
        assert refused.returncode == 2
        assert "mcpfault report: --html" in refused.stderr and "--out directory" in refused.stderr


def test_text_from_the_run_cannot_break_out_of_the_page() -> None:
    record = TaskRecord(
        profile="p</script><script>alert(1)</script>",
        agent="a<b>",
        session=0,
        task_index=0,
        task="open_incident",
        outcome="failed_silent",
        detail="</script><!-- & \u2028",
    )
    text = report_html.render_run(report_html.RunData(title="t<i>", records=(record,)))
    assert "<script>alert(1)" not in text and "<b>" not in text and "<i>" not in text
    assert text.count("</script>") == text.count("<script")  # every script ends where it should
    data = text.split('<script type="application/json" id="task-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(data)[0][11] == "</script><!-- & \u2028"


@needs_chromium
def test_a_run_directory_gets_its_report_html_too(tmp_path: Path, page: Page) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [*MCPFAULT, "run", "--profile", "error", "--tasks", "4", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    path = out / "report.html"
    open_fresh(page, path)
    records = records_of(out)
    assert (
        page.evaluate("document.getElementById('task-count').textContent") == f"{len(records)} of {len(records)} tasks"
    )
    assert page.evaluate("document.querySelectorAll('#outcome-table tbody tr').length") == 1
    page.evaluate("document.querySelector('#task-table tbody tr.task').click()")
    assert page.evaluate("document.querySelectorAll('tr.trace .step.attempt').length") >= 1
    page.screenshot(tmp_path / "screenshots" / "run.png")
    assert_no_request_and_no_error(page, path)


@pytest.mark.slow
@needs_chromium
def test_an_experiment_gets_a_page_with_its_verdict_states_and_probe_values(tmp_path: Path, page: Page) -> None:
    out = tmp_path / "experiment"
    done = subprocess.run(
        [*MCPFAULT, "experiment", "run", str(ROOT / "experiments" / "latency-holds.toml"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (out / "report.html").is_file(), done.stdout + done.stderr
    outcome = json.loads((out / "outcome.json").read_text())
    journal = read_jsonl(out / "journal.jsonl", strict=True)
    path = out / "report.html"
    open_fresh(page, path)
    assert page.evaluate("document.querySelector('#verdict h2').textContent") == f"Verdict: {outcome['verdict']}"
    states = page.evaluate("[...document.querySelectorAll('#journal-table tbody tr .state')].map(s => s.textContent)")
    assert states == [entry["data"]["state"] for entry in journal]
    probes = page.evaluate("[...document.querySelectorAll('#probe-table tbody th')].map(th => th.textContent)")
    assert probes == list(outcome["hypothesis"])
    assert page.evaluate("document.querySelectorAll('#timeline svg').length") == 1
    page.screenshot(tmp_path / "screenshots" / "experiment.png")
    assert_no_request_and_no_error(page, path)


def test_broken_inputs_are_refused_with_the_file_named(bench: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "records.jsonl").write_text((bench / "records.jsonl").read_text() + "{not json\n")
    done = subprocess.run([*MCPFAULT, "report", "--html", str(copy)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"{copy / 'records.jsonl'}:37: not a task record" in done.stderr
    (copy / "records.jsonl").write_text((bench / "records.jsonl").read_text())
    (copy / "bench.json").write_text("[1, 2")
    done = subprocess.run([*MCPFAULT, "report", "--html", str(copy)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"{copy / 'bench.json'}: not the bench's JSON" in done.stderr
    (copy / "bench.json").unlink()
    done = subprocess.run([*MCPFAULT, "report", "--html", str(copy)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr  # no spans, no report.md: the page without traces
    assert '<script type="application/json" id="trace-' not in (copy / "report.html").read_text()


def test_with_trials_the_outcome_table_shows_pass_k_and_never_silent_k() -> None:
    def run(index: int, trial: int, outcome: str) -> TaskRecord:
        return TaskRecord("p", "a", 0, index, "site_triage", outcome, trial=trial)  # type: ignore[arg-type]

    records = (
        run(0, 1, "success"),
        run(0, 2, "success"),
        run(1, 1, "success"),
        run(1, 2, "failed_silent"),
    )
    text = report_html.render_run(report_html.RunData(title="trials", records=records))
    # Task 0 is correct on both runs, task 1 on one of two: pass^1 = 75%, pass^2 = 50%; never silent the same.
    for attribute, k, share in (
        ("pass-k", 1, 75),
        ("pass-k", 2, 50),
        ("never-silent-k", 1, 75),
        ("never-silent-k", 2, 50),
    ):
        assert f'data-{attribute}="{k}">{share}%</td>' in text
    assert "pass^2" in text and "never silent^2" in text


def test_the_stress_profiles_get_a_table_of_their_own() -> None:
    records = tuple(
        TaskRecord(profile, "resilient", 0, index, "site_triage", outcome)  # type: ignore[arg-type]
        for profile in ("mixed", "outage", "storm")
        for index, outcome in enumerate(("success", "failed_detected"))
    )
    text = report_html.render_run(report_html.RunData(title="stress", records=records))
    gentle = text.split('<table id="outcome-table"', 1)[1].split("</table>", 1)[0]
    stress = text.split('<table id="stress-table"', 1)[1].split("</table>", 1)[0]
    assert 'data-profile="mixed"' in gentle and 'data-profile="outage"' not in gentle
    assert (
        'data-profile="outage"' in stress and 'data-profile="storm"' in stress and 'data-profile="mixed"' not in stress
    )


def test_the_outcome_table_keeps_the_order_the_profiles_were_given(bench: Path) -> None:
    # `--profiles lost_once.toml,error`: error comes first in the usual order, second as given.
    outcomes = (bench / "report.html").read_text(encoding="utf-8").split('<section id="outcomes">', 1)[1]
    outcomes = outcomes.split("</section>", 1)[0]
    markdown = (bench / "report.md").read_text(encoding="utf-8")
    assert outcomes.index(">lost_once<") < outcomes.index(">error<"), outcomes[:2000]
    assert markdown.index("| lost_once") < markdown.index("| error")


def test_the_silent_callout_lists_its_cells_in_the_outcome_tables_order() -> None:
    def task(profile: str, agent: str, index: int) -> TaskRecord:
        return TaskRecord(profile, agent, 0, index, "site_triage", "failed_silent")

    # Records in the order sessions finished (slowest first), profiles given as "lost_once,error", and a
    # stress profile, whose table comes after the gentle one's.
    records = (
        task("storm", "naive", 0),
        task("error", "resilient", 1),
        task("error", "naive", 0),
        task("lost_once", "naive", 2),
        task("lost_once", "naive", 1),
    )
    meta = {"rows": ["storm", "lost_once", "error"]}
    text = report_html.render_run(report_html.RunData(title="order", records=records, meta=meta))
    callout = text.split('<section id="silent"', 1)[1].split("</section>", 1)[0]
    assert "By cell: lost_once / naive: 2, error / naive: 1, error / resilient: 1, storm / naive: 1." in callout
    listed = [item.split("</a>", 1)[0].split('">', 1)[1] for item in callout.split("<li>")[1:]]
    assert listed == [
        "lost_once / naive · session 0 · task 1 (site_triage)",
        "lost_once / naive · session 0 · task 2 (site_triage)",
        "error / naive · session 0 · task 0 (site_triage)",
        "error / resilient · session 0 · task 1 (site_triage)",
        "storm / naive · session 0 · task 0 (site_triage)",
    ]
