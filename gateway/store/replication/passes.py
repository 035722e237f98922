"""A replication pass run by a command (``gateway store replicate``, ``gateway store
repair --replace-copies``, the benchmark) in its own process, on the objects the
background actors tick: the director's pass made as ``replication_batch``
objects (:func:`enqueue_pass`), worked by batch and copy actors of
this process (:func:`work_pass`), and what it did (:func:`report_of`); the
store's jobs database opened for a command (:func:`open_jobs`).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.jobs.actors import JobContext
from gateway.jobs.db import JobObject, utcnow
from gateway.jobs.hooks import Hooks
from gateway.jobs.jobs_db import JobsDB
from gateway.jobs.model import ObjectType
from gateway.jobs.settings import JobsSettings
from gateway.store.job_rows import BatchColumns
from gateway.store.layout import Layout
from gateway.store.object_types import BATCH, OBJECT_TYPES
from gateway.store.replication.batch import BatchActor, write_batches
from gateway.store.replication.copy import CopyActor
from gateway.store.replication.director import Progress, ReplicationReport, director_batches
from gateway.store.replication.replicas import Replicas
from gateway.store.settings import StoreSettings
from gateway.store.store_actor import StoreContext

__all__ = ["enqueue_pass", "open_jobs", "read_pass", "report_of", "work_pass"]


def read_pass(conn: sqlite3.Connection, pass_id: str) -> list[JobObject[BatchColumns]]:
    """The batch objects of one director pass, in the order they were made."""
    rows = conn.execute(
        f"SELECT {', '.join(BATCH.column_names)} FROM {BATCH.table} WHERE pass_id = ? ORDER BY id",
        (pass_id,),
    ).fetchall()
    return [JobObject.from_row(BATCH, row) for row in rows]


async def enqueue_pass(
    replicas: Replicas,
    ctx: JobContext[Any],
    *,
    max_rounds: int = 6,
    replace_conflicts: bool = False,
) -> str:
    """The director's pass from the command line: the batches of files needing
    copies, made as objects of a new pass (returned: its id). Reads from the
    index, then one write (:func:`write_batches`)."""
    batches = [ids async for ids in director_batches(replicas)]
    pass_id = f"store-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    await ctx.db.call(
        write_batches,
        batches,
        pass_id,
        utcnow(),
        max_rounds=max_rounds,
        replace_conflicts=replace_conflicts,
    )
    return pass_id


async def work_pass(
    ctx: JobContext[Any], pass_id: str, *, progress: Progress | None = None, poll_s: float = 0.2
) -> list[JobObject[BatchColumns]]:
    """Work the batches of ``pass_id`` with a batch actor and copy actors of this
    process (``retention.parallel_copies`` at once) until each batch is final
    (other processes' actors may take some: their objects are waited for, read
    again every ``poll_s``); return them. ``progress(n)``: bytes copied."""
    batches = ("pass_id = ?", [pass_id])
    copies = (f"batch_id IN (SELECT id FROM {BATCH.table} WHERE pass_id = ?)", [pass_id])
    parallel, _ = CopyActor.limits_for(ctx)
    while True:
        batch_actor = BatchActor(ctx, where=batches)
        await batch_actor.run()
        copy_actors = [CopyActor(ctx, number=n + 1, where=copies) for n in range(parallel)]
        for actor in copy_actors:
            actor.progress = progress
        await asyncio.gather(*(actor.run() for actor in copy_actors))
        objects = await ctx.db.call(read_pass, pass_id)
        if all(obj.retry_at is None for obj in objects):
            return objects
        if not batch_actor.ticks and not any(actor.ticks for actor in copy_actors):
            await asyncio.sleep(poll_s)  # copies backing off, or other processes' actors


async def open_jobs(
    store_root: Path,
    settings: StoreSettings,
    jobs: JobsSettings | None,
    object_types: Sequence[ObjectType[Any]],
    who: str,
) -> tuple[JobsDB, JobContext[StoreContext]]:
    """The store's jobs database, opened, and a context for actors of ``object_types``
    run by a command (``gateway store replicate | scrub``, the benchmark) in this
    process, claiming as ``"{who} {pid}"``. Close the database when done."""
    db = JobsDB(Layout(store_root).db_path, OBJECT_TYPES)
    await db.open()
    hooks = Hooks()
    hooks.add_object_types(object_types)
    ctx: JobContext[StoreContext] = JobContext(
        db=db,
        hooks=hooks,
        settings=jobs or JobsSettings(),
        owner=f"{who} {os.getpid()}",
        app=StoreContext(root=store_root, settings=settings),
    )
    return db, ctx


def report_of(objects: Sequence[JobObject[BatchColumns]]) -> ReplicationReport:
    """What the batches ``objects`` did, summed (their files' problems included)."""
    total = ReplicationReport()
    for obj in objects:
        total.files += obj.row.files
        total.bytes_copied += obj.row.bytes_copied
        for outcome, n in obj.row.outcomes.items():
            total.outcomes[outcome] = total.outcomes.get(outcome, 0) + n
        for name, whys in obj.row.problems.items():
            total.unsafe.setdefault(name, []).extend(whys)
    return total
