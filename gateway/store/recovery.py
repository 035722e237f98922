"""Start-up recovery: bring ``warcs/`` and the index back into agreement.

Run by :meth:`Store.open <gateway.store.store.Store.open>` (with the store
lock held, before the writer starts) and by ``store repair``:

1. ``*.importing`` leftovers of an interrupted ``store add`` are deleted.
2. A ``.open`` name next to its closed name (a close interrupted after the
   link) is removed.
3. Index entries of files that no longer exist are dropped; entries pointing
   past a file's end are dropped.
4. Bytes past a file's ``indexed_end`` are scanned with
   :func:`~gateway.store.framing.scan_frames`: whole records are indexed; a
   ``.open`` file's torn tail is truncated to the last whole record.
5. ``.open`` files are closed (fsync, rename away ``.open``, fsync the
   directory); one that holds no capture is deleted.
6. WARC files present but not indexed are indexed; unreadable ones (not a
   single whole record) are moved to ``invalid/YYYYMMDD/``.

A closed file damaged after some whole records keeps those records indexed
and is reported (``store check`` finds it, ``store repair`` salvages it).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from gateway.store.db import FileRow, IndexDB
from gateway.store.framing import FramingError, scan_frames
from gateway.store.indexing import index_range
from gateway.store.layout import IMPORTING_SUFFIX, OPEN_SUFFIX, Layout, fsync_dir, is_warc_name

__all__ = ["RecoveryReport", "index_tail", "recover"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class RecoveryReport:
    """What recovery changed; every list holds file names under ``warcs/``."""

    truncated: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    indexed: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    dropped_entries: int = 0
    indexed_records: int = 0

    def describe(self) -> list[str]:
        """One line per action, for logs and ``store repair``."""
        lines: list[str] = []
        for label, names in (
            ("truncated the torn tail of", self.truncated),
            ("closed", self.closed),
            ("deleted leftover", self.deleted),
            ("indexed unindexed file", self.indexed),
            ("moved unreadable file to invalid/:", self.invalid),
            ("found damaged (run store check/repair):", self.damaged),
        ):
            lines.extend(f"{label} {name}" for name in names)
        if self.dropped_entries:
            lines.append(f"dropped {self.dropped_entries} index entries of missing or short files")
        if self.indexed_records:
            lines.append(f"indexed {self.indexed_records} record(s) found past the index")
        return lines

    @property
    def changed(self) -> bool:
        return bool(
            self.truncated
            or self.closed
            or self.deleted
            or self.indexed
            or self.invalid
            or self.dropped_entries
            or self.indexed_records
        )


def index_tail(db: IndexDB, file: FileRow, path: Path, *, truncate: bool) -> tuple[int, str | None]:
    """Index the whole records after ``file.indexed_end``; return (records, problem).

    With ``truncate`` (a ``.open`` file), bytes after the last whole record are
    cut off; otherwise they are left alone and described in ``problem``.
    """
    problem: str | None = None
    with path.open("r+b" if truncate else "rb") as fh:
        good_end = file.indexed_end
        try:
            for frame in scan_frames(fh, file.indexed_end):
                good_end = frame.end
        except FramingError as exc:
            problem = str(exc)
        size = fh.seek(0, os.SEEK_END)
        if truncate and good_end < size:
            fh.truncate(good_end)
            fh.flush()
            os.fsync(fh.fileno())
        rows = (
            list(index_range(fh, file.indexed_end, good_end)) if good_end > file.indexed_end else []
        )
    if good_end > file.indexed_end:
        db.append_rows(file.id, rows, good_end)
    return len(rows), problem


def _close_open_file(layout: Layout, db: IndexDB, file: FileRow, report: RecoveryReport) -> None:
    open_path = layout.warcs / (file.name + OPEN_SUFFIX)
    final = layout.warcs / file.name
    if db.count_rows(file.id) == 0:
        open_path.unlink()
        fsync_dir(layout.warcs)
        db.remove_file(file.id)
        report.deleted.append(open_path.name)
        return
    with open_path.open("rb") as fh:
        os.fsync(fh.fileno())
    os.rename(open_path, final)
    fsync_dir(layout.warcs)
    db.set_open(file.id, False)
    report.closed.append(file.name)


def recover(layout: Layout, db: IndexDB) -> RecoveryReport:
    """Run every recovery step (blocking); see the module docstring."""
    report = RecoveryReport()
    layout.create()
    on_disk = set(os.listdir(layout.warcs))

    for name in sorted(on_disk):
        if name.endswith(IMPORTING_SUFFIX):
            (layout.warcs / name).unlink()
            report.deleted.append(name)
        elif name.endswith(OPEN_SUFFIX) and name.removesuffix(OPEN_SUFFIX) in on_disk:
            path, final = layout.warcs / name, layout.warcs / name.removesuffix(OPEN_SUFFIX)
            if os.path.samefile(path, final):
                path.unlink()
                report.deleted.append(name)
            else:
                report.invalid.append(layout.move_to_invalid(path).name)
    if report.deleted:
        fsync_dir(layout.warcs)
    on_disk = set(os.listdir(layout.warcs))

    known: set[str] = set()
    for file in db.files():
        if file.name in on_disk:
            is_open = False
        elif file.name + OPEN_SUFFIX in on_disk:
            is_open = True
        else:
            logger.warning("store: %s is missing; dropping its index entries", file.name)
            report.dropped_entries += db.count_rows(file.id)
            db.remove_file(file.id)
            continue
        known.add(file.name)
        if is_open != file.open:
            db.set_open(file.id, is_open)
        _recover_file(layout, db, file.name, report)

    for name in sorted(on_disk):
        base = name.removesuffix(OPEN_SUFFIX)
        if base in known or not is_warc_name(base):
            continue
        file = db.add_file(base, is_open=name.endswith(OPEN_SUFFIX), origin="found")
        report.indexed.append(base)
        _recover_file(layout, db, base, report)
    return report


def _recover_file(layout: Layout, db: IndexDB, name: str, report: RecoveryReport) -> None:
    file = db.file_by_name(name)
    assert file is not None
    path = layout.warcs / file.disk_name
    size = path.stat().st_size
    if size < file.indexed_end:
        dropped = db.truncate_file_rows(file.id, size)
        report.dropped_entries += dropped
        logger.warning(
            "store: %s is shorter than indexed (%d < %d); dropped %d entries",
            file.disk_name,
            size,
            file.indexed_end,
            dropped,
        )
        file = db.file_by_name(name)
        assert file is not None
    if size > file.indexed_end:
        count, problem = index_tail(db, file, path, truncate=file.open)
        report.indexed_records += count
        if problem and file.open:
            report.truncated.append(file.disk_name)
            logger.warning("store: truncated the torn tail of %s (%s)", file.disk_name, problem)
        elif problem:
            refreshed = db.file_by_name(name)
            if refreshed is not None and refreshed.indexed_end == 0 and count == 0:
                db.remove_file(file.id)
                report.invalid.append(layout.move_to_invalid(path).name)
                logger.error("store: %s is unreadable (%s); moved to invalid/", name, problem)
                return
            report.damaged.append(file.disk_name)
            logger.error(
                "store: %s is damaged (%s); run `gateway store check` and `store repair`",
                file.disk_name,
                problem,
            )
    if file.open:
        _close_open_file(layout, db, file, report)
