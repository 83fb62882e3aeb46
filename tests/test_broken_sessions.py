"""A session that broke shows in report.md: a banner naming it, and its cells marked."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from mcpfault.analysis.records import TaskRecord, write_records
from mcpfault.harness.bench import merge_results
from mcpfault.harness.report import ReportMeta, render_markdown, summarize

META = ReportMeta("mcpfault bench", 0, 2, 1.0, 1, "2026-01-01T00:00:00+00:00", "2 CPUs")
ERROR = "session 1 of mixed/resilient: the trace join and the proxy's events disagree (task 3: fault types)"


def records() -> list[TaskRecord]:
    return [
        TaskRecord(profile, agent, 0, i, "site_triage", "success")
        for profile in ("mixed", "error")
        for agent in ("naive", "resilient")
        for i in range(2)
    ]


def test_banner_names_the_broken_session_and_its_cells_are_marked():
    meta = dataclasses.replace(META, broken=(("mixed", "resilient", 1, ERROR),))
    text = render_markdown(summarize(records()), meta)
    assert "> **Warning: 1 session(s) broke.**" in text
    assert f"> - mixed/resilient session 1: {ERROR}" in text
    success = text.split("## Success rate")[1].split("##")[0]
    assert "| mixed   | 100% (0%) | 100% (0%) (broken) |" in success
    assert "| error   | 100% (0%) |          100% (0%) |" in success
    counts = text.split("## Outcome counts")[1].split("##")[0]
    assert "| mixed   | resilient (broken) |" in counts and "| error   | resilient          |" in counts


def test_no_banner_when_every_session_ran():
    assert "Warning" not in render_markdown(summarize(records()), META)
    assert "(broken)" not in render_markdown(summarize(records()), META)


def test_merging_shards_keeps_their_broken_sessions(tmp_path: Path):
    for index, broken in enumerate(([], [{"profile": "mixed", "agent": "resilient", "session": 1, "error": ERROR}])):
        shard = tmp_path / f"shard{index}"
        shard.mkdir()
        write_records(shard / "records.jsonl", [r for r in records() if r.task_index == index])
        (shard / "bench.json").write_text(json.dumps({"seed": 0, "broken": broken}))
    merged = merge_results([tmp_path / "shard0", tmp_path / "shard1"])
    assert [(b.profile, b.agent, b.session) for b in merged.broken] == [("mixed", "resilient", 1)]
