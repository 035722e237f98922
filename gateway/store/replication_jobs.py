"""Replication as background work: the director and the workers are actor types (issue 13 §3).

The director and workers of :mod:`gateway.store.replication` run as two
actor types of :mod:`gateway.jobs`, so the retention policy holds by itself
wherever an orchestrator runs (``gateway serve``, ``gateway worker``), and
``gateway store replicate`` drives the same objects from the command line.

**The director** (``replication_director``): one object per store (made
by :meth:`DirectorActor.seed` when ``store.storages`` is configured),
periodic, and woken when a file is closed (:func:`write_director_wake`, in
the transaction that closes it). A tick reads the files with fewer safe copies than
``retention.copies`` (:func:`~gateway.store.replication.director_batches`,
``batch_size`` file ids at a time) and makes one ``replication_batch``
object per batch, then waits ``jobs.replicate_interval_s``. While batches
wait for a worker (due, or backing off between rounds) it only waits, so a
file is not handed out again before a worker has had its batch; a batch a
worker holds does not stop it (its files' copies are claimed ``ongoing``
as the worker goes, and a copy claimed twice is made once: claims are
compare-and-swap writes), nor does the lease of a worker that died, which
would otherwise stop replication until the lease expires. Each pass also
removes what killed copies left on the storages and publishes newly safe
files (``store.publish``).

::

    waiting --(a pass: batches made, leftovers removed, safe files published)--> waiting

**A worker** (``replication_worker``) ticks one ``replication_batch``
object: :func:`~gateway.store.replication.replicate_batch` (needs re-read,
integrity at the source, claims, copies ``parallel_copies`` at once,
verification at the destination, the copy status). A tick is time-boxed:
it starts copies for half of ``jobs.replicate_max_tick_s`` and leaves the
rest (``deferred``, not claimed) to the next tick of the same object, due
at once, which plans them afresh; so a batch of any size fits the tick
limit, as long as one copy fits in the other half. Copies that failed for
a transient reason (a storage down) keep their ``ongoing`` claim and are
tried again by the next tick of the same object, after a backoff, up to
``max_rounds`` ticks (6; 1 for ``store replicate --once``); then the
claims are left to expire after ``archival_max_age_s``, when the director
lists the files again (the Software Heritage archiver's way).

::

    queued --(copies failed transiently: retried after a backoff;
              or copies left when the tick's time was up: at once)--> queued
    queued --> done      every file of the batch has its safe copies
    queued --> unsafe    a file could not be made safe (the reasons kept in ``problems``)

A worker killed in the middle of a copy leaves the object leased: the lease
(``jobs.replicate_max_tick_s``) expires and another worker ticks it again;
a copy left ``ongoing`` by the dead worker counts as under way until
``archival_max_age_s``, and an object it half-wrote is never ``present``
(the copier's create-only, verified puts).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from gateway.jobs.actors import ActorType, JobContext, backoff_s
from gateway.jobs.db import JobObject, JobsDB, Value, format_time, utcnow, write_objects
from gateway.jobs.hooks import Hooks
from gateway.jobs.model import ObjectType
from gateway.jobs.settings import JobsSettings
from gateway.storage.errors import StorageError
from gateway.store.copies import CopyRow, read_file_copies
from gateway.store.errors import StoreError
from gateway.store.layout import Layout
from gateway.store.publish import PublishReport
from gateway.store.replicas import Replicas
from gateway.store.replication import (
    CopyPlan,
    ReplicationReport,
    director_batches,
    replicate_batch,
    retry_copies,
)
from gateway.store.settings import StoreSettings

__all__ = [
    "BATCH",
    "DIRECTOR",
    "DirectorActor",
    "ReplicationWorker",
    "enqueue_pass",
    "open_jobs",
    "publish",
    "published",
    "read_pass",
    "read_waiting_batches",
    "remove_leftovers",
    "report_of",
    "work_pass",
    "write_batches",
    "write_director",
    "write_director_wake",
]

logger = logging.getLogger(__name__)

DIRECTOR: Final = ObjectType(
    name="replication_director",
    description="the retention policy's director: a batch object per batch_size files"
    " with too few safe copies, periodically",
    states=("waiting",),
    initial="waiting",
    final=(),
    transitions=(("waiting", "waiting"),),
    columns=(
        ("policy", "TEXT NOT NULL"),
        ("passes", "INTEGER NOT NULL DEFAULT 0"),
        ("last_pass_at", "TEXT"),
        ("last_batches", "INTEGER NOT NULL DEFAULT 0"),
        ("last_files", "INTEGER NOT NULL DEFAULT 0"),
    ),
    unique=(("policy",),),
    label_column="policy",
)

BATCH: Final = ObjectType(
    name="replication_batch",
    description="a replication worker's batch: its files copied until each has its safe copies",
    states=("queued", "done", "unsafe"),
    initial="queued",
    final=("done", "unsafe"),
    transitions=(("queued", "queued"), ("queued", "done"), ("queued", "unsafe")),
    columns=(
        ("pass_id", "TEXT NOT NULL"),
        ("file_ids", "TEXT NOT NULL"),
        ("max_rounds", "INTEGER NOT NULL DEFAULT 6"),
        ("replace_conflicts", "INTEGER NOT NULL DEFAULT 0"),
        ("rounds", "INTEGER NOT NULL DEFAULT 0"),
        ("deferred", "INTEGER NOT NULL DEFAULT 0"),
        ("files", "INTEGER NOT NULL DEFAULT 0"),
        ("outcomes", "TEXT NOT NULL DEFAULT '{}'"),
        ("bytes_copied", "INTEGER NOT NULL DEFAULT 0"),
        ("problems", "TEXT NOT NULL DEFAULT '{}'"),
        ("pending", "TEXT NOT NULL DEFAULT '[]'"),
        ("result", "TEXT NOT NULL DEFAULT ''"),
    ),
    indexes=(("pass_id",),),
    attention_states=("unsafe",),
    label_column="pass_id",
    detail_column="result",
)

#: The one director object's key.
POLICY: Final = "retention"
#: The share of a worker's tick limit spent starting copies; the rest lets the last
#: ones finish (a copy must fit in the rest: ``jobs.replicate_max_tick_s``).
TICK_BUDGET_SHARE: Final = 0.5
#: Backoff between the rounds of a batch whose copies failed transiently (seconds).
ROUND_BACKOFF_BASE_S: Final = 5.0
ROUND_BACKOFF_MAX_S: Final = 300.0

Progress = Callable[[int], object]


# ------------------------------------------------------------------------ reads
def read_waiting_batches(conn: sqlite3.Connection, now: datetime) -> int:
    """How many batch objects wait for a worker: not final and not held by a live
    lease (due, backing off between rounds, or leased by a worker whose lease ran out)."""
    (count,) = conn.execute(
        f"SELECT COUNT(*) FROM {BATCH.table} WHERE retry_at IS NOT NULL"
        " AND (lease_owner IS NULL OR retry_at <= ?)",
        (format_time(now),),
    ).fetchone()
    return int(count)


def read_pass(conn: sqlite3.Connection, pass_id: str) -> list[JobObject]:
    """The batch objects of one director pass, in the order they were made."""
    rows = conn.execute(
        f"SELECT {', '.join(BATCH.column_names)} FROM {BATCH.table} WHERE pass_id = ? ORDER BY id",
        (pass_id,),
    ).fetchall()
    return [JobObject.from_row(BATCH, row) for row in rows]


# ----------------------------------------------------------------------- writes
def write_director(conn: sqlite3.Connection, now: datetime) -> int:
    """The director's object, due now, unless it exists: one statement; returns 1 if made."""
    stamp = format_time(now)
    cursor = conn.execute(
        f"INSERT OR IGNORE INTO {DIRECTOR.table} (status, retry_at, created_at, updated_at,"
        " policy) VALUES (?, ?, ?, ?, ?)",
        (DIRECTOR.initial, stamp, stamp, stamp, POLICY),
    )
    return cursor.rowcount


