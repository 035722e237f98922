"""Scrub of copies: every copy read back and checked against its file's SHA-256 (issue 13 §4).

A pass takes the copies least recently verified first
(:func:`gateway.store.copies.read_scrub_candidates`: primaries never
verified, then every ``present`` copy by ``verified_at``) and reads each back
whole (the primary from disk, a replica through its storage: range reads on
S3), as ``borg check --max-duration`` and git-annex's incremental fsck do,
so that a store of any size is covered a slice at a time:

- the bytes have the file's SHA-256: ``verified_at`` is set;
- they do not: the copy becomes ``corrupted`` (it stays ``archived``: the
  next replication pass replaces it with a good copy, or restores the
  primary), and the pass reports it;
- the object is gone: the copy becomes ``missing`` (the next pass copies it
  again, or restores the primary);
- the storage cannot be reached: it is reported as down and skipped for the
  rest of the pass; nothing about its copies changes.

``max_duration_s`` bounds the pass: no copy is started once it has passed
(the one being read is finished). A copy is never changed but by its own
row: a scrub only reads objects.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from gateway.storage.errors import ObjectNotFound, StorageError
from gateway.store.copies import (
    FileCopies,
    read_scrub_candidates,
    write_copy_status,
    write_copy_verified,
)
from gateway.store.replicas import Replicas

__all__ = ["ScrubReport", "scrub_copies"]

logger = logging.getLogger(__name__)

#: Copies read from the index at a time.
PAGE: Final = 100


@dataclass(slots=True)
class ScrubReport:
    """What a pass found: copies verified (and their bytes), problems, storages down.

    ``corrupted`` and ``missing`` are ``(file, place, detail)``;
    ``complete`` is False when ``max_duration_s`` stopped the pass with
    copies left to verify.
    """

    verified: int = 0
    bytes: int = 0
    corrupted: list[tuple[str, str, str]] = field(default_factory=list)
    missing: list[tuple[str, str, str]] = field(default_factory=list)
    down: dict[str, str] = field(default_factory=dict)
    complete: bool = True

    @property
    def ok(self) -> bool:
        return not (self.corrupted or self.missing or self.down)


async def scrub_copies(
    replicas: Replicas,
    *,
    max_duration_s: float | None = None,
    progress: Callable[[int], object] | None = None,
) -> ScrubReport:
    """One pass over the copies, least recently verified first (see the module docstring).

    ``progress(n)`` is called with the bytes of each copy read. Raises only
    on index failures (:class:`sqlite3.Error`) and cancellation.
    """
    report = ScrubReport()
    started = time.time()
    deadline = None if max_duration_s is None else time.monotonic() + max_duration_s
    attempted: set[tuple[str, str]] = set()
    while True:
        places = [p for p in replicas.places if p not in report.down]
        page = await replicas.index.call(read_scrub_candidates, places, limit=PAGE)
        fresh = [(f, p) for f, p in page if (f.name, p) not in attempted]
        if not fresh or _verified_since(fresh[0], started):
            return report
        for file, place in fresh:
            if deadline is not None and time.monotonic() >= deadline:
                report.complete = False
                return report
            if place in report.down:
                continue
            attempted.add((file.name, place))
            assert file.sha256 is not None  # candidates have one
            replicas.fs_versions[file.name] = file.fs_version
            await _verify(replicas, file.name, file.sha256, place, report, progress)


def _verified_since(candidate: tuple[FileCopies, str], started: float) -> bool:
    """True when the least recently verified copy left was verified in this pass."""
    file, place = candidate
    row = file.copies.get(place)
    return row is not None and row.verified_at is not None and row.verified_at >= started


async def _verify(
    replicas: Replicas,
    name: str,
    sha256: str,
    place: str,
    report: ScrubReport,
    progress: Callable[[int], object] | None,
) -> None:
    now = time.time
    try:
        storage = await replicas.storage(place)
        info = await storage.stat(name)
        found = await storage.digest(name)
    except ObjectNotFound:
        detail = f"scrub: no object under the name on {place}"
        report.missing.append((name, place, detail))
        logger.warning("scrub: %s is missing on %s", name, place)
        await replicas.index.call(
            write_copy_status, name, place, sha256, "missing", mtime=now(), detail=detail
        )
        return
    except StorageError as exc:
        report.down[place] = str(exc)
        logger.warning("scrub: %s cannot be read (%s); skipping it in this pass", place, exc)
        return
    report.verified += 1
    report.bytes += info.size
    if progress is not None:
        progress(info.size)
    if found == sha256:
        await replicas.index.call(write_copy_verified, name, place, sha256, verified_at=now())
        return
    detail = f"scrub: read back as sha256 {found} ({info.size} bytes), not {sha256}"
    report.corrupted.append((name, place, detail))
    logger.warning("scrub: the copy of %s on %s is corrupted: %s", name, place, detail)
    await replicas.index.call(
        write_copy_status, name, place, sha256, "corrupted", mtime=now(), detail=detail
    )
