"""Counters, a gauge and histograms for the proxy's per-request metrics, kept as plain numbers.

``prometheus_client``'s ``Counter.inc`` and ``Histogram.observe`` with an exemplar take a lock per
value, validate the exemplar and build it with a clock read each time; with the in-flight gauge's
``inc`` and ``dec``, a request's metrics cost 11.4-12.9 us on this machine (``ProxyMetrics``,
in-process), on the thread that builds the spans and on the request's path. These tallies keep the
same numbers under one lock per observation (3.1-4.9 us a request, measured the same way), and a
scrape reads them through ``prometheus_client``'s own metric families, so the exposition, the
OpenMetrics exemplars and the registry stay the library's.

Each exemplar is the latest observation of its bucket (or counter), as ``prometheus_client`` keeps it.
Label values are the caller's to bound (``ProxyMetrics`` normalizes them).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Exemplar, Sample
from prometheus_client.utils import floatToGoString

from mcpfault.telemetry import names

# The exposition's spelling of a bound ("0.01", "+Inf"); the library's helper is untyped.
_le: Callable[[float], str] = floatToGoString

# An observation's exemplar as kept: (trace id, value, unix time); an Exemplar is built at a scrape.
_Kept = tuple[str, float, float]
_C = TypeVar("_C")


def _created_series() -> bool:
    """Whether ``_created`` samples are exported, as for the library's own metrics: its switch
    (``PROMETHEUS_DISABLE_CREATED_SERIES``, ``disable_created_metrics()``) is a module global it reads."""
    return bool(getattr(prometheus_metrics, "_use_created", True))


def _exemplar(kept: _Kept | None) -> Exemplar | None:
    if kept is None:
        return None
    return Exemplar({names.EXEMPLAR_TRACE_ID: kept[0]}, kept[1], kept[2])


class CounterChild:
    __slots__ = ("_lock", "created", "exemplar", "value")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.value = 0.0
        self.exemplar: _Kept | None = None
        self.created = time.time()

    def inc(self, amount: float = 1.0, trace_id: str | None = None) -> None:
        with self._lock:
            self.add(amount, trace_id, time.time() if trace_id is not None else 0.0)

    def add(self, amount: float, trace_id: str | None, now: float) -> None:
        """``inc`` for a caller that holds the lock (``Tallies.lock``) and read the clock."""
        self.value += amount
        if trace_id is not None:
            self.exemplar = (trace_id, amount, now)


class GaugeChild:
    __slots__ = ("_lock", "value")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.value = 0.0

    def inc(self) -> None:
        with self._lock:
            self.value += 1.0

    def dec(self) -> None:
        with self._lock:
            self.value -= 1.0


class HistogramChild:
    __slots__ = ("_bounds", "_counts", "_exemplars", "_lock", "created", "total")

    def __init__(self, lock: threading.Lock, bounds: tuple[float, ...]) -> None:
        self._lock = lock
        self._bounds = bounds  # the finite upper bounds; the last count is +Inf's
        self._counts = [0] * (len(bounds) + 1)
        self._exemplars: list[_Kept | None] = [None] * (len(bounds) + 1)
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float, trace_id: str | None = None) -> None:
        with self._lock:
            self.add(value, trace_id, time.time() if trace_id is not None else 0.0)

    def add(self, value: float, trace_id: str | None, now: float) -> None:
        """``observe`` for a caller that holds the lock (``Tallies.lock``) and read the clock."""
        index = bisect_left(self._bounds, value)  # the first bucket whose bound is >= value (le)
        self._counts[index] += 1
        self.total += value
        if trace_id is not None:
            self._exemplars[index] = (trace_id, value, now)

    def buckets(self) -> tuple[list[tuple[str, float, Exemplar] | tuple[str, float]], float]:
        """The cumulative buckets as ``HistogramMetricFamily.add_metric`` takes them, and the sum."""
        with self._lock:
            counts, exemplars, total = list(self._counts), list(self._exemplars), self.total
        buckets: list[tuple[str, float, Exemplar] | tuple[str, float]] = []
        cumulative = 0
        for bound, count, kept in zip((*self._bounds, float("inf")), counts, exemplars, strict=True):
            cumulative += count
            exemplar = _exemplar(kept)
            le = _le(bound)
            buckets.append((le, float(cumulative), exemplar) if exemplar is not None else (le, float(cumulative)))
        return buckets, total


class _Family(Generic[_C]):
    """A metric's name, help and label names, and its children by label values."""

    def __init__(
        self,
        lock: threading.Lock,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        new_child: Callable[[], _C],
    ) -> None:
        self._lock = lock
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._new_child = new_child
        self._children: dict[tuple[str, ...], _C] = {}

    def labels(self, *values: str) -> _C:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got values {values}")
        with self._lock:
            child = self._children.get(values)
            if child is None:
                child = self._children[values] = self._new_child()
            return child


