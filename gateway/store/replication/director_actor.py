"""The replication director as an actor type (``replication_director``, issue 13 §3).

One object per store (made by :meth:`DirectorActor.seed` when
``store.storages`` is configured), periodic, and woken when a file is closed
(:func:`~gateway.store.object_types.write_director_wake`, in the transaction
that closes it). A tick reads the files with fewer safe copies than
``retention.copies`` (:func:`~gateway.store.replication.director.director_batches`,
``batch_size`` file ids at a time) and makes one ``replication_batch``
object per batch (:func:`~gateway.store.replication.batch.write_batches`),
then waits ``jobs.replicate_interval_s``. While batches
wait for a batch actor (due, or backing off between rounds) it only waits, so a
file is not handed out again before a batch actor has had its batch; a batch a
batch actor holds does not stop it (its files' copies are claimed ``ongoing``
as the batch actor goes, and a copy claimed twice is made once: claims are
compare-and-swap writes), nor does the lease of a batch actor that died, which
would otherwise stop replication until the lease expires. Each pass also
removes what killed copies left on the storages and publishes newly safe
files (``store.publish``; :mod:`~gateway.store.replication.pass_effects`).

::

    waiting --(a pass: batches made, leftovers removed, safe files published)--> waiting
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

from gateway.jobs.actors import JobContext
from gateway.jobs.db import JobObject, format_time, utcnow
from gateway.jobs.settings import JobsSettings
from gateway.store.job_rows import DirectorColumns
from gateway.store.object_types import BATCH, DIRECTOR, DIRECTOR_WAITING_TO_WAITING
from gateway.store.replication.actor_base import ReplicationActor
from gateway.store.replication.batch import write_batches
from gateway.store.replication.director import director_batches
from gateway.store.replication.pass_effects import publish, remove_leftovers
from gateway.store.store_actor import store_context

__all__ = ["DirectorActor", "read_waiting_batches", "write_director"]

logger = logging.getLogger(__name__)


#: The one director object's key.
POLICY: Final = "retention"


def read_waiting_batches(conn: sqlite3.Connection, now: datetime) -> int:
    """How many batch objects wait for a batch actor: ``queued`` and not held by a live
    lease (due, or leased by one whose lease ran out). A batch in ``copying`` does
    not wait for a batch actor: its copies are claimed, so its files are not listed."""
    (count,) = conn.execute(
        f"SELECT COUNT(*) FROM {BATCH.table} WHERE retry_at IS NOT NULL AND status = 'queued'"
        " AND (lease_owner IS NULL OR retry_at <= ?)",
        (format_time(now),),
    ).fetchone()
    return int(count)


def write_director(conn: sqlite3.Connection, now: datetime) -> int:
    """The director's object, due now, unless it exists: one statement; returns 1 if made."""
    stamp = format_time(now)
    cursor = conn.execute(
        f"INSERT OR IGNORE INTO {DIRECTOR.table} (status, retry_at, created_at, updated_at,"
        " policy) VALUES (?, ?, ?, ?, ?)",
        (DIRECTOR.initial, stamp, stamp, stamp, POLICY),
    )
    return cursor.rowcount


class DirectorActor(ReplicationActor):
    """The periodic director (see the module docstring)."""

    name = "replication_director"
    object_type = DIRECTOR
    queue_states = ("waiting",)
    max_concurrent = 1
    #: The tick limit (and lease), or ``jobs.replicate_max_tick_s`` when shorter:
    #: a director killed mid-tick holds its lease, and replication waits for it.
    max_tick_s = 600.0
    backoff_base_s = 10.0
    backoff_max_s = 600.0

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return cls.max_concurrent, min(cls.max_tick_s, settings.replicate_max_tick_s)

    @classmethod
    async def seed(cls, ctx: JobContext[Any]) -> None:
        """The director's object, when the store has storages to replicate to."""
        store = store_context(ctx).settings
        if store is not None and store.storages:
            await ctx.db.call(write_director, utcnow())

    async def tick(self, obj: JobObject[DirectorColumns]) -> None:
        interval_s = self.ctx.settings.replicate_interval_s
        if await self.ctx.db.call(read_waiting_batches, utcnow()):
            await self.transition(
                obj, DIRECTOR_WAITING_TO_WAITING, retry_at=self.due_in(interval_s)
            )
            return
        batches = [ids async for ids in director_batches(self.replicas)]
        values = replace(
            obj.row,
            passes=obj.row.passes + 1,
            last_pass_at=format_time(utcnow()),
            last_batches=len(batches),
            last_files=sum(len(ids) for ids in batches),
        )
        if await self.transition(
            obj, DIRECTOR_WAITING_TO_WAITING, retry_at=self.due_in(interval_s), values=values
        ):
            await self._after_pass(obj, batches)

    async def _after_pass(self, obj: JobObject[DirectorColumns], batches: list[list[int]]) -> None:
        """The pass's side effects: its batches, leftovers removed, safe files published."""
        if batches:
            pass_id = f"director-{obj.id}-{obj.row.passes + 1}"
            await self.ctx.db.call(write_batches, batches, pass_id, utcnow())
            logger.info(
                "replication: %d file(s) need copies; %d batch(es) made",
                sum(len(ids) for ids in batches),
                len(batches),
            )
        await remove_leftovers(self.replicas)
        await publish(self.replicas)
