"""A trace per task: a real bench's span files, the session span linked with its tasks both ways,
exemplars pointing at task traces, and ``traces show`` listing, sorting and filtering the tasks."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.exposition import generate_latest

from mcpfault.analysis import trace_tree, traces
from mcpfault.analysis.records import TaskRecord, read_records
from mcpfault.harness import waterfall
from mcpfault.harness.metrics_push import record_bench_metrics, trace_ids_of
from mcpfault.telemetry import names
from mcpfault.telemetry.metrics import HarnessMetrics
from mcpfault.telemetry.tracing import SpanView
from tests.bench_support import run_small_bench

MCPFAULT = [sys.executable, "-m", "mcpfault"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_small_bench(tmp_path_factory.mktemp("task-traces") / "bench")


def session_dirs(bench: Path) -> list[Path]:
    # The bench gzips each session's span files once it is judged.
    return sorted(
        {path.parent for name in (traces.CLIENT_SPANS, traces.CLIENT_SPANS + ".gz") for path in bench.rglob(name)}
    )


def records_of(bench: Path) -> list[TaskRecord]:
    return list(read_records(bench / "records.jsonl"))


def show(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MCPFAULT, "traces", "show", *args], capture_output=True, text=True, timeout=60)


def test_each_task_is_the_root_of_its_own_trace_linked_to_its_session(bench: Path) -> None:
    directories = session_dirs(bench)
    assert len(directories) == 12  # 2 profiles x 3 agents x 2 sessions
    task_traces: set[str] = set()
    for directory in directories:
        spans = traces.read_session_spans(directory)
        (session,) = [s for s in spans.client if s.name == names.SESSION_SPAN]
        tasks = [s for s in spans.client if isinstance(s.attributes.get(names.TASK_INDEX), int)]
        assert len(tasks) == 3
        for task in tasks:
            assert task.parent_span_id is None  # a root
            assert task.trace_id != session.trace_id
            (link,) = task.links
            assert (link.trace_id, link.span_id) == (session.trace_id, session.span_id)
            assert link.attributes == {names.LINK_ROLE: names.LINK_SESSION}
            assert task.attributes[names.SESSION_INDEX] == session.attributes[names.SESSION_INDEX]
            assert task.attributes[names.SESSION_ID] == session.attributes[names.SESSION_ID] == session.trace_id
        # ... and the session span links to each of its tasks.
        assert sorted((link.trace_id, link.span_id) for link in session.links) == sorted(
            (t.trace_id, t.span_id) for t in tasks
        )
        assert {link.attributes[names.LINK_ROLE] for link in session.links} == {names.LINK_TASK}
        # Every attempt, proxy span and server span of a task lives in the task's trace.
        by_trace: dict[str, list[SpanView]] = defaultdict(list)
        for span in (*spans.client, *spans.proxy, *spans.server):
            by_trace[span.trace_id].append(span)
        for index, tree in traces.task_traces(spans).items():
            assert tree.attempts, f"task {index} has no attempts"
            for attempt in tree.attempts:
                assert attempt.span.trace_id == tree.span.trace_id
                assert {p.trace_id for p in attempt.proxy} | {s.trace_id for s in attempt.server} <= {
                    tree.span.trace_id
                }
                assert attempt.proxy and (attempt.server or attempt.faults)
            # The trace holds the task's spans and nothing of another task.
            assert {s.span_id for s in by_trace[tree.span.trace_id] if s.kind.name == "CLIENT"} == {
                a.span.span_id for a in tree.attempts
            }
        task_traces.update(t.trace_id for t in tasks)
        # The requests between tasks (initialize, tools/list) stay under the session span.
        assert any(s.parent_span_id == session.span_id for s in spans.client)
    records = records_of(bench)
    assert len(task_traces) == len(records) == 36
    assert {r.trace_id for r in records} == task_traces  # each record points at its task's trace


def test_exemplars_point_at_task_traces(bench: Path) -> None:
    records = records_of(bench)
    metrics = HarnessMetrics()
    record_bench_metrics(records, metrics, trace_ids=trace_ids_of(records))
    text = generate_latest(metrics.registry).decode()  # type: ignore[no-untyped-call]
    exemplars = {line.split('trace_id="', 1)[1][:32] for line in text.splitlines() if "# {trace_id=" in line}
    sessions = {
        s.trace_id
        for directory in session_dirs(bench)
        for s in traces.read_session_spans(directory).client
        if s.name == names.SESSION_SPAN
    }
    assert exemplars and exemplars <= {r.trace_id for r in records}
    assert not exemplars & sessions


def test_traces_show_lists_profile_and_session_sorted(bench: Path) -> None:
    done = show(str(bench))
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if "profile" in line and "session" in line)
    assert header.split()[1:9] == ["profile", "┃", "agent", "┃", "session", "┃", "task", "┃"]
    roots = trace_tree.trees(trace_tree.read_run(bench))
    rows = trace_tree.task_rows(roots)
    assert len(rows) == 36
    keys = [(r.profile, r.agent, r.session, r.index) for r in rows]
    assert keys[:3] == [("error", "naive", 0, 0), ("error", "naive", 0, 1), ("error", "naive", 0, 2)]
    # Profiles in the report's order (bundled first, then others by name), agents naive, retry-only, resilient.
    assert [k[0] for k in keys] == ["error"] * 18 + ["lost_once"] * 18
    assert [k[1] for k in keys[:18]] == ["naive"] * 6 + ["retry-only"] * 6 + ["resilient"] * 6
    assert [k[2] for k in keys[:6]] == [0, 0, 0, 1, 1, 1]
    for row in rows[:6]:
        assert row.trace_id in done.stdout


def test_traces_show_filters_by_outcome_profile_and_agent(bench: Path) -> None:
    silent = [r for r in records_of(bench) if r.outcome == "failed_silent"]
    # retry-only's blind retry of the lost open_incident (a duplicate), and naive's raise after the
    # server applied the write it reported as failed: both damage, so both silent.
    assert {r.agent for r in silent} == {"naive", "retry-only"}
    done = show(str(bench), "--outcome", "failed_silent")
    assert done.returncode == 0, done.stderr
    listed = [line for line in done.stdout.splitlines() if line.startswith("│")]
    assert len(listed) == len(silent)
    assert all("lost_once" in line and "timeout/drop" in line for line in listed)
    assert sum("retry-only" in line for line in listed) == sum(r.agent == "retry-only" for r in silent)
    assert all("failed_silent" in line for line in listed)
    assert {r.trace_id for r in silent} == {line.split()[-2] for line in listed}
    only = show(str(bench), "--profile", "error", "--agent", "resilient")
    assert only.returncode == 0, only.stderr
    rows = [line for line in only.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 6 and all("error" in r and "resilient" in r for r in rows)
    tree = show(str(bench), "--task", "0", "--outcome", "failed_silent")
    assert tree.returncode == 0, tree.stderr
    assert tree.stdout.count("outcome=failed_silent") == sum(1 for r in silent if r.task_index == 0)
    assert "profile=lost_once" in tree.stdout and "session=" in tree.stdout
    none = show(str(bench), "--outcome", "failed_silent", "--agent", "resilient")
    assert none.returncode == 0 and "no task matches --outcome failed_silent --agent resilient" in none.stdout


def test_traces_show_refuses_a_directory_that_is_not_a_run(bench: Path, tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "old-spans.jsonl").write_text("")
    for where in (tmp_path / "notes", bench / "charts", tmp_path / "missing"):
        done = show(str(where))
        assert done.returncode == 2, done.stdout
        assert "mcpfault traces show:" in done.stderr and "--out directory" in done.stderr
    assert "is not a run's directory: it holds none of records.jsonl" in show(str(tmp_path / "notes")).stderr
    assert show(str(next(iter(session_dirs(bench))))).returncode == 0  # one session's directory is a run's


def test_traces_export_sends_the_links_between_tasks_and_sessions(bench: Path, receiver: Any) -> None:
    done = subprocess.run(
        [*MCPFAULT, "traces", "export", str(bench), "--otlp-endpoint", receiver.base_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    exported = receiver.spans()
    sessions = {span.span_id.hex(): span for span in exported if span.name == names.SESSION_SPAN}
    tasks = [span for span in exported if span.name.startswith(names.TASK_SPAN + " ")]
    assert len(sessions) == 12 and len(tasks) == 36
    for task in tasks:
        (link,) = task.links
        session = sessions[link.span_id.hex()]
        assert link.trace_id == session.trace_id != task.trace_id
        assert (task.trace_id, task.span_id) in {(back.trace_id, back.span_id) for back in session.links}


def test_the_llm_agents_model_calls_are_in_its_tasks_traces(tmp_path: Path) -> None:
    out = tmp_path / "llm"
    agent = ["--agent", "llm", "--model", "fake-careful"]
    done = subprocess.run(
        [*MCPFAULT, "run", *agent, "--profile", "timeout", "--tasks", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    spans = traces.read_session_spans(out)
    records = records_of(out)
    model_calls = [s for s in spans.client if s.attributes.get(names.GEN_AI_OPERATION_NAME) == "chat"]
    assert model_calls and {s.trace_id for s in model_calls} == {r.trace_id for r in records}
    tasks = {node.span.trace_id: node for node in trace_tree.tasks(trace_tree.trees(spans.client))}
    for call in model_calls:
        assert call.parent_span_id == tasks[call.trace_id].span.span_id  # a child of its task, beside the attempts
    steps = waterfall.waterfall(tasks[records[0].trace_id or ""])
    assert [s.kind for s in steps].count("model") == sum(1 for c in model_calls if c.trace_id == records[0].trace_id)


def test_a_long_session_links_to_every_task_beyond_the_sdks_default_limit(tmp_path: Path) -> None:
    out = tmp_path / "long"
    done = subprocess.run(
        [*MCPFAULT, "run", "--profile", "baseline", "--tasks", "140", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    spans = traces.read_session_spans(out)
    (session,) = [s for s in spans.client if s.name == names.SESSION_SPAN]
    assert len(session.links) == 140  # the SDK keeps 128 links per span unless told otherwise


def test_traces_show_names_where_the_links_lead(bench: Path) -> None:
    directory = session_dirs(bench)[0]
    spans = traces.read_session_spans(directory)
    (session,) = [s for s in spans.client if s.name == names.SESSION_SPAN]
    done = show(str(directory), "--trace", session.trace_id)
    assert done.returncode == 0, done.stderr
    assert "mcpfault.session" in done.stdout and "links to 3 task trace(s)" in done.stdout
    task = show(str(directory), "--task", "0")
    assert task.returncode == 0, task.stderr
    assert f"session trace {session.trace_id}" in task.stdout.replace("\n", "")
