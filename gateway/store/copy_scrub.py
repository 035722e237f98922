"""The scrub's second half: a file's copies read back and checked against its SHA-256
(issue 13 §4).

The scrub actor type (:class:`gateway.store.scrub.ScrubActor`, one ``scrub``
object per closed file, least recently verified first) verifies a file's
records at the primary, then, in the same pass, every ``present`` copy of the
file on every place (the primary's bytes included) with
:func:`verify_copies_of`: each read back whole (the primary from disk, a
replica through its storage: range reads on S3), as ``borg check
--max-duration`` and git-annex's incremental fsck do:

- the bytes have the file's SHA-256: ``verified_at`` is set;
- they do not: the copy becomes ``corrupted`` (it stays ``archived``: the
  next replication pass replaces it with a good copy, or restores the
  primary from a replica), and the pass reports it;
- the object is gone: the copy becomes ``missing`` (the next pass copies it
  again, or restores the primary);
- the storage cannot be reached: it is reported as down and skipped for the
  rest of the pass; nothing about its copies changes.

Copies verified since the pass began are not read again, so a pass cut
into time-boxed ticks goes on where it stopped. A copy is never changed but
by its own row: a scrub only reads objects.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.storage.errors import ObjectNotFound, StorageError
from gateway.store.copies import read_file_copies, write_copy_status, write_copy_verified
from gateway.store.replicas import Replicas

__all__ = ["ScrubReport", "verify_copies_of"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class ScrubReport:
    """What verification found: copies verified (and their bytes), problems, storages down.

    ``corrupted`` and ``missing`` are ``(file, place, detail)``; ``damaged``
    is ``(file, result)`` for files whose records failed at the primary;
    ``complete`` is False when a time limit stopped the run with files
    left to verify.
    """

    verified: int = 0
    bytes: int = 0
    corrupted: list[tuple[str, str, str]] = field(default_factory=list)
    missing: list[tuple[str, str, str]] = field(default_factory=list)
    down: dict[str, str] = field(default_factory=dict)
    damaged: list[tuple[str, str]] = field(default_factory=list)
    complete: bool = True

    @property
    def ok(self) -> bool:
        return not (self.corrupted or self.missing or self.down or self.damaged)


async def verify_copies_of(
    replicas: Replicas,
    name: str,
    sha256: str,
    fs_version: int,
    *,
    since: float,
    deadline: float,
    report: ScrubReport,
    progress: Callable[[int], object] | None = None,
) -> bool:
    """Verify the ``present`` copies of file ``name`` not verified since ``since``
    (Unix seconds), places in config order, the primary first.

    Stops before a copy once ``deadline`` (``time.monotonic()``) has passed,
    having verified at least one: returns False when copies are left,
    True when every copy was verified (or skipped: its storage is down).
    ``progress(n)`` is called with the bytes of each copy read. Raises only
    on index failures (:class:`sqlite3.Error`) and cancellation.
    """
    files = await replicas.index.call(read_file_copies, replicas.places, names=[name])
    if not files:
        return True
    file, cutoff, first = files[0], replicas.cutoff(), True
    replicas.fs_versions[name] = fs_version
    for place in replicas.places:
        if place in report.down or file.status(place, cutoff) != "present":
            continue
        row = file.copies.get(place)
        if row is not None and row.verified_at is not None and row.verified_at >= since:
            continue
        if not first and time.monotonic() >= deadline:
            return False
        first = False
        await _verify(replicas, name, sha256, place, report, progress)
    return True


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
