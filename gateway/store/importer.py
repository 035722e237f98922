"""``gateway store add``: import an existing WARC or ARC file into the store.

What the gateway serves, ``store add`` accepts: WARC/0.17, 0.18, 1.0 and 1.1
and ARC files, gzipped (a member per record) or not, named ``.warc``,
``.warc.gz``, ``.arc`` or ``.arc.gz``. A file is stored as given (same
bytes, same name) and indexed; anything else is refused, with every problem
named, before the store changes at all.

Three steps, separate so that background work can run them apart:

1. :func:`verify_source` (reads the source only): every record whole
   (:mod:`gateway.store.framing`) and its digests right (warcio, as
   ``warcio check``); its SHA-256 and date.
2. :func:`stage` (any process that has the store open; no writer needed):
   take the lock of ``incoming/<name>``, commit the file's row
   (``importing``), copy the source into ``incoming/<name>``, fsync, and
   check the copy's SHA-256 against the verified one.
3. :func:`publish`: link the copy into its place under ``warcs/`` in the
   current layout (never over an existing file), index every record and
   mark the file ``closed`` in one transaction, then remove the staged
   name and release the lock.

:func:`abort` undoes 2. A crash anywhere leaves a row in state
``importing`` and a free lock: recovery
(:func:`~gateway.store.recovery.recover_imports`) finishes the import if its
copy joined ``warcs/``, else undoes it. :func:`import_file` runs all three.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from warcio.timeutils import iso_date_to_timestamp

from gateway.store.db import IndexDB
from gateway.store.errors import ImportRejected
from gateway.store.layout import Layout, fsync_dir, is_archive_name, utc_timestamp
from gateway.store.migration.layout_steps import ensure_current
from gateway.store.recovery import (
    RecoveryReport,
    file_sha256,
    finish_or_undo_import,
    index_tail,
    lock_staged,
)
from gateway.store.rows import FileRow
from gateway.store.verify import Progress, verify_file

__all__ = [
    "ImportResult",
    "StagedImport",
    "VerifiedSource",
    "abort",
    "import_file",
    "known_in_store",
    "publish",
    "stage",
    "verify_source",
]

logger = logging.getLogger(__name__)

_CHUNK: Final = 1 << 20
_RECORD_TYPES: Final = frozenset(
    {"warcinfo", "response", "request", "resource", "revisit", "metadata", "conversion"}
    | {"continuation"}
)
#: How long :func:`stage` retries a staging lock held for a moment by recovery.
_LOCK_RETRY_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class VerifiedSource:
    """A file :func:`verify_source` accepted.

    ``date``: its first record's date (14 digits; None if it has none: the
    row then takes the time of the import, which places it in layout 2);
    ``notes``: what is odd but kept, for the user.
    """

    path: Path
    name: str
    size: int
    sha256: str
    date: str | None
    records: int
    notes: tuple[str, ...] = ()


@dataclass(slots=True)
class StagedImport:
    """A verified copy in ``incoming/``, its row (``importing``) and the held lock."""

    source: VerifiedSource
    file: FileRow
    path: Path
    fd: int


@dataclass(frozen=True, slots=True)
class ImportResult:
    """``name`` in the store; ``records`` indexed; ``already_present`` when identical.

    ``already_present`` with another ``name``: the same bytes are in the
    store under that name.
    """

    name: str
    records: int
    already_present: bool = False
    notes: tuple[str, ...] = ()


def verify_source(source: Path, *, progress: Progress | None = None) -> VerifiedSource:
    """Check ``source`` without changing anything (blocking; reads the file three times).

    ``progress(n)``: ``n`` more bytes were read (three times the size in all).

    Raises :class:`ImportRejected` listing every problem: a name that is not
    a WARC or ARC file name, a file that cannot be read, a record that is not
    whole (a torn or damaged file: ``offset N: reason``), a failing digest, no
    records at all.
    """
    name = source.name
    if not is_archive_name(name):
        raise ImportRejected(str(source), ["expected a .warc, .warc.gz, .arc or .arc.gz file name"])
    if not source.is_file():
        raise ImportRejected(str(source), ["not a regular file"])
    try:
        verdict = verify_file(source, progress=progress)
        sha256 = file_sha256(source, progress=progress)
    except OSError as exc:
        raise ImportRejected(str(source), [f"cannot read: {exc.strerror or exc}"]) from exc
    problems = [f"offset {off}: {why}" for off, why in sorted(verdict.bad_records.items())]
    if verdict.framing_error:
        problems.insert(0, verdict.framing_error)
    if not verdict.records:
        problems.append("no WARC or ARC records")
    elif verdict.records[0].rec_type not in _RECORD_TYPES:
        problems.append(f"not a WARC file (first record type {verdict.records[0].rec_type!r})")
    if problems:
        raise ImportRejected(str(source), problems)
    first_date = verdict.records[0].warc_date
    return VerifiedSource(
        path=source,
        name=name,
        size=verdict.size,
        sha256=sha256,
        date=iso_date_to_timestamp(first_date) if first_date else None,
        records=len(verdict.records),
        notes=tuple(verdict.notes),
    )


def known_in_store(db: IndexDB, source: VerifiedSource) -> ImportResult | None:
    """What the index already says of ``source``, reading only (blocking).

    The result when the same bytes are in the store (closed, under any
    name); raises :class:`ImportRejected` when a closed file of that name has
    another recorded SHA-256; None otherwise (including a row of an older
    release without a SHA-256, which :func:`stage` settles).
    """
    for other in db.files_with_sha256(source.sha256):
        if other.state == "closed":
            return ImportResult(name=other.name, records=0, already_present=True)
    file = db.file_by_name(source.name)
    if file is not None and file.state == "closed" and file.sha256 is not None:
        raise _name_taken(source)
    return None


def _name_taken(source: VerifiedSource) -> ImportRejected:
    return ImportRejected(
        str(source.path),
        [f"a different file named {source.name} is already in the store; rename it to import it"],
    )


def _present(layout: Layout, db: IndexDB, source: VerifiedSource) -> ImportResult | None:
    """The result when the store holds these bytes already; raises on a name clash."""
    known = known_in_store(db, source)
    if known is not None:
        return known
    file = db.file_by_name(source.name)
    if file is None or file.state != "closed":
        return None
    if file.sha256 is None:  # a row of an older release: its SHA-256 is about to be written
        file = ensure_current(layout, db, file).file  # which moves it to the current layout first
    sha256 = file.sha256
    path = layout.place(file)
    if sha256 is None and path.is_file():  # a file the store did not write
        sha256 = file_sha256(path)
        db.set_sha256(file.id, sha256)
    if sha256 == source.sha256:
        return ImportResult(name=file.name, records=0, already_present=True)
    raise _name_taken(source)


def stage(layout: Layout, db: IndexDB, source: VerifiedSource) -> StagedImport | ImportResult:
    """Copy a verified file into ``incoming/`` under its row (blocking).

    Returns an :class:`ImportResult` instead when the same bytes are in the
    store already. Raises :class:`ImportRejected` when another file has the
    name, another process is importing the same name, or the copy differs
    from what was verified (the source changed, or a disk error); the store
    is then as it was.
    """
    layout.create()
    staged = layout.staging_path(source.name)
    deadline = time.monotonic() + _LOCK_RETRY_S
    while True:
        fd = lock_staged(staged, create=True)
        if fd is None:
            if time.monotonic() > deadline:
                raise ImportRejected(
                    str(source.path), [f"{source.name} is being imported by another process"]
                )
            time.sleep(0.05)
            continue
        row = db.file_by_name(source.name)
        if row is None or row.state != "importing":
            break
        # An import of this name whose importer died after the store was opened
        # (its lock is ours now): finish or undo it first, then look again.
        try:
            finish_or_undo_import(layout, db, row, staged, fd, RecoveryReport())
        finally:
            os.close(fd)
    try:
        present = _present(layout, db, source)
        if present is not None:
            staged.unlink()
            os.close(fd)
            return present
        try:
            file = db.add_file(
                source.name,
                state="importing",
                origin="imported",
                fs_version=layout.current,
                date=source.date or utc_timestamp(),
                sha256=source.sha256,
            )
        except sqlite3.IntegrityError as exc:  # a row appeared since: let its owner finish
            raise ImportRejected(
                str(source.path), [f"{source.name} is being imported by another process"]
            ) from exc
    except BaseException:
        staged.unlink(missing_ok=True)
        os.close(fd)
        raise
    staging = StagedImport(source=source, file=file, path=staged, fd=fd)
    try:
        _copy(source, fd)
        fsync_dir(layout.incoming)
    except BaseException:
        abort(layout, db, staging)
        raise
    return staging


def _copy(source: VerifiedSource, fd: int) -> None:
    """Copy the source into the locked staging file, fsync, check both SHA-256s."""
    digest = hashlib.sha256()
    os.ftruncate(fd, 0)
    with source.path.open("rb") as src:
        position = 0
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            view = memoryview(chunk)
            while view:
                written = os.pwrite(fd, view, position)
                position += written
                view = view[written:]
    os.fsync(fd)
    if digest.hexdigest() != source.sha256:
        raise ImportRejected(
            str(source.path), ["the file changed since it was verified; add it again"]
        )
    check = hashlib.sha256()
    position = 0
    while chunk := os.pread(fd, _CHUNK, position):
        check.update(chunk)
        position += len(chunk)
    if check.hexdigest() != source.sha256:
        raise ImportRejected(str(source.path), ["the copy differs from the source (disk error?)"])


def publish(layout: Layout, db: IndexDB, staging: StagedImport) -> ImportResult:
    """Link the staged copy into its place under ``warcs/``, index it and close it (blocking).

    Raises :class:`ImportRejected` (after undoing the import) when a file of
    that name is at the place of any layout but not in the index: the store
    never replaces a file it did not write, nor puts its own beside one a
    reader could mistake for it.
    """
    name = staging.file.name
    final = layout.place(staging.file)
    try:
        squatter = next((p for p in layout.candidates(staging.file) if p.exists()), None)
        if squatter is not None:
            raise FileExistsError(squatter)
        layout.make_directory(final.parent)
        os.link(staging.path, final)
    except FileExistsError as exc:
        abort(layout, db, staging)
        where = squatter or final
        raise ImportRejected(
            str(staging.source.path),
            [f"{where} exists but is not in the store's index; the store does not touch it"],
        ) from exc
    except BaseException:
        abort(layout, db, staging)
        raise
    try:
        fsync_dir(final.parent)
        records, problem = index_tail(
            db, staging.file, final, truncate=False, closed_sha256=staging.source.sha256
        )
    except BaseException:
        # The row stays ``importing``; recovery finishes the import (the copy joined warcs/).
        os.close(staging.fd)
        raise
    if problem:  # verified before the copy; only a disk error gets here
        logger.error("store: the stored copy of %s is damaged: %s", name, problem)
    staging.path.unlink(missing_ok=True)
    fsync_dir(layout.incoming)
    os.close(staging.fd)
    return ImportResult(name=name, records=records, notes=staging.source.notes)


def abort(layout: Layout, db: IndexDB, staging: StagedImport) -> None:
    """Undo :func:`stage`: forget the row, then delete the staged copy, release the lock."""
    try:
        db.remove_file(staging.file.id)
        staging.path.unlink(missing_ok=True)
    finally:
        os.close(staging.fd)


def import_file(
    layout: Layout, db: IndexDB, source: Path, *, progress: Progress | None = None
) -> ImportResult:
    """Verify, stage and publish ``source`` (blocking); see the module docstring."""
    verified = verify_source(source, progress=progress)
    staged = stage(layout, db, verified)
    if isinstance(staged, ImportResult):
        return staged
    return publish(layout, db, staged)
