"""``gateway store check``: verify every record and every index entry; change nothing.

For each WARC file under ``warcs/`` (see :mod:`gateway.store.verify`):

- every record is whole (framing) and its digests pass (warcio);
- every index entry points at a record with the entry's offset, length,
  type, WARC-Record-ID, URL and timestamp; no entry points past the end;
- every indexable record has an index entry;
- every revisit the store wrote refers (``WARC-Refers-To``) to an indexed full
  record, never to another revisit;
- a closed file's SHA-256 is the one its row recorded when it was closed or
  imported (rows of older releases have none).

And for the store as a whole: the SQLite index passes ``quick_check``; every
indexed file is at the place its row gives (:meth:`Layout.place
<gateway.store.layout.Layout.place>`); no interrupted imports, no ``.open``
files (a writer that did not close them) and no stray ``.open`` links. One
walk of ``warcs/`` (every layout's directories) accounts for what is on
disk. Files the index does not place where they are are *orphans*: one the
store wrote, at a layout's place for its name's date
(:func:`~gateway.store.verify.written_by_store`), is ``not_indexed`` and
``store repair`` indexes it; any other is a ``foreign_file``, which the store
never touches (``store add`` imports a copy of it). What an interrupted
layout migration leaves is not a problem, only noted: the copy of a move in
progress (``.<name>.moving``), and a second copy of a file at another
layout's place with the SHA-256 its row records (``store migrate`` finishes
both).

On a store nobody else has open, ``check`` holds ``store.lock`` exclusive
and reads the index without changing a byte of it (an index of an older
schema is migrated in a scratch copy). Beside other processes it takes the
lock shared and reads their live index; beside a writer it skips the file
being written, and everywhere the imports in progress, and says so.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from gateway.progress import progress_bar
from gateway.store.db import IndexDB
from gateway.store.errors import StoreError
from gateway.store.indexing import FULL_RECORD_TYPES, is_indexed, timestamp_of
from gateway.store.integrity.safety import Policy, StoreSafety, read_store_safety
from gateway.store.layout import (
    IMPORTING_SUFFIX,
    OPEN_SUFFIX,
    Layout,
    StoreLock,
    date_of_name,
    is_moving_name,
)
from gateway.store.recovery import file_sha256
from gateway.store.rows import FileRow, StoredRow
from gateway.store.schema import SCHEMA_VERSION, schema_version
from gateway.store.verify import FileVerdict, RecordInfo, verify_file, written_by_store

if TYPE_CHECKING:
    from gateway.progress import Bar

__all__ = [
    "CheckReport",
    "Problem",
    "ProblemKind",
    "check_files",
    "check_store",
    "compare_rows",
    "verify_problems",
]

ProblemKind = Literal[
    "index_db",
    "leftover_import",
    "leftover_link",
    "not_closed",
    "missing_file",
    "not_indexed",
    "foreign_file",
    "torn_tail",
    "damaged",
    "digest",
    "index_mismatch",
    "index_past_end",
    "unindexed_record",
    "revisit_original",
    "sha256",
]

#: Problems that :func:`gateway.store.integrity.repair.repair_store` fixes by re-indexing.
REINDEX_KINDS: frozenset[ProblemKind] = frozenset(
    {"index_mismatch", "index_past_end", "unindexed_record"}
)
#: Problems fixed by salvaging the whole records into a new file.
SALVAGE_KINDS: frozenset[ProblemKind] = frozenset({"damaged", "digest"})
#: A file whose bytes changed while every record stays whole and valid:
#: ``store repair`` records its new SHA-256 and says so.
RESHA_KINDS: frozenset[ProblemKind] = frozenset({"sha256"})


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding: ``file`` is a file's name ("" for the store itself;
    ``incoming/<name>`` for a staged import); ``where``, when set, is its path
    relative to the store's root (``warcs/2025/03/01/<name>``)."""

    kind: ProblemKind
    file: str
    message: str
    offset: int | None = None
    where: str | None = None

    def __str__(self) -> str:
        if self.where is not None:
            where = self.where
        elif not self.file:
            where = "store"
        elif self.file.startswith("incoming/"):
            where = self.file
        else:
            where = f"warcs/{self.file}"
        at = f": offset {self.offset}" if self.offset is not None else ""
        return f"{where}{at}: {self.message} [{self.kind}]"


