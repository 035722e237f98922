"""What a replication pass does besides its batches, in the director's pass
(:mod:`~gateway.store.replication.director_actor`) and in ``gateway store replicate``
alike: what killed copies left on the storages removed (:func:`remove_leftovers`)
and newly safe files published (:func:`publish`).
"""

from __future__ import annotations

import logging

from gateway.storage.errors import StorageError
from gateway.store.replication.publication import PublishReport
from gateway.store.replication.replicas import Replicas

__all__ = ["publish", "published", "remove_leftovers"]

logger = logging.getLogger(__name__)


async def remove_leftovers(replicas: Replicas) -> list[str]:
    """Remove what killed copies left on each storage (older than ``archival_max_age_s``);
    returns one line per storage that removed some or could not be reached."""
    said: list[str] = []
    for name in replicas.pool.names:
        try:
            storage = await replicas.pool.get(name)
            removed = await storage.remove_leftovers(replicas.policy.archival_max_age_s)
        except StorageError as exc:
            logger.warning("replication: %s: %s", name, exc)
            said.append(f"{name}: {exc}")
            continue
        if removed:
            said.append(f"{name}: removed {len(removed)} leftover(s) of interrupted copies")
    return said


async def publish(replicas: Replicas) -> PublishReport | None:
    """Publish newly safe files when ``store.publish`` is set.

    :mod:`gateway.store.replication.publication` publishes; returns what was
    published, or None when publication is not configured. What was published
    is logged at INFO, a failure at WARNING."""
    target = replicas.settings.publish
    if target is None:
        return None
    import redis.asyncio as aioredis

    from gateway.store.replication.publication import publish_safe_files

    client = aioredis.Redis.from_url(target.server_url)
    try:
        report = await publish_safe_files(replicas, target, client)
    finally:
        await client.aclose()
    if report.failure is not None:
        logger.warning("replication: %s", report.failure)
    elif report.files:
        logger.info("replication: %s", published(report, target.target))
    return report


def published(report: PublishReport, target: str) -> str:
    """One line saying what ``report`` published to ``target``."""
    return f"published {report.lines} capture(s) of {report.files} file(s) to {target}"