def write_director_wake(conn: sqlite3.Connection, now: datetime) -> int:
    """Make the director due now (a file was closed: it may need copies), unless a
    live actor holds it or it is due already; one statement, a wake only."""
    stamp = format_time(now)
    cursor = conn.execute(
        f"UPDATE {DIRECTOR.table} SET retry_at = ? WHERE retry_at > ? AND lease_owner IS NULL",
        (stamp, stamp),
    )
    return cursor.rowcount


def write_batches(
    conn: sqlite3.Connection,
    batches: Sequence[Sequence[int]],
    pass_id: str,
    now: datetime,
    *,
    max_rounds: int = 6,
    replace_conflicts: bool = False,
) -> list[int]:
    """One ``replication_batch`` object per batch of file ids, due now (one transaction).

    ``replace_conflicts``: its worker replaces objects of other bytes found
    under a file's name (``store repair --replace-copies``).
    """
    rows: list[dict[str, Value]] = [
        {
            "pass_id": pass_id,
            "file_ids": json.dumps(list(ids)),
            "max_rounds": max_rounds,
            "replace_conflicts": int(replace_conflicts),
        }
        for ids in batches
    ]
    return write_objects(conn, BATCH, now, rows) if rows else []


async def enqueue_pass(
    replicas: Replicas, ctx: JobContext, *, max_rounds: int = 6, replace_conflicts: bool = False
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
    ctx: JobContext, pass_id: str, *, progress: Progress | None = None, poll_s: float = 0.2
) -> list[JobObject]:
    """Work the batches of ``pass_id`` with a replication worker of this process until
    each is final (other processes' workers may take some: their batches are waited
    for, read again every ``poll_s``); return them. ``progress(n)``: bytes copied."""
    while True:
        worker = ReplicationWorker(ctx, where=("pass_id = ?", [pass_id]))
        worker.progress = progress
        await worker.run()
        objects = await ctx.db.call(read_pass, pass_id)
        if all(obj.retry_at is None for obj in objects):
            return objects
        await asyncio.sleep(poll_s)