@dataclass(slots=True)
class CheckReport:
    """Problems found plus counts.

    ``live``: other processes had the store open; ``skipped``: files left
    out because they were being written or imported; ``notes``: oddities
    kept on purpose (an imported ARC file's short last record); ``safety``:
    the store's safety, read from the same index when a policy was given
    (whole records are not yet replicated ones).
    """

    problems: list[Problem] = field(default_factory=list)
    files: int = 0
    records: int = 0
    entries: int = 0
    live: bool = False
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdicts: dict[str, FileVerdict] = field(default_factory=dict)
    safety: StoreSafety | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        text = f"{self.files} file(s), {self.records} record(s), {self.entries} index entries"
        if self.skipped:
            text += f"; {len(self.skipped)} file(s) being written or imported skipped"
        if self.ok:
            return f"{text}: OK"
        return (
            f"{text}: {len(self.problems)} problem(s); run `gateway store repair` to fix: it "
            "restores a damaged or missing file from a verified copy first, and salvages only "
            "what no copy holds"
        )


def _indexable(info: RecordInfo) -> bool:
    return is_indexed(info.rec_type, info.content_type, info.warc_date)


def compare_rows(
    file: FileRow, rows: list[StoredRow], verdict: FileVerdict, db: IndexDB, out: list[Problem]
) -> None:
    """Append to ``out`` how ``rows`` (index entries of ``file``) disagree with ``verdict``.

    ``verdict.records`` may cover part of the file (the scrub verifies a
    file a range at a time): then ``rows`` must be the entries of that range.
    """
    by_offset = {info.offset: info for info in verdict.records}
    indexed = set()
    name = file.disk_name
    for stored in rows:
        row = stored.row
        indexed.add(row.offset)
        if row.end > verdict.size:
            out.append(
                Problem("index_past_end", name, "index entry ends past the file's end", row.offset)
            )
            continue
        info = by_offset.get(row.offset)
        if info is None:
            out.append(
                Problem("index_mismatch", name, "index entry points at no whole record", row.offset)
            )
            continue
        expected = (
            info.length,
            info.rec_type,
            info.record_id,
            info.url,
            timestamp_of(info.warc_date) or "",
        )
        actual = (row.length, row.rec_type, row.record_id, row.url, row.timestamp)
        if expected != actual:
            out.append(
                Problem(
                    "index_mismatch",
                    name,
                    f"index entry {actual} does not match the record {expected}",
                    row.offset,
                )
            )
        if row.rec_type == "revisit" and file.origin == "written":
            original = db.by_record_id(info.refers_to) if info.refers_to else None
            if original is None:
                out.append(
                    Problem(
                        "revisit_original",
                        name,
                        f"revisit refers to {info.refers_to or 'nothing'}, "
                        "which is not in the index",
                        row.offset,
                    )
                )
            elif original.row.rec_type not in FULL_RECORD_TYPES:
                out.append(
                    Problem(
                        "revisit_original",
                        name,
                        f"revisit refers to a {original.row.rec_type} record",
                        row.offset,
                    )
                )
    for info in verdict.records:
        if _indexable(info) and info.offset not in indexed:
            out.append(
                Problem(
                    "unindexed_record",
                    name,
                    f"{info.rec_type} record {info.record_id} has no index entry",
                    info.offset,
                )
            )
    if file.indexed_end > verdict.size:
        out.append(
            Problem(
                "index_past_end",
                name,
                f"indexed to {file.indexed_end} but the file has {verdict.size} bytes",
            )
        )


def verify_problems(name: str, is_open: bool, verdict: FileVerdict) -> list[Problem]:
    """The framing and digest problems of ``verdict`` as :class:`Problem` values."""
    out: list[Problem] = []
    if verdict.framing_error is not None:
        # In a file still being written, whatever follows the last whole record
        # is an unfinished write, which recovery truncates; elsewhere it is damage.
        kind: ProblemKind = "torn_tail" if is_open else "damaged"
        what = "torn tail (a write cut short)" if is_open else "damaged record"
        out.append(Problem(kind, name, f"{what}: {verdict.framing_error}", verdict.good_end))
    for offset, reason in sorted(verdict.bad_records.items()):
        out.append(Problem("digest", name, reason, offset))
    return out


def _orphan(layout: Layout, path: Path) -> Problem:
    """A file under ``warcs/`` that no row of the index places where it is."""
    where = str(path.relative_to(layout.root))
    base = path.with_name(path.name.removesuffix(OPEN_SUFFIX))
    placed = layout.version_at(base, date_of_name(base.name)) is not None
    if placed and path.is_file() and written_by_store(path):
        return Problem(
            "not_indexed",
            path.name,
            "written by this store but not in its index (`gateway store repair` indexes it)",
            where=where,
        )
    return Problem(
        "foreign_file",
        path.name,
        "not a file of this store; the store never moves or deletes it (to import it, move it "
        "out of the store and `gateway store add` it)",
        where=where,
    )


