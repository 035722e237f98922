"""``gateway store check``: verify every record and every index entry; change nothing.

For each WARC file under ``warcs/`` (see :mod:`gateway.store.verify`):

- every record is whole (framing) and its digests pass (warcio);
- every index entry points at a record with the entry's offset, length,
  type, WARC-Record-ID, URL and timestamp; no entry points past the end;
- every indexable record has an index entry;
- every revisit the store wrote refers (``WARC-Refers-To``) to an indexed full
  record, never to another revisit.

And for the store as a whole: the SQLite index passes ``quick_check``; every
indexed file exists, every file is indexed; no ``.importing`` leftovers, no
``.open`` files (a store not shut down cleanly) and no stray ``.open`` links.

While a writer holds the store (the gateway runs), ``check`` takes the lock
shared only if it can; if not it checks closed files only and says so.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from warcio.timeutils import iso_date_to_timestamp

from gateway.store.db import FileRow, IndexDB, StoredRow
from gateway.store.indexing import FULL_RECORD_TYPES, INDEXED_TYPES
from gateway.store.layout import IMPORTING_SUFFIX, OPEN_SUFFIX, Layout, StoreLock, is_warc_name
from gateway.store.progress import ProgressBar
from gateway.store.verify import FileVerdict, RecordInfo, verify_file

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
    "torn_tail",
    "damaged",
    "digest",
    "index_mismatch",
    "index_past_end",
    "unindexed_record",
    "revisit_original",
]

#: Problems that :func:`gateway.store.repair.repair_store` fixes by re-indexing.
REINDEX_KINDS: frozenset[ProblemKind] = frozenset(
    {"index_mismatch", "index_past_end", "unindexed_record"}
)
#: Problems fixed by salvaging the whole records into a new file.
SALVAGE_KINDS: frozenset[ProblemKind] = frozenset({"damaged", "digest"})


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding: ``file`` is a name under ``warcs/`` ("" for the store itself)."""

    kind: ProblemKind
    file: str
    message: str
    offset: int | None = None

    def __str__(self) -> str:
        where = f"warcs/{self.file}" if self.file else "store"
        at = f": offset {self.offset}" if self.offset is not None else ""
        return f"{where}{at}: {self.message} [{self.kind}]"


@dataclass(slots=True)
class CheckReport:
    """Problems found plus counts; ``live`` when a writer held the store."""

    problems: list[Problem] = field(default_factory=list)
    files: int = 0
    records: int = 0
    entries: int = 0
    live: bool = False
    skipped: list[str] = field(default_factory=list)
    verdicts: dict[str, FileVerdict] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        text = f"{self.files} file(s), {self.records} record(s), {self.entries} index entries"
        if self.skipped:
            text += f"; {len(self.skipped)} open file(s) skipped (the store is in use)"
        if self.ok:
            return f"{text}: OK"
        return f"{text}: {len(self.problems)} problem(s); run `gateway store repair` to fix"


def _indexable(info: RecordInfo) -> bool:
    if info.rec_type not in INDEXED_TYPES:
        return False
    return not (
        info.rec_type in ("resource", "metadata") and info.content_type == "application/warc-fields"
    )


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
            iso_date_to_timestamp(info.warc_date) if info.warc_date else "",
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


def check_files(
    layout: Layout, db: IndexDB, *, live: bool = False, progress: ProgressBar | None = None
) -> CheckReport:
    """Check with an already opened index (``store repair`` reuses it). Blocking."""
    report = CheckReport(live=live)
    quick = db.quick_check()
    if quick != "ok":
        report.problems.append(Problem("index_db", "", f"SQLite quick_check: {quick}"))
    on_disk = set(os.listdir(layout.warcs)) if layout.warcs.is_dir() else set()
    files = {f.name: f for f in db.files()}
    todo: list[tuple[str, FileRow | None]] = []
    for name in sorted(on_disk):
        path = layout.warcs / name
        base = name.removesuffix(OPEN_SUFFIX)
        if name.endswith(IMPORTING_SUFFIX):
            if not live:
                report.problems.append(Problem("leftover_import", name, "interrupted import"))
            continue
        if not is_warc_name(base):
            continue
        if name.endswith(OPEN_SUFFIX):
            if base in on_disk and os.path.samefile(path, layout.warcs / base):
                if not live:
                    report.problems.append(
                        Problem("leftover_link", name, "stray name of a closed file")
                    )
                continue
            if live:
                report.skipped.append(name)
                continue
            report.problems.append(
                Problem("not_closed", name, "still open: the store was not shut down cleanly")
            )
        file = files.get(base)
        if file is None:
            report.problems.append(Problem("not_indexed", name, "file is not in the index"))
        todo.append((name, file))
    for name, file in files.items():
        if name not in on_disk and name + OPEN_SUFFIX not in on_disk:
            report.problems.append(
                Problem(
                    "missing_file",
                    name,
                    f"{db.count_rows(file.id)} index entries "
                    "point into this file, which does not exist",
                )
            )
    total = sum((layout.warcs / name).stat().st_size for name, _ in todo)
    bar = progress or ProgressBar(2 * total, label="store check", enabled=False)
    bar.total = max(2 * total, 1)
    for name, file in todo:
        verdict = verify_file(layout.warcs / name, progress=bar.advance)
        report.verdicts[name] = verdict
        report.files += 1
        report.records += len(verdict.records)
        report.problems.extend(verify_problems(name, name.endswith(OPEN_SUFFIX), verdict))
        if file is not None:
            rows = db.rows_of_file(file.id)
            report.entries += len(rows)
            compare_rows(file, rows, verdict, db, report.problems)
    bar.finish()
    return report


def _open_index(layout: Layout, live: bool, scratch: Path) -> IndexDB:
    """Open the index for reading without changing any file of the store.

    Clean store: ``immutable`` (no -wal/-shm files are created). Crashed store
    (a -wal file to replay): a copy of the index and its WAL in ``scratch``,
    since SQLite would otherwise rewrite the -shm index of the WAL. Live
    store: read-only beside the writer.
    """
    wal = layout.db_path.with_name(layout.db_path.name + "-wal")
    if live:
        return IndexDB(layout.db_path, access="read")
    if not wal.exists():
        return IndexDB(layout.db_path, access="immutable")
    copy = scratch / layout.db_path.name
    shutil.copyfile(layout.db_path, copy)
    shutil.copyfile(wal, copy.with_name(wal.name))
    return IndexDB(copy, access="read")


def check_store(layout: Layout, *, progress: bool | None = None) -> CheckReport:
    """Check the store at ``layout`` without changing anything (blocking).

    ``progress``: see :class:`ProgressBar` ``enabled``. A missing store or
    index is reported as a problem.
    """
    if not layout.exists():
        return CheckReport(problems=[Problem("index_db", "", f"no store at {layout.root}")])
    lock = StoreLock(layout.lock_path)
    live = layout.lock_path.exists() and not lock.try_acquire("shared")
    try:
        if not layout.db_path.exists():
            report = CheckReport(live=live)
            report.problems.append(Problem("index_db", "", f"{layout.db_path} is missing"))
            return report
        with tempfile.TemporaryDirectory(prefix="store-check-") as scratch:
            db = _open_index(layout, live, Path(scratch))
            try:
                bar = ProgressBar(0, label="store check", enabled=progress)
                return check_files(layout, db, live=live, progress=bar)
            finally:
                db.close()
    finally:
        lock.release()
