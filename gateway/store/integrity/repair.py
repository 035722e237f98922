"""``gateway store repair``: fix what ``store check`` finds, and say exactly what it cost.

With the store to itself (``store.lock`` and ``writer.lock`` exclusive: every
other process using the store must be stopped):

1. recovery (:mod:`gateway.store.recovery`): interrupted imports, files
   left ``open``, ``.open`` names kept after a close;
2. what recovery at open no longer looks at, since it never lists
   ``warcs/``: leftovers of older releases (``*.importing`` copies, ``.open``
   names of closed files) are removed, and orphan files the store wrote
   (:func:`~gateway.store.verify.written_by_store`) at a layout's place for
   their name's date are indexed where they are, a ``.open`` one closed; a
   store-written orphan with no whole record moves to
   ``invalid/YYYYMMDD/``. Foreign files are left where they are;
3. a check (:func:`~gateway.store.integrity.check.check_files`);
4. a file that is damaged, changed since it closed, or missing is first
   *restored* from a storage holding a verified copy of its recorded
   SHA-256, when the store has storages
   (:mod:`gateway.store.integrity.restore`): nothing is dropped while a
   copy holds it. What follows applies only to what no copy restored;
5. files the store owns with damaged records or failing digests are
   *salvaged*: every whole, digest-valid record, the ones after the damage
   included (:func:`~gateway.store.framing.next_frame`), is copied (bytes
   unchanged) into ``<stem>-salvaged<N>.<ext>``, which is indexed in place of
   the original; the original moves to ``invalid/YYYYMMDD/``. What was
   dropped is reported exactly: each byte range left behind and why, and
   every index entry (capture) that pointed into it. A damaged file the
   store did not write (``found`` by an older release) is reported, not
   rewritten;
6. files whose index entries disagree with their records are re-indexed;
7. a file whose bytes changed after it was closed while every record in it
   stays whole and valid, and that no copy restored, gets its new SHA-256
   recorded (the report says so);
8. a final check, whose report is returned.

Problems no file operation can fix (a revisit whose original is lost, a
foreign file in ``warcs/``) remain in the final report, so ``repair`` exits
non-zero on them too.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from gateway.progress import progress_bar
from gateway.store.db import IndexDB
from gateway.store.framing import FramingError, next_frame, scan_frames
from gateway.store.integrity.check import (
    REINDEX_KINDS,
    RESHA_KINDS,
    SALVAGE_KINDS,
    CheckReport,
    ProblemKind,
    check_files,
)
from gateway.store.integrity.restore import Restorer
from gateway.store.layout import (
    IMPORTING_SUFFIX,
    OPEN_SUFFIX,
    Layout,
    StoreLock,
    date_of_name,
    fsync_dir,
    is_archive_name,
)
from gateway.store.recovery import (
    RecoveryReport,
    close_open_file,
    file_sha256,
    index_tail,
    recover_imports,
    recover_open_files,
)
from gateway.store.rows import FileRow
from gateway.store.verify import FileVerdict, file_date, record_problem, written_by_store
from gateway.store.warcfile import remove_open_link

__all__ = ["RepairReport", "repair_store"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class RepairReport:
    """What was done (``actions``, one line each) and the final check."""

    recovery: RecoveryReport
    actions: list[str] = field(default_factory=list)
    final: CheckReport = field(default_factory=CheckReport)


def _salvage_name(layout: Layout, db: IndexDB, name: str, date: str) -> str:
    """A name for the salvaged copy that neither the index nor any layout's place holds."""
    ext = next(e for e in (".warc.gz", ".warc", ".arc.gz", ".arc") if name.endswith(e))
    stem = name.removesuffix(ext)
    counter = 1
    while True:
        candidate = f"{stem}-salvaged{counter if counter > 1 else ''}{ext}"
        placed = FileRow(0, candidate, "closed", "written", 0, fs_version=layout.current, date=date)
        taken = db.file_by_name(candidate) is not None
        if not taken and not any(p.exists() for p in layout.candidates(placed)):
            return candidate
        counter += 1


@dataclass(frozen=True, slots=True)
class _Dropped:
    """Bytes left behind: one whole record whose digest fails, or an unreadable range."""

    start: int
    end: int
    why: str
    whole_record: bool


def _plan_salvage(path: Path, verdict: FileVerdict) -> tuple[list[tuple[int, int]], list[_Dropped]]:
    """Whole, digest-valid records to keep, and every byte range left behind (with why)."""
    keep: list[tuple[int, int]] = []
    dropped: list[_Dropped] = []
    size = verdict.size
    with path.open("rb") as fh:
        position = 0
        while position < size:
            try:
                for frame in scan_frames(fh, position):
                    if frame.offset < verdict.good_end:  # verify_file checked it
                        why = verdict.bad_records.get(frame.offset)
                    else:  # past the first damage: check its digests now
                        why = record_problem(fh, frame.offset, frame.end)
                    if why is not None:
                        dropped.append(_Dropped(frame.offset, frame.end, why, whole_record=True))
                    else:
                        keep.append((frame.offset, frame.end))
                    position = frame.end
                break
            except FramingError as exc:
                found = next_frame(fh, exc.offset)
                end = found.offset if found is not None else size
                dropped.append(_Dropped(exc.offset, end, exc.reason, whole_record=False))
                position = end
    return keep, dropped


