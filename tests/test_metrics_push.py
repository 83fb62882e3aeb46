"""Benchmark records as harness metrics: in the registry, and through a real Pushgateway into a real Prometheus."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mcpfault.analysis.records import TaskRecord
from mcpfault.harness.metrics_push import check_pushgateway_url, push_bench_metrics, record_bench_metrics, task_key
from mcpfault.telemetry import names
from mcpfault.telemetry.metrics import HarnessMetrics
from tests.http_support import free_port
from tests.prometheus_support import PROMETHEUS, PUSHGATEWAY, api_get, prometheus, pushgateway

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def rec(
    profile: str,
    agent: str,
    index: int,
    outcome: Any,
    *,
    faults: tuple[str, ...] = (),
    recovery_s: float | None = None,
    retries: int = 0,
    duplicates: int = 0,
) -> TaskRecord:
    return TaskRecord(
        profile=profile,
        agent=agent,
        session=index // 3,
        task_index=index,
        task="open_incident",
        outcome=outcome,
        fault_types=faults,
        affected_types=faults if outcome == "recovered" else (),
        retries=retries,
        duplicates=duplicates,
        recovery_s=recovery_s,
    )


RECORDS = [
    rec("baseline", "naive", 0, "success"),
    rec("baseline", "resilient", 0, "success"),
    rec("timeout", "naive", 0, "failed_detected", faults=("timeout",)),
    rec("timeout", "naive", 1, "success"),
    rec("timeout", "retry-only", 0, "failed_silent", faults=("timeout",), retries=2, duplicates=1),
    rec("timeout", "retry-only", 1, "recovered", faults=("timeout",), recovery_s=0.75, retries=1),
    rec("timeout", "resilient", 0, "recovered", faults=("timeout", "error"), recovery_s=1.5, retries=3),
    rec("error", "resilient", 0, "recovered", faults=("error",), recovery_s=0.03, retries=1),
    rec("stale", "naive", 0, "failed_silent", faults=("stale",)),
]
EXPECTED_OUTCOMES = {"success": 3, "failed_detected": 1, "failed_silent": 2, "recovered": 3}
EXPECTED_RECOVERY_COUNTS = {"timeout": 2, "error": 1}  # labelled by the fault that started the clock


def value(metrics: HarnessMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name}{labels}"
    return found


def test_records_fill_every_metric() -> None:
    metrics = HarnessMetrics()
    record_bench_metrics(RECORDS, metrics)
    assert Counter(r.outcome for r in RECORDS) == EXPECTED_OUTCOMES  # the fixture says what it means
    outcomes = names.TASK_OUTCOMES_TOTAL
    assert value(metrics, outcomes, profile="timeout", agent="naive", outcome="failed_detected") == 1
    assert value(metrics, outcomes, profile="timeout", agent="retry-only", outcome="failed_silent") == 1
    assert value(metrics, outcomes, profile="baseline", agent="resilient", outcome="success") == 1
    for fault_type, count in EXPECTED_RECOVERY_COUNTS.items():
        assert value(metrics, names.TASK_RECOVERY_SECONDS + "_count", fault_type=fault_type) == count
    assert value(metrics, names.TASK_RECOVERY_SECONDS + "_sum", fault_type="timeout") == pytest.approx(2.25)
    assert value(metrics, names.TASK_RECOVERY_SECONDS + "_bucket", fault_type="error", le="0.05") == 1
    assert value(metrics, names.TASK_RETRIES_TOTAL, profile="timeout", agent="retry-only") == 3
    assert value(metrics, names.TASK_RETRIES_TOTAL, profile="timeout", agent="resilient") == 3
    assert value(metrics, names.DUPLICATES_TOTAL, profile="timeout", agent="retry-only") == 1
    assert value(metrics, names.SILENT_FAILURES_TOTAL, profile="timeout", agent="retry-only") == 1
    assert value(metrics, names.SILENT_FAILURES_TOTAL, profile="stale", agent="naive") == 1
    # Cells with nothing to count still have their series, at zero.
    assert value(metrics, names.SILENT_FAILURES_TOTAL, profile="baseline", agent="naive") == 0
    assert value(metrics, names.DUPLICATES_TOTAL, profile="baseline", agent="naive") == 0


def test_trace_ids_become_exemplars() -> None:
    metrics = HarnessMetrics()
    recovered = RECORDS[5]
    record_bench_metrics(RECORDS, metrics, trace_ids={task_key(recovered): TRACE_ID})
    with_exemplar = {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.exemplar is not None and sample.exemplar.labels == {names.EXEMPLAR_TRACE_ID: TRACE_ID}
    }
    assert with_exemplar == {
        (names.TASK_OUTCOMES_TOTAL, (("agent", "retry-only"), ("outcome", "recovered"), ("profile", "timeout"))),
        (names.TASK_RECOVERY_SECONDS + "_bucket", (("fault_type", "timeout"), ("le", "1.0"))),
    }  # only the task whose trace is known, in the bucket its 0.75 s fell into


def test_unreachable_pushgateway_names_it() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(OSError, match=f"cannot push metrics to the Pushgateway at {url}"):
        push_bench_metrics(RECORDS, url)
    with pytest.raises(OSError) as info:
        push_bench_metrics(RECORDS, f"http://user:hunter2@127.0.0.1:{free_port()}")
    assert "hunter2" not in str(info.value)
    with pytest.raises(ValueError, match="Pushgateway URL"):
        push_bench_metrics(RECORDS, "127.0.0.1:9091")


def test_check_pushgateway_url() -> None:
    assert check_pushgateway_url("http://127.0.0.1:9091") == "http://127.0.0.1:9091"
    for bad in ("127.0.0.1:9091", "ftp://gateway", "http://"):
        with pytest.raises(ValueError, match=r"not an http\(s\) URL with a host"):
            check_pushgateway_url(bad)
    with pytest.raises(ValueError) as info:
        check_pushgateway_url("grpc://user:hunter2@gateway")
    assert "hunter2" not in str(info.value)


def query(api: str, promql: str) -> list[Any]:
    result: list[Any] = api_get(api, "query", query=promql)["data"]["result"]
    return result


def by_label(result: list[Any], label: str) -> dict[str, float]:
    return {series["metric"].get(label, ""): float(series["value"][1]) for series in result}


@pytest.mark.slow
@pytest.mark.skipif(
    not (PUSHGATEWAY.exists() and PROMETHEUS.exists()),
    reason="needs /usr/bin/prometheus and /usr/bin/prometheus-pushgateway (apt-get install prometheus prometheus-pushgateway)",
)
def test_pushgateway_scraped_by_prometheus(tmp_path: Path) -> None:
    gateway_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: pushgateway\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{gateway_port}']\n"
    )
    with (
        pushgateway(gateway_port, tmp_path / "pushgateway.log") as gateway,
        prometheus(free_port(), config, tmp_path / "tsdb", tmp_path / "prometheus.log") as prometheus_url,
    ):
        push_bench_metrics(RECORDS, gateway, grouping={"run": "r1"})

        api = prometheus_url + "/api/v1"
        outcomes: dict[str, float] = {}
        recovery: dict[str, float] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            outcomes = by_label(query(api, "sum by (outcome) (mcpfault_task_outcomes_total)"), "outcome")
            recovery = by_label(query(api, "sum by (fault_type) (mcpfault_task_recovery_seconds_count)"), "fault_type")
            if outcomes == EXPECTED_OUTCOMES and recovery == EXPECTED_RECOVERY_COUNTS:
                break
            time.sleep(0.25)
        log = (tmp_path / "prometheus.log").read_text()[-3000:]
        assert outcomes == EXPECTED_OUTCOMES, f"Prometheus answered {outcomes}; log:\n{log}"
        assert recovery == EXPECTED_RECOVERY_COUNTS

        # honor_labels kept the pushed job and grouping labels instead of the scrape job's.
        labelled = query(api, 'mcpfault_task_outcomes_total{job="mcpfault_bench",run="r1",outcome="recovered"}')
        assert {(s["metric"]["profile"], s["metric"]["agent"]) for s in labelled} == {
            ("timeout", "retry-only"),
            ("timeout", "resilient"),
            ("error", "resilient"),
        }
        silent = by_label(query(api, "sum by (profile) (mcpfault_silent_failures_total)"), "profile")
        assert silent == {"baseline": 0, "timeout": 1, "error": 0, "stale": 1}
        assert by_label(query(api, "sum(mcpfault_task_retries_total)"), "") == {"": 7}
        assert by_label(query(api, "sum(mcpfault_duplicates_total)"), "") == {"": 1}
