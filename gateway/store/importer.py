"""``gateway store add``: import an existing WARC file into the store.

Two steps:

1. :func:`prepare_import` (any thread, no index access): verify the source
   with :func:`~gateway.store.verify.verify_file` (whole records, warcio
   digests; any problem rejects the file), copy it to
   ``warcs/<name>.importing``, fsync, and check the copy's SHA-256 against
   the source's.
2. :func:`import_warc` (with the writer's exclusive access): rename the copy
   to ``warcs/<name>``, fsync the directory, index every record.

A crash during 1 leaves a ``.importing`` file that recovery deletes; during 2
a file that recovery indexes. The file keeps its own name and format (gzip or
not, WARC/1.0 or 1.1); a different file of the same name is refused.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.store.db import IndexDB
from gateway.store.errors import ImportRejected
from gateway.store.layout import IMPORTING_SUFFIX, OPEN_SUFFIX, Layout, fsync_dir, is_warc_name
from gateway.store.recovery import index_tail
from gateway.store.verify import Progress, verify_file

__all__ = ["ImportPlan", "ImportResult", "import_warc", "prepare_import", "sha256_of"]

_CHUNK: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class ImportPlan:
    """A verified copy waiting at ``copy`` to become ``warcs/<name>``."""

    source: Path
    name: str
    copy: Path
    sha256: str


@dataclass(frozen=True, slots=True)
class ImportResult:
    """``name`` under ``warcs/``; ``records`` indexed; ``already_present`` when identical."""

    name: str
    records: int
    already_present: bool = False


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of the file at ``path`` (blocking)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def prepare_import(
    layout: Layout,
    source: Path,
    *,
    progress: Progress | None = None,
    copy_to: Path | None = None,
) -> ImportPlan:
    """Verify ``source`` and copy it next to its final place (blocking).

    The copy goes to ``copy_to`` (default ``warcs/<name>.importing``; the
    online import stages it outside ``warcs/``). ``progress(n)`` is called
    as bytes are verified and copied (an exception it raises stops the work
    and removes the copy). Raises :class:`ImportRejected` when the name is
    not a WARC name, the file has any framing or digest problem, or the copy
    differs from the source.
    """
    name = source.name
    if not is_warc_name(name):
        raise ImportRejected(str(source), ["expected a .warc or .warc.gz file name"])
    try:
        verdict = verify_file(source, progress=progress)
    except OSError as exc:
        raise ImportRejected(str(source), [f"cannot read: {exc}"]) from exc
    problems = [f"offset {off}: {why}" for off, why in sorted(verdict.bad_records.items())]
    if verdict.framing_error:
        problems.insert(0, verdict.framing_error)
    if not verdict.records:
        problems.append("no WARC records")
    elif verdict.records[0].rec_type not in (
        "warcinfo",
        "response",
        "request",
        "resource",
        "revisit",
        "metadata",
        "conversion",
        "continuation",
    ):
        problems.append(f"not a WARC file (first record type {verdict.records[0].rec_type!r})")
    if problems:
        raise ImportRejected(str(source), problems)

    layout.create()
    copy = copy_to or layout.warcs / (name + IMPORTING_SUFFIX)
    digest = hashlib.sha256()
    advance = progress or (lambda n: None)
    try:
        with source.open("rb") as src, copy.open("wb") as dst:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                dst.write(chunk)
                advance(len(chunk))
            dst.flush()
            os.fsync(dst.fileno())
        if sha256_of(copy) != digest.hexdigest():
            raise ImportRejected(str(source), ["the copy differs from the source (disk error?)"])
    except BaseException:
        copy.unlink(missing_ok=True)
        raise
    return ImportPlan(source=source, name=name, copy=copy, sha256=digest.hexdigest())


def import_warc(layout: Layout, db: IndexDB, plan: ImportPlan) -> ImportResult:
    """Move the verified copy into ``warcs/`` and index it (needs exclusive access)."""
    target = layout.warcs / plan.name
    existing = db.file_by_name(plan.name)
    if (
        existing is not None
        or target.exists()
        or (layout.warcs / (plan.name + OPEN_SUFFIX)).exists()
    ):
        same = target.exists() and sha256_of(target) == plan.sha256
        plan.copy.unlink(missing_ok=True)
        if same:
            return ImportResult(name=plan.name, records=0, already_present=True)
        raise ImportRejected(
            str(plan.source),
            [f"a different file named {plan.name} is already in the store; rename it to import it"],
        )
    os.rename(plan.copy, target)
    fsync_dir(layout.warcs)
    file = db.add_file(plan.name, is_open=False, origin="imported")
    records, problem = index_tail(db, file, target, truncate=False)
    if problem:  # verified before the copy; only a disk error gets here
        raise ImportRejected(str(plan.source), [f"the stored copy is damaged: {problem}"])
    return ImportResult(name=plan.name, records=records)