async def open_jobs(
    store_root: Path,
    settings: StoreSettings,
    jobs: JobsSettings | None,
    object_types: Sequence[ObjectType],
    who: str,
) -> tuple[JobsDB, JobContext]:
    """The store's jobs database, opened, and a context for actors of ``object_types``
    run by a command (``gateway store replicate | scrub``, the benchmark) in this
    process, claiming as ``"{who} {pid}"``. Close the database when done."""
    db = JobsDB(Layout(store_root).db_path)
    await db.open()
    hooks = Hooks()
    hooks.add_object_types(object_types)
    ctx = JobContext(
        db=db,
        hooks=hooks,
        settings=jobs or JobsSettings(),
        store_root=store_root,
        owner=f"{who} {os.getpid()}",
        store=settings,
    )
    return db, ctx


def report_of(objects: Sequence[JobObject]) -> ReplicationReport:
    """What the batches ``objects`` did, summed (their files' problems included)."""
    total = ReplicationReport()
    for obj in objects:
        total.files += int(obj["files"] or 0)
        total.bytes_copied += int(obj["bytes_copied"] or 0)
        for outcome, n in json.loads(str(obj["outcomes"])).items():
            total.outcomes[outcome] = total.outcomes.get(outcome, 0) + int(n)
        for name, whys in json.loads(str(obj["problems"])).items():
            total.unsafe.setdefault(name, []).extend(whys)
    return total


# ----------------------------------------------------------------- actor types
class _ReplicationActor(ActorType):
    """An actor with its own :class:`Replicas` (storages opened on first use)."""

    _replicas: Replicas | None = None

    @property
    def replicas(self) -> Replicas:
        assert self._replicas is not None, "the actor has not started"
        return self._replicas

    async def on_startup(self) -> None:
        store = self.ctx.store
        if store is None:
            raise StoreError(f"{self.name}: the jobs context carries no store settings")
        self._replicas = Replicas(store, Layout(self.ctx.store_root))

    async def on_shutdown(self) -> None:
        if self._replicas is not None:
            replicas, self._replicas = self._replicas, None
            await replicas.close()


