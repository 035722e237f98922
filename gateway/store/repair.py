"""``gateway store repair``: fix what ``store check`` finds.

With the store lock held exclusively (the gateway must be stopped):

1. recovery (:func:`~gateway.store.recovery.recover`): leftovers, ``.open``
   files and their torn tails, missing and unindexed files, entries past EOF;
2. a check (:func:`~gateway.store.check.check_files`);
3. files with damaged records or failing digests are *salvaged*: their whole,
   digest-valid records are copied (bytes unchanged) into
   ``<stem>-salvaged<N>.warc[.gz]``, which is indexed in place of the
   original; the original moves to ``invalid/YYYYMMDD/``;
4. files whose index entries disagree with their records are re-indexed;
5. a final check, whose report is returned.

Problems no file operation can fix (a revisit whose original is lost) remain
in the final report, so ``repair`` exits non-zero on them too.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from gateway.progress import progress_bar
from gateway.store.check import REINDEX_KINDS, SALVAGE_KINDS, CheckReport, check_files
from gateway.store.db import IndexDB
from gateway.store.layout import IMPORTING_SUFFIX, Layout, StoreLock, fsync_dir
from gateway.store.recovery import RecoveryReport, index_tail, recover
from gateway.store.verify import FileVerdict

__all__ = ["RepairReport", "repair_store"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class RepairReport:
    """What was done (``actions``, one line each) and the final check."""

    recovery: RecoveryReport
    actions: list[str] = field(default_factory=list)
    final: CheckReport = field(default_factory=CheckReport)


def _salvage_name(layout: Layout, name: str) -> str:
    ext = ".warc.gz" if name.endswith(".warc.gz") else ".warc"
    stem = name.removesuffix(ext)
    counter = 1
    while True:
        candidate = f"{stem}-salvaged{counter if counter > 1 else ''}{ext}"
        if not (layout.warcs / candidate).exists():
            return candidate
        counter += 1


def _salvage(layout: Layout, db: IndexDB, name: str, verdict: FileVerdict) -> str:
    """Copy the good records of ``name`` into a new file, index it, retire the original."""
    source = layout.warcs / name
    new_name = _salvage_name(layout, name)
    temp = layout.warcs / (new_name + IMPORTING_SUFFIX)
    kept = 0
    with source.open("rb") as src, temp.open("wb") as dst:
        for offset, end in sorted(verdict.frame_ends.items()):
            if offset in verdict.bad_records:
                continue
            src.seek(offset)
            dst.write(src.read(end - offset))
            kept += 1
        dst.flush()
        os.fsync(dst.fileno())
    original = db.file_by_name(name)
    if kept == 0:
        temp.unlink()
    else:
        os.rename(temp, layout.warcs / new_name)
        fsync_dir(layout.warcs)
    if original is not None:
        db.remove_file(original.id)
    if kept:
        file = db.add_file(new_name, is_open=False, origin=original.origin if original else "found")
        index_tail(db, file, layout.warcs / new_name, truncate=False)
    moved = layout.move_to_invalid(source)
    dropped = len(verdict.records) - kept
    return (
        f"salvaged {kept} record(s) of {name} into {new_name if kept else '(nothing)'}; "
        f"{max(dropped, 0)} dropped; original moved to {moved.relative_to(layout.root)}"
    )


def _reindex(layout: Layout, db: IndexDB, name: str) -> str:
    file = db.file_by_name(name)
    if file is None:
        return f"{name}: not in the index, left to recovery"
    db.reset_file(file.id)
    refreshed = db.file_by_name(name)
    assert refreshed is not None
    count, problem = index_tail(db, refreshed, layout.warcs / refreshed.disk_name, truncate=False)
    return f"re-indexed {name}: {count} entries" + (f" ({problem})" if problem else "")


def repair_store(layout: Layout, *, progress: bool | None = None) -> RepairReport:
    """Run recovery, then fix every fixable problem of a check (blocking).

    ``progress``: draw a bar for each of the two checks (None: when standard
    error is a terminal; :func:`gateway.progress.progress_bar`). Raises
    :class:`~gateway.store.errors.StoreLocked` when the store is in use.
    """
    lock = StoreLock(layout.lock_path)
    layout.create()
    lock.acquire("exclusive")
    try:
        db = IndexDB(layout.db_path)
        try:
            report = RepairReport(recovery=recover(layout, db))
            first = check_files(
                layout, db, progress=progress_bar("store repair: check", enabled=progress)
            )
            salvage = sorted({p.file for p in first.problems if p.kind in SALVAGE_KINDS})
            reindex = sorted(
                {p.file for p in first.problems if p.kind in REINDEX_KINDS} - set(salvage)
            )
            for name in salvage:
                report.actions.append(_salvage(layout, db, name, first.verdicts[name]))
            for name in reindex:
                report.actions.append(_reindex(layout, db, name))
            report.final = check_files(
                layout, db, progress=progress_bar("store repair: final check", enabled=progress)
            )
            return report
        finally:
            db.close()
    finally:
        lock.release()