def _account(layout: Layout, file: FileRow, path: Path, report: CheckReport) -> None:
    """Say whether ``path``, named like the row ``file``, is where the store keeps it."""
    where = str(path.relative_to(layout.root))
    if path.name == file.name:
        if path == layout.place(file) and (not file.open or report.live):
            return  # an open file gets its final name during a close in progress
        # Another layout's place: a move copies the file there before the row
        # changes, and removes the old copy after (gateway.store.migration.layout_steps).
        if (
            not file.open
            and path in layout.candidates(file)[1:]
            and file.sha256 is not None
            and file_sha256(path) == file.sha256
        ):
            report.notes.append(
                f"{where}: a second copy of {file.name} left by an interrupted move "
                "(`gateway store migrate` removes it)"
            )
            return
    elif path == layout.place(file, open_=True):  # the file's .open name
        if file.open:
            return
        if report.live and file.open_link:
            return  # kept for a grace period after the close
        report.problems.append(
            Problem("leftover_link", path.name, "stray name of a closed file", where=where)
        )
        return
    report.problems.append(_orphan(layout, path))


def _disk_problems(layout: Layout, files: dict[str, FileRow], report: CheckReport) -> None:
    """Files under ``warcs/`` the index does not account for, and leftovers (one walk)."""
    for path in layout.walk():
        name = path.name
        where = str(path.relative_to(layout.root))
        if is_moving_name(name):
            report.notes.append(
                f"{where}: the copy of a move in progress or interrupted "
                "(`gateway store migrate` finishes or removes it)"
            )
            continue
        file = files.get(name.removesuffix(OPEN_SUFFIX))
        if file is not None:
            _account(layout, file, path, report)
        elif name.endswith(IMPORTING_SUFFIX):
            report.problems.append(
                Problem(
                    "leftover_import",
                    name,
                    "a copy left by an interrupted `store add`",
                    where=where,
                )
            )
        else:
            report.problems.append(_orphan(layout, path))
    if not report.live and layout.incoming.is_dir():
        for name in sorted(os.listdir(layout.incoming)):
            report.problems.append(
                Problem(
                    "leftover_import",
                    f"incoming/{name}",
                    "a copy left by an interrupted `store add` (the next open removes it)",
                )
            )


def _path_now(layout: Layout, db: IndexDB, file: FileRow, *, live: bool) -> Path | None:
    """The file's place, read again when another process may have moved it since."""
    path = layout.place(file, open_=file.open)
    if path.is_file() or not live:
        return path if path.is_file() else None
    fresh = db.file_by_id(file.id)
    if fresh is None or fresh.fs_version == file.fs_version:
        return None
    moved = layout.place(fresh, open_=fresh.open)
    return moved if moved.is_file() else None


def check_files(
    layout: Layout,
    db: IndexDB,
    *,
    live: bool = False,
    writer_live: bool = False,
    progress: Bar | None = None,
) -> CheckReport:
    """Check with an already opened index (``store repair`` reuses it). Blocking.

    ``live``: other processes have the store open (their imports in
    progress are skipped); ``writer_live``: one of them writes (its open
    file is skipped). ``progress``: a bar
    (:func:`gateway.progress.progress_bar`) whose total is set to the bytes
    to read (twice each file's size, plus once for each SHA-256) and closed
    at the end.
    """
    report = CheckReport(live=live)
    quick = db.quick_check()
    if quick != "ok":
        report.problems.append(Problem("index_db", "", f"SQLite quick_check: {quick}"))
    files = {f.name: f for f in db.files()}
    _disk_problems(layout, files, report)
    todo: list[tuple[Path, FileRow]] = []
    for file in files.values():
        if file.state == "importing":
            if live:
                report.skipped.append(file.name)
            else:
                report.problems.append(
                    Problem(
                        "leftover_import",
                        file.name,
                        "an interrupted import (the next open finishes or undoes it)",
                    )
                )
            continue
        if file.open and writer_live:
            report.skipped.append(file.disk_name)
            continue
        path = _path_now(layout, db, file, live=live)
        if path is None:
            report.problems.append(
                Problem(
                    "missing_file",
                    file.name,
                    f"{db.count_rows(file.id)} index entries point into this file, which "
                    f"is not at {layout.place(file, open_=file.open).relative_to(layout.root)}",
                )
            )
            continue
        if file.open:
            report.problems.append(
                Problem(
                    "not_closed",
                    file.disk_name,
                    "still open: its writer stopped without closing it (the next writer, "
                    "or `gateway store repair`, closes it)",
                )
            )
        todo.append((path, file))
    total = sum(path.stat().st_size for path, _ in todo)
    bar = progress if progress is not None else progress_bar("store check", enabled=False)
    bar.total = 3 * total
    bar.refresh()
    for path, file in todo:
        try:
            size = path.stat().st_size
            verdict = verify_file(path, progress=bar.update)
        except FileNotFoundError:  # closed or moved by another process meanwhile
            report.skipped.append(path.name)
            continue
        where = str(path.relative_to(layout.root))
        report.verdicts[file.name] = verdict
        report.files += 1
        report.records += len(verdict.records)
        report.notes.extend(f"{where}: {note}" for note in verdict.notes)
        problems = verify_problems(path.name, file.open, verdict)
        found = list(problems)
        if file.state == "closed" and file.sha256 is not None and not problems:
            actual = file_sha256(path, progress=bar.update)
            if actual != file.sha256:
                found.append(
                    Problem(
                        "sha256",
                        file.name,
                        f"the file changed after it was closed: SHA-256 {actual}, "
                        f"recorded {file.sha256} (its records pass their digests)",
                    )
                )
        else:
            bar.update(size)
        rows = db.rows_of_file(file.id)
        report.entries += len(rows)
        compare_rows(file, rows, verdict, db, found)
        report.problems.extend(replace(problem, where=where) for problem in found)
    bar.close()
    return report


