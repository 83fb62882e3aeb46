"""The experiment probes against real things: a Prometheus, an HTTP server, a command, the proxy's events."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from mcpfault.experiments import probes
from mcpfault.experiments.plan import ProbeSpec, Tolerance
from tests.http_support import free_port, serve_in_thread, server_url
from tests.prometheus_support import PROMETHEUS, prometheus

ANY = Tolerance(exact=0)


def window(path: Path, start: float = 0.0, end: float = 4e9) -> probes.Window:
    return probes.Window(start, end, path)


def test_metric_probes_read_the_proxys_events(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    now = time.time()

    def line(at: float, received: str, fault: str | None = None, duration_s: float = 0.01) -> str:
        stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
        record = {"time": stamp, "request_id": at, "client_received": received, "fault_type": fault}
        return json.dumps({**record, "duration_s": duration_s})

    lines = [line(now - 10, "error", "error")]  # outside the window below
    lines += [line(now - 1 + i / 100, "response", duration_s=i / 100) for i in range(90)]
    lines += [line(now - 0.05, "error", "error") for _ in range(10)]
    lines.append(json.dumps({"time": datetime.fromtimestamp(now, UTC).isoformat(), "control": "off", "version": 3}))
    events.write_text("\n".join(lines) + "\n")
    recent = window(events, now - 2, now + 1)

    def value(metric: str) -> object:
        return probes.measure(ProbeSpec("p", "metric", ANY, metric=metric), recent)

    assert value("error_rate") == 0.1
    assert value("faults_injected") == 10
    assert value("request_rate") == round(100 / 3, 3)
    assert value("p95_duration_s") == 0.85
    assert probes.measure(ProbeSpec("p", "metric", ANY, metric="error_rate"), window(events, 0, 1)) is None  # no data


def test_http_and_command_probes(tmp_path: Path) -> None:
    class Unavailable(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(503 if self.path == "/down" else 204)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    with serve_in_thread(Unavailable) as server:
        up = ProbeSpec("up", "http", Tolerance(exact=204), url=server_url(server, "/"))
        down = ProbeSpec("down", "http", Tolerance(exact=204), url=server_url(server, "/down"))
        assert probes.measure(up, window(tmp_path)) == 204
        assert probes.measure(down, window(tmp_path)) == 503
    nothing = ProbeSpec("gone", "http", ANY, url=f"http://127.0.0.1:{free_port()}/", timeout_s=1)
    assert probes.measure(nothing, window(tmp_path)) is None
    exit_3 = ProbeSpec("c", "command", ANY, command=(sys.executable, "-c", "raise SystemExit(3)"))
    assert probes.measure(exit_3, window(tmp_path)) == 3
    slow = ProbeSpec("c", "command", ANY, command=(sys.executable, "-c", "import time; time.sleep(5)"), timeout_s=0.3)
    assert probes.measure(slow, window(tmp_path)) is None


@pytest.mark.slow
@pytest.mark.skipif(not PROMETHEUS.exists(), reason="Debian's prometheus package is not installed (make setup)")
def test_a_promql_probe_asks_a_real_prometheus(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n"
        f"  - job_name: self\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    with prometheus(port, config, tmp_path / "tsdb") as url:
        spec = ProbeSpec("up", "promql", Tolerance(exact=1.0), query='up{job="self"}', prometheus=url)
        deadline = time.monotonic() + 20
        value = None
        while value is None and time.monotonic() < deadline:
            value = probes.measure(spec, probes.Window(0, time.time(), tmp_path / "none"))
            time.sleep(0.3)
        assert value == 1.0 and spec.tolerance.holds(value)
        missing = ProbeSpec("m", "promql", ANY, query="no_such_metric", prometheus=url)
        assert probes.measure(missing, probes.Window(0, time.time(), tmp_path / "none")) is None


def test_requests_in_keeps_a_record_holding_a_line_separator(tmp_path: Path) -> None:
    """orjson writes U+2028 raw inside a string; str.splitlines would cut that record in two and lose it."""
    events = tmp_path / "events.jsonl"
    inside = {"time": "2026-12-03T12:00:01+00:00", "request_id": 1, "tool": "echo", "detail": "a\u2028b"}
    outside = {"time": "2026-12-03T12:00:09+00:00", "request_id": 2}
    control = {"time": "2026-12-03T12:00:01+00:00", "event": "proxy_started"}
    lines = [json.dumps(r, ensure_ascii=False) for r in (inside, outside, control)]
    events.write_text("\n".join(lines) + '\n{"time": "2026-12-03T12:00:0', encoding="utf-8")  # a line being written
    start = datetime.fromisoformat("2026-12-03T12:00:00+00:00").timestamp()
    assert probes.requests_in(probes.Window(start, start + 5, events)) == [inside]


def test_a_task_the_method_met_counts_during_it_and_after_means_begun_after() -> None:
    from mcpfault.analysis.records import TaskRecord

    def task(index: int, began: float, finished: float) -> tuple[float, TaskRecord]:
        return finished, TaskRecord("p", "a", 0, index, "open_incident", "failed_silent", duration_s=finished - began)

    tasks = [
        task(0, 1.0, 1.5),  # over before the method (2-4 s): before
        task(1, 1.8, 2.2),  # began before, ran into it: during
        task(2, 3.9, 4.3),  # met the fault's last moment, finished after it: during, not after
        task(3, 4.0, 4.2),  # began as the method ended: after
        task(4, 1.5, 5.0),  # spans the whole method: during
    ]
    placed = probes.place_tasks(tasks, 2.0, 4.0)

    def counted(start: float, end: float) -> list[int]:
        window = probes.Window(start, end, Path("/nonexistent"), placed)
        return [record.task_index for at, record in window.tasks if window.start <= at < window.end]

    assert counted(0.0, 2.0) == [0]
    assert counted(2.0, 4.0) == [1, 2, 4]
    assert counted(4.0, 9.0) == [3]
    spec = ProbeSpec("silent", "metric", ANY, metric="silent_failure_rate")
    assert probes.measure(spec, probes.Window(4.0, 9.0, Path("/nonexistent"), placed)) == 1.0
