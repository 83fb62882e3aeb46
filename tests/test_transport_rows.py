"""Pure parts of the benchmark over HTTP: report rows per transport, the HTTP-faults table, Retry-After."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import anyio
import pytest

from mcpfault.analysis.records import TaskRecord
from mcpfault.analysis.summary import summarize
from mcpfault.errors import HttpStatusError, SessionLost, StreamCut
from mcpfault.harness.agents.policies import Agent, RetryOnly
from mcpfault.harness.agents.resilient import Resilient
from mcpfault.harness.http_client import listen_command, retry_after_s
from mcpfault.harness.report import ReportMeta, render_markdown


def record(
    profile: str, agent: str, outcome: str, transport: str = "stdio", affected: tuple[str, ...] = ()
) -> TaskRecord:
    return TaskRecord(
        profile=profile,
        agent=agent,
        session=0,
        task_index=0,
        task="site_triage",
        outcome=outcome,  # type: ignore[arg-type]
        fault_types=affected,
        affected_types=affected,
        transport=transport,
    )


def test_each_transport_gets_its_own_rows_stdio_first() -> None:
    records = [
        record("mixed", "naive", "success", "http"),
        record("http", "naive", "failed_detected", "http", ("http_status",)),
        record("mixed", "naive", "success"),
        record("error", "naive", "success", "http"),
    ]
    summary = summarize(records)
    assert summary.profiles == ("mixed", "error (http)", "mixed (http)", "http (http)")
    assert records[2].as_dict()["transport"] == "stdio"
    assert (
        TaskRecord.from_dict({k: v for k, v in records[2].as_dict().items() if k != "transport"}).transport == "stdio"
    )


def test_the_report_shows_what_each_agent_does_with_http_faults() -> None:
    records = [
        record("http", "naive", "failed_detected", "http", ("session_expired",)),
        record("http", "resilient", "recovered", "http", ("session_expired", "http_status")),
        record("error", "naive", "failed_detected", "stdio", ("error",)),
    ]
    meta = ReportMeta(
        command="mcpfault bench --transport both",
        seed=0,
        tasks_per_cell=1,
        wall_s=1.0,
        jobs=1,
        started_at="now",
        machine="test",
    )
    text = render_markdown(summarize(records), meta)
    section = text.split("## HTTP faults, by agent", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "fault type" not in line]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert ["http_status", "resilient", "1", "1", "0", "0"] in cells
    assert ["session_expired", "naive", "1", "0", "1", "0"] in cells
    assert not any(c[0] == "error" for c in cells)  # a fault every transport has is not an HTTP fault
    assert "**Over Streamable HTTP" in text


def test_no_http_fault_no_http_section() -> None:
    meta = ReportMeta(
        command="mcpfault bench", seed=0, tasks_per_cell=1, wall_s=1.0, jobs=1, started_at="now", machine="test"
    )
    text = render_markdown(summarize([record("error", "naive", "failed_detected", affected=("error",))]), meta)
    assert "HTTP faults" not in text


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after_s("2") == 2.0
    assert retry_after_s(None) is None and retry_after_s("soon") is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (retry_after_s(later) or 0) <= 31


def test_the_http_bridge_command_listens_on_a_port_the_os_picks() -> None:
    command = listen_command(["python", "-m", "mcpfault", "proxy", "--config", "x.toml", "--", "mock", "--seed", "0"])
    assert command[command.index("--listen") + 1] == "127.0.0.1:0"
    assert command.index("--listen") < command.index("--") and command[-3:] == ["mock", "--seed", "0"]


def test_only_resilient_waits_what_retry_after_says() -> None:
    refused = HttpStatusError(503, "HTTP 503", retry_after_s=0.3)

    async def waited(agent: RetryOnly) -> tuple[float, float]:
        started = time.monotonic()
        slept = await agent.backoff(0, refused)
        return slept, time.monotonic() - started

    resilient = Resilient(None, random.Random(0))  # type: ignore[arg-type]
    slept, took = anyio.run(waited, resilient)
    assert slept == pytest.approx(0.3) and took >= 0.29
    blind = RetryOnly(None, random.Random(0))  # type: ignore[arg-type]
    slept, _ = anyio.run(waited, blind)
    assert slept <= blind.base_backoff_s  # its own jittered backoff, whatever the server said
    too_long = HttpStatusError(503, "HTTP 503", retry_after_s=3600)
    with pytest.raises(HttpStatusError):
        anyio.run(resilient.backoff, 0, too_long)


def test_http_failures_are_transient_to_the_retrying_agents_only() -> None:
    for failure in (HttpStatusError(503, "x"), SessionLost(404, "x"), StreamCut("x")):
        assert RetryOnly.retryable(failure)
    assert not hasattr(Agent, "retryable")  # naive: one try per call