def _open_index(layout: Layout, alone: bool, scratch: Path) -> IndexDB:
    """Open the index for reading without changing any file of the store.

    Beside other processes: read-only on the live index (they keep its WAL
    files). Alone, clean store: ``immutable`` (no -wal/-shm files are
    created). Alone, crashed store (a -wal file to replay) or an index of an
    older schema: a copy in ``scratch`` (SQLite would otherwise rewrite the
    -shm index of the WAL; a migration writes), migrated there.
    """
    if not alone:
        db = IndexDB(layout.db_path, access="read")
        if schema_version(db.conn) < SCHEMA_VERSION:
            db.close()
            raise StoreError(
                f"{layout.db_path} has an older schema while other processes use it; "
                "retry when the store has been opened by this release"
            )
        return db
    wal = layout.db_path.with_name(layout.db_path.name + "-wal")
    copy = scratch / layout.db_path.name
    if not wal.exists():
        db = IndexDB(layout.db_path, access="immutable")
        if schema_version(db.conn) >= SCHEMA_VERSION:
            return db
        db.close()
    shutil.copyfile(layout.db_path, copy)
    if wal.exists():
        shutil.copyfile(wal, copy.with_name(wal.name))
    return IndexDB(copy, access="write", synchronous="OFF")


def check_store(
    layout: Layout, *, progress: bool | None = None, policy: Policy | None = None
) -> CheckReport:
    """Check the store at ``layout`` without changing anything (blocking).

    ``progress``: draw a bar (None: when standard error is a terminal; see
    :func:`gateway.progress.progress_bar`); ``policy``: also read the store's
    safety (:mod:`gateway.store.integrity.safety`) into ``report.safety``. A
    missing store or index is reported as a problem, and so is a store
    ``store repair`` holds.
    """
    if not layout.exists():
        return CheckReport(problems=[Problem("index_db", "", f"no store at {layout.root}")])
    lock = StoreLock(layout.lock_path)
    alone = lock.try_acquire("exclusive")
    if not alone and not lock.try_acquire("shared"):
        return CheckReport(
            problems=[
                Problem("index_db", "", "`gateway store repair` holds the store; retry later")
            ]
        )
    writer_live = False
    if not alone and layout.writer_lock_path.exists():
        writer = StoreLock(layout.writer_lock_path, exclusive_only=True)
        writer_live = not writer.try_acquire("exclusive")
        writer.release()
    try:
        if not layout.db_path.exists():
            report = CheckReport(live=not alone)
            report.problems.append(Problem("index_db", "", f"{layout.db_path} is missing"))
            return report
        with tempfile.TemporaryDirectory(prefix="store-check-") as scratch:
            db = _open_index(layout, alone, Path(scratch))
            try:
                bar = progress_bar("store check", enabled=progress)
                report = check_files(
                    layout, db, live=not alone, writer_live=writer_live, progress=bar
                )
                if policy is not None:
                    report.safety = read_store_safety(db.conn, policy, time.time())
                return report
            finally:
                db.close()
    finally:
        lock.release()
