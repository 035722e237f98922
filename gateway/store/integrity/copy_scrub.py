"""The scrub's second half: a file's copies read back and checked against its SHA-256
(issue 13 §4).

The scrub actor type (:class:`gateway.store.integrity.scrub.ScrubActor`, one ``scrub``
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
into time-boxed ticks goes on where it stopped; a copy itself is read
until the tick's deadline and its SHA-256 so far kept in the actor's memory
(:class:`PartialDigest`), so that the next tick of the same file, which the
same actor normally takes at once, reads on from there (another actor, or
one that restarted, reads it from the start). A copy is never changed but
by its own row: a scrub only reads objects.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.storage.base import Storage, hash_chunk
from gateway.storage.errors import ObjectNotFound, StorageError
from gateway.store.replication.copy_status import (
    read_file_copies,
    write_copy_status,
    write_copy_verified,
)
from gateway.store.replication.replicas import Replicas

__all__ = ["PartialDigest", "ScrubReport", "verify_copies_of"]

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


@dataclass(slots=True)
class PartialDigest:
    """A copy of ``size`` bytes read back up to ``offset``, and the SHA-256 so far."""

    size: int
    offset: int = 0
    digest: Any = field(default_factory=hashlib.sha256)


#: Copies being read back, by (file name, place): what one scrub actor keeps between ticks.
PartialDigests = dict[tuple[str, str], PartialDigest]


async def verify_copies_of(
    replicas: Replicas,
    name: str,
    sha256: str,
    *,
    since: float,
    deadline: float,
    report: ScrubReport,
    partials: PartialDigests,
    progress: Callable[[int], object] | None = None,
) -> bool:
    """Verify the ``present`` copies of file ``name`` not verified since ``since``
    (Unix seconds), places in config order, the primary first.

    Stops once ``deadline`` (``time.monotonic()``) has passed, having read
    at least one chunk: in the middle of a copy, its digest so far is kept
    in ``partials`` for the next call. Returns False when copies are left,
    True when every copy was verified (or skipped: its storage is down).
    ``progress(n)`` is called with the bytes of each chunk read. Raises only
    on index failures (:class:`sqlite3.Error`) and cancellation.
    """
    files = await replicas.index.call(read_file_copies, replicas.places, names=[name])
    if not files:
        return True
    file, cutoff, first = files[0], replicas.cutoff(), True
    replicas.rows[name] = file
    for place in replicas.places:
        if place in report.down or file.status(place, cutoff) != "present":
            continue
        row = file.copies.get(place)
        if row is not None and row.verified_at is not None and row.verified_at >= since:
            continue
        if not first and time.monotonic() >= deadline:
            return False
        first = False
        done = await _verify(replicas, name, sha256, place, report, progress, deadline, partials)
        if not done:
            return False
    return True


async def _read_on(
    storage: Storage,
    name: str,
    partial: PartialDigest,
    deadline: float,
    progress: Callable[[int], object] | None,
) -> bool:
    """Hash the copy on from ``partial.offset``; True at its end, False at ``deadline``
    (after one chunk at least)."""
    stream = storage.get_range(name, partial.offset)
    try:
        async for chunk in stream:
            await hash_chunk(partial.digest, chunk)
            partial.offset += len(chunk)
            if progress is not None:
                progress(len(chunk))
            if partial.offset < partial.size and time.monotonic() >= deadline:
                return False
    finally:
        await stream.aclose()
    return True


async def _verify(
    replicas: Replicas,
    name: str,
    sha256: str,
    place: str,
    report: ScrubReport,
    progress: Callable[[int], object] | None,
    deadline: float,
    partials: PartialDigests,
) -> bool:
    """Verify one copy, or read on in it until ``deadline``: True when its verdict is in."""
    now = time.time
    key = (name, place)
    try:
        storage = await replicas.storage(place)
        info = await storage.stat(name)
        partial = partials.get(key)
        if partial is None or partial.size != info.size:
            partial = partials[key] = PartialDigest(info.size)
        if not await _read_on(storage, name, partial, deadline, progress):
            return False
        partials.pop(key, None)
        found = partial.digest.hexdigest()
    except ObjectNotFound:
        partials.pop(key, None)
        detail = f"scrub: no object under the name on {place}"
        report.missing.append((name, place, detail))
        logger.warning("scrub: %s is missing on %s", name, place)
        await replicas.index.call(
            write_copy_status, name, place, sha256, "missing", mtime=now(), detail=detail
        )
        return True
    except StorageError as exc:
        partials.pop(key, None)
        report.down[place] = str(exc)
        logger.warning("scrub: %s cannot be read (%s); skipping it in this pass", place, exc)
        return True
    report.verified += 1
    report.bytes += info.size
    if found == sha256 and partial.offset == info.size:
        await replicas.index.call(write_copy_verified, name, place, sha256, verified_at=now())
        return True
    detail = f"scrub: read back as sha256 {found} ({partial.offset} bytes), not {sha256}"
    report.corrupted.append((name, place, detail))
    logger.warning("scrub: the copy of %s on %s is corrupted: %s", name, place, detail)
    await replicas.index.call(
        write_copy_status, name, place, sha256, "corrupted", mtime=now(), detail=detail
    )
    return True