def _describe_drops(db: IndexDB, file: FileRow | None, dropped: list[_Dropped]) -> str:
    """Exactly what is left behind: records, byte ranges and why, and the index entries lost.

    A record whose digest fails is one record; an unreadable range may hold
    any number of records, of which the index names the ones it had.
    """
    total = sum(d.end - d.start for d in dropped)
    records = sum(d.whole_record for d in dropped)
    unreadable = len(dropped) - records
    ranges = "; ".join(
        f"bytes {d.start}-{d.end} ({'a record: ' if d.whole_record else 'unreadable: '}{d.why})"
        for d in dropped
    )
    entries = []
    if file is not None:
        for stored in db.rows_of_file(file.id):
            row = stored.row
            if any(d.start <= row.offset < d.end for d in dropped):
                entries.append(f"{row.url} {row.timestamp}")
    lost = f"{len(entries)} indexed record(s) lost" + (f": {', '.join(entries)}" if entries else "")
    return (
        f"dropped {records} record(s) failing their digests and {unreadable} unreadable "
        f"range(s), {total} byte(s) in all: {ranges}; {lost}"
    )


#: Problems a verified copy fixes without loss (step 4).
RESTORE_KINDS: frozenset[ProblemKind] = SALVAGE_KINDS | RESHA_KINDS | {"missing_file"}


def _restore(db: IndexDB, check: CheckReport, restorer: Restorer, report: RepairReport) -> set[str]:
    """Step 4: every closed file with a :data:`RESTORE_KINDS` problem offered to the
    replicas; returns the names restored, saying what happened to each."""
    restored: set[str] = set()
    for name in sorted({p.file for p in check.problems if p.kind in RESTORE_KINDS}):
        row = db.file_by_name(name)
        if row is None or row.state != "closed":
            continue
        done, what = restorer.restore(row)
        report.actions.append(what if done else f"not restored {name}: {what}")
        if done:
            restored.add(name)
    return restored


def _salvage(layout: Layout, db: IndexDB, name: str, verdict: FileVerdict) -> str:
    """Copy the good records of ``name`` into a new file, index it, retire the original."""
    original = db.file_by_name(name)
    if original is None:
        return f"{name}: not in the index, left to recovery"
    if not original.owned:
        return (
            f"not salvaged {name}: the store did not write it (origin {original.origin}); "
            "it is left as it is"
        )
    source = layout.place(original)
    date = original.date or file_date(source)
    keep, dropped = _plan_salvage(source, verdict)
    what = _describe_drops(db, original, dropped)
    new_name = _salvage_name(layout, db, name, date)
    staged = layout.incoming / new_name
    layout.incoming.mkdir(exist_ok=True)
    kept_bytes = 0
    with source.open("rb") as src, staged.open("xb") as dst:
        for start, end in keep:
            src.seek(start)
            dst.write(src.read(end - start))
            kept_bytes += end - start
        dst.flush()
        os.fsync(dst.fileno())
    db.remove_file(original.id)
    if keep:
        file = db.add_file(
            new_name,
            state="importing",
            origin=original.origin,
            fs_version=layout.current,
            date=date,
        )
        final = layout.place(file)
        layout.make_directory(final.parent)
        os.link(staged, final)
        fsync_dir(final.parent)
        index_tail(db, file, final, truncate=False, closed_sha256=file_sha256(final))
    staged.unlink()
    moved = layout.move_to_invalid(source)
    into = f"into {new_name}" if keep else "(nothing whole was left)"
    return (
        f"salvaged {name} {into}: kept {len(keep)} record(s), {kept_bytes} byte(s); {what}; "
        f"the original moved to {moved.relative_to(layout.root)}"
    )


def _reindex(layout: Layout, db: IndexDB, name: str) -> str:
    file = db.file_by_name(name)
    if file is None:
        return f"{name}: not in the index, left to recovery"
    db.reset_file(file.id)
    refreshed = db.file_by_id(file.id)
    assert refreshed is not None
    path = layout.place(refreshed)
    count, problem = index_tail(db, refreshed, path, truncate=False)
    return f"re-indexed {name}: {count} entries" + (f" ({problem})" if problem else "")


