"""The reconcile pass of ``store migrate``: one streaming walk of ``warcs/`` against the index.

:func:`reconcile_entry` decides about one file found on disk
(:meth:`Layout.walk <gateway.store.layout.Layout.walk>` yields them one at a
time, so the listing is never held in memory; each decision reads the rows
it needs from the index by name):

- **at its row's place**: nothing to do, unless other files have its
  SHA-256: then they are merged
  (:func:`~gateway.store.migration.layout_steps.merge_duplicates`);
- **named like a row, at another layout's place**: what an interrupted move
  leaves. A whole copy (its SHA-256 is the row's) behind the row's layout is
  the old copy of a move that committed: it is removed; one ahead of it is
  the new copy of a move killed before its commit: the move is finished. A
  row whose file is missing from its place but whole at another layout's is
  pointed there. Any other file of that name is another file: reported,
  left alone;
- **a move's ``.<name>.moving`` copy** whose move no process holds: removed
  once its move finished (or its row went away); kept otherwise, so the
  next move of that file resumes it;
- **an orphan** (a WARC or ARC file the index does not know, at a layout's
  place for its date: copied in by hand, or left by an older release): it
  is verified (:func:`~gateway.store.verify.verify_file`: every record
  whole, every digest right) and *imported* where it is, its row and index
  entries in one transaction (origin ``written`` when its first record is
  this store's warcinfo, else ``found``: the store reads it, never moves
  it), then moved to the current layout like any file. An orphan the store
  wrote that is not whole moves to ``invalid/YYYYMMDD/``; any other file
  that is not the store's is only reported.

Every function is blocking and takes the store's lock model as it is:
``store migrate`` holds ``store.lock`` shared, beside a serving and
recording gateway; what others are doing (a move, an import, the writer's
``.open`` file) has a row or a lock, and is left to them.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.store.db import IndexDB
from gateway.store.indexing import index_range
from gateway.store.layout import (
    IMPORTING_SUFFIX,
    MOVING_SUFFIX,
    OPEN_SUFFIX,
    Layout,
    fsync_dir,
    is_archive_name,
    is_moving_name,
)
from gateway.store.migration.layout_steps import Mover, merge_duplicates, migrate_file
from gateway.store.recovery import file_sha256, lock_staged
from gateway.store.rows import FileRow
from gateway.store.verify import file_date, verify_file, written_by_store

if TYPE_CHECKING:
    from gateway.store.migration.migrator import MigrationReport

__all__ = ["adopt_file", "reconcile_entry"]


def reconcile_entry(
    layout: Layout, db: IndexDB, path: Path, report: MigrationReport, mover: Mover
) -> None:
    """Decide about one file under ``warcs/`` and count it in ``report`` (module docstring)."""
    name = path.name
    if is_moving_name(name):
        _temporary(layout, db, path, report)
        return
    base = name.removesuffix(OPEN_SUFFIX)
    file = db.file_by_name(base)
    if file is not None:
        if name != base:
            return  # a .open name: the writer's, or `store check`'s to report
        if path == layout.place(file):
            _merge_in_place(layout, db, file, report)
        else:
            _elsewhere(layout, db, file, path, report, mover)
        return
    report.processed += 1
    where = path.relative_to(layout.root)
    if name != base or name.endswith(IMPORTING_SUFFIX):
        report.reported += 1
        report.say(f"{where}: a leftover of an older release; `gateway store repair` removes it")
    elif not is_archive_name(name) or not path.is_file():
        report.reported += 1
        report.say(f"{where}: not a WARC or ARC file; the store leaves it alone")
    else:
        _orphan(layout, db, path, report, mover)


def adopt_file(
    layout: Layout, db: IndexDB, path: Path, *, owned: bool, fs_version: int, date: str
) -> FileRow | None:
    """Index ``path`` where it is (a whole file) and record it closed, in one transaction.

    ``owned``: the store wrote it (origin ``written``), else it is ``found``.
    Returns the new row, or None when another process gave the name a row
    first.
    """
    size = path.stat().st_size
    sha256 = file_sha256(path)
    with path.open("rb") as fh:
        rows = list(index_range(fh, 0, size))
    try:
        return db.add_closed_file(
            path.name,
            origin="written" if owned else "found",
            fs_version=fs_version,
            date=date,
            sha256=sha256,
            rows=rows,
            indexed_end=size,
        )
    except sqlite3.IntegrityError:
        return None


# ------------------------------------------------------------------ entries
def _merge_in_place(layout: Layout, db: IndexDB, file: FileRow, report: MigrationReport) -> None:
    if file.sha256 is None or not file.owned or file.state != "closed":
        return
    if len(db.files_with_sha256(file.sha256)) < 2:
        return
    report.processed += 1
    _, merged = merge_duplicates(layout, db, file)
    report.merged += merged
    if merged:
        report.say(f"{file.name}: {merged} file(s) with the same SHA-256 merged")


def _elsewhere(
    layout: Layout,
    db: IndexDB,
    file: FileRow,
    path: Path,
    report: MigrationReport,
    mover: Mover,
) -> None:
    """A file named like ``file`` that is not at its row's place."""
    report.processed += 1
    where = path.relative_to(layout.root)
    version = layout.version_at(path, file.date)
    whole = (
        version is not None
        and file.owned
        and file.state == "closed"
        and file.sha256 is not None
        and file_sha256(path) == file.sha256
    )
    if not whole:
        report.reported += 1
        report.say(
            f"{where}: another file with the name of the store's {file.name}, which is at "
            f"{layout.place(file).relative_to(layout.root)}; the store leaves it alone"
        )
        return
    assert version is not None
    if version < file.fs_version and layout.place(file).is_file():
        path.unlink()  # the old copy of a move that committed
        fsync_dir(path.parent)
        report.cleaned += 1
        report.say(f"{where}: removed, the old copy of a move that was interrupted")
        return
    report.count(migrate_file(layout, db, file, mover=mover))


