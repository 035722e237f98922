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
process: a scrub or a replication worker moving on write) counts what is
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
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Final

from gateway.jobs.actors import JobContext, WorkCancelled, in_thread
from gateway.jobs.db import JobObject, Value, format_time, utcnow
from gateway.jobs.settings import JobsSettings
from gateway.store.connection import Access
from gateway.store.db import IndexDB
from gateway.store.layout import Layout
from gateway.store.migration.layout_steps import Mover
from gateway.store.migration.migrator import WAIT_FOR_MOVER_S, MigrationReport, move_batch
from gateway.store.object_types import MIGRATE
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

    async def tick(self, obj: JobObject) -> None:
        if int(obj["fs_version"] or 0) != self.layout.current:
            await getattr(self, f"transition_migrate_{obj.status}_to_superseded")(obj)
        elif obj.status == "waiting":
            await self.transition_migrate_waiting_to_moving(obj)
        elif obj.status == "current":
            await self.transition_migrate_current_to_moving(obj)
        else:
            await self._move(obj)

    async def _move(self, obj: JobObject) -> None:
        below = obj["cursor_id"]
        done = await in_thread(
            lambda cancel: move_some(
                self.layout,
                self.index,
                None if below is None else int(below),
                self.batch_size,
                min(self.budget_s, self.tick_limit_s / 3),
                cancel,
            )
        )
        counts: dict[str, Value] = {
            "processed": int(obj["processed"] or 0) + done.processed,
            "migrated": int(obj["migrated"] or 0) + done.migrated,
            "merged": int(obj["merged"] or 0) + done.merged,
            "left_behind": int(obj["left_behind"] or 0) + done.left,
        }
        if done.next_id is not None:
            await self.transition_migrate_moving_to_moving(obj, done.next_id, counts)
            return
        remaining = 0
        if counts["left_behind"]:  # some may have been moved meanwhile by another process
            remaining = await asyncio.to_thread(self.index.count_files_to_move, self.layout.current)
        result = (
            f"{counts['processed']} processed, {counts['migrated']} migrated,"
            f" {counts['merged']} merged, {counts['left_behind']} left in an older layout"
        )
        if remaining:
            result += f" ({remaining} still there)"
            logger.warning(
                "store migrator: pass to layout %s ended: %s; a new pass in %g s",
                obj["fs_version"],
                result,
                RETRY_PASS_S,
            )
            await self.transition_migrate_moving_to_waiting(obj, counts, result)
        else:
            logger.info("store migrator: pass to layout %s ended: %s", obj["fs_version"], result)
            await self.transition_migrate_moving_to_current(obj, counts, result)

    # -------------------------------------------------------------- transitions
    async def transition_migrate_moving_to_moving(
        self, obj: JobObject, cursor_id: int, counts: dict[str, Value]
    ) -> bool:
        values = {"cursor_id": cursor_id, **counts}
        return await self.transition(obj, "moving", "moving", retry_at=utcnow(), values=values)

    async def transition_migrate_moving_to_current(
        self, obj: JobObject, counts: dict[str, Value], result: str
    ) -> bool:
        return await self.transition(
            obj,
            "moving",
            "current",
            retry_at=self.due_in(RECHECK_S),
            values=_pass_done(obj, counts, result),
        )

    async def transition_migrate_moving_to_waiting(
        self, obj: JobObject, counts: dict[str, Value], result: str
    ) -> bool:
        return await self.transition(
            obj,
            "moving",
            "waiting",
            retry_at=self.due_in(RETRY_PASS_S),
            values=_pass_done(obj, counts, result),
        )

    async def transition_migrate_waiting_to_moving(self, obj: JobObject) -> bool:
        return await self.transition(
            obj, "waiting", "moving", retry_at=utcnow(), values=_new_pass()
        )

    async def transition_migrate_current_to_moving(self, obj: JobObject) -> bool:
        return await self.transition(
            obj, "current", "moving", retry_at=utcnow(), values=_new_pass()
        )

    async def transition_migrate_moving_to_superseded(self, obj: JobObject) -> bool:
        return await self.transition(obj, "moving", "superseded", retry_at=None)

    async def transition_migrate_waiting_to_superseded(self, obj: JobObject) -> bool:
        return await self.transition(obj, "waiting", "superseded", retry_at=None)

    async def transition_migrate_current_to_superseded(self, obj: JobObject) -> bool:
        return await self.transition(obj, "current", "superseded", retry_at=None)


def _pass_done(obj: JobObject, counts: dict[str, Value], result: str) -> dict[str, Value]:
    """A pass ended: its counts and result kept, the cursor back to the newest file."""
    return {**counts, "cursor_id": None, "result": result, "passes": int(obj["passes"] or 0) + 1}


def _new_pass() -> dict[str, Value]:
    """The columns a new pass starts from."""
    return {
        "cursor_id": None,
        "pass_started_at": format_time(utcnow()),
        "processed": 0,
        "migrated": 0,
        "merged": 0,
        "left_behind": 0,
    }
