"""Prometheus metrics: plain counters on the request path, families made at scrape time.

Nothing on the request path touches prometheus-client. Each route owns a
:class:`RouteStats` made when the app is built (ints in a dict keyed by
status, a list of histogram bucket counts); circuit breakers, collections
and the store's writer keep their own plain counters
(:class:`~gateway.index.breaker.Breaker`, :class:`ServedStats` of each step,
:class:`~gateway.store.writer.WriteStats`). ``GET /metrics`` builds the
metric families from those counters in a worker thread, through a custom
collector (prometheus-client's "custom collectors"), and renders them in the
Prometheus text format 0.0.4 (``generate_latest``).

Families (every name starts with ``gateway_``; ``route`` is the route's path
template, e.g. ``/{coll}/index``):

==========================================  ====================================================
``http_requests_total``                     counter {method, route, status}; ``status`` 499:
                                            the client left before the answer was complete
``http_request_duration_seconds``           histogram {method, route}: from the handler's start
                                            until its answer is handed to aiohttp (a streamed
                                            answer: until its last byte is written)
``source_lookups_total``                    counter {collection, step, source, outcome}:
                                            ``ok``, ``error``, ``timeout``, ``skipped`` (open
                                            circuit breaker), ``refused`` (the client's error)
``source_breaker_open``                     gauge {collection, step, source}: 1 while skipped
``source_consecutive_failures``             gauge {collection, step, source}
``records_served_total``                    counter {collection, step}: WARC records
                                            (Resource API) and mementos (``id_``) sent whole
``record_bytes_served_total``               counter {collection, step}: their body bytes
``loader_loads_total``                      counter {collection, step, loader, outcome}: ``ok``,
                                            ``error`` (its place unreachable), ``timeout``,
                                            ``skipped`` (open circuit breaker)
``loader_breaker_open``                     gauge {collection, step, loader}: 1 while skipped
``store_captures_total``                    counter {policy, outcome}: captures the store's
                                            writer finished: ``full``, ``revisit``, ``skipped``
                                            (the dedup decision, once durable) or ``failed``
``store_bytes_written_total``               counter: WARC bytes made durable
``access_rules``                            gauge {collection}: access rules in force
                                            (collections with access control only)
``access_decisions_total``                  counter {collection, access}: captures decided
                                            ``allow``, ``block`` or ``exclude`` by the rules,
                                            ``default_access`` and the embargo
``index_memo_hits_total``                   counter {collection, step, source}: lookups of a
                                            local CDXJ file or ZipNum cluster answered from the
                                            source's memo of short answers (a directory source
                                            counts each of its files)
``index_memo_misses_total``                 counter {collection, step, source}: those read
``zipnum_block_cache_hits_total``           counter {collection, step, source}: blocks of remote
                                            ZipNum shards found inflated in the source's LRU
``zipnum_block_cache_misses_total``         counter {collection, step, source}: blocks read
``zipnum_block_cache_hit_ratio``            gauge {collection, step, source}: hits / (hits +
                                            misses), 0 before the first remote block
``zipnum_range_requests_total``             counter {collection, step, source, shard}: reads
                                            (``pread`` or range request) of a ZipNum shard;
                                            ``shard`` is its part number within a generation
``zipnum_range_bytes_total``                counter {collection, step, source, shard}
==========================================  ====================================================

plus prometheus-client's standard ``process_*``, ``python_gc_*`` and
``python_info`` families. Subsystems add their own families (background jobs
by type and state, copies by status) with :func:`register_collector`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Final, Protocol

from aiohttp import web

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

    from gateway.index.collection import Collection
    from gateway.sources.base import IndexSource

__all__ = [
    "LATENCY_BUCKETS_S",
    "METRICS",
    "Metrics",
    "MetricsCollector",
    "RouteStats",
    "register_collector",
]

#: Upper bounds (seconds, inclusive) of the request latency histogram's buckets.
LATENCY_BUCKETS_S: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
#: The buckets' ``le`` labels, as Prometheus writes them (``"0.005"``, ``"+Inf"``).
_BUCKET_LABELS: Final = (*(repr(bound) for bound in LATENCY_BUCKETS_S), "+Inf")
#: The status counted for an answer the client did not wait for (nginx's 499).
CLIENT_LEFT_STATUS: Final = 499


class MetricsCollector(Protocol):
    """A prometheus-client custom collector: ``collect()`` yields metric families.

    ``collect`` runs in a worker thread at each scrape (never on the event
    loop), so it may block briefly (a SQLite ``COUNT ... GROUP BY``); it must
    not touch asyncio objects. Families are prometheus-client's
    ``CounterMetricFamily``, ``GaugeMetricFamily``, ...
    """

    def collect(self) -> Iterable[Metric]: ...


class RouteStats:
    """Counters of one registered route, updated once per request on the event loop."""

    __slots__ = ("buckets", "method", "route", "seconds", "statuses")

    def __init__(self, method: str, route: str) -> None:
        self.method = method
        self.route = route
        #: Answers by HTTP status.
        self.statuses: dict[int, int] = {}
        #: Non-cumulative counts per bucket of :data:`LATENCY_BUCKETS_S`, then +Inf.
        self.buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.seconds = 0.0

    def observe(self, status: int, seconds: float) -> None:
        """Count one answer of ``status`` that took ``seconds``."""
        statuses = self.statuses
        statuses[status] = statuses.get(status, 0) + 1
        self.buckets[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.seconds += seconds


class Metrics:
    """The app's metrics: route counters and the registry ``/metrics`` renders."""

    def __init__(self) -> None:
        self.routes: list[RouteStats] = []
        self._extra: list[MetricsCollector] = []
        self._registry: CollectorRegistry | None = None

    def route(self, method: str, route: str) -> RouteStats:
        """The counters of a route being registered (made once, at app build time)."""
        stats = RouteStats(method, route)
        self.routes.append(stats)
        return stats

    def add(self, collector: MetricsCollector) -> None:
        """Expose ``collector``'s families on every scrape from now on."""
        self._extra.append(collector)
        if self._registry is not None:
            self._registry.register(collector)

    def registry(self, app: web.Application) -> CollectorRegistry:
        """The prometheus-client registry of ``app`` (made on the first scrape)."""
        if self._registry is None:
            from prometheus_client import (
                GC_COLLECTOR,
                PLATFORM_COLLECTOR,
                PROCESS_COLLECTOR,
                CollectorRegistry,
            )

            registry = CollectorRegistry(auto_describe=False)
            for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                registry.register(standard)
            registry.register(_GatewayCollector(app, self))
            for collector in self._extra:
                registry.register(collector)
            self._registry = registry
        return self._registry

    def render(self, app: web.Application) -> bytes:
        """The Prometheus text format (0.0.4) of every family; blocking, run it in a thread."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry(app))


#: The app's metrics: route counters and the ``/metrics`` registry.
METRICS = web.AppKey("metrics", Metrics)


def register_collector(app: web.Application, collector: MetricsCollector) -> None:
    """Add ``collector``'s metric families to ``app``'s ``/metrics``.

    For subsystems that own their state: background jobs by type and state,
    copies by status. ``collector.collect()`` is called at every scrape, in a
    worker thread (see :class:`MetricsCollector`); names should start with
    ``gateway_``. Call it at any time (typically in the subsystem's
    ``cleanup_ctx``); a collector stays registered for the app's life.
    """
    app[METRICS].add(collector)


def _access_families(collections: dict[str, Collection]) -> Iterator[Metric]:
    """``gateway_access_rules`` and ``gateway_access_decisions`` (:mod:`gateway.access`)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    rules = GaugeMetricFamily(
        "gateway_access_rules", "Access rules in force (.aclj lines).", labels=["collection"]
    )
    decisions = CounterMetricFamily(
        "gateway_access_decisions",
        "Captures decided by access control, by access (allow, block, exclude).",
        labels=["collection", "access"],
    )
    for name, collection in collections.items():
        policy = collection.access
        if policy is None:
            continue
        rules.add_metric([name], len(policy.rules))
        for access, count in sorted(policy.decisions.copy().items()):
            decisions.add_metric([name, access], count)
    yield rules
    yield decisions


