"""The migrator actor: the store's files moved to the current layout in the background.

One ``migrate`` object per layout version a release writes (``fs_version``,
unique), made by the actor type's seeding when an orchestrator starts
(``gateway serve``, ``gateway worker``). Its pass is the index pass of
``gateway store migrate`` (:func:`~gateway.store.migration.migrator.move_batch`, the
same code): the closed files the store owns under an older layout, newest
first (by row id), a batch per tick. Each tick moves up to
:attr:`MigrateActor.batch_size` files or works for about a third of its
limit (``migrate_max_tick_s``; :data:`BATCH_BUDGET_S` at most), whichever
comes first, and records how far it got
(``cursor_id``): a restarted process (or a kill -9, once the lease expires)
goes on from there. Every move commits on its own
(:meth:`Mover.move <gateway.store.migration.layout_steps.Mover.move>`: copy, verify,
commit, remove), so a tick cut short loses nothing; the next one moves what
is left. A pass that left files behind (some were being moved by another
process: a scrub or a replication batch moving on write) counts what is
still in an older layout when it ends, and is ``current`` if nothing is.
This follows ArchiveBox's lazy filesystem migration (a
``Snapshot.fs_version`` per row, moved on write and by ``archivebox
update``) as an actor of :mod:`gateway.jobs`.

::

    moving --(a batch moved, more to go)--> moving
    moving --> current      nothing is left in an older layout; checked again daily
    moving --> waiting      files stay there (busy, name clash, damage, disk full): a new pass later
    waiting, current --> moving      the next pass starts from the newest file
    any --> superseded      a release writing a newer layout took over (its own object)

The reconcile pass of ``gateway store migrate`` (orphans, quarantine,
duplicates, leftovers of interrupted moves) walks the whole of ``warcs/``
and is left to the command: a background actor never imports or
quarantines files a person copied in.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, ClassVar, Final

from gateway.jobs.actors import JobContext, WorkCancelled, in_thread
from gateway.jobs.db import JobObject, format_time, utcnow
from gateway.jobs.model import Transition
from gateway.jobs.settings import JobsSettings
from gateway.store.connection import Access
from gateway.store.db import IndexDB
from gateway.store.job_rows import MigrateColumns
from gateway.store.layout import Layout
from gateway.store.migration.layout_steps import Mover
from gateway.store.migration.migrator import WAIT_FOR_MOVER_S, MigrationReport, move_batch
from gateway.store.object_types import (
    MIGRATE,
    MIGRATE_CURRENT_TO_MOVING,
    MIGRATE_CURRENT_TO_SUPERSEDED,
    MIGRATE_MOVING_TO_CURRENT,
    MIGRATE_MOVING_TO_MOVING,
    MIGRATE_MOVING_TO_SUPERSEDED,
    MIGRATE_MOVING_TO_WAITING,
    MIGRATE_WAITING_TO_MOVING,
    MIGRATE_WAITING_TO_SUPERSEDED,
)
from gateway.store.store_actor import StoreActorType, store_context

__all__ = [
    "BATCH_BUDGET_S",
    "MIGRATE",
    "MigrateActor",
    "Pass",
    "read_migrate_object_id",
    "write_migrate_seed",
]

logger = logging.getLogger(__name__)


#: The longest one tick moves files before it records how far it got (seconds).
BATCH_BUDGET_S: Final = 20.0
#: After a pass that left files behind, the next one starts this much later (seconds).
RETRY_PASS_S: Final = 600.0
#: After a pass that left nothing, the layout is checked again this much later
#: (a file whose move on write failed is picked up then).
RECHECK_S: Final = 86_400.0

#: How an object of another release's layout ends, from each state.
_SUPERSEDED: Final[dict[str, Transition]] = {
    "moving": MIGRATE_MOVING_TO_SUPERSEDED,
    "waiting": MIGRATE_WAITING_TO_SUPERSEDED,
    "current": MIGRATE_CURRENT_TO_SUPERSEDED,
}


# ------------------------------------------------------------------------ writes
def write_migrate_seed(conn: sqlite3.Connection, fs_version: int, now: datetime) -> int:
    """The ``migrate`` object of layout ``fs_version``, due now, unless it exists: one statement.

    Returns 1 when it was made, 0 when it was there already (it keeps its
    state and cursor: a pass goes on across restarts).
    """
    stamp = format_time(now)
    cursor = conn.execute(
        f"INSERT OR IGNORE INTO {MIGRATE.table} (status, retry_at, created_at, updated_at,"
        " fs_version, pass_started_at) VALUES (?, ?, ?, ?, ?, ?)",
        (MIGRATE.initial, stamp, stamp, stamp, fs_version, stamp),
    )
    return cursor.rowcount


# ------------------------------------------------------------------------- reads
def read_migrate_object_id(conn: sqlite3.Connection, fs_version: int) -> int | None:
    """The id of layout ``fs_version``'s ``migrate`` object, or None before it is seeded."""
    row = conn.execute(
        f"SELECT id FROM {MIGRATE.table} WHERE fs_version = ?", (fs_version,)
    ).fetchone()
    return None if row is None else int(row[0])


@dataclass(frozen=True, slots=True)
class Pass:
    """What one tick did: the counts, and where the pass goes on (None: it is over)."""

    next_id: int | None
    processed: int
    migrated: int
    merged: int
    left: int