class DirectorActor(_ReplicationActor):
    """The periodic director (see the module docstring)."""

    name = "replication_director"
    object_type = DIRECTOR
    queue_states = ("waiting",)
    max_concurrent = 1
    max_tick_s = 600.0
    backoff_base_s = 10.0
    backoff_max_s = 600.0

    @classmethod
    async def seed(cls, ctx: JobContext) -> None:
        """The director's object, when the store has storages to replicate to."""
        if ctx.store is not None and ctx.store.storages:
            await ctx.db.call(write_director, utcnow())

    async def tick(self, obj: JobObject) -> None:
        interval_s = self.ctx.settings.replicate_interval_s
        if await self.ctx.db.call(read_waiting_batches, utcnow()):
            await self.transition_replication_director_waiting_to_waiting(
                obj, retry_at=self.due_in(interval_s)
            )
            return
        batches = [ids async for ids in director_batches(self.replicas)]
        won = await self.transition_replication_director_waiting_to_waiting(
            obj,
            retry_at=self.due_in(interval_s),
            values={
                "passes": int(obj["passes"] or 0) + 1,
                "last_pass_at": format_time(utcnow()),
                "last_batches": len(batches),
                "last_files": sum(len(ids) for ids in batches),
            },
        )
        if won:
            await self._after_pass(obj, batches)

    async def _after_pass(self, obj: JobObject, batches: list[list[int]]) -> None:
        """The pass's side effects: its batches, leftovers removed, safe files published."""
        if batches:
            pass_id = f"director-{obj.id}-{int(obj['passes'] or 0) + 1}"
            await self.ctx.db.call(write_batches, batches, pass_id, utcnow())
            logger.info(
                "replication: %d file(s) need copies; %d batch(es) made",
                sum(len(ids) for ids in batches),
                len(batches),
            )
        await remove_leftovers(self.replicas)
        await publish(self.replicas)

    async def transition_replication_director_waiting_to_waiting(
        self, obj: JobObject, *, retry_at: datetime, values: dict[str, Value] | None = None
    ) -> bool:
        return await self.transition(obj, "waiting", "waiting", retry_at=retry_at, values=values)