class _GatewayCollector:
    """The gateway's own families, read from the app's plain counters at scrape time.

    Runs in a worker thread while the event loop goes on: every dict is
    copied in one step (``dict.copy`` holds the GIL) before it is read.
    """

    def __init__(self, app: web.Application, metrics: Metrics) -> None:
        self._app = app
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        from gateway.api.keys import CLIENTS, COLLECTIONS

        requests = CounterMetricFamily(
            "gateway_http_requests",
            "HTTP answers by route and status (499: the client left first).",
            labels=["method", "route", "status"],
        )
        latency = HistogramMetricFamily(
            "gateway_http_request_duration_seconds",
            "Time from the handler's start until its answer was handed to aiohttp.",
            labels=["method", "route"],
        )
        for stats in self._metrics.routes:
            counts = stats.buckets.copy()
            if not any(counts):
                continue  # a route never asked for has no series yet
            for status, count in sorted(stats.statuses.copy().items()):
                requests.add_metric([stats.method, stats.route, str(status)], count)
            cumulative, total = [], 0
            for bound, count in zip(_BUCKET_LABELS, counts, strict=True):
                total += count
                cumulative.append((bound, total))
            latency.add_metric([stats.method, stats.route], cumulative, stats.seconds)
        yield requests
        yield latency

        source_labels = ["collection", "step", "source"]
        lookups = CounterMetricFamily(
            "gateway_source_lookups",
            "Index lookups per source by outcome (skipped: its circuit breaker was open).",
            labels=[*source_labels, "outcome"],
        )
        breaker_open = GaugeMetricFamily(
            "gateway_source_breaker_open",
            "1 while the source's circuit breaker skips it, else 0.",
            labels=source_labels,
        )
        failures = GaugeMetricFamily(
            "gateway_source_consecutive_failures",
            "Failures of the source in a row (its breaker opens at 3).",
            labels=source_labels,
        )
        served = CounterMetricFamily(
            "gateway_records_served",
            "WARC records (Resource API) and raw mementos sent whole, by the step that found them.",
            labels=["collection", "step"],
        )
        served_bytes = CounterMetricFamily(
            "gateway_record_bytes_served",
            "Body bytes of the records and mementos counted by gateway_records_served.",
            labels=["collection", "step"],
        )
        loader_labels = ["collection", "step", "loader"]
        loads = CounterMetricFamily(
            "gateway_loader_loads",
            "Record loads per resource loader by outcome (error: its place was not reached "
            "or read; skipped: its circuit breaker was open). Damaged records are not counted.",
            labels=[*loader_labels, "outcome"],
        )
        loader_open = GaugeMetricFamily(
            "gateway_loader_breaker_open",
            "1 while the loader's circuit breaker skips it (its place unreachable), else 0.",
            labels=loader_labels,
        )
        for name, collection in self._app[COLLECTIONS].items():
            for step in collection.steps:
                served.add_metric([name, step.name], step.served.records)
                served_bytes.add_metric([name, step.name], step.served.bytes)
                for source, breaker in step.index.breakers.copy().items():
                    labels = [name, step.name, source]
                    for outcome, count in breaker.lookups().items():
                        lookups.add_metric([*labels, outcome], count)
                    breaker_open.add_metric(labels, 1 if breaker.is_open() else 0)
                    failures.add_metric(labels, breaker.failures)
                for loader, breaker in step.load_breakers.copy().items():
                    labels = [name, step.name, loader]
                    for outcome, count in breaker.lookups().items():
                        if outcome != "refused":  # index sources only
                            loads.add_metric([*labels, outcome], count)
                    loader_open.add_metric(labels, 1 if breaker.is_open() else 0)
        yield from (lookups, breaker_open, failures, served, served_bytes, loads, loader_open)
        yield from _access_families(self._app[COLLECTIONS])
        yield from _memo_families(self._app[COLLECTIONS])
        yield from _zipnum_families(self._app[COLLECTIONS])

        store = self._app[CLIENTS].store
        if store is not None:
            written = store.write_stats
            captures = CounterMetricFamily(
                "gateway_store_captures",
                "Captures the store's writer finished, by dedup policy and outcome "
                "(full, revisit, skipped once durable; failed).",
                labels=["policy", "outcome"],
            )
            for (policy, outcome), count in sorted(written.captures.copy().items()):
                captures.add_metric([policy, outcome], count)
            yield captures
            yield CounterMetricFamily(
                "gateway_store_bytes_written",
                "WARC bytes the store's writer made durable.",
                value=written.bytes_written,
            )