def move_some(
    layout: Layout,
    index: IndexDB,
    below_id: int | None,
    batch_size: int,
    budget_s: float,
    cancel: threading.Event,
) -> Pass:
    """One tick's batch (blocking): ``move_batch`` under a budget.

    :func:`~gateway.store.migration.migrator.move_batch` does the moving.

    Stops before the next file once ``budget_s`` has passed (after at least
    one), and raises :class:`WorkCancelled` inside a copy when ``cancel`` is
    set (the move is abandoned cleanly: its partial copy goes, the old copy
    stays the file).
    """

    def progress(count: int) -> None:
        if cancel.is_set():
            raise WorkCancelled("moving files was cancelled")

    stop_at = time.monotonic() + budget_s
    report = MigrationReport(say=lambda line: logger.warning("store migrator: %s", line))
    mover = Mover(layout, index, progress=progress, wait_s=WAIT_FOR_MOVER_S)

    def stop() -> bool:
        return cancel.is_set() or (report.processed > 0 and time.monotonic() >= stop_at)

    next_id = move_batch(
        layout, index, report, mover, below_id=below_id, limit=batch_size, stop=stop
    )
    if cancel.is_set():
        raise WorkCancelled("moving files was cancelled")
    return Pass(next_id, report.processed, report.migrated, report.merged, report.left)


# --------------------------------------------------------------------- the actor
class MigrateActor(StoreActorType):
    """Moves the store's files to the current layout a batch per tick (module docstring)."""

    name = "migrate"
    object_type = MIGRATE
    queue_states = ("moving", "waiting", "current")
    max_concurrent = 1
    #: A tick's limit and lease (``migrate_max_tick_s``): a batch, or one large
    #: file's copy and read-back.
    max_tick_s = 600.0
    backoff_base_s = 10.0
    backoff_max_s = 3600.0
    #: It moves files and commits their rows (each commit durable before a removal).
    index_access: ClassVar[Access] = "write"
    #: Files read from the index per tick (at most).
    batch_size: ClassVar[int] = 100
    #: How long a tick moves files before it records how far it got.
    budget_s: ClassVar[float] = BATCH_BUDGET_S

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return cls.max_concurrent, settings.migrate_max_tick_s

    @classmethod
    async def seed(cls, ctx: JobContext[Any]) -> None:
        """The ``migrate`` object of the layout this release writes, if it has none yet."""
        current = Layout(store_context(ctx).root).current
        if await ctx.db.call(write_migrate_seed, current, utcnow()):
            logger.info("store migrator: files will move to layout %d in the background", current)

    async def tick(self, obj: JobObject[MigrateColumns]) -> None:
        if obj.row.fs_version != self.layout.current:
            await self.transition(obj, _SUPERSEDED[obj.status], retry_at=None)
        elif obj.status == "waiting":
            await self.transition(
                obj, MIGRATE_WAITING_TO_MOVING, retry_at=utcnow(), values=_new_pass(obj.row)
            )
        elif obj.status == "current":
            await self.transition(
                obj, MIGRATE_CURRENT_TO_MOVING, retry_at=utcnow(), values=_new_pass(obj.row)
            )
        else:
            await self._move(obj)

    async def _move(self, obj: JobObject[MigrateColumns]) -> None:
        row = obj.row
        done = await in_thread(
            lambda cancel: move_some(
                self.layout,
                self.index,
                row.cursor_id,
                self.batch_size,
                min(self.budget_s, self.tick_limit_s / 3),
                cancel,
            )
        )
        counts = replace(
            row,
            processed=row.processed + done.processed,
            migrated=row.migrated + done.migrated,
            merged=row.merged + done.merged,
            left_behind=row.left_behind + done.left,
        )
        if done.next_id is not None:
            values = replace(counts, cursor_id=done.next_id)
            await self.transition(obj, MIGRATE_MOVING_TO_MOVING, retry_at=utcnow(), values=values)
            return
        remaining = 0
        if counts.left_behind:  # some may have been moved meanwhile by another process
            remaining = await asyncio.to_thread(self.index.count_files_to_move, self.layout.current)
        result = (
            f"{counts.processed} processed, {counts.migrated} migrated,"
            f" {counts.merged} merged, {counts.left_behind} left in an older layout"
        )
        # A pass ended: its counts and result kept, the cursor back to the newest file.
        values = replace(counts, cursor_id=None, result=result, passes=row.passes + 1)
        if remaining:
            values = replace(values, result=f"{result} ({remaining} still there)")
            logger.warning(
                "store migrator: pass to layout %s ended: %s; a new pass in %g s",
                row.fs_version,
                values.result,
                RETRY_PASS_S,
            )
            await self.transition(
                obj, MIGRATE_MOVING_TO_WAITING, retry_at=self.due_in(RETRY_PASS_S), values=values
            )
        else:
            logger.info("store migrator: pass to layout %s ended: %s", row.fs_version, result)
            await self.transition(
                obj, MIGRATE_MOVING_TO_CURRENT, retry_at=self.due_in(RECHECK_S), values=values
            )


def _new_pass(row: MigrateColumns) -> MigrateColumns:
    """The row a new pass starts from."""
    return replace(
        row,
        cursor_id=None,
        pass_started_at=format_time(utcnow()),
        processed=0,
        migrated=0,
        merged=0,
        left_behind=0,
    )