class ReplicationWorker(_ReplicationActor):
    """Ticks one batch: its copies made, retried, or its files reported (module docstring)."""

    name = "replication_worker"
    object_type = BATCH
    queue_states = ("queued",)
    max_concurrent = 1
    max_tick_s = 3600.0
    backoff_base_s = 10.0
    backoff_max_s = 600.0
    #: Called with the bytes of each copy made (``store replicate``'s progress bar).
    progress: Progress | None = None

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return cls.max_concurrent, settings.replicate_max_tick_s

    async def tick(self, obj: JobObject) -> None:
        replicas = self.replicas
        deadline = time.monotonic() + self.tick_limit_s * TICK_BUDGET_SHARE
        pending = json.loads(str(obj["pending"]))
        report = ReplicationReport()
        if pending:
            plans = await self._plans(pending)
            report.add(await retry_copies(replicas, plans, progress=self.progress))
        if not pending or int(obj["deferred"] or 0):
            ids = [int(i) for i in json.loads(str(obj["file_ids"]))]
            batch = await replicate_batch(
                replicas,
                ids,
                replace_conflicts=bool(obj["replace_conflicts"]),
                progress=self.progress,
                deadline=deadline,
            )
            if int(obj["files"] or 0):
                batch.files = 0  # (counted by the first tick)
            report.add(batch)
        rounds = int(obj["rounds"] or 0) + (1 if report.retry else 0)
        values = _totals(obj, report, rounds)
        retry = bool(report.retry) and rounds < int(obj["max_rounds"] or 1)
        if retry or report.deferred:
            values["pending"] = json.dumps(
                [
                    [c.file.name, c.source, c.destination, claimed, c.replace]
                    for c, claimed in (report.retry if retry else ())
                ]
            )
            values["deferred"] = report.deferred
            # Copies left for want of time go on at once; failed ones after a backoff.
            delay = (
                0.0
                if report.deferred
                else backoff_s(rounds, ROUND_BACKOFF_BASE_S, ROUND_BACKOFF_MAX_S)
            )
            await self.transition_replication_batch_queued_to_queued(
                obj, retry_at=self.due_in(delay), values=values
            )
            return
        values["pending"], values["deferred"] = "[]", 0
        problems: dict[str, list[str]] = json.loads(str(values["problems"]))
        unsafe = await self._still_unsafe(problems)
        values["problems"] = json.dumps({name: problems[name] for name in unsafe})
        if unsafe:
            values["result"] = f"{len(unsafe)} file(s) not safe: " + "; ".join(
                f"{name}: {'; '.join(dict.fromkeys(problems[name]))}" for name in unsafe[:3]
            )
            logger.warning("replication: batch #%d: %s", obj.id, values["result"])
            await self.transition_replication_batch_queued_to_unsafe(obj, values=values)
        else:
            values["result"] = _summary(values)
            await self.transition_replication_batch_queued_to_done(obj, values=values)

    async def _plans(self, pending: list[list[Any]]) -> list[tuple[CopyPlan, float]]:
        """The copies an earlier round left to retry, with the files' rows as they are now."""
        names = sorted({str(item[0]) for item in pending})
        files = await self.replicas.index.call(read_file_copies, self.replicas.places, names=names)
        by_name = {f.name: f for f in files}
        plans: list[tuple[CopyPlan, float]] = []
        for name, source, destination, claimed, replace in pending:
            file = by_name.get(name)
            if file is None or file.sha256 is None:
                continue  # the file left the index (repaired): nothing to copy
            seen = CopyRow(name, destination, file.sha256, "ongoing", float(claimed))
            plans.append((CopyPlan(file, source, destination, seen, bool(replace)), claimed))
        return plans

    async def _still_unsafe(self, problems: dict[str, list[str]]) -> list[str]:
        """The files of ``problems`` that still have fewer present copies than the policy."""
        if not problems:
            return []
        replicas = self.replicas
        files = await replicas.index.call(read_file_copies, replicas.places, names=list(problems))
        cutoff, wanted = replicas.cutoff(), replicas.policy.copies
        return [f.name for f in files if len(f.present_places(replicas.places, cutoff)) < wanted]

    async def transition_replication_batch_queued_to_queued(
        self, obj: JobObject, *, retry_at: datetime, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "queued", retry_at=retry_at, values=values)

    async def transition_replication_batch_queued_to_done(
        self, obj: JobObject, *, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "done", retry_at=None, values=values)

    async def transition_replication_batch_queued_to_unsafe(
        self, obj: JobObject, *, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "unsafe", retry_at=None, values=values)


def _totals(obj: JobObject, report: ReplicationReport, rounds: int) -> dict[str, Value]:
    """The batch's columns after this round: counts summed, problems gathered."""
    outcomes: dict[str, int] = json.loads(str(obj["outcomes"]))
    for outcome, n in report.outcomes.items():
        outcomes[outcome] = outcomes.get(outcome, 0) + n
    if report.deferred:
        outcomes["deferred"] = outcomes.get("deferred", 0) + report.deferred
    problems: dict[str, list[str]] = json.loads(str(obj["problems"]))
    for name, whys in report.unsafe.items():
        problems.setdefault(name, []).extend(whys)
    return {
        "rounds": rounds,
        "files": int(obj["files"] or 0) + report.files,
        "outcomes": json.dumps(outcomes, sort_keys=True),
        "bytes_copied": int(obj["bytes_copied"] or 0) + report.bytes_copied,
        "problems": json.dumps(problems),
    }


def _summary(values: dict[str, Value]) -> str:
    outcomes: dict[str, int] = json.loads(str(values["outcomes"]))
    done = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "nothing to copy"
    return f"{values['files']} file(s): {done}; {int(values['bytes_copied'] or 0)} bytes copied"


# ------------------------------------------------------------ pass side effects
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
    """Publish newly safe files when ``store.publish`` is set (:mod:`gateway.store.publish`);
    returns what was published, or None when publication is not configured. What was
    published is logged at INFO, a failure at WARNING."""
    target = replicas.settings.publish
    if target is None:
        return None
    import redis.asyncio as aioredis

    from gateway.store.publish import publish_safe_files

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
