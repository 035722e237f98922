"""Replication as background work: the director and the workers are actor types (issue 13 §3).

The director and workers of :mod:`gateway.store.replication.director` run as two
actor types of :mod:`gateway.jobs`, so the retention policy holds by itself
wherever an orchestrator runs (``gateway serve``, ``gateway worker``), and
``gateway store replicate`` drives the same objects from the command line.

**The director** (``replication_director``): one object per store (made
by :meth:`DirectorActor.seed` when ``store.storages`` is configured),
periodic, and woken when a file is closed (:func:`write_director_wake`, in
the transaction that closes it). A tick reads the files with fewer safe copies than
``retention.copies`` (:func:`~gateway.store.replication.director.director_batches`,
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
object: it re-reads its files' needs, checks what cannot be copied, plans
and claims the copies (:func:`~gateway.store.replication.director.plan_batch`,
:func:`~gateway.store.replication.director.claim_copy`: ``ongoing`` with the batch's
``mtime``), groups them by (source, destination) pair and hands each group
to a copier: the batch moves to ``copying`` and, as that transition's side
effect, one ``replication_copy`` object per group is written (one
transaction). Written after the transition, so that no copier can end
before the batch waits for it (a wake leaves a leased object alone); a
worker killed between the two leaves the groups in the batch's
``pending``, and the batch's next tick writes the missing objects (a
unique key on (batch, source, destination) makes that write idempotent).
Each copy object's final transition wakes the batch; once every one is
final, the batch's next tick gathers their outcomes and reasons and ends
it, as a batch ended before copiers were objects of their own. Until then
it looks again at least every ``min(60 s, jobs.replicate_max_tick_s)`` (a
copy object that ends while such a look leases the batch does not wake it:
the batch ends at its next look instead).

::

    queued --> copying   copies claimed and handed to copy objects
    queued --> done      nothing to copy: every file of the batch has its safe copies
    queued --> unsafe    nothing could be copied, and a file is not safe (reasons in ``problems``)
    copying --> copying  copy objects still at work (looked at again later)
    copying --> done     every copy object final and every file safe
    copying --> unsafe   a file could not be made safe (the reasons gathered from its copies)

**A copier** (``replication_copier``, ``retention.parallel_copies`` at
once) ticks one ``replication_copy`` object: the files of one group, one
by one, through :func:`~gateway.store.replication.director.claim_and_copy` (the
claim checked, or renewed for a retry; integrity at both ends; create-only
verified puts; the copy status recorded). A tick starts copies for half of
``jobs.replicate_max_tick_s`` and leaves the rest to the next tick of the
same object, due at once (one copy must fit in the other half). Files
whose copy failed for a transient reason (a storage down) keep their
``ongoing`` claim and are tried again by the same object after a backoff
(5, 10, 20, 40, 80 s), up to ``max_rounds`` rounds (6; 1 for ``store
replicate --once``); then the claims are left to expire after
``archival_max_age_s``, when the director lists the files again (the
Software Heritage archiver's way).

::

    queued --(files left when the tick's time was up: at once;
              or copies failed transiently: after a backoff)--> queued
    queued --> done      every file of the group copied and verified
    queued --> failed    a file not copied (the reasons kept in ``problems``)

A worker or copier killed in the middle of a tick leaves its object leased:
the lease (``jobs.replicate_max_tick_s``) expires and another actor ticks
it again; a copy left ``ongoing`` by a dead copier is made again by the
same object (its claim is still the object's), counts as under way until
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

from gateway.jobs.actors import ActorType, JobContext, Wake, backoff_s
from gateway.jobs.db import JobObject, JobsDB, Value, format_time, utcnow, write_objects
from gateway.jobs.hooks import Hooks
from gateway.jobs.model import ObjectType
from gateway.jobs.settings import JobsSettings
from gateway.storage.errors import StorageError
from gateway.store.errors import StoreError
from gateway.store.layout import Layout
from gateway.store.object_types import BATCH, COPY, DIRECTOR, OBJECT_TYPES
from gateway.store.replication.copy_status import CopyRow, read_file_copies
from gateway.store.replication.director import (
    COPIED,
    DEFAULT_RETRY,
    CopyPlan,
    ReplicationReport,
    claim_and_copy,
    claim_copy,
    director_batches,
    group_by_pair,
    plan_batch,
)
from gateway.store.replication.publication import PublishReport
from gateway.store.replication.replicas import Replicas
from gateway.store.settings import StoreSettings
from gateway.store.store_actor import StoreContext, store_context

__all__ = [
    "BATCH",
    "COPY",
    "DIRECTOR",
    "CopierActor",
    "DirectorActor",
    "ReplicationWorker",
    "enqueue_pass",
    "open_jobs",
    "publish",
    "published",
    "read_batch_copies",
    "read_pass",
    "read_waiting_batches",
    "remove_leftovers",
    "report_of",
    "work_pass",
    "write_batches",
    "write_copies",
    "write_director",
]

logger = logging.getLogger(__name__)


#: The one director object's key.
POLICY: Final = "retention"
#: The share of a copier's tick limit spent starting copies; the rest lets the last
#: one finish (a copy must fit in the rest: ``jobs.replicate_max_tick_s``). The
#: worker moves files to the current layout for as long.
TICK_BUDGET_SHARE: Final = 0.5
#: How long a batch in ``copying`` waits before it looks at its copy objects again
#: (at most; its copies' last transition wakes it), seconds.
COPYING_LOOK_S: Final = 60.0
#: Backoff between the rounds of a copy object whose copies failed transiently (seconds).
ROUND_BACKOFF_BASE_S: Final = 5.0
ROUND_BACKOFF_MAX_S: Final = 300.0

Progress = Callable[[int], object]


# ------------------------------------------------------------------------ reads
def read_waiting_batches(conn: sqlite3.Connection, now: datetime) -> int:
    """How many batch objects wait for a worker: ``queued`` and not held by a live
    lease (due, or leased by a worker whose lease ran out). A batch in ``copying``
    does not wait for a worker: its copies are claimed, so its files are not listed."""
    (count,) = conn.execute(
        f"SELECT COUNT(*) FROM {BATCH.table} WHERE retry_at IS NOT NULL AND status = 'queued'"
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


def read_batch_copies(conn: sqlite3.Connection, batch_id: int) -> list[JobObject]:
    """The copy objects of batch ``batch_id``, in the order they were made."""
    rows = conn.execute(
        f"SELECT {', '.join(COPY.column_names)} FROM {COPY.table} WHERE batch_id = ? ORDER BY id",
        (batch_id,),
    ).fetchall()
    return [JobObject.from_row(COPY, row) for row in rows]


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


def write_copies(
    conn: sqlite3.Connection,
    batch_id: int,
    max_rounds: int,
    groups: Sequence[Sequence[Any]],
    now: datetime,
) -> list[int]:
    """One ``replication_copy`` object per group of batch ``batch_id``, due now (one
    transaction); a group that has its object already is skipped (the unique key on
    (batch, source, destination)). ``groups``: ``[source, destination, mtime,
    [[name, replace], ...]]`` as the batch's ``pending`` holds them; each file's
    claim is ``ongoing`` since ``mtime``."""
    rows: list[dict[str, Value]] = [
        {
            "batch_id": batch_id,
            "source": source,
            "destination": destination,
            "mtime": mtime,
            "max_rounds": max_rounds,
            "files": json.dumps([name for name, _ in files]),
            "todo": json.dumps([[name, replace, mtime] for name, replace in files]),
        }
        for source, destination, mtime, files in groups
    ]
    return write_objects(conn, COPY, now, rows, ignore_existing=True) if rows else []


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
) -> list[JobObject]:
    """Work the batches of ``pass_id`` with a replication worker and copiers of this
    process (``retention.parallel_copies`` at once) until each batch is final
    (other processes' actors may take some: their objects are waited for, read
    again every ``poll_s``); return them. ``progress(n)``: bytes copied."""
    batches = ("pass_id = ?", [pass_id])
    copies = (f"batch_id IN (SELECT id FROM {BATCH.table} WHERE pass_id = ?)", [pass_id])
    parallel, _ = CopierActor.limits_for(ctx)
    while True:
        worker = ReplicationWorker(ctx, where=batches)
        await worker.run()
        copiers = [CopierActor(ctx, number=n + 1, where=copies) for n in range(parallel)]
        for copier in copiers:
            copier.progress = progress
        await asyncio.gather(*(copier.run() for copier in copiers))
        objects = await ctx.db.call(read_pass, pass_id)
        if all(obj.retry_at is None for obj in objects):
            return objects
        if not worker.ticks and not any(copier.ticks for copier in copiers):
            await asyncio.sleep(poll_s)  # copies backing off, or other processes' actors


async def open_jobs(
    store_root: Path,
    settings: StoreSettings,
    jobs: JobsSettings | None,
    object_types: Sequence[ObjectType],
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
        context = store_context(self.ctx)
        if context.settings is None:
            raise StoreError(f"{self.name}: the jobs context carries no store settings")
        self._replicas = Replicas(context.settings, Layout(context.root))

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
    """Ticks one batch: its copies planned, claimed and handed to copy objects, then
    its end gathered from them (see the module docstring)."""

    name = "replication_worker"
    object_type = BATCH
    queue_states = ("queued", "copying")
    max_concurrent = 1
    max_tick_s = 3600.0
    backoff_base_s = 10.0
    backoff_max_s = 600.0

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return cls.max_concurrent, settings.replicate_max_tick_s

    async def tick(self, obj: JobObject) -> None:
        if obj.status == "copying":
            await self._gather(obj)
            return
        replicas = self.replicas
        deadline = time.monotonic() + self.tick_limit_s * TICK_BUDGET_SHARE
        mtime = time.time()
        ids = [int(i) for i in json.loads(str(obj["file_ids"]))]
        report, planned = await plan_batch(
            replicas, ids, replace_conflicts=bool(obj["replace_conflicts"]), deadline=deadline
        )
        claimed: list[CopyPlan] = []
        for copy in planned:
            if await claim_copy(replicas, copy, mtime):
                claimed.append(copy)
            else:
                report.count("claimed_elsewhere")
        values = _totals(obj, report)
        if not claimed:
            await self._end(obj, values)
            return
        groups = [
            [source, destination, mtime, [[c.file.name, c.replace] for c in copies]]
            for (source, destination), copies in group_by_pair(claimed).items()
        ]
        values["pending"] = json.dumps(groups)
        if await self.transition_replication_batch_queued_to_copying(
            obj, retry_at=self.due_in(self._look_s()), values=values
        ):
            await self.ctx.db.call(
                write_copies, obj.id, int(obj["max_rounds"] or 1), groups, utcnow()
            )

    async def _gather(self, obj: JobObject) -> None:
        """A batch in ``copying``: wait for its copy objects, then end it with their outcomes."""
        copies = await self.ctx.db.call(read_batch_copies, obj.id)
        groups: list[list[Any]] = json.loads(str(obj["pending"]))
        made = {(str(c["source"]), str(c["destination"])) for c in copies}
        missing = [g for g in groups if (g[0], g[1]) not in made]
        if missing or any(c.retry_at is not None for c in copies):
            if (
                await self.transition_replication_batch_copying_to_copying(
                    obj, retry_at=self.due_in(self._look_s())
                )
                and missing
            ):
                # The worker that moved the batch died before it wrote them.
                max_rounds = int(obj["max_rounds"] or 1)
                await self.ctx.db.call(write_copies, obj.id, max_rounds, missing, utcnow())
            return
        report = ReplicationReport()
        rounds = int(obj["rounds"] or 0)
        for copy in copies:
            rounds = max(rounds, int(copy["rounds"] or 0))
            report.bytes_copied += int(copy["bytes_copied"] or 0)
            for outcome, n in json.loads(str(copy["outcomes"])).items():
                report.outcomes[outcome] = report.outcomes.get(outcome, 0) + int(n)
            for name, whys in json.loads(str(copy["problems"])).items():
                report.unsafe.setdefault(name, []).extend(whys)
        values = _totals(obj, report)
        values["rounds"] = rounds
        values["deferred"] = int(report.outcomes.get("deferred", 0))
        await self._end(obj, values)

    async def _end(self, obj: JobObject, values: dict[str, Value]) -> None:
        """The batch's last transition: ``done``, or ``unsafe`` with the files still not
        safe and why (a file whose problem a later copy mended is not named)."""
        problems: dict[str, list[str]] = json.loads(str(values["problems"]))
        unsafe = await self._still_unsafe(problems)
        values["problems"] = json.dumps({name: problems[name] for name in unsafe})
        if unsafe:
            values["result"] = f"{len(unsafe)} file(s) not safe: " + "; ".join(
                f"{name}: {'; '.join(dict.fromkeys(problems[name]))}" for name in unsafe[:3]
            )
            logger.warning("replication: batch #%d: %s", obj.id, values["result"])
            if obj.status == "copying":
                await self.transition_replication_batch_copying_to_unsafe(obj, values=values)
            else:
                await self.transition_replication_batch_queued_to_unsafe(obj, values=values)
            return
        values["result"] = _summary(values)
        if obj.status == "copying":
            await self.transition_replication_batch_copying_to_done(obj, values=values)
        else:
            await self.transition_replication_batch_queued_to_done(obj, values=values)

    def _look_s(self) -> float:
        return min(COPYING_LOOK_S, self.tick_limit_s)

    async def _still_unsafe(self, problems: dict[str, list[str]]) -> list[str]:
        """The files of ``problems`` that still have fewer present copies than the policy."""
        if not problems:
            return []
        replicas = self.replicas
        files = await replicas.index.call(read_file_copies, replicas.places, names=list(problems))
        cutoff, wanted = replicas.cutoff(), replicas.policy.copies
        return [f.name for f in files if len(f.present_places(replicas.places, cutoff)) < wanted]

    async def transition_replication_batch_queued_to_copying(
        self, obj: JobObject, *, retry_at: datetime, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "copying", retry_at=retry_at, values=values)

    async def transition_replication_batch_queued_to_done(
        self, obj: JobObject, *, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "done", retry_at=None, values=values)

    async def transition_replication_batch_queued_to_unsafe(
        self, obj: JobObject, *, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "unsafe", retry_at=None, values=values)

    async def transition_replication_batch_copying_to_copying(
        self, obj: JobObject, *, retry_at: datetime
    ) -> bool:
        return await self.transition(obj, "copying", "copying", retry_at=retry_at)

    async def transition_replication_batch_copying_to_done(
        self, obj: JobObject, *, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "copying", "done", retry_at=None, values=values)

    async def transition_replication_batch_copying_to_unsafe(
        self, obj: JobObject, *, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "copying", "unsafe", retry_at=None, values=values)


class CopierActor(_ReplicationActor):
    """Ticks one copy object: its files copied one by one (see the module docstring)."""

    name = "replication_copier"
    object_type = COPY
    queue_states = ("queued",)
    max_concurrent = 4
    max_tick_s = 3600.0
    backoff_base_s = 10.0
    backoff_max_s = 600.0
    #: Called with the bytes of each copy made (``store replicate``'s progress bar).
    progress: Progress | None = None
    #: Seconds a tick starts copies for (None: ``TICK_BUDGET_SHARE`` of its limit).
    budget_s: float | None = None

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return cls.max_concurrent, settings.replicate_max_tick_s

    @classmethod
    def limits_for(cls, ctx: JobContext[Any]) -> tuple[int, float]:
        """``retention.parallel_copies`` copiers at once (the class's default without
        store settings), each tick limited by ``jobs.replicate_max_tick_s``."""
        store = store_context(ctx).settings
        parallel = store.retention.parallel_copies if store is not None else cls.max_concurrent
        return parallel, ctx.settings.replicate_max_tick_s

    async def tick(self, obj: JobObject) -> None:
        replicas = self.replicas
        budget_s = self.budget_s
        deadline = time.monotonic() + (
            self.tick_limit_s * TICK_BUDGET_SHARE if budget_s is None else budget_s
        )
        source, destination = str(obj["source"]), str(obj["destination"])
        todo: list[list[Any]] = json.loads(str(obj["todo"]))
        retry: list[list[Any]] = json.loads(str(obj["retry"]))
        rounds = int(obj["rounds"] or 0)
        problems: dict[str, list[str]] = json.loads(str(obj["problems"]))
        names = sorted({str(item[0]) for item in todo})
        files = await replicas.index.call(read_file_copies, replicas.places, names=names)
        by_name = {f.name: f for f in files}
        replicas.rows.update(by_name)  # where the primary keeps them
        report = ReplicationReport()
        started = False
        while todo and not (started and time.monotonic() >= deadline):
            name, replace, claimed = todo[0]
            file = by_name.get(name)
            if file is not None and file.sha256 is not None:  # else it left the index
                started = True
                seen = CopyRow(name, destination, file.sha256, "ongoing", float(claimed))
                copy = CopyPlan(file, source, destination, seen, bool(replace))
                # The worker's claim is kept; a retry renews it (the copy's new mtime).
                mtime = time.time() if rounds else float(claimed)
                outcome = await claim_and_copy(
                    replicas, copy, mtime, DEFAULT_RETRY, report, self.progress
                )
                if outcome in COPIED:
                    problems.pop(name, None)
            todo.pop(0)
        retry += [[c.file.name, c.replace, claimed] for c, claimed in report.retry]
        for name, whys in report.unsafe.items():
            problems.setdefault(name, []).extend(whys)
        if todo:
            report.outcomes["deferred"] = len(todo)
        values = _sums(obj, report)
        values["problems"] = json.dumps(problems)
        if todo:  # the tick's time is up: the rest at once, by the next tick
            values.update(todo=json.dumps(todo), retry=json.dumps(retry))
            await self.transition_replication_copy_queued_to_queued(
                obj, retry_at=self.due_in(0.0), values=values
            )
            return
        if retry:
            rounds += 1
            values["rounds"] = rounds
            if rounds < int(obj["max_rounds"] or 1):
                values.update(todo=json.dumps(retry), retry="[]")
                delay = backoff_s(rounds, ROUND_BACKOFF_BASE_S, ROUND_BACKOFF_MAX_S)
                await self.transition_replication_copy_queued_to_queued(
                    obj, retry_at=self.due_in(delay), values=values
                )
                return
        values.update(todo="[]", retry=json.dumps(retry))
        wake: list[Wake] = [(BATCH, [int(obj["batch_id"] or 0)])]
        if problems:
            values["result"] = f"{len(problems)} file(s) not copied: " + "; ".join(
                f"{name}: {'; '.join(dict.fromkeys(whys))}"
                for name, whys in list(problems.items())[:3]
            )
            # (INFO: its batch warns with the same reasons once it has gathered them.)
            logger.info("replication: copy #%d: %s", obj.id, values["result"])
            await self.transition_replication_copy_queued_to_failed(obj, values=values, wake=wake)
            return
        values["result"] = _summary({**values, "files": len(json.loads(str(obj["files"])))})
        await self.transition_replication_copy_queued_to_done(obj, values=values, wake=wake)

    async def transition_replication_copy_queued_to_queued(
        self, obj: JobObject, *, retry_at: datetime, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "queued", retry_at=retry_at, values=values)

    async def transition_replication_copy_queued_to_done(
        self, obj: JobObject, *, values: dict[str, Value], wake: list[Wake]
    ) -> bool:
        return await self.transition(obj, "queued", "done", retry_at=None, values=values, wake=wake)

    async def transition_replication_copy_queued_to_failed(
        self, obj: JobObject, *, values: dict[str, Value], wake: list[Wake]
    ) -> bool:
        return await self.transition(
            obj, "queued", "failed", retry_at=None, values=values, wake=wake
        )


def _sums(obj: JobObject, report: ReplicationReport) -> dict[str, Value]:
    """The object's counts (``outcomes``, ``bytes_copied``) with ``report``'s added."""
    outcomes: dict[str, int] = json.loads(str(obj["outcomes"]))
    for outcome, n in report.outcomes.items():
        outcomes[outcome] = outcomes.get(outcome, 0) + n
    return {
        "outcomes": json.dumps(outcomes, sort_keys=True),
        "bytes_copied": int(obj["bytes_copied"] or 0) + report.bytes_copied,
    }


def _totals(obj: JobObject, report: ReplicationReport) -> dict[str, Value]:
    """The batch's columns with ``report`` added: counts summed, problems gathered."""
    problems: dict[str, list[str]] = json.loads(str(obj["problems"]))
    for name, whys in report.unsafe.items():
        problems.setdefault(name, []).extend(whys)
    return {
        **_sums(obj, report),
        "files": int(obj["files"] or 0) + report.files,
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
