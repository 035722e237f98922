"""Publishing the store's captures to a Redis index, for a fleet of gateways (issue 13 §5).

With ``store.publish: {redis: redis://host:6379/0/archive:cdxj}``, every
capture of a closed WARC file is added to that sorted set as its CDXJ line
(``urlkey timestamp {json}``, score 0: pywb's Redis index format, the one
:mod:`gateway.sources.redis_zset` reads) once the file is **safe** under
the retention policy and **present** on the storage the fleet reads WARC
files from (``store.publish.storage``). The line's ``filename`` is the
file's name, the object's name on that storage, so another gateway serves
the capture with::

    collections:
      archive:
        index: redis://host:6379/0/archive:cdxj
        resource: s3+http://s3-host:8333/warcs/gateway/     # the storage's bucket and prefix

A published file is recorded in the ``publications`` table (with its
SHA-256); ``ZADD`` of a line already there changes nothing, so a publisher
killed between the two publishes the file again, harmlessly.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from redis.exceptions import RedisError

from gateway.redis_keys import describe_failure
from gateway.store.db import IndexDB
from gateway.store.replication.copy_status import read_unpublished, write_publication
from gateway.store.replication.replicas import Replicas
from gateway.store.settings import PublishSettings

if TYPE_CHECKING:
    import redis.asyncio

__all__ = ["PublishReport", "publish_safe_files"]

logger = logging.getLogger(__name__)

#: Lines sent per ``ZADD``.
ZADD_LINES: Final = 1000
#: Files published per round trip to the index.
FILES_PER_ROUND: Final = 100


@dataclass(slots=True)
class PublishReport:
    """Files and index lines published, and the failure that stopped it (if any)."""

    files: int = 0
    lines: int = 0
    failure: str | None = None
    names: list[str] = field(default_factory=list)


def _lines_of(index: IndexDB, file_id: int) -> list[str]:
    """The CDXJ lines of a file's captures, by offset (blocking)."""
    rows = index.rows_of_file(file_id)
    return [stored.row.to_cdx(stored.filename).to_cdxj().rstrip("\n") for stored in rows]


async def publish_safe_files(
    replicas: Replicas, publish: PublishSettings, client: redis.asyncio.Redis
) -> PublishReport:
    """Publish every file that is safe and present on ``publish.storage`` and not yet
    published; returns what was done. A Redis failure stops it and is reported
    (``failure``): the files not published are published by the next call."""
    report = PublishReport()
    target = publish.target
    while True:
        ready = await replicas.index.call(
            read_unpublished,
            target,
            publish.storage,
            replicas.places,
            replicas.policy.copies,
            limit=FILES_PER_ROUND,
        )
        if not ready:
            return report
        for file_id, name, sha256 in ready:
            lines = await replicas.index.call_db(functools.partial(_lines_of, file_id=file_id))
            try:
                for start in range(0, len(lines), ZADD_LINES):
                    chunk = lines[start : start + ZADD_LINES]
                    await client.zadd(publish.key, dict.fromkeys(chunk, 0))
            except RedisError as exc:
                report.failure = f"publishing to {target} failed: {describe_failure(exc)}"
                logger.warning("store: %s", report.failure)
                return report
            await replicas.index.call(
                write_publication, name, target, sha256, mtime=time.time(), captures=len(lines)
            )
            report.files += 1
            report.lines += len(lines)
            report.names.append(name)
            logger.info("store: published %d capture(s) of %s to %s", len(lines), name, target)
