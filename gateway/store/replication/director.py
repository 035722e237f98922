"""The director, the batches and the copies: every closed WARC file in as many verified
copies as the retention policy asks (issue 13 §3), after the Software Heritage archiver
(whose worker and copier are the batch and copy here).

**Director** (:func:`director_batches`): lists the closed files with fewer
*safe* copies than ``retention.copies`` (``present``, or ``ongoing`` for less
than ``archival_max_age_s``; the primary included) in batches of
``batch_size`` file ids, ascending, each read afresh once the previous one
is done (:func:`gateway.store.replication.copy_status.read_files_needing_copies`).

**Batch** (:func:`plan_batch`, :func:`claim_copy`), for one batch:

1. re-reads each file's copies (another batch may have made them
   meanwhile) and plans what it still needs (:func:`plan_file`): the
   destinations are the places without a safe copy, chosen at random
   (the primary first when the store's own copy of a file it wrote is lost
   or damaged: it is always restored), each with a source chosen at random
   among the places holding a ``present`` copy; a place whose object under
   the name has other bytes that the archiver never wrote is left alone
   (append-only) unless ``replace_conflicts``;
2. groups the copies by (source, destination) pair (:func:`group_by_pair`);
3. claims each copy by marking it ``ongoing`` with the batch's ``mtime``
   (a compare-and-swap on the row it read: a copy another batch claimed is
   skipped), and hands each group to a copy (as jobs: a
   ``replication_copy`` object per group, :mod:`gateway.store.replication.batch`).

**Copy** (:func:`claim_and_copy`), for each file of its group in turn:

4. checks that the claim is still its own (the same compare-and-swap;
   a retry renews it) and copies the file through the storage copier
   (:func:`gateway.storage.copier.copy_file`: the source read once, every
   gzip member inflated and the SHA-256 checked on the way, create-only
   verified puts, transient failures retried with backoff and jitter), or
   through :func:`gateway.store.replication.primary.restore_primary` for the primary;
5. records each outcome: a verified copy becomes ``present`` with the
   batch's ``mtime``; an object of other bytes found at the destination
   ``corrupted`` (reported, left as it is); a source whose bytes turn out
   wrong (SHA-256, a gzip member) ``corrupted`` there, a source that lost the
   file ``missing`` (the destination's claim is given back, and a later
   pass copies from another source); a copy that failed otherwise stays
   ``ongoing`` with the reason, and counts as present until
   ``archival_max_age_s`` has passed, when the director lists the file again
   (the blueprint's way of retrying, also what an actor killed mid-copy
   leaves behind).

A file that cannot be made safe in a pass (no good copy left, too few places
that can take one, a failing storage) is reported with the reason
(:class:`ReplicationReport`); the command exits non-zero.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Final

from gateway.storage.copier import CopyOutcome, CopyResult, RetryPolicy, copy_file
from gateway.storage.errors import ObjectNotFound, StorageError
from gateway.storage.integrity import check_for
from gateway.storage.settings import PRIMARY
from gateway.store.db import IndexDB
from gateway.store.migration.layout_steps import ensure_current
from gateway.store.object_types import write_scrub_recheck
from gateway.store.recovery import file_sha256
from gateway.store.replication.copy_status import (
    CopyRow,
    CopyStatus,
    FileCopies,
    claim_holder,
    holder_is_gone,
    read_claim_holders,
    read_file_copies,
    read_files_needing_copies,
    write_copy_claim,
    write_copy_present,
    write_copy_release,
    write_copy_status,
    write_copy_verified,
    write_release_claims,
)
from gateway.store.replication.primary import restore_primary
from gateway.store.replication.replicas import Replicas
from gateway.store.rows import OWNED_ORIGINS, FileRow
from gateway.store.verify import verify_file

__all__ = [
    "COPIED",
    "DEFAULT_RETRY",
    "CopyPlan",
    "FilePlan",
    "Progress",
    "ReplicationReport",
    "adopt_sha256",
    "claim_and_copy",
    "claim_copy",
    "director_batches",
    "group_by_pair",
    "plan_batch",
    "plan_file",
    "release_orphan_claims",
    "release_own_claims",
]

logger = logging.getLogger(__name__)

#: The copier's retries of transient failures (4 attempts, backoff with full jitter).
DEFAULT_RETRY: Final = RetryPolicy()
#: Outcomes after which the destination holds a verified copy.
COPIED: Final = frozenset({"copied", "already_present", "replaced"})


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """One copy to make: ``file`` from ``source`` to ``destination``.

    ``seen`` is the destination's row as the batch read it (None: no row),
    the claim's compare-and-swap; ``replace``: the destination holds an
    object under the name that may be replaced (a copy the archiver made
    that was found damaged, or ``replace_conflicts``).
    """

    file: FileCopies
    source: str
    destination: str
    seen: CopyRow | None
    replace: bool = False


@dataclass(slots=True)
class FilePlan:
    """What one file needs: its copies to make, or why it cannot be made safe."""

    file: FileCopies
    copies: list[CopyPlan] = field(default_factory=list)
    problem: str | None = None


def plan_file(
    file: FileCopies,
    places: Sequence[str],
    wanted: int,
    cutoff: float,
    rng: random.Random,
    *,
    replace_conflicts: bool = False,
) -> FilePlan:
    """Plan the copies ``file`` needs to have ``wanted`` safe ones among ``places``
    (see the module docstring, step 1); an empty plan when it has them."""
    plan = FilePlan(file)
    if file.sha256 is None:
        plan.problem = (
            "no SHA-256 recorded (a file of an older release) and it failed its verification "
            "or could not be read: run `gateway store check`"
        )
        return plan
    status = {place: file.status(place, cutoff) for place in places}
    safe = [p for p in places if status[p] in ("present", "ongoing")]
    sources = [p for p in places if status[p] == "present"]
    need = wanted - len(safe)
    destinations: list[str] = []
    notes: list[str] = []
    if status[PRIMARY] in ("missing", "corrupted"):
        if file.origin in OWNED_ORIGINS:
            destinations.append(PRIMARY)  # always restored, whatever the count
        else:
            notes.append(
                f"its primary copy is {status[PRIMARY]}, and the store did not write this file "
                "(origin found): it never rewrites it; restore it by hand"
            )
    candidates: list[str] = []
    for place in places:
        if place == PRIMARY or status[place] in ("present", "ongoing"):
            continue
        row = file.copies.get(place)
        conflict = status[place] == "corrupted" and row is not None and not row.archived
        if conflict and not replace_conflicts:
            detail = row.detail if row is not None else ""
            notes.append(
                f"{place} holds another object under the name ({detail}); it is left "
                "as it is: `gateway store repair --replace-copies` replaces it"
            )
            continue
        candidates.append(place)
    rng.shuffle(candidates)
    destinations += candidates[: max(0, need - len(destinations))]
    if not destinations:
        if need > 0:
            plan.problem = f"{len(safe)} of {wanted} copies, and no place can take another: " + (
                "; ".join(notes) or "every place holds a copy or is taking one"
            )
        return plan
    if not sources:
        described = ", ".join(f"{place} {status[place]}" for place in places)
        plan.problem = f"no good copy left to copy from ({described})"
        return plan
    for destination in destinations:
        row = file.copies.get(destination)
        replace = row is not None and row.status == "corrupted"
        plan.copies.append(CopyPlan(file, rng.choice(sources), destination, row, replace=replace))
    if len(safe) + len(destinations) < wanted:
        plan.problem = (
            f"at most {len(safe) + len(destinations)} of {wanted} copies can be made: "
            + ("; ".join(notes) or "too few places")
        )
    return plan


@dataclass(slots=True)
class ReplicationReport:
    """What a pass did: copies by outcome, bytes copied, files that are not safe and why.

    ``unsafe`` maps a file name to the reasons it was not made safe in this
    pass; ``retry`` holds the copies that failed transiently (their claim
    stays ``ongoing``), for a caller that tries them again itself (a copy
    object's next round). ``outcomes`` counts copies by
    :data:`~gateway.storage.copier.CopyOutcome`, ``claimed_elsewhere``, and
    (in a copy object's counts) ``deferred``: files a copy actor left to its
    next tick, claimed but not started, because its tick's time was up.
    """

    files: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    bytes_copied: int = 0
    unsafe: dict[str, list[str]] = field(default_factory=dict)
    retry: list[tuple[CopyPlan, float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unsafe

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def problem(self, name: str, why: str) -> None:
        self.unsafe.setdefault(name, []).append(why)


async def release_orphan_claims(replicas: Replicas) -> int:
    """Release the claims of holders that are gone (a killed run of this host),
    so that their copies are planned again now, not after ``archival_max_age_s``;
    returns how many were released (each logged)."""
    released = 0
    for holder in await replicas.index.call(read_claim_holders):
        if not holder_is_gone(holder):
            continue
        n = await replicas.index.call(
            write_release_claims,
            holder,
            mtime=time.time(),
            detail=f"released: its holder ({holder}) is gone",
        )
        if n:
            logger.info("replication: %d claim(s) of %s released: it is gone", n, holder)
        released += n
    return released


async def release_own_claims(replicas: Replicas, why: str) -> int:
    """Release every claim this process still holds (its run ends: ``why``); returns
    how many. A claim is never left to count as a copy after its holder stops."""
    return await replicas.index.call(
        write_release_claims, claim_holder(), mtime=time.time(), detail=f"released: {why}"
    )


async def director_batches(replicas: Replicas) -> AsyncIterator[list[int]]:
    """The director: batches of ``batch_size`` ids of files that need copies, ascending.

    Claims of holders that are gone are released first
    (:func:`release_orphan_claims`). Each batch is read when the previous one
    has been handed over (keyset pagination by file id), so files closed
    meanwhile join the pass.
    """
    await release_orphan_claims(replicas)
    policy, after = replicas.policy, 0
    while True:
        ids = await replicas.index.call(
            read_files_needing_copies,
            replicas.places,
            policy.copies,
            replicas.cutoff(),
            after_id=after,
            limit=policy.batch_size,
        )
        if not ids:
            return
        yield ids
        after = ids[-1]


Progress = Callable[[int], object]


async def plan_batch(
    replicas: Replicas,
    ids: Sequence[int],
    *,
    replace_conflicts: bool = False,
    rng: random.Random | None = None,
    deadline: float | None = None,
) -> tuple[ReplicationReport, list[CopyPlan]]:
    """A batch's first steps for files ``ids``: their copies read again, files of
    an older release verified (:func:`adopt_sha256`), files moved to the current
    layout while ``deadline`` (``time.monotonic()``) allows, and each file planned
    (:func:`plan_file`). Returns the report so far (files examined, the problems
    of files that cannot be made safe) and the copies to make, in file order.
    Claims nothing; raises only on index failures (:class:`sqlite3.Error`)."""
    rng = rng or random.Random()
    mtime = time.time()
    report = ReplicationReport()
    files = await replicas.index.call(read_file_copies, replicas.places, ids=list(ids))
    report.files = len(files)
    copies: list[CopyPlan] = []
    for found in files:
        replicas.rows[found.name] = found
        file = found if found.sha256 is not None else await adopt_sha256(replicas, found)
        file = await _to_current_layout(replicas, file, deadline)
        plan = plan_file(
            file,
            replicas.places,
            replicas.policy.copies,
            replicas.cutoff(mtime),
            rng,
            replace_conflicts=replace_conflicts,
        )
        if plan.problem is not None:
            report.problem(file.name, plan.problem)
        copies += plan.copies
    return report, copies


def group_by_pair(copies: Sequence[CopyPlan]) -> dict[tuple[str, str], list[CopyPlan]]:
    """``copies`` grouped by (source, destination) pair, each group in the given order."""
    by_pair: dict[tuple[str, str], list[CopyPlan]] = defaultdict(list)
    for copy in copies:
        by_pair[(copy.source, copy.destination)].append(copy)
    return dict(by_pair)


async def claim_copy(replicas: Replicas, copy: CopyPlan, mtime: float) -> bool:
    """Claim ``copy``: its destination ``ongoing`` since ``mtime``, if the row is still
    the one read (``copy.seen``); one compare-and-swap (step 3). Returns whether it won."""
    assert copy.file.sha256 is not None  # planned files have one
    return await replicas.index.call(
        write_copy_claim, copy.file.name, copy.destination, copy.file.sha256, copy.seen, mtime
    )


async def adopt_sha256(replicas: Replicas, file: FileCopies) -> FileCopies:
    """A file of an older release, closed without a SHA-256: verify it at the primary
    as ``store check`` does (every record whole, its digests), and only then record
    the SHA-256 of its bytes, which makes it replicable. Returns the file with its
    SHA-256, or as it was (still None) when it fails its verification or cannot
    be read; the planner then reports it."""

    def adopt() -> str | None:
        path = replicas.primary.path(file.name)
        try:
            verdict = verify_file(path)
            if not verdict.ok:
                logger.warning(
                    "replicate: %s has no SHA-256 and fails its verification (%s); "
                    "it is not replicated: run `gateway store check`",
                    file.name,
                    verdict.framing_error or "; ".join(verdict.bad_records.values()),
                )
                return None
            return file_sha256(path)
        except OSError as exc:
            logger.warning("replicate: %s cannot be read to compute its SHA-256: %s", path, exc)
            return None

    sha256 = await asyncio.to_thread(adopt)
    if sha256 is None:
        return file
    await replicas.index.call_db(lambda db: db.set_sha256(file.id, sha256))
    logger.info("replicate: %s verified; its SHA-256 is now recorded (%s)", file.name, sha256)
    return FileCopies(file.id, file.name, sha256, file.origin, file.fs_version, file.date)


async def _to_current_layout(
    replicas: Replicas, file: FileCopies, deadline: float | None
) -> FileCopies:
    """Move ``file`` to the current layout before its copy status is written (issue 14 §3).

    The on-write path of :func:`gateway.store.migration.layout_steps.ensure_current`, on
    the index thread: a file the store owns under an older layout is moved
    (copy, fsync, verify, commit, remove) and its row returned with the new
    ``fs_version``; replicas keep their names, so no copy changes. Past
    ``deadline`` (``time.monotonic()``), or when the move cannot be made now
    (busy, clash, damage, disk full: logged), the file stays where it is and
    the background migrator moves it later. Raises only on index failures.
    """
    layout = replicas.layout
    if (
        file.fs_version == layout.current
        or file.origin not in OWNED_ORIGINS
        or file.sha256 is None
        or (deadline is not None and time.monotonic() >= deadline)
    ):
        return file

    def move(db: IndexDB) -> FileRow | None:
        row = db.file_by_id(file.id)
        return None if row is None or row.open else ensure_current(layout, db, row).file

    row = await replicas.index.call_db(move)
    if row is None or row.name != file.name or row.fs_version == file.fs_version:
        return file
    moved = replace(file, fs_version=row.fs_version, date=row.date)
    replicas.rows[moved.name] = moved
    return moved


async def claim_and_copy(
    replicas: Replicas,
    copy: CopyPlan,
    mtime: float,
    retry: RetryPolicy,
    report: ReplicationReport,
    progress: Progress | None,
) -> str:
    """Make one copy (steps 3 to 5): claim it since ``mtime`` (a compare-and-swap on
    ``copy.seen``: a copy object passes the claim its batch made, ``ongoing`` since the
    batch's ``mtime``, and keeps it, or renews it for a retry), copy it, record the
    outcome in the copy status and in ``report``. A claim lost to another batch is
    counted ``claimed_elsewhere`` and not copied. Returns the outcome (a
    :data:`~gateway.storage.copier.CopyOutcome` or ``claimed_elsewhere``); raises
    only on index failures."""
    file, destination = copy.file, copy.destination
    sha256 = file.sha256
    assert sha256 is not None  # planned files have one
    if not await claim_copy(replicas, copy, mtime):
        report.count("claimed_elsewhere")
        return "claimed_elsewhere"
    done = await _copy(replicas, copy, sha256, retry)
    report.count(done.outcome)
    now = time.time()
    if done.outcome in COPIED:
        report.bytes_copied += done.size
        if progress is not None:
            progress(done.size)
        await replicas.index.call(
            write_copy_present,
            file.name,
            destination,
            sha256,
            mtime=mtime,
            verified_at=now,
            detail=f"from {copy.source}: {done.verified_by or done.outcome}",
        )
        if destination == PRIMARY and done.outcome == "copied":
            # The primary restored from a verified copy: its scrub is due again now.
            await replicas.index.call(write_scrub_recheck, file.name, datetime.now(UTC))
        if copy.source == PRIMARY and done.outcome in ("copied", "replaced"):
            # Every byte read from the primary hashed to the file's SHA-256 at the
            # destination: the primary was verified now, too.
            await replicas.index.call(
                write_copy_verified, file.name, PRIMARY, sha256, verified_at=now
            )
        return done.outcome
    reason = f"{copy.source} -> {destination}: {done.outcome}: {done.detail}"
    report.problem(file.name, reason)
    source_status: CopyStatus | None = done.source_status
    if done.outcome == "corrupted":
        await replicas.index.call(
            write_copy_status,
            file.name,
            destination,
            sha256,
            "corrupted",
            mtime=now,
            detail=done.detail,
            archived=False,
        )
    elif source_status is not None:
        await replicas.index.call(
            write_copy_status,
            file.name,
            copy.source,
            sha256,
            source_status,
            mtime=now,
            detail=f"found {source_status} while copying to {destination}: {done.detail}",
        )
        back: CopyStatus = "corrupted" if copy.replace else "missing"
        await replicas.index.call(
            write_copy_release, file.name, destination, mtime, back, mtime=now, detail=reason
        )
    elif done.outcome == "retry":
        # A transient failure: the claim stays, under way, for its copy object's next
        # round (released if that run ends first, or its process dies).
        await replicas.index.call(
            write_copy_release, file.name, destination, mtime, "ongoing", mtime=mtime, detail=reason
        )
        report.retry.append((copy, mtime))
    else:
        # A lasting failure (no space, refused): the claim is given back at once, so that
        # no report counts it as under way and the next pass plans the copy again.
        await replicas.index.call(
            write_copy_release, file.name, destination, mtime, "missing", mtime=now, detail=reason
        )
    return done.outcome


async def _copy(replicas: Replicas, copy: CopyPlan, sha256: str, retry: RetryPolicy) -> CopyResult:
    """Run one planned copy; storage failures become the result's outcome."""
    name = copy.file.name
    try:
        source = await replicas.storage(copy.source)
    except StorageError as exc:
        return _failed(copy, sha256, "retry" if exc.retryable else "source_failed", str(exc))
    if copy.destination == PRIMARY:
        return await restore_primary(replicas.layout, copy.file, sha256=sha256, source=source)
    try:
        try:
            size = (await source.stat(name)).size
        except ObjectNotFound:
            if copy.source != PRIMARY or not await _moved_since(replicas, copy.file):
                raise
            size = (await source.stat(name)).size  # at the place its row now gives
    except ObjectNotFound as exc:
        return _failed(copy, sha256, "source_missing", str(exc))
    except StorageError as exc:
        return _failed(copy, sha256, "retry" if exc.retryable else "source_failed", str(exc))
    try:
        destination = await replicas.storage(copy.destination)
    except StorageError as exc:
        return _failed(copy, sha256, "retry" if exc.retryable else "failed", str(exc))
    return await copy_file(
        source,
        destination,
        name,
        size=size,
        sha256=sha256,
        replace=copy.replace,
        retry=retry,
        check=lambda: check_for(source.name, name),
    )


async def _moved_since(replicas: Replicas, file: FileCopies) -> bool:
    """Whether ``file``'s row places it elsewhere now (a layout migration moved it
    since the batch read the row); the primary then reads it at the new place."""
    found = await replicas.index.call(read_file_copies, replicas.places, names=[file.name])
    if not found or (found[0].fs_version, found[0].date) == (file.fs_version, file.date):
        return False
    replicas.rows[file.name] = found[0]
    return True


def _failed(copy: CopyPlan, sha256: str, outcome: CopyOutcome, detail: str) -> CopyResult:
    return CopyResult(
        name=copy.file.name,
        source=copy.source,
        destination=copy.destination,
        outcome=outcome,
        size=0,
        sha256=sha256,
        detail=detail,
    )