class TalliedCounter(_Family[CounterChild]):
    def __init__(self, lock: threading.Lock, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        super().__init__(lock, name, documentation, labelnames, lambda: CounterChild(lock))

    def metric(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            rows = [(values, c.value, c.created, c.exemplar) for values, c in self._children.items()]
        with_created = _created_series()
        for values, value, created, kept in rows:
            family.add_metric(values, value, created if with_created else None, exemplar=_exemplar(kept))
        return family


class TalliedGauge(_Family[GaugeChild]):
    def __init__(self, lock: threading.Lock, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        super().__init__(lock, name, documentation, labelnames, lambda: GaugeChild(lock))

    def metric(self) -> Metric:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            rows = [(values, child.value) for values, child in self._children.items()]
        for values, value in rows:
            family.add_metric(values, value)
        return family


class TalliedHistogram(_Family[HistogramChild]):
    def __init__(
        self, lock: threading.Lock, name: str, documentation: str, labelnames: Sequence[str], bounds: Sequence[float]
    ) -> None:
        finite = tuple(sorted(float(b) for b in bounds if b != float("inf")))
        super().__init__(lock, name, documentation, labelnames, lambda: HistogramChild(lock, finite))

    def metric(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            children = list(self._children.items())
        with_created = _created_series()
        for values, child in children:
            buckets, total = child.buckets()
            family.add_metric(values, buckets, total)
            if with_created:  # as prometheus_client's own histograms export it (its family has no field)
                labels = dict(zip(self.labelnames, values, strict=True))
                family.samples.append(Sample(f"{self.name}_created", labels, child.created))
        return family


_F = TypeVar("_F", TalliedCounter, TalliedGauge, TalliedHistogram)


class Tallies:
    """The tallied metrics of one registry, collected at each scrape; one lock for all of them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # Held for each change; a caller that makes several at once takes it once for all (``add``).
        self.lock = self._lock = threading.Lock()
        self._families: list[TalliedCounter | TalliedGauge | TalliedHistogram] = []
        self._registry = registry

    def counter(self, name: str, documentation: str, labelnames: Sequence[str]) -> TalliedCounter:
        return self._add(TalliedCounter(self._lock, name, documentation, labelnames))

    def gauge(self, name: str, documentation: str, labelnames: Sequence[str]) -> TalliedGauge:
        return self._add(TalliedGauge(self._lock, name, documentation, labelnames))

    def histogram(
        self, name: str, documentation: str, labelnames: Sequence[str], bounds: Sequence[float]
    ) -> TalliedHistogram:
        return self._add(TalliedHistogram(self._lock, name, documentation, labelnames, bounds))

    def register(self) -> None:
        """Into the registry, once every family is declared (the registry checks their names then)."""
        self._registry.register(self)

    def _add(self, family: _F) -> _F:
        self._families.append(family)
        return family

    def collect(self) -> Iterable[Metric]:
        return [family.metric() for family in self._families]

    def describe(self) -> Iterable[Metric]:
        """For the registry's check of names taken twice: the same families (without children then)."""
        return self.collect()