def _memo_families(collections: dict[str, Collection]) -> Iterator[Metric]:
    """The memo of short answers of every source that has one (module docstring)."""
    from prometheus_client.core import CounterMetricFamily

    from gateway.sources.range_memo import RangeMemo

    labels = ["collection", "step", "source"]
    hits = CounterMetricFamily(
        "gateway_index_memo_hits",
        "Lookups of a local index answered from the source's memo of short answers.",
        labels=labels,
    )
    misses = CounterMetricFamily(
        "gateway_index_memo_misses",
        "Lookups of a local index that read it (not in the source's memo).",
        labels=labels,
    )
    for own, member in _members(collections):
        memo = getattr(member, "memo", None)
        if isinstance(memo, RangeMemo):
            hits.add_metric(own, memo.hits)
            misses.add_metric(own, memo.misses)
    yield from (hits, misses)


def _members(collections: dict[str, Collection]) -> Iterator[tuple[list[str], IndexSource]]:
    """Every index source of every step: ``([collection, step, source], source)``."""
    for name, collection in collections.items():
        for step in collection.steps:
            for member in step.index.members:
                yield [name, step.name, member.name], member


def _zipnum_families(collections: dict[str, Collection]) -> Iterator[Metric]:
    """The block cache and range reads of every ZipNum source (see the module docstring)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from gateway.sources.zipnum import ZipNumSource

    labels = ["collection", "step", "source"]
    hits = CounterMetricFamily(
        "gateway_zipnum_block_cache_hits",
        "Blocks of remote ZipNum shards found inflated in the source's LRU.",
        labels=labels,
    )
    misses = CounterMetricFamily(
        "gateway_zipnum_block_cache_misses",
        "Blocks of remote ZipNum shards read because the LRU did not hold them.",
        labels=labels,
    )
    ratio = GaugeMetricFamily(
        "gateway_zipnum_block_cache_hit_ratio",
        "Block cache hits / (hits + misses) of remote ZipNum shards (0 before any).",
        labels=labels,
    )
    requests = CounterMetricFamily(
        "gateway_zipnum_range_requests",
        "Reads of a ZipNum shard (pread or range request), by shard.",
        labels=[*labels, "shard"],
    )
    read_bytes = CounterMetricFamily(
        "gateway_zipnum_range_bytes",
        "Bytes read from a ZipNum shard, by shard.",
        labels=[*labels, "shard"],
    )
    for own, member in _members(collections):
        if not isinstance(member, ZipNumSource):
            continue
        stats = member.stats
        hits.add_metric(own, stats.cache_hits)
        misses.add_metric(own, stats.cache_misses)
        asked = stats.cache_hits + stats.cache_misses
        ratio.add_metric(own, stats.cache_hits / asked if asked else 0.0)
        for shard, count in sorted(stats.requests.copy().items()):
            requests.add_metric([*own, shard], count)
        for shard, size in sorted(stats.bytes_read.copy().items()):
            read_bytes.add_metric([*own, shard], size)
    yield from (hits, misses, ratio, requests, read_bytes)
