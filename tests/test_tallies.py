"""The tallied metrics (telemetry/tallies.py) expose what prometheus_client's own would, sample for sample."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as _untyped_openmetrics

from mcpfault.telemetry.tallies import Tallies

TRACE = "0af7651916cd43dd8448eb211c80319c"
generate_openmetrics: Callable[[CollectorRegistry], bytes] = _untyped_openmetrics  # the library's is untyped
BOUNDS = (0.01, 0.1, 1.0, 10.0)
# (labels, value, trace id): below, on and between the bounds, beyond the last, negative, no exemplar.
OBSERVED = [
    (("tools/call",), 0.005, TRACE),
    (("tools/call",), 0.1, None),
    (("tools/call",), 0.5, TRACE),
    (("tools/call",), 50.0, TRACE),
    (("tools/list",), -0.25, None),
    (("tools/list",), 1.0, TRACE),
]


def _timeless(exposition: bytes) -> str:
    """The exposition without what differs by when it was made: _created values, exemplar times."""
    text = re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", exposition.decode())
    return re.sub(r'(# \{trace_id="\w+"\} \S+) \S+', r"\1 T", text)


def _library_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    counter = Counter("demo_calls_total", "Calls.", ["method"], registry=registry)
    histogram = Histogram("demo_seconds", "Durations.", ["method"], registry=registry, buckets=BOUNDS)
    gauge = Gauge("demo_in_flight", "In flight.", ["transport"], registry=registry)
    for labels, value, trace in OBSERVED:
        exemplar = {"trace_id": trace} if trace else None
        counter.labels(*labels).inc(1, exemplar)
        histogram.labels(*labels).observe(value, exemplar)
    gauge.labels("stdio").inc()
    gauge.labels("stdio").inc()
    gauge.labels("stdio").dec()
    return registry


def _tallied_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    tallies = Tallies(registry)
    counter = tallies.counter("demo_calls_total", "Calls.", ["method"])
    histogram = tallies.histogram("demo_seconds", "Durations.", ["method"], BOUNDS)
    gauge = tallies.gauge("demo_in_flight", "In flight.", ["transport"])
    tallies.register()
    for labels, value, trace in OBSERVED:
        counter.labels(*labels).inc(1, trace)
        histogram.labels(*labels).observe(value, trace)
    gauge.labels("stdio").inc()
    gauge.labels("stdio").inc()
    gauge.labels("stdio").dec()
    return registry


@pytest.mark.parametrize("generate", [generate_latest, generate_openmetrics], ids=["text", "openmetrics"])
def test_tallies_expose_what_the_library_s_metrics_do(generate: Callable[[CollectorRegistry], bytes]) -> None:
    library = _timeless(generate(_library_registry()))
    tallied = _timeless(generate(_tallied_registry()))
    assert 'demo_seconds_bucket{le="+Inf",method="tools/call"} 4.0' in library  # there is something to compare
    if generate is generate_openmetrics:
        assert library.count("trace_id") == 6  # the exemplars: two counters', four buckets' (+Inf too)
    assert sorted(tallied.splitlines()) == sorted(library.splitlines())


def test_without_created_series_neither_exports_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import prometheus_client.metrics

    monkeypatch.setattr(prometheus_client.metrics, "_use_created", False)  # what disable_created_metrics() sets
    library = _timeless(generate_openmetrics(_library_registry()))
    tallied = _timeless(generate_openmetrics(_tallied_registry()))
    assert "_created" not in library
    assert sorted(tallied.splitlines()) == sorted(library.splitlines())


def test_a_name_taken_twice_is_refused_as_the_library_refuses_it() -> None:
    registry = CollectorRegistry(auto_describe=True)
    Counter("demo_calls_total", "Calls.", registry=registry)
    tallies = Tallies(registry)
    tallies.counter("demo_calls_total", "Calls again.", [])
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        tallies.register()


def test_wrong_label_count_says_which_labels_the_metric_takes() -> None:
    tallies = Tallies(CollectorRegistry())
    histogram = tallies.histogram("demo_seconds", "Durations.", ["method", "transport"], BOUNDS)
    with pytest.raises(ValueError, match=r"demo_seconds takes labels \('method', 'transport'\)"):
        histogram.labels("tools/call")


def test_observations_from_many_threads_are_all_counted() -> None:
    registry = CollectorRegistry()
    tallies = Tallies(registry)
    counter = tallies.counter("demo_calls_total", "Calls.", [])
    histogram = tallies.histogram("demo_seconds", "Durations.", [], BOUNDS)
    gauge = tallies.gauge("demo_in_flight", "In flight.", [])
    tallies.register()

    def work() -> None:
        for _ in range(20_000):
            gauge.labels().inc()
            counter.labels().inc()
            histogram.labels().observe(0.05)
            gauge.labels().dec()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert registry.get_sample_value("demo_calls_total") == 80_000
    assert registry.get_sample_value("demo_seconds_count") == 80_000
    assert registry.get_sample_value("demo_seconds_bucket", {"le": "0.1"}) == 80_000
    assert registry.get_sample_value("demo_seconds_bucket", {"le": "0.01"}) == 0
    assert registry.get_sample_value("demo_in_flight") == 0