def _temporary(layout: Layout, db: IndexDB, path: Path, report: MigrationReport) -> None:
    """A ``.<name>.moving`` copy: removed once nothing will resume it."""
    fd = lock_staged(path, create=False)
    if fd is None:
        return  # a live move, or gone meanwhile
    try:
        name = path.name[1:].removesuffix(MOVING_SUFFIX)
        file = db.file_by_name(name)
        version = layout.version_at(path.with_name(name), file.date) if file else None
        if file is None or version is None:
            report.processed += 1
            report.reported += 1
            report.say(
                f"{path.relative_to(layout.root)}: named like the copy of a move, but no move "
                "of the store's puts it there; left alone"
            )
            return
        if file.fs_version < version:
            return  # its move is pending: the next one resumes this copy
        report.processed += 1
        report.cleaned += 1
        path.unlink()  # its move committed (a linked copy keeps its other name)
        fsync_dir(path.parent)
    finally:
        os.close(fd)


def _orphan(layout: Layout, db: IndexDB, path: Path, report: MigrationReport, mover: Mover) -> None:
    """A WARC or ARC file the index does not know: import it, quarantine it, or report it."""
    where = path.relative_to(layout.root)
    owned = written_by_store(path)
    try:
        date = file_date(path)
        verdict = verify_file(path)
    except OSError as exc:
        report.reported += 1
        report.say(f"{where}: cannot be read ({exc.strerror or exc}); left alone")
        return
    version = layout.version_at(path, date)
    problem = verdict.framing_error or next(iter(verdict.bad_records.values()), None)
    if not verdict.records:
        problem = problem or "no WARC or ARC records"
    if problem is not None:
        if owned:
            moved = layout.move_to_invalid(path)
            report.invalid += 1
            report.say(
                f"{where}: written by this store but not whole ({problem}); "
                f"moved to {moved.relative_to(layout.root)}"
            )
        else:
            report.reported += 1
            report.say(f"{where}: not a whole WARC file ({problem}); not the store's: left alone")
        return
    if version is None:
        report.reported += 1
        report.say(
            f"{where}: a WARC file no layout puts there (its date is {date}); left alone "
            "(`gateway store add` imports a copy of it)"
        )
        return
    adopted = adopt_file(layout, db, path, owned=owned, fs_version=version, date=date)
    if adopted is None:
        return  # another process gave the name a row meanwhile
    report.imported += 1
    origin = "written by this store" if owned else "the store will read it, never move it"
    report.say(f"{where}: imported, {len(verdict.records)} record(s) ({origin})")
    if adopted.owned:
        report.count(migrate_file(layout, db, adopted, mover=mover), processed=False)
