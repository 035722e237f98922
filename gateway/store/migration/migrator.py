"""The migrator: move a store's files to the current layout, and reconcile disk and index.

One run (:func:`run_migration`, what ``gateway store migrate`` does once,
and what the background migrator repeats) is two streaming passes:

1. **the index pass**: the files the store owns under an older layout, newest
   first (by row id, the order the store got them), read in batches of
   ``batch_size`` with a keyset cursor and moved one at a time
   (:func:`~gateway.store.migration.layout_steps.migrate_file`). Each move commits on
   its own, so a run killed at any moment has lost nothing, and the next
   one lists only what is left (``resume_from`` starts at a given file);
2. **the reconcile pass**: one walk of ``warcs/``
   (:func:`~gateway.store.migration.reconcile.reconcile_entry`): orphans imported or
   quarantined, duplicates merged, what interrupted moves left finished.

Neither pass holds a listing in memory: the index is read a batch at a time,
the disk one directory entry at a time. The counts are ArchiveBox's
``update`` counts (processed, migrated, imported, invalid, merged), plus the
leftovers of interrupted moves cleaned, the files left in an older layout
for now, and the files reported for a person to look at.

The run opens the store *shared* (:func:`open_shared`): it works beside
``gateway serve`` recording and serving the same store, and beside another
migrator (each move is under its own lock). Everything here is blocking.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

from gateway.store.db import IndexDB
from gateway.store.errors import StoreError
from gateway.store.layout import Layout, StoreLock
from gateway.store.migration.layout_steps import Mover, MoveResult, migrate_file
from gateway.store.migration.reconcile import reconcile_entry
from gateway.store.warcfile import FaultInjector

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "WAIT_FOR_MOVER_S",
    "MigrationReport",
    "move_batch",
    "open_shared",
    "run_migration",
]

logger = logging.getLogger(__name__)

#: Files read from the index at a time by the index pass.
DEFAULT_BATCH_SIZE: Final = 100
#: How long the index pass waits for another mover of a file (a move on write
#: of ``gateway serve``: it ends or stops within its tick) before it leaves the
#: file as ``busy`` (seconds).
WAIT_FOR_MOVER_S: Final = 30.0


def _log(line: str) -> None:
    logger.info("store migrate: %s", line)


def _never() -> bool:
    return False


def _nothing(what: object) -> None:
    return None


@dataclass(slots=True)
class MigrationReport:
    """The counts of one run; ``say(line)`` is told each file worth a line, as it happens.

    ``processed``: files the run decided about (each row of the index pass;
    each file of the reconcile pass that is not simply at its row's place);
    ``migrated``: moved to the current layout; ``imported``: orphans
    indexed; ``invalid``: store-written files moved to ``invalid/``;
    ``merged``: duplicates merged into another file; ``cleaned``: copies
    left by interrupted moves removed; ``left``: files that stay in an older
    layout for now (another process moves them, a name clash, damage, disk
    full: each said why); ``reported``: files on disk that are not the
    store's to change. ``stopped``: the run was asked to stop before the
    end; ``stopped_at``: the file of the index pass it had not done yet
    (``--resume-from``), None when it stopped in the reconcile pass.
    """

    processed: int = 0
    migrated: int = 0
    imported: int = 0
    invalid: int = 0
    merged: int = 0
    cleaned: int = 0
    left: int = 0
    reported: int = 0
    stopped: bool = False
    stopped_at: str | None = None
    say: Callable[[str], object] = field(default=_log, repr=False)

    def count(self, result: MoveResult, *, processed: bool = True) -> None:
        """Count what :func:`~gateway.store.migration.layout_steps.migrate_file` did to one file."""
        self.processed += processed
        self.merged += result.merged
        if result.outcome == "moved":
            self.migrated += 1
        elif result.outcome not in ("current", "merged", "skipped"):
            self.left += 1
            self.say(
                f"{result.file.name}: left in layout {result.file.fs_version} "
                f"({result.outcome}): {result.detail}"
            )

    @property
    def clean(self) -> bool:
        """True when nothing was left undone and nothing needs a person."""
        return not (self.left or self.invalid or self.reported or self.stopped)

    def summary(self) -> str:
        """``N processed, N migrated, N imported, N invalid, N merged`` and what else happened."""
        text = (
            f"{self.processed} processed, {self.migrated} migrated, {self.imported} imported, "
            f"{self.invalid} invalid, {self.merged} merged"
        )
        extra = []
        if self.cleaned:
            extra.append(f"{self.cleaned} leftover(s) of interrupted moves removed")
        if self.left:
            extra.append(f"{self.left} file(s) left in an older layout for now")
        if self.reported:
            extra.append(f"{self.reported} file(s) reported, not the store's to change")
        if extra:
            text += "; " + "; ".join(extra)
        if self.stopped_at is not None:
            text += f"; stopped: resume with --resume-from {self.stopped_at}"
        elif self.stopped:
            text += "; stopped in the reconcile pass: run again to finish it"
        return text


def move_batch(
    layout: Layout,
    db: IndexDB,
    report: MigrationReport,
    mover: Mover,
    *,
    below_id: int | None,
    limit: int,
    stop: Callable[[], bool] = _never,
    on_file: Callable[[str], object] = _nothing,
) -> int | None:
    """One batch of the index pass: up to ``limit`` files, newest first, from ``below_id``.

    The files the store owns under an older layout with an id of
    ``below_id`` or less (None: from the newest), each brought to the
    current layout (:func:`~gateway.store.migration.layout_steps.migrate_file`) and
    counted in ``report``. ``stop()`` is asked before each file; when it
    says so, ``report.stopped`` is set, ``report.stopped_at`` names that
    file, and its id is returned (the pass resumes there). Returns the id
    the next batch starts at, or None when the pass is over. What
    ``gateway store migrate`` and the migrator actor
    (:class:`~gateway.store.migration.actor.MigrateActor`) both run. Raises
    ``sqlite3.Error`` on index failures.
    """
    batch = db.files_to_move(below_id=below_id, fs_version=layout.current, limit=limit)
    for file in batch:
        if stop():
            report.stopped, report.stopped_at = True, file.name
            return file.id
        report.count(migrate_file(layout, db, file, mover=mover))
        on_file("index")
    return batch[-1].id - 1 if len(batch) == limit else None


@contextmanager
def open_shared(layout: Layout) -> Iterator[IndexDB]:
    """The store's index, opened the way a migrator shares the store (``store.lock`` shared).

    The index connection commits durably (``synchronous=FULL``): a move
    removes a file's old copy only after its new ``fs_version`` is on disk.
    Raises :class:`StoreError` when there is no store at ``layout``, and
    :class:`~gateway.store.errors.StoreLocked` while ``store repair`` runs.
    """
    if not layout.exists() or not layout.db_path.is_file():
        raise StoreError(f"no store at {layout.root}")
    lock = StoreLock(layout.lock_path)
    lock.acquire("shared", hint="`gateway store repair` is running; retry when it has finished")
    try:
        db = IndexDB(layout.db_path, synchronous="FULL")
        try:
            yield db
        finally:
            db.close()
    finally:
        lock.release()


def run_migration(
    layout: Layout,
    db: IndexDB,
    report: MigrationReport,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    resume_from: str | None = None,
    stop: Callable[[], bool] = _never,
    inject: FaultInjector | None = None,
    progress: Callable[[int], object] = _nothing,
    on_file: Callable[[str], object] = _nothing,
) -> MigrationReport:
    """One run: the index pass, then the reconcile pass (module docstring); returns ``report``.

    ``resume_from``: start the index pass at this file (by name) instead of
    the newest. ``stop()`` is asked before each file; when it says so, the
    run ends there and ``report.stopped_at`` names the next file. ``inject``:
    the fault-injection hook of the moves; ``progress(n)``: bytes copied or
    read back; ``on_file(pass)``: one more file done by the ``"index"`` or
    ``"disk"`` pass. Raises :class:`StoreError` for an unknown
    ``resume_from``, and on index failures (``sqlite3.Error``).
    """
    mover = Mover(layout, db, inject=inject, progress=progress, wait_s=WAIT_FOR_MOVER_S)
    cursor: int | None = None
    if resume_from is not None:
        start = db.file_by_name(resume_from)
        if start is None:
            raise StoreError(f"--resume-from {resume_from}: no file of that name in the store")
        cursor = start.id
    while True:
        cursor = move_batch(
            layout, db, report, mover, below_id=cursor, limit=batch_size, stop=stop, on_file=on_file
        )
        if report.stopped:
            return report
        if cursor is None:
            break
    for path in layout.walk():
        if stop():
            report.stopped = True
            return report
        reconcile_entry(layout, db, path, report, mover)
        on_file("disk")
    return report
