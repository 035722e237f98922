"""Exponential backoff: the one formula by which every retry loop of the gateway waits.

After the ``attempts``-th failure in a row a loop waits ``base_s * 2**(attempts
- 1)`` seconds, at most ``max_s``: ``base_s``, twice that, four times... up to
the ceiling. The callers (see "Who retries what" in ``docs/operations.md``):

- the jobs engine: a failed tick (:class:`gateway.jobs.actors.ActorType`'s
  ``backoff_base_s`` and ``backoff_max_s``) and an actor that failed to
  start (:class:`gateway.jobs.orchestrator.Orchestrator`);
- a replication copy object's rounds
  (:mod:`gateway.store.replication.copy`);
- the storage copier's attempts (:class:`gateway.storage.copier.RetryPolicy`),
  which draws its wait uniformly in ``[0, backoff_s(...)]`` (full jitter);
- the supervisor of ``gateway serve --workers`` (a worker that keeps dying
  at start-up, :mod:`gateway.server.workers`).
"""

from __future__ import annotations

__all__ = ["backoff_s"]


def backoff_s(attempts: int, base_s: float, max_s: float) -> float:
    """Seconds to wait after the ``attempts``-th failure in a row.

    ``attempts`` counts from 1 (0 or less waits ``base_s`` too); the
    exponent stops at 62, so a huge count cannot overflow a float.

    >>> [backoff_s(n, 1.0, 60.0) for n in (1, 2, 3, 7, 8)]
    [1.0, 2.0, 4.0, 60.0, 60.0]
    """
    return min(max_s, base_s * 2.0 ** min(max(attempts - 1, 0), 62))