def _record_sha256(layout: Layout, db: IndexDB, name: str) -> str:
    file = db.file_by_name(name)
    if file is None:
        return f"{name}: not in the index"
    sha256 = file_sha256(layout.place(file))
    db.set_sha256(file.id, sha256)
    return (
        f"recorded the new SHA-256 of {name}, changed after it was closed "
        f"(was {file.sha256}, now {sha256}); every record in it passes its digests"
    )


def _leftovers(layout: Layout, db: IndexDB, report: RepairReport) -> None:
    """Step 2: older releases' leftovers and store-written orphans (walks ``warcs/``)."""
    for path in sorted(layout.walk()):
        name = path.name
        if name.endswith(IMPORTING_SUFFIX) and is_archive_name(name.removesuffix(IMPORTING_SUFFIX)):
            path.unlink()
            fsync_dir(path.parent)
            report.actions.append(f"removed {name}, a copy left by an interrupted import")
            continue
        base = name.removesuffix(OPEN_SUFFIX)
        row = db.file_by_name(base)
        if name.endswith(OPEN_SUFFIX) and row is not None and row.state == "closed":
            final = layout.place(row)
            if final.exists() and os.path.samefile(path, final):
                path.unlink()
                fsync_dir(path.parent)
                report.actions.append(f"removed {name}, a second name of the closed {base}")
            continue
        if row is not None or not is_archive_name(base) or not written_by_store(path):
            continue
        version = layout.version_at(path.with_name(base), date_of_name(base))
        if version is not None:  # elsewhere, it is not where the store puts its files
            _adopt_orphan(layout, db, path, version, report)


def _adopt_orphan(
    layout: Layout, db: IndexDB, path: Path, fs_version: int, report: RepairReport
) -> None:
    """Index a file the store wrote that its index lost (an older release's crash)."""
    name = path.name.removesuffix(OPEN_SUFFIX)
    is_open = path.name.endswith(OPEN_SUFFIX)
    file = db.add_file(
        name,
        state="open" if is_open else "importing",
        origin="written",
        fs_version=fs_version,  # where it is
        date=date_of_name(name),
    )
    if is_open:
        close_open_file(layout, db, file, report.recovery)
        report.actions.append(f"indexed and closed {path.name}, written by this store")
        return
    records, problem = index_tail(db, file, path, truncate=False, closed_sha256=file_sha256(path))
    if records == 0 and problem:
        db.remove_file(file.id)
        moved = layout.move_to_invalid(path)
        report.actions.append(
            f"moved {path.name} to {moved.relative_to(layout.root)}: written by this store "
            f"but unreadable ({problem})"
        )
        return
    report.actions.append(
        f"indexed {path.name}, written by this store: {records} record(s)"
        + (f" ({problem})" if problem else "")
    )


def repair_store(
    layout: Layout, *, progress: bool | None = None, restorer: Restorer | None = None
) -> RepairReport:
    """Run recovery, then fix every fixable problem of a check (blocking).

    ``progress``: draw a bar for each of the two checks (None: when standard
    error is a terminal; :func:`gateway.progress.progress_bar`);
    ``restorer``: the store's replicas, tried first for every damaged,
    changed or missing file (step 4). Raises
    :class:`~gateway.store.errors.StoreLocked` when the store is in use.
    """
    lock = StoreLock(layout.lock_path)
    writer = StoreLock(layout.writer_lock_path, exclusive_only=True)
    layout.create()
    hint = "stop every process using the store (gateway serve, gateway worker, store add)"
    lock.acquire("exclusive", hint=hint)
    try:
        writer.acquire("exclusive", hint=hint)
        db = IndexDB(layout.db_path)
        try:
            report = RepairReport(recovery=RecoveryReport())
            recover_imports(layout, db, report.recovery)
            recover_open_files(layout, db, report.recovery)
            for file in db.pending_links():
                remove_open_link(db, file, layout.place(file, open_=True))
            _leftovers(layout, db, report)
            first = check_files(
                layout, db, progress=progress_bar("store repair: check", enabled=progress)
            )
            restored = _restore(db, first, restorer, report) if restorer is not None else set()
            salvage = sorted({p.file for p in first.problems if p.kind in SALVAGE_KINDS} - restored)
            reindex = sorted(
                {p.file for p in first.problems if p.kind in REINDEX_KINDS}
                - set(salvage)
                - restored
            )
            for name in salvage:
                report.actions.append(_salvage(layout, db, name, first.verdicts[name]))
            for name in reindex:
                report.actions.append(_reindex(layout, db, name))
            for problem in first.problems:
                if problem.kind in RESHA_KINDS and problem.file not in restored:
                    report.actions.append(_record_sha256(layout, db, problem.file))
            report.final = check_files(
                layout, db, progress=progress_bar("store repair: final check", enabled=progress)
            )
            return report
        finally:
            db.close()
    finally:
        writer.release()
        lock.release()
