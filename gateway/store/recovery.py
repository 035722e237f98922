"""Recovery at open: finish what the index says may be unfinished, and nothing else.

Opening a store never lists ``warcs/`` (O(1) in the store's size, see
:mod:`gateway.store.layout`). What a process killed at any moment can leave
is always named by the index, because a file's row is committed before the
file exists:

- :func:`recover_imports` (any process opening the store): rows in state
  ``importing`` whose importer died (its lock on ``incoming/<name>`` is free).
  An import whose copy already joined ``warcs/`` (the same inode under both
  names) is finished: indexed and closed; any other is undone: its staged
  copy is deleted, then its row. Leftovers in ``incoming/`` of imports that
  finished (a crash before their staged name was removed) are deleted. Only
  ``incoming/``, the store's private directory, is listed.
- :func:`recover_open_files` (the process that takes the writer lock, and
  ``store repair``): rows in state ``open`` are closed: whole records past the
  file's ``indexed_end`` are indexed, a torn tail (bytes after the last whole
  record, which a write cut short leaves) is truncated, rows pointing past the
  end are dropped, and the file is fsynced, linked to its final name and
  marked closed with its SHA-256; its ``.open`` name is kept (``open_link``)
  for the writer to remove after its grace period. An open file without a
  capture is deleted with its row; a row whose file does not exist (a crash
  between the row and the file) is dropped.

Every file recovery changes is one the index says the store wrote.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from gateway.store.db import IndexDB
from gateway.store.framing import FramingError, scan_frames
from gateway.store.indexing import index_range
from gateway.store.layout import Layout, fsync_dir
from gateway.store.rows import FileRow

__all__ = [
    "RecoveryReport",
    "close_open_file",
    "file_sha256",
    "finish_or_undo_import",
    "index_tail",
    "lock_staged",
    "recover_imports",
    "recover_open_files",
]

logger = logging.getLogger(__name__)

_CHUNK: Final = 1 << 20


@dataclass(slots=True)
class RecoveryReport:
    """What recovery changed; names are file names under ``warcs/`` or ``incoming/``."""

    truncated: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    imports_finished: list[str] = field(default_factory=list)
    imports_undone: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
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
            ("finished the interrupted import of", self.imports_finished),
            ("undid the interrupted import of", self.imports_undone),
            ("forgot the missing file", self.missing),
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
        return bool(self.describe())


def file_sha256(path: Path, *, progress: Callable[[int], object] | None = None) -> str:
    """The hex SHA-256 of a whole file (blocking; reads it once).

    ``progress(n)``: called as ``n`` more bytes are read.
    """
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return digest.hexdigest()


def index_tail(
    db: IndexDB,
    file: FileRow,
    path: Path,
    *,
    truncate: bool,
    closed_sha256: str | None = None,
) -> tuple[int, str | None]:
    """Index the whole records after ``file.indexed_end``; return (records, problem).

    With ``truncate`` (a ``.open`` file), bytes after the last whole record are
    cut off; otherwise they are left alone and described in ``problem``.
    ``closed_sha256``: the same transaction marks the file closed (an import).
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
    if good_end > file.indexed_end or closed_sha256 is not None:
        db.append_rows(file.id, rows, good_end, closed_sha256=closed_sha256)
    return len(rows), problem


