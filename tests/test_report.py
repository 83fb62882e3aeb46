"""The bench report: exact figures in the tables, well-formed charts, escaping and determinism."""

from __future__ import annotations

import io
import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from mcpfault.analysis.records import TaskRecord
from mcpfault.harness.report import (
    CHARTS,
    ReportMeta,
    nice_ceiling,
    percent,
    percentile,
    print_summary,
    render_markdown,
    summarize,
    write_report,
)

SVG = "{http://www.w3.org/2000/svg}"
META = ReportMeta(
    command="mcpfault bench --tasks 4 --seed 7",
    seed=7,
    tasks_per_cell=4,
    wall_s=83.4,
    jobs=2,
    started_at="2025-01-07T10:00:00+00:00",
    machine="2 CPUs, Python 3.11.7, Linux 6.8",
)
RECOVERY_TIMES = (0.4, 0.1, 1.0, 0.3, 0.2)  # median 0.3 s; p95 at rank 3.8: 0.4 + 0.8 * 0.6 = 0.88 s


def rec(profile: str, agent: str, outcome: str, index: int = 0, **fields: object) -> TaskRecord:
    return TaskRecord(profile, agent, 0, index, "site_triage", outcome, **fields)  # type: ignore[arg-type]


def cell(profile: str, agent: str, *outcomes: str, **fields: object) -> list[TaskRecord]:
    return [rec(profile, agent, outcome, i, **fields) for i, outcome in enumerate(outcomes)]


def records() -> list[TaskRecord]:
    """Known outcomes; agents and profiles deliberately listed out of display order."""
    timeout_resilient = [
        rec("timeout", "resilient", "recovered", i, fault_types=types, affected_types=types, recovery_s=s, retries=1)
        for i, (s, types) in enumerate(
            zip(
                RECOVERY_TIMES,
                [("timeout",), ("timeout",), ("timeout", "latency"), ("timeout",), ("timeout",)],
                strict=True,
            )
        )
    ]
    return [
        *cell("zeta", "aaa-agent", "success", "success", "success", "success"),
        *timeout_resilient,
        *cell("timeout", "resilient", "failed_detected", failure="deadline", fault_types=("timeout",)),
        *cell("timeout", "naive", "success", fault_types=()),
        *[rec("timeout", "naive", "failed_silent", i, duplicates=2, fault_types=("timeout",)) for i in (1, 2)],
        rec("timeout", "naive", "failed_detected", 3, failure="timeout", retries=3, fault_types=("timeout",)),
        *cell("baseline", "resilient", "success", "success", "success", "success"),
        *cell("baseline", "naive", "success", "failed_silent", "success", "success", duplicates=1),
        *cell("alpha", "naive", "success", "success", "success", "success"),
    ]


def write(tmp_path: Path, items: list[TaskRecord], meta: ReportMeta = META) -> str:
    return write_report(items, tmp_path, meta).read_text(encoding="utf-8")


def section(markdown: str, heading: str) -> str:
    return markdown.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def table(markdown: str, heading: str) -> list[list[str]]:
    """The rows of the first table under a heading, header included, cells stripped (split on unescaped |)."""
    lines = [line for line in section(markdown, heading).splitlines() if line.startswith("|")]
    rows = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    return [rows[0], *rows[2:]]


