"""The store's safety and copies as ``/metrics`` and ``/_status`` show them.

:class:`StoreCollector` is a prometheus-client custom collector, registered
by the app with :func:`gateway.api.metrics.register_collector` for every
store it opens. Families:

===============================================  ============================================
``gateway_store_files``                          gauge {state}: closed files by safety
                                                 (:mod:`gateway.store.integrity.safety`):
                                                 ``safe``, ``under_way``, ``unsafe``,
                                                 ``no_sha256``
``gateway_store_replicated_files``               gauge {state}: the same count, by its
                                                 earlier name (kept for dashboards)
``gateway_store_captures_not_safe``              gauge: captures in unclosed files or in
                                                 files that are not safe
``gateway_store_captures_in_open_files``         gauge: the first kind alone
``gateway_store_oldest_not_safe_seconds``        gauge: how long the oldest of them has
                                                 waited (0 when there is none)
``gateway_store_copies``                         gauge {storage, status}: copies by copy
                                                 status (``primary`` included; an expired
                                                 ``ongoing`` counts as ``missing``)
``gateway_store_primary_failures_total``         counter: loads whose file failed at the
                                                 primary and went on to the replicas
``gateway_store_replica_reads_total``            counter {storage, outcome}: ``served``,
                                                 ``failed``
``gateway_store_storage_down``                   gauge {storage}: 1 while the storage
                                                 cannot be opened
===============================================  ============================================

``/_status``'s ``store`` entry (:func:`store_status`) has the safety report
(:meth:`StoreSafety.to_json <gateway.store.integrity.safety.StoreSafety.to_json>`:
``safe``, ``computed_at``, ``policy``, ``files``, ``captures``, copies by
place and what they are), the copies by copy status, the storages that
cannot be opened and the reads from replicas.

Both are computed on a read-only connection of their own, in the scrape's or
the request's worker thread (O(files)), at most every
:data:`CACHE_MAX_AGE_S` seconds; ``computed_at`` says when.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from gateway.store.integrity.safety import StoreSafety, policy_of, read_safety_at
from gateway.store.replication.copy_status import COPY_STATUSES, CopySummary

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from gateway.store.replication.replicas import Replicas

__all__ = ["CACHE_MAX_AGE_S", "CachedSafety", "StoreCollector", "store_status"]

#: The longest a report is reused before it is computed again (seconds).
CACHE_MAX_AGE_S: Final = 5.0


class CachedSafety:
    """The store's :class:`StoreSafety`, computed at most every ``max_age_s`` seconds
    on a read-only connection of its own; :meth:`get` is blocking and
    thread-safe (scrapes and ``/_status`` run in threads)."""

    def __init__(
        self, replicas: Replicas, scrub_interval_days: float, max_age_s: float = CACHE_MAX_AGE_S
    ) -> None:
        self.replicas = replicas
        self.scrub_interval_days = scrub_interval_days
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._made: tuple[float, StoreSafety] | None = None

    def get(self) -> StoreSafety:
        with self._lock:
            made = self._made
            if made is not None and time.monotonic() - made[0] < self.max_age_s:
                return made[1]
            now = time.time()
            policy = policy_of(self.replicas, self.scrub_interval_days, now)
            safety = read_safety_at(self.replicas.layout.db_path, policy, now)
            self._made = (time.monotonic(), safety)
            return safety


class StoreCollector:
    """The families of the module docstring, for one store."""

    def __init__(self, replicas: Replicas, safety: CachedSafety) -> None:
        self.replicas = replicas
        self.safety = safety

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        safety = self.safety.get()
        for name, what in (
            ("gateway_store_files", "Closed WARC files by safety under the retention policy."),
            ("gateway_store_replicated_files", "gateway_store_files by its earlier name."),
        ):
            files = GaugeMetricFamily(name, what, labels=["state"])
            for state, count in safety.by_state.items():
                files.add_metric([state], count)
            yield files
        yield GaugeMetricFamily(
            "gateway_store_captures_not_safe",
            "Captures in unclosed WARC files or in closed files that are not safe.",
            value=safety.unsafe_captures,
        )
        yield GaugeMetricFamily(
            "gateway_store_captures_in_open_files",
            "Captures in WARC files not closed yet (one copy, never safe).",
            value=safety.open_captures,
        )
        yield GaugeMetricFamily(
            "gateway_store_oldest_not_safe_seconds",
            "How long the oldest capture that is not safe has waited (0: none).",
            value=safety.oldest_unsafe_age_s or 0.0,
        )
        summary = self.replicas.summary.get()
        copies = GaugeMetricFamily(
            "gateway_store_copies",
            "Copies of the store's closed WARC files by storage and copy status.",
            labels=["storage", "status"],
        )
        for (storage, status), count in sorted(summary.by_status.items()):
            copies.add_metric([storage, status], count)
        yield copies
        reads = self.replicas.reads
        yield CounterMetricFamily(
            "gateway_store_primary_failures",
            "Loads whose WARC file failed at the primary and went on to the replicas.",
            value=reads.primary_failures,
        )
        replica_reads = CounterMetricFamily(
            "gateway_store_replica_reads",
            "Record reads from replicas by storage and outcome.",
            labels=["storage", "outcome"],
        )
        for outcome, table in (("served", reads.served), ("failed", reads.failed)):
            for storage, count in sorted(table.copy().items()):
                replica_reads.add_metric([storage, outcome], count)
        yield replica_reads
        down = GaugeMetricFamily(
            "gateway_store_storage_down",
            "1 while the storage cannot be opened.",
            labels=["storage"],
        )
        failed = self.replicas.pool.down()
        for name in self.replicas.pool.names:
            down.add_metric([name], 1 if name in failed else 0)
        yield down


def _copies(summary: CopySummary, places: Sequence[str]) -> dict[str, dict[str, int]]:
    """Copies per place (config order) and copy status, every status listed (0 when none)."""
    table: dict[str, dict[str, int]] = {place: dict.fromkeys(COPY_STATUSES, 0) for place in places}
    for (storage, status), count in summary.by_status.items():
        if storage in table:
            table[storage][status] = count
    return table


def store_status(replicas: Replicas, safety: CachedSafety) -> dict[str, Any]:
    """``/_status``'s ``store`` entry (blocking: run it in a worker thread)."""
    report = safety.get().to_json()
    report["safety_by_place"] = report.pop("copies")
    reads = replicas.reads
    last = reads.last
    return {
        **report,
        "retention": {"copies": replicas.policy.copies, "places": list(replicas.places)},
        "copies": _copies(replicas.summary.get(), replicas.places),
        "storages_down": replicas.pool.down(),
        "replica_reads": {
            "primary_failures": reads.primary_failures,
            "served": dict(reads.served),
            "failed": dict(reads.failed),
            "last_primary_failure": last[1] if last else None,
            "last_primary_failure_at": last[0] if last else None,
        },
    }
