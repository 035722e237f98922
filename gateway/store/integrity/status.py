"""Replication as ``/metrics`` and ``/_status`` show it (issue 13: copies by status).

:class:`ReplicationCollector` is a prometheus-client custom collector,
registered by the app with :func:`gateway.api.metrics.register_collector` when
the store has storages. Families:

=========================================  ============================================
``gateway_store_copies``                   gauge {storage, status}: copies by status
                                           (``primary`` included; an expired
                                           ``ongoing`` counts as ``missing``)
``gateway_store_replicated_files``         gauge {state}: files ``safe``, ``ongoing``
                                           (safe counting copies under way),
                                           ``under_replicated``, ``corrupted`` (a
                                           corrupted copy somewhere), ``no_sha256``
``gateway_store_primary_failures_total``   counter: loads whose file failed at the
                                           primary and went on to the replicas
``gateway_store_replica_reads_total``      counter {storage, outcome}: ``served``,
                                           ``failed``
``gateway_store_storage_down``             gauge {storage}: 1 while the storage
                                           cannot be opened
=========================================  ============================================

``/_status``'s ``store`` entry (:func:`replication_status`) has the same
counts: ``files`` by state and ``copies`` per place and status.

The copy counts cost a pass over the index's ``files`` (O(files), read-only,
in the scrape's worker thread); they are computed at most every
:data:`~gateway.store.replication.replicas.SUMMARY_MAX_AGE_S` seconds and reused in
between (:class:`~gateway.store.replication.replicas.CachedSummary`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from gateway.store.replication.copy_status import COPY_STATUSES, CopySummary

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from gateway.store.replication.replicas import Replicas

__all__ = ["ReplicationCollector", "replication_status"]


class ReplicationCollector:
    """The families of the module docstring, for one store's :class:`Replicas`."""

    def __init__(self, replicas: Replicas) -> None:
        self.replicas = replicas

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        summary = self.replicas.summary.get()
        copies = GaugeMetricFamily(
            "gateway_store_copies",
            "Copies of the store's closed WARC files by storage and status.",
            labels=["storage", "status"],
        )
        for (storage, status), count in sorted(summary.by_status.items()):
            copies.add_metric([storage, status], count)
        yield copies
        files = GaugeMetricFamily(
            "gateway_store_replicated_files",
            "Closed WARC files by safety under the retention policy.",
            labels=["state"],
        )
        for state, count in _states(summary).items():
            files.add_metric([state], count)
        yield files
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


def _states(summary: CopySummary) -> dict[str, int]:
    return {
        "safe": summary.safe,
        "ongoing": summary.pending,
        "under_replicated": summary.under_replicated,
        "corrupted": summary.corrupted,
        "no_sha256": summary.no_sha256,
    }


def _copies(summary: CopySummary, places: Sequence[str]) -> dict[str, dict[str, int]]:
    """Copies per place (config order) and status, every status listed (0 when none)."""
    table: dict[str, dict[str, int]] = {place: dict.fromkeys(COPY_STATUSES, 0) for place in places}
    for (storage, status), count in summary.by_status.items():
        if storage in table:
            table[storage][status] = count
    return table


def replication_status(replicas: Replicas) -> dict[str, Any]:
    """``/_status``'s ``store`` entry (blocking: run it in a worker thread)."""
    summary = replicas.summary.get()
    reads = replicas.reads
    last = reads.last
    return {
        "retention": {"copies": replicas.policy.copies, "places": list(replicas.places)},
        "files": {"total": summary.files, **_states(summary)},
        "copies": _copies(summary, replicas.places),
        "storages_down": replicas.pool.down(),
        "replica_reads": {
            "primary_failures": reads.primary_failures,
            "served": dict(reads.served),
            "failed": dict(reads.failed),
            "last_primary_failure": last[1] if last else None,
            "last_primary_failure_at": last[0] if last else None,
        },
    }