def bars(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return [el for el in root.iter(f"{SVG}rect") if el.get("class", "").split()[:1] == ["bar"]]


def test_success_table_percentages_and_order(tmp_path: Path) -> None:
    rows = table(write(tmp_path, records()), "Success rate")
    assert rows == [
        ["profile", "naive", "resilient", "aaa-agent"],
        ["baseline", "75% (25%)", "100% (0%)", "-"],
        ["timeout", "25% (50%)", "83% (0%)", "-"],
        ["alpha", "100% (0%)", "-", "-"],
        ["zeta", "-", "-", "100% (0%)"],
    ]


def test_known_profiles_and_agents_come_first_then_alphabetical() -> None:
    names = ["mixed", "zz", "baseline", "drift_output", "aa", "stale", "timeout"]
    items = [
        rec(p, a, "success") for p in names for a in ("resilient-no-freshness", "resilient", "naive", "retry-only")
    ]
    summary = summarize(items)
    assert summary.profiles == ("baseline", "timeout", "stale", "drift_output", "mixed", "aa", "zz")
    assert summary.agents == ("naive", "retry-only", "resilient", "resilient-no-freshness")


def test_outcome_counts_table(tmp_path: Path) -> None:
    rows = table(write(tmp_path, records()), "Outcome counts")
    assert rows[0] == [
        "profile",
        "agent",
        "tasks",
        "success",
        "recovered",
        "failed_detected",
        "failed_silent",
        "touched, no effect",
    ]
    assert rows[1:] == [
        ["baseline", "naive", "4", "3", "0", "0", "1", "0"],
        ["baseline", "resilient", "4", "4", "0", "0", "0", "0"],
        ["timeout", "naive", "4", "1", "0", "1", "2", "0"],
        ["timeout", "resilient", "6", "0", "5", "1", "0", "0"],
        ["alpha", "naive", "4", "4", "0", "0", "0", "0"],
        ["zeta", "aaa-agent", "4", "4", "0", "0", "0", "0"],
    ]


def test_duplicates_and_retries(tmp_path: Path) -> None:
    rows = {(r[0], r[1]): r[2:] for r in table(write(tmp_path, records()), "Duplicates and retries")[1:]}
    assert rows["baseline", "naive"] == ["4", "0", "0.00"]
    assert rows["timeout", "naive"] == ["4", "3", "0.75"]
    assert rows["timeout", "resilient"] == ["0", "5", "0.83"]


def test_percentile_is_linear_between_closest_ranks() -> None:
    assert percentile(RECOVERY_TIMES, 50) == 0.3
    assert percentile(RECOVERY_TIMES, 95) == pytest.approx(0.88)
    assert percentile(range(1, 21), 95) == pytest.approx(19.05)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_recovery_per_fault_type_counts_a_task_under_each_type(tmp_path: Path) -> None:
    summary = summarize(records())
    timeout = summary.recovery_for("timeout", "resilient")
    latency = summary.recovery_for("latency", "resilient")
    assert timeout is not None and latency is not None
    assert (timeout.samples, timeout.median_s) == (5, 0.3)
    assert timeout.p95_s == pytest.approx(0.88)
    assert (latency.samples, latency.median_s, latency.p95_s) == (1, 1.0, 1.0)
    rows = table(write(tmp_path, records()), "Recovery time by fault type")
    assert rows == [
        ["fault type", "naive", "resilient", "aaa-agent"],
        ["timeout", "-", "300 ms / 880 ms (5)", "-"],
        ["latency", "-", "1,000 ms / 1,000 ms (1)", "-"],
    ]
    assert "interpolate linearly" in section((tmp_path / "report.md").read_text(), "Recovery time by fault type")


def test_failures_by_class(tmp_path: Path) -> None:
    items = [*records(), rec("baseline", "naive", "failed_detected", 9, failure="deadline")]
    rows = table(write(tmp_path, items, META), "Failures by class")
    assert rows == [
        ["failure", "naive", "resilient", "aaa-agent", "total"],
        ["deadline", "1", "1", "0", "2"],
        ["timeout", "1", "0", "0", "1"],
    ]


def test_header_and_chart_links(tmp_path: Path) -> None:
    markdown = write(tmp_path, records())
    assert "```sh\nmcpfault bench --tasks 4 --seed 7\n```" in markdown
    for fact in ("**Seed:** 7", "**Tasks per cell:** 4", "**Jobs:** 2", "**Wall time:** 83.4 s (1 min 23 s)"):
        assert fact in markdown
    assert "2 CPUs, Python 3.11.7, Linux 6.8" in markdown and "2025-01-07T10:00:00+00:00" in markdown
    assert "timeout/resilient (6)" in markdown  # the one cell that does not have tasks_per_cell tasks
    for name in CHARTS:
        assert f"](charts/{name})" in markdown
        assert (tmp_path / "charts" / name).is_file()


def test_command_with_backticks_gets_a_longer_fence() -> None:
    meta = ReportMeta("echo ```x``` | mcpfault bench", 1, 1, 1.0, 1, "t", "m")
    assert "````sh\necho ```x``` | mcpfault bench\n````" in render_markdown(summarize(records()), meta)


def test_proxy_overhead_table_only_when_given(tmp_path: Path) -> None:
    assert "## Proxy time under the bench's load" not in write(tmp_path, records())
    meta = ReportMeta(**{**META.__dict__, "proxy_overhead": {"proxied_p50_ms": 0.63, "direct_p50_ms": 0.41}})
    text = render_markdown(summarize(records()), meta)
    assert "Not the proxy's overhead" in text and "benchmarks/stdio_overhead.py" in text  # labelled as what it is
    rows = table(text, "Proxy time under the bench's load")
    assert rows == [["figure", "value"], ["direct_p50_ms", "0.410 ms"], ["proxied_p50_ms", "0.630 ms"]]


def test_percent_rounds_half_up_and_never_hides_a_share() -> None:
    assert [percent(3, 4), percent(1, 8), percent(1, 3), percent(2, 3)] == ["75%", "13%", "33%", "67%"]
    assert [percent(0, 300), percent(1, 300), percent(299, 300), percent(300, 300)] == ["0%", "<1%", ">99%", "100%"]
    assert percent(0, 0) == "-"


def test_svg_charts_parse_and_have_one_bar_per_datum(tmp_path: Path) -> None:
    write(tmp_path, records())
    charts = {name: (tmp_path / "charts" / name).read_text(encoding="utf-8") for name in CHARTS}
    # Outcome segments: one per non-zero outcome of each cell: 2 + 1 + 3 + 2 + 1 + 1.
    outcome_bars = bars(charts["outcomes.svg"])
    assert len(outcome_bars) == 10
    assert sorted({b.get("class", "") for b in outcome_bars}) == [
        "bar bar-failed_detected",
        "bar bar-failed_silent",
        "bar bar-recovered",
        "bar bar-success",
    ]
    assert len(bars(charts["silent.svg"])) == 6  # one per cell, zero-width ones included
    assert len(bars(charts["recovery.svg"])) == 2  # timeout and latency, resilient only
    for svg in charts.values():
        root = ET.fromstring(svg)
        assert root.get("version") == "1.1" and root.get("viewBox", "").startswith("0 0 ")
        assert root.find(f"{SVG}title") is not None
        for b in bars(svg):
            assert float(b.get("width", "-1")) >= 0 and b.find(f"{SVG}title") is not None


def test_outcome_segments_fill_the_bar_exactly(tmp_path: Path) -> None:
    write(tmp_path, records())
    segments = bars((tmp_path / "charts" / "outcomes.svg").read_text(encoding="utf-8"))
    row = [b for b in segments if "timeout / naive" in (b.findtext(f"{SVG}title") or "")]
    widths = [float(b.get("width", "0")) for b in row]
    assert widths == pytest.approx([130.0, 130.0, 260.0])  # 1, 1 and 2 of 4 tasks on a 520-wide plot


def test_recovery_chart_without_recoveries_is_still_a_chart(tmp_path: Path) -> None:
    write(tmp_path, cell("baseline", "naive", "success", "failed_silent"))
    svg = (tmp_path / "charts" / "recovery.svg").read_text(encoding="utf-8")
    assert bars(svg) == [] and "no recovered task" in svg
    assert "No fault touched any task." in (tmp_path / "report.md").read_text(encoding="utf-8")


def test_names_are_escaped_in_markdown_and_svg(tmp_path: Path) -> None:
    hostile = "<&>|x"
    items = [rec(hostile, 'a"g<ent>', "failed_silent", fault_types=("t&<",)), rec(hostile, 'a"g<ent>', "success", 1)]
    markdown = write(tmp_path, items)
    assert "&lt;&amp;&gt;\\|x" in markdown and "<&>" not in markdown
    assert table(markdown, "Success rate")[1] == ["&lt;&amp;&gt;\\|x", "50% (50%)"]
    for name in CHARTS:
        root = ET.fromstring((tmp_path / "charts" / name).read_text(encoding="utf-8"))
        texts = [el.text for el in root.iter(f"{SVG}text")]
        if name != "recovery.svg":
            assert hostile in texts and 'a"g<ent>' in texts


def test_control_characters_do_not_break_the_xml(tmp_path: Path) -> None:
    write(tmp_path, [rec("bad\x01name", "naive", "success")])
    ET.fromstring((tmp_path / "charts" / "outcomes.svg").read_text(encoding="utf-8"))


def test_output_is_deterministic_whatever_the_record_order(tmp_path: Path) -> None:
    shuffled = records()
    random.Random(1).shuffle(shuffled)
    first, second = tmp_path / "a", tmp_path / "b"
    write_report(records(), first, META)
    write_report(shuffled, second, META)
    for name in ["report.md", *(f"charts/{c}" for c in CHARTS)]:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    write_report(records(), first, META)  # rewriting in place changes nothing either
    assert (first / "report.md").read_bytes() == (second / "report.md").read_bytes()


def test_empty_input_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no task records"):
        write_report([], tmp_path / "out", META)
    assert not (tmp_path / "out").exists()


def test_unknown_outcome_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown outcome 'bogus'"):
        summarize([rec("baseline", "naive", "bogus")])


def test_nice_ceiling() -> None:
    assert [nice_ceiling(v) for v in (0, 3, 12, 24, 25, 26, 480, 1000, 0.3)] == [1, 5, 20, 25, 25, 50, 500, 1000, 0.5]


def test_print_summary_shows_the_success_table() -> None:
    out = io.StringIO()
    print_summary(records(), Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    baseline = next(line for line in text.splitlines() if "baseline" in line)
    assert "75% (25%)" in baseline and "100% (0%)" in baseline
    assert text.index("naive") < text.index("resilient") < text.index("aaa-agent")