# ------------------------------------------------------------------ imports
def lock_staged(path: Path, *, create: bool) -> int | None:
    """Open ``path`` and take its exclusive ``flock`` without waiting; return the fd.

    None when another process holds the lock (a live import), or when the
    file does not exist (``create`` False). The classic lock-file check
    follows: if the name was removed or replaced between the open and the
    lock, the lock is on a stale inode and the open is tried again.
    """
    while True:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def recover_imports(layout: Layout, db: IndexDB, report: RecoveryReport) -> None:
    """Finish or undo imports whose importer died (blocking; see the module docstring)."""
    importing = {f.name: f for f in db.unfinished_files() if f.state == "importing"}
    for file in importing.values():
        staged = layout.staging_path(file.name)
        fd = lock_staged(staged, create=False)
        if fd is None:
            if not staged.exists():  # never staged: nothing of it is on disk
                db.remove_file(file.id)
                report.imports_undone.append(file.name)
            continue  # a live import
        try:
            finish_or_undo_import(layout, db, file, staged, fd, report)
        finally:
            os.close(fd)
    if not layout.incoming.is_dir():
        return
    for name in sorted(os.listdir(layout.incoming)):
        if name in importing:
            continue
        path = layout.incoming / name
        fd = lock_staged(path, create=False)
        if fd is None:
            continue  # a live import (its row is younger than the list above)
        try:
            row = db.file_by_name(name)
            if row is None or row.state != "importing":
                path.unlink()
                report.deleted.append(f"incoming/{name}")
        finally:
            os.close(fd)


def finish_or_undo_import(
    layout: Layout, db: IndexDB, file: FileRow, staged: Path, fd: int, report: RecoveryReport
) -> None:
    """Finish (its copy joined ``warcs/``) or undo an import whose importer died.

    The caller holds the import's lock (``fd``, on ``staged``) and closes it.
    """
    final = layout.place(file)
    try:
        joined = os.path.samestat(os.fstat(fd), os.stat(final))
    except FileNotFoundError:
        joined = False
    if joined:
        sha256 = file.sha256 or file_sha256(final)
        records, problem = index_tail(db, file, final, truncate=False, closed_sha256=sha256)
        report.indexed_records += records
        report.imports_finished.append(file.name)
        if problem:
            report.damaged.append(file.name)
            logger.error("store: the imported %s is damaged: %s", file.name, problem)
    else:
        report.imports_undone.append(file.name)
    staged.unlink()
    fsync_dir(layout.incoming)
    if not joined:
        db.remove_file(file.id)


# --------------------------------------------------------------- open files
def recover_open_files(layout: Layout, db: IndexDB, report: RecoveryReport) -> None:
    """Close every file the index says is ``open`` (blocking; needs the writer lock)."""
    for file in db.unfinished_files():
        if file.state == "open":
            close_open_file(layout, db, file, report)


def close_open_file(layout: Layout, db: IndexDB, file: FileRow, report: RecoveryReport) -> None:
    """Close one file in state ``open`` whose writer is gone (see the module docstring)."""
    open_path = layout.place(file, open_=True)
    final = layout.place(file)
    if not open_path.exists():
        if final.exists() and file.owned:
            # An older release closed by renaming: the file has its final name already.
            open_path = final
        else:
            report.dropped_entries += db.remove_file(file.id)
            report.missing.append(file.name)
            logger.warning("store: %s is missing; dropped its index entries", open_path)
            return
    elif final.exists() and not os.path.samefile(open_path, final):
        report.damaged.append(file.name)
        logger.error(
            "store: cannot close %s: %s is another file, which the store did not write",
            open_path,
            final,
        )
        return
    size = open_path.stat().st_size
    if size < file.indexed_end:
        dropped = db.truncate_file_rows(file.id, size)
        report.dropped_entries += dropped
        logger.warning(
            "store: %s is shorter than indexed (%d < %d); dropped %d entries",
            open_path.name,
            size,
            file.indexed_end,
            dropped,
        )
        file = db.file_by_id(file.id) or file
    count, problem = index_tail(db, file, open_path, truncate=True)
    report.indexed_records += count
    if problem:
        report.truncated.append(open_path.name)
        logger.warning("store: truncated the torn tail of %s (%s)", open_path.name, problem)
    if db.count_rows(file.id) == 0:
        open_path.unlink()
        fsync_dir(open_path.parent)
        db.remove_file(file.id)
        report.deleted.append(open_path.name)
        return
    with open_path.open("rb") as fh:
        os.fsync(fh.fileno())
    if open_path != final and not final.exists():
        os.link(open_path, final)
        fsync_dir(final.parent)
    db.close_file(file.id, sha256=file_sha256(final), open_link=open_path != final)
    report.closed.append(file.name)
