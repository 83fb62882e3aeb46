"""Agents through the real proxy to the real mock server: what each policy buys, judged end to end."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpfault.analysis.records import read_records
from mcpfault.harness.agents.tasks import TaskSpec
from mcpfault.harness.bench import BenchConfig, plan_sessions, run_bench
from mcpfault.harness.session import SessionPlan, run_session
from mcpfault.mock.world import World
from mcpfault.telemetry.tracing import read_spans
from tests.conftest import write_profile
from tests.http_support import free_port
from tests.prometheus_support import PUSHGATEWAY, http_get, pushgateway

pytestmark = pytest.mark.slow
WORLD = World.generate(0)
DEVICE = WORLD.device_ids()[0]


def bounded(function: Any, *args: Any, seconds: float = 60) -> Any:
    async def main() -> Any:
        with anyio.fail_after(seconds):
            return await function(*args)

    return anyio.run(main)


def session(tmp_path: Path, profile: Path, agent: str, specs: list[TaskSpec]) -> list:
    plan = SessionPlan(
        profile=profile, profile_name=profile.stem, agent=agent, tasks=tuple(specs), out_dir=tmp_path / agent
    )
    result = bounded(run_session, plan, WORLD)
    assert result.error is None, result.error
    return result.records


def incidents(count: int) -> list[TaskSpec]:
    return [TaskSpec(i, "open_incident", DEVICE, f"task-t-{i}") for i in range(count)]


LOST_FIRST_INCIDENT = '[[faults]]\ntype = "timeout"\ntools = ["open_incident"]\nlimit = 1\n'


def test_naive_raises_after_a_lost_write_response_and_the_write_is_there(tmp_path):
    records = session(tmp_path, write_profile(tmp_path, LOST_FIRST_INCIDENT), "naive", incidents(2))
    # It raised a timeout, but the server created the incident: a write the agent said failed is
    # silent, not detected (analysis.judge), and the record keeps what it raised.
    assert [r.outcome for r in records] == ["failed_silent", "success"]
    assert records[0].failure == "write_denied" and "timeout" in records[0].detail
    assert records[0].fault_types == ("timeout",)
    assert records[0].duplicates == 0  # the server acted once; the agent just never heard


def test_blind_retry_after_a_lost_response_creates_a_duplicate(tmp_path):
    records = session(tmp_path, write_profile(tmp_path, LOST_FIRST_INCIDENT), "retry-only", incidents(2))
    first = records[0]
    assert first.outcome == "failed_silent" and first.duplicates == 1 and first.retries == 1
    assert "2 incidents on the server" in first.detail
    assert records[1].outcome == "success"


def test_idempotency_key_makes_the_retry_safe(tmp_path):
    records = session(tmp_path, write_profile(tmp_path, LOST_FIRST_INCIDENT), "resilient", incidents(2))
    first = records[0]
    assert first.outcome == "recovered" and first.duplicates == 0 and first.retries == 1
    assert first.recovery_s is not None and first.recovery_s >= 0.5  # at least one deadline was lost


def test_without_idempotency_keys_resilient_does_not_retry_a_write(tmp_path):
    records = session(tmp_path, write_profile(tmp_path, LOST_FIRST_INCIDENT), "resilient-no-idempotency", incidents(1))
    # No retry, so no duplicate; but the write it raised about is on the server.
    assert records[0].outcome == "failed_silent" and records[0].duplicates == 0
    assert records[0].failure == "write_denied"


STALE_SECOND_READ = '[[faults]]\ntype = "stale"\ntools = ["get_device_status"]\nafter = 1\nlimit = 1\n'


def roundtrips() -> list[TaskSpec]:
    return [TaskSpec(i, "maintenance_roundtrip", DEVICE, f"task-t-{i}") for i in range(2)]


def test_stale_read_after_write_is_a_silent_wrong_verdict(tmp_path):
    records = session(tmp_path, write_profile(tmp_path, STALE_SECOND_READ), "naive", roundtrips())
    assert records[0].outcome == "success"
    assert records[1].outcome == "failed_silent" and records[1].fault_types == ("stale",)


def test_freshness_check_catches_the_stale_read(tmp_path):
    records = session(tmp_path, write_profile(tmp_path, STALE_SECOND_READ), "resilient", roundtrips())
    assert [r.outcome for r in records] == ["success", "recovered"]
    # Without the freshness check, verification still catches it: the stale status says the device is not
    # in maintenance, get_site says it is; read again, the status is fresh.
    no_freshness = session(tmp_path, write_profile(tmp_path, STALE_SECOND_READ), "resilient-no-freshness", roundtrips())
    assert no_freshness[1].outcome == "recovered" and no_freshness[1].verify_reads >= 2
    neither = session(
        tmp_path, write_profile(tmp_path, STALE_SECOND_READ), "resilient-no-freshness-no-verify", roundtrips()
    )
    assert neither[1].outcome == "failed_silent"


def test_renamed_fields_fool_naive_code_and_reconciliation_maps_them_back(tmp_path):
    drift = write_profile(
        tmp_path,
        '[[faults]]\ntype = "schema_drift"\nrename_fields = { status = "state", utilization_pct = "util_pct" }\n',
    )
    specs = [TaskSpec(0, "site_triage", WORLD.site_ids()[0], "t0"), TaskSpec(1, "interface_check", DEVICE, "t1")]
    naive = session(tmp_path, drift, "naive", specs)
    expected_unhealthy = [d for d in WORLD.device_ids(WORLD.site_ids()[0]) if WORLD.device(d).status != "ok"]
    # site_triage reads .get("status"): renamed away, every device looks healthy.
    assert naive[0].outcome == ("failed_silent" if expected_unhealthy else "success")
    assert naive[1].outcome == "failed_detected" and naive[1].failure == "task_crashed"
    # Resilient lists tools first and so knows the renamed schema before any answer: it maps the fields
    # back without a request after the fault, which is absorbed (success), not a recovery.
    resilient = session(tmp_path, drift, "resilient", specs)
    assert [(r.outcome, r.absorbed) for r in resilient] == [("success", True), ("success", True)]


def test_a_server_that_dies_mid_run_ends_the_session_with_a_clear_error_and_keeps_results(tmp_path):
    out = tmp_path / "dies"
    state = out / "server-state.json"
    # The mock server behind a pipe that closes after 12 lines: it sees EOF, saves its state and exits.
    forward_12 = (
        "import sys\nfor _ in range(12): sys.stdout.buffer.write(sys.stdin.buffer.readline()); sys.stdout.flush()"
    )
    server = (
        "sh",
        "-c",
        f"{sys.executable} -c '{forward_12}' | {sys.executable} -m mcpfault mock-server --state {state}",
    )
    specs = [TaskSpec(i, "site_triage", WORLD.site_ids()[0], f"t{i}") for i in range(6)]
    plan = SessionPlan(
        profile=Path("profiles/baseline.toml"),
        profile_name="baseline",
        agent="naive",
        tasks=tuple(specs),
        out_dir=out,
        server_command=server,
    )
    result = bounded(run_session, plan, WORLD)
    assert result.error is not None and "broke" in result.error
    assert "exited" in result.error or "closed" in result.error
    assert result.records and len(result.records) < len(specs)  # the tasks that ran are judged and kept
    assert result.records[0].outcome == "success"
    assert (out / "attempts.jsonl").read_text()


def counts(records) -> Counter:
    return Counter((r.profile, r.agent, r.outcome) for r in records)


def test_bench_same_seed_same_outcome_counts(tmp_path):
    def bench(out: Path) -> list:
        config = BenchConfig(
            profiles=(Path("profiles/mixed.toml"), Path("profiles/error.toml")),
            agents=("naive", "retry-only"),
            out_dir=out,
            tasks=12,
            session_tasks=6,
            seed=5,
            jobs=8,
        )
        result = bounded(run_bench, config, plan_sessions(config, WORLD_5), WORLD_5, lambda: None, seconds=120)
        assert result.errors == []
        return result.records

    WORLD_5 = World.generate(5)
    first, second = bench(tmp_path / "a"), bench(tmp_path / "b")
    assert len(first) == 2 * 2 * 12
    assert counts(first) == counts(second)
    assert [r.fault_modes for r in first] == [r.fault_modes for r in second]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpfault", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_bench_command_writes_records_report_and_charts(tmp_path):
    out = tmp_path / "bench"
    done = cli(
        "bench",
        "--profiles",
        "baseline,error",
        "--agents",
        "naive,resilient",
        "--tasks",
        "8",
        "--session-tasks",
        "4",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    records = list(read_records(out / "records.jsonl"))
    assert len(records) == 2 * 2 * 8
    assert all(r.outcome == "success" for r in records if r.profile == "baseline")
    report = (out / "report.md").read_text()
    assert re.search(r"\| baseline\s+\|\s+100% \(0%\)\s+\|\s+100% \(0%\)\s+\|", report), report
    assert {p.name for p in (out / "charts").iterdir()} == {"outcomes.svg", "silent.svg", "recovery.svg"}
    assert "success (silent failures)" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("bench", "--profiles", "nope"), "unknown profile 'nope'"),
        (("bench", "--agents", "careful"), "unknown agent 'careful'; choose from: naive, retry-only, resilient"),
        (("run", "--agent", "careful"), "unknown agent 'careful'"),
        (("run", "--tasks", "0"), "--tasks 0: give at least 1"),
        (("bench", "--workflows", "site_triage,coffee"), "unknown workflow 'coffee'; choose from: site_triage"),
        (("run", "--out", "/proc/nope/x"), "--out /proc/nope/x: cannot write there"),
        (("run", "--otlp-endpoint", "localhost:4318"), "--otlp-endpoint 'localhost:4318' is not an http(s) URL"),
        (("bench", "--otlp-endpoint", "http://u:secret@[::1"), "'http://***@[::1' is not an http(s) URL"),
    ],
)
def test_bad_harness_input_is_named(args, message):
    done = cli(*args)
    assert done.returncode == 2
    assert message in done.stderr


# ---- tracing: attempt spans, their context on the wire, and export from all three processes -----------

ECHO_SERVER = (
    "import json, sys\n"
    "for line in sys.stdin:\n"
    "    m = json.loads(line)\n"
    "    if 'id' in m:\n"
    "        print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': {'echo': m.get('params')}}), flush=True)\n"
)


def echo_params(tracer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """What an echoing server received for a tools/call and a tools/list, sent by a client with ``tracer``."""
    from mcpfault.harness.client import StdioClient

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with StdioClient([sys.executable, "-c", ECHO_SERVER], tracer=tracer) as client:
            called = await client.call_tool("get_site", {"site_id": "s1"}, attempt=3, backoff_s=0.04)
            listed = await client.request("tools/list", {})
            return called["echo"], listed["echo"]

    result: tuple[dict[str, Any], dict[str, Any]] = bounded(main)
    return result


def test_an_untraced_client_sends_requests_as_they_were():
    called, listed = echo_params(None)
    assert called == {"name": "get_site", "arguments": {"site_id": "s1"}} and listed == {}


def test_a_traced_client_sends_each_attempts_span_context_in_meta():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from mcpfault.telemetry import names
    from mcpfault.telemetry import names as span_names

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    called, listed = echo_params(provider.get_tracer("test"))
    call_span, list_span = exporter.get_finished_spans()
    for sent, span in ((called, call_span), (listed, list_span)):
        context = span.get_span_context()
        assert context is not None
        assert list(sent["_meta"]) == ["traceparent"]
        assert sent["_meta"]["traceparent"].startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
    assert call_span.name == "tools/call get_site" and call_span.kind.name == "CLIENT"
    assert dict(call_span.attributes or {}) == {
        names.MCP_METHOD_NAME: "tools/call",
        names.JSONRPC_REQUEST_ID: "1",
        names.NETWORK_TRANSPORT: "pipe",
        names.GEN_AI_TOOL_NAME: "get_site",
        names.GEN_AI_OPERATION_NAME: "execute_tool",
        span_names.ATTEMPT: 3,
        span_names.BACKOFF_S: 0.04,
    }
    assert list_span.name == "tools/list" and list_span.parent is None  # no task: a trace of its own


def test_run_exports_the_spans_of_harness_proxy_and_server_over_otlp(tmp_path, receiver):
    out = tmp_path / "run"
    done = cli("run", "--profile", "error", "--tasks", "4", "--otlp-endpoint", receiver.base_url, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert receiver.service_names() == {"mcpfault-harness", "mcpfault-proxy", "mcpfault-mock"}
    exported = {span.span_id.hex() for span in receiver.spans()}
    written = {s.span_id for name in ("client", "proxy", "server") for s in read_spans(out / f"{name}-spans.jsonl")}
    assert exported == written  # the same spans live and in the files
    records = list(read_records(out / "records.jsonl"))
    trace_ids = {r.trace_id for r in records}
    assert len(trace_ids) == 4  # a trace per task, each exported with its spans
    assert trace_ids <= {span.trace_id.hex() for span in receiver.spans()}


@pytest.mark.skipif(
    not PUSHGATEWAY.exists(),
    reason="needs /usr/bin/prometheus-pushgateway (make test installs Debian's prometheus-pushgateway)",
)
def test_bench_pushes_its_metrics_to_a_real_pushgateway(tmp_path):
    with pushgateway(free_port()) as gateway:
        out = tmp_path / "pushed"
        done = cli(
            "bench",
            "--profiles",
            "baseline",
            "--agents",
            "naive",
            "--tasks",
            "4",
            "--session-tasks",
            "4",
            "--out",
            str(out),
            "--pushgateway",
            gateway,
        )
        assert done.returncode == 0, done.stderr
        status, _, body = http_get(f"{gateway}/metrics")
        assert status == 200
        line = next(
            row
            for row in body.splitlines()
            if row.startswith("mcpfault_task_outcomes_total{") and 'outcome="success"' in row
        )
        assert 'profile="baseline"' in line and 'agent="naive"' in line and 'run="pushed"' in line
        assert line.endswith(" 4")


def test_bench_serves_task_metrics_while_it_runs(tmp_path):
    port = free_port()
    bench = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mcpfault",
            "bench",
            "--profiles",
            "baseline,timeout",
            "--agents",
            "naive",
            "--tasks",
            "16",
            "--session-tasks",
            "4",
            "--jobs",
            "1",
            "--out",
            str(tmp_path / "live"),
            "--metrics-addr",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    seen = ""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and bench.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    body = response.read().decode()
            except OSError:
                time.sleep(0.1)
                continue
            if 'mcpfault_task_outcomes_total{agent="naive",outcome="success",profile="baseline"}' in body:
                seen = body
                break
            time.sleep(0.1)
        assert seen, "no task metrics were served while the bench ran"
        assert bench.wait(timeout=120) == 0
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()


def test_shards_merge_to_the_unsharded_outcome_counts(tmp_path):
    common = ("--profiles", "mixed,timeout", "--agents", "naive,retry-only", "--tasks", "8", "--session-tasks", "4")
    whole = cli("bench", *common, "--out", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    for index in range(3):
        shard = cli("bench", *common, "--shard", f"{index}/3", "--out", str(tmp_path / f"shard-{index}"))
        assert shard.returncode == 0, shard.stderr
    merged = cli(
        "report", "--merge", *(str(tmp_path / f"shard-{i}") for i in range(3)), "--out", str(tmp_path / "merged")
    )
    assert merged.returncode == 0, merged.stderr
    unsharded = counts(read_records(tmp_path / "whole" / "records.jsonl"))
    assert counts(read_records(tmp_path / "merged" / "records.jsonl")) == unsharded
    assert sum(unsharded.values()) == 2 * 2 * 8
    assert (tmp_path / "merged" / "report.md").is_file()
    overlap = cli(
        "report", "--merge", str(tmp_path / "shard-0"), str(tmp_path / "shard-0"), "--out", str(tmp_path / "x")
    )
    assert overlap.returncode == 2 and "overlap" in overlap.stderr
    two_of_three = [str(tmp_path / "shard-0"), str(tmp_path / "shard-2")]
    partial = cli("report", "--merge", *two_of_three, "--out", str(tmp_path / "p"))
    assert (
        partial.returncode == 2 and "shard(s) 1/3 are missing" in partial.stderr and "--allow-partial" in partial.stderr
    )
    allowed = cli("report", "--merge", *two_of_three, "--allow-partial", "--out", str(tmp_path / "p"))
    assert allowed.returncode == 0 and "INCOMPLETE" in allowed.stderr
    assert "INCOMPLETE: shard(s) 1/3 missing" in (tmp_path / "p" / "report.md").read_text()
    bad = cli("bench", *common, "--shard", "3/3")
    assert bad.returncode == 2 and "need 0 <= INDEX < COUNT" in bad.stderr
