"""Scrub: closed WARC files verified again, a time-boxed tick at a time, forever.

Every closed WARC file of the store has one ``scrub`` object (made when the
writer closes the file, when an import indexes it, and at each orchestrator
start for files that have none). A pass over a file verifies what ``store
check`` verifies: every record is whole (its gzip member complete, CRC and
length trailer included), its ``WARC-Block-Digest`` and
``WARC-Payload-Digest`` hold (warcio), and the index entries of the file
point at exactly its records. A pass is cut into ticks of at most about half
of ``scrub_max_tick_s`` each, ending at a record boundary; the offset
reached is kept (``resume_offset``), so a store of any size is covered at a
steady pace, as ``borg check --max-duration`` and git-annex's incremental
fsck do. The queue takes the objects whose ``retry_at`` has passed oldest
first: files least recently verified first.

::

    verifying --(a chunk verified, more to go)--> verifying
    verifying --> good       the pass found nothing; due again in scrub_interval_days
    verifying --> damaged    problems (kind, record offset, message); due again daily
    good, damaged --> verifying   the next pass starts
    any --> missing          the file left the index (repaired into a new file)

Each file keeps ``verified_at``, its last result and its problems; a
damaged file is logged at WARNING with the record and offset, and ``store
repair`` mends it (the salvaged file gets an object of its own).

**Migration on write** (issue 14 §3). Before a pass that found nothing
records its result, a file the store owns under an older layout is moved
to the current one (:func:`gateway.store.migration.layout_steps.ensure_current`: copy,
fsync, verify, commit, remove), within what is left of the tick
(:attr:`ScrubActor.move_share` of its limit, from the tick's start). A move
that does not fit stops at a chunk boundary and keeps its partial copy;
the result is recorded with the file where it is ("stays in layout N for
now") and the transition wakes the migrator (its ``migrate`` object made
due, the only side effect), which goes on from the partial copy. A
damaged file does not move: ``store repair`` comes first.

**Copies** (issue 13 §4). When the store has its settings (``gateway serve``,
``gateway worker``, ``gateway store scrub``), the same pass then verifies
every ``present`` copy of the file, the primary's bytes included, against
the file's SHA-256 (:func:`gateway.store.integrity.copy_scrub.verify_copies_of`), in
the same time-boxed ticks (the copies verified since the pass began are
not read again, and a copy read to the tick's deadline is read on from
there by the actor's next tick of the file). A damaged or
missing copy becomes ``corrupted`` or ``missing`` in the copy status and
the replication director makes a new one from a good copy, or restores a
damaged primary from a replica; the pass's result names them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import IO, Any, ClassVar, Final

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from gateway.jobs.actors import JobContext, Wake, WorkCancelled, in_thread
from gateway.jobs.db import JobObject, format_time, parse_time, utcnow
from gateway.jobs.model import Transition
from gateway.jobs.settings import JobsSettings
from gateway.store.db import IndexDB
from gateway.store.framing import Frame, FramingError, file_format, scan_frames
from gateway.store.indexing import RangeReader
from gateway.store.integrity.check import Problem, compare_rows, verify_problems
from gateway.store.integrity.copy_scrub import PartialDigests, ScrubReport, verify_copies_of
from gateway.store.job_rows import ScrubColumns, ScrubProblem
from gateway.store.layout import Layout
from gateway.store.migration.actor import MIGRATE, read_migrate_object_id
from gateway.store.migration.layout_steps import Mover, MoveResult, ensure_current, needs_move
from gateway.store.object_types import (
    SCRUB,
    SCRUB_DAMAGED_TO_MISSING,
    SCRUB_DAMAGED_TO_VERIFYING,
    SCRUB_GOOD_TO_MISSING,
    SCRUB_GOOD_TO_VERIFYING,
    SCRUB_VERIFYING_TO_DAMAGED,
    SCRUB_VERIFYING_TO_GOOD,
    SCRUB_VERIFYING_TO_MISSING,
    SCRUB_VERIFYING_TO_VERIFYING,
)
from gateway.store.replication.replicas import Replicas
from gateway.store.rows import FileRow
from gateway.store.store_actor import StoreActorType
from gateway.store.verify import FileVerdict, drain, record_info

__all__ = [
    "SCRUB",
    "Chunk",
    "ScrubActor",
    "verify_chunk",
    "write_scrub_backfill",
    "write_scrub_due",
]

logger = logging.getLogger(__name__)


#: Problems kept per pass (a file damaged early has an entry per later index row).
MAX_PROBLEMS: Final = 100
#: A damaged file is verified again at least this often (a repair may have mended it).
DAMAGED_RECHECK_S: Final = 86_400.0
#: The share of the tick limit spent verifying; the rest is for the index rows and the write.
_BUDGET_SHARE: Final = 0.5


# ------------------------------------------------------------------------ writes
def write_scrub_backfill(conn: sqlite3.Connection, now: datetime) -> int:
    """A scrub object, due now, for every closed file that has none; returns how many.

    One statement over the store's ``files`` table (nothing when it does not
    exist yet).
    """
    (has_files,) = conn.execute(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'files'"
    ).fetchone()
    if not has_files:
        return 0
    stamp = format_time(now)
    cursor = conn.execute(
        f"INSERT OR IGNORE INTO {SCRUB.table} (status, retry_at, created_at, updated_at,"
        " file_name) SELECT ?, ?, ?, ?, name FROM files WHERE state = 'closed'",
        (SCRUB.initial, stamp, stamp, stamp),
    )
    return cursor.rowcount


def write_scrub_due(conn: sqlite3.Connection, now: datetime) -> int:
    """Every scrub object at rest (``good`` or ``damaged``, not leased) due now, in the
    order of its last verification; returns how many moved.

    ``gateway store scrub`` asks for a pass over every file, least recently
    verified first: each object's ``retry_at`` becomes its ``verified_at``
    (or ``created_at``), which the queue takes oldest first. One statement;
    it only moves ``retry_at`` earlier (a wake, as :func:`gateway.jobs.db.write_wake`).
    """
    stamp = format_time(now)
    cursor = conn.execute(
        f"UPDATE {SCRUB.table} SET retry_at = COALESCE(verified_at, created_at)"
        " WHERE status IN ('good', 'damaged') AND lease_owner IS NULL AND retry_at > ?"
        " AND COALESCE(verified_at, created_at) <= ?",
        (stamp, stamp),
    )
    return cursor.rowcount


# ---------------------------------------------------------------- verification
@dataclass(frozen=True, slots=True)
class Chunk:
    """What one tick verified: up to ``next_offset``; ``done`` at the end of the file."""

    next_offset: int
    done: bool
    records: int
    problems: list[Problem]


def _check_record(fh: IO[bytes], frame: Frame, verdict: FileVerdict) -> None:
    try:
        iterator = ArchiveIterator(
            RangeReader(fh, frame.offset, frame.end), check_digests=True, arc2warc=True
        )
        record = next(iter(iterator))
        drain(record.raw_stream)
    except (ArchiveLoadFailed, StopIteration) as exc:
        verdict.bad_records[frame.offset] = f"warcio cannot read the record: {exc}".strip()
        return
    verdict.records.append(record_info(record, frame.offset, frame.length, arc=verdict.arc))
    checker = record.digest_checker
    if checker.passed is False:
        verdict.bad_records[frame.offset] = "; ".join(str(p) for p in checker.problems)


def _open_placed(layout: Layout, file: FileRow) -> IO[bytes] | None:
    """``file`` opened at its row's place, or at another layout's while it moves; else None."""
    for path in layout.candidates(file):
        try:
            return path.open("rb")
        except FileNotFoundError:
            continue
    return None


def verify_chunk(
    layout: Layout,
    index: IndexDB,
    file: FileRow,
    start: int,
    budget_s: float,
    cancel: threading.Event,
) -> Chunk:
    """Verify ``file`` from the record at ``start`` for about ``budget_s`` (blocking).

    Stops after the record during which the budget ran out; raises
    :class:`WorkCancelled` when ``cancel`` is set. The index entries of the
    range verified are compared with its records.
    """
    fh = _open_placed(layout, file)
    if fh is None:
        missing = Problem("missing_file", file.name, "the file is missing from warcs/")
        return Chunk(0, True, 0, [missing])
    with fh:
        size = os.fstat(fh.fileno()).st_size
        verdict = FileVerdict(size=size, good_end=start, arc=size > 0 and file_format(fh)[1])
        stop_at = time.monotonic() + budget_s
        offset = start
        try:
            for frame in scan_frames(fh, start):
                _check_record(fh, frame, verdict)
                offset = verdict.good_end = frame.end
                if cancel.is_set():
                    raise WorkCancelled(f"verifying warcs/{file.name} was cancelled")
                if time.monotonic() >= stop_at:
                    break
        except FramingError as exc:
            verdict.framing_error = str(exc)
            offset = size
        done = offset >= size
        problems = verify_problems(file.name, False, verdict)
        rows = index.rows_of_file(file.id, start, None if done else offset)
        compare_rows(file, rows, verdict, index, problems)
    return Chunk(offset, done, len(verdict.records), problems)


def _merge(known: tuple[ScrubProblem, ...], new: Iterable[Problem]) -> tuple[ScrubProblem, ...]:
    merged = list(known)
    seen = set(merged)
    for problem in new:
        found = ScrubProblem(problem.kind, problem.offset, problem.message)
        if found not in seen and len(merged) < MAX_PROBLEMS:
            seen.add(found)
            merged.append(found)
    return tuple(merged)


def _summary(file_name: str, records: int, problems: tuple[ScrubProblem, ...]) -> str:
    if not problems:
        return f"ok: {records} records"
    shown = "; ".join(
        f"offset {p.offset}: {p.message} [{p.kind}]"
        if p.offset is not None
        else f"{p.message} [{p.kind}]"
        for p in problems[:3]
    )
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return f"{len(problems)} problem(s) in warcs/{file_name}: {shown}{more}"


# --------------------------------------------------------------------- the actor
class ScrubActor(StoreActorType):
    """Verifies closed WARC files a time-boxed chunk at a time (see the module docstring)."""

    name = "scrub"
    object_type = SCRUB
    queue_states = ("verifying", "good", "damaged")
    max_concurrent = 1
    max_tick_s = 10.0
    backoff_base_s = 10.0
    backoff_max_s = 3600.0

    #: A move on write stops this far into the tick (a share of its limit, from
    #: its start); the rest is for the write.
    move_share: ClassVar[float] = 0.8

    _replicas: Replicas | None = None
    #: A writing connection for moves on write, opened at the first (the scrub
    #: itself only reads).
    _writer: IndexDB | None = None
    #: ``gateway store scrub``: what the pass found, gathered over every tick of
    #: this actor (the orchestrator's actors keep none), and its progress bar.
    copy_report: ScrubReport | None = None
    progress: Callable[[int], object] | None = None

    async def on_startup(self) -> None:
        await super().on_startup()
        self._partials: PartialDigests = {}
        if self.store.settings is not None:
            self._replicas = Replicas(self.store.settings, self.layout)

    async def on_shutdown(self) -> None:
        try:
            await super().on_shutdown()
        finally:
            if self._writer is not None:
                writer, self._writer = self._writer, None
                await asyncio.to_thread(writer.close)
            if self._replicas is not None:
                replicas, self._replicas = self._replicas, None
                await replicas.close()

    @property
    def interval_s(self) -> float:
        """How long after a pass the next one is due (``scrub_interval_days``)."""
        return self.ctx.settings.scrub_interval_days * 86_400.0

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return settings.scrub_max_concurrent, settings.scrub_max_tick_s

    @classmethod
    async def seed(cls, ctx: JobContext[Any]) -> None:
        """Scrub objects for closed files that have none (closed by recovery, or before)."""
        added = await ctx.db.call(write_scrub_backfill, utcnow())
        if added:
            logger.info("scrub: %d file(s) to verify were not yet scheduled", added)

    async def tick(self, obj: JobObject[ScrubColumns]) -> None:
        file = await asyncio.to_thread(self.index.file_by_name, obj.row.file_name)
        if obj.status == "good":
            if file is None:
                await self.transition(obj, SCRUB_GOOD_TO_MISSING, retry_at=None)
            else:
                await self._next_pass(obj, SCRUB_GOOD_TO_VERIFYING)
        elif obj.status == "damaged":
            if file is None:
                await self.transition(obj, SCRUB_DAMAGED_TO_MISSING, retry_at=None)
            else:
                await self._next_pass(obj, SCRUB_DAMAGED_TO_VERIFYING)
        elif file is None:
            await self.transition(obj, SCRUB_VERIFYING_TO_MISSING, retry_at=None)
        else:
            await self._verify(obj, file)

    async def _next_pass(self, obj: JobObject[ScrubColumns], transition: Transition) -> None:
        """A pass starts, due now."""
        values = replace(
            obj.row,
            resume_offset=0,
            pass_records=0,
            pass_problems=(),
            pass_started_at=format_time(utcnow()),
        )
        await self.transition(obj, transition, retry_at=utcnow(), values=values)

    async def _verify(self, obj: JobObject[ScrubColumns], file: FileRow) -> None:
        started_at, started = utcnow(), time.monotonic()
        row = obj.row
        pass_started = row.pass_started_at or format_time(started_at)
        start = row.resume_offset
        budget = self.tick_limit_s * _BUDGET_SHARE
        chunk = await in_thread(
            lambda cancel: verify_chunk(self.layout, self.index, file, start, budget, cancel)
        )
        problems = _merge(row.pass_problems, chunk.problems)
        records = row.pass_records + chunk.records
        report = self.copy_report if self.copy_report is not None else ScrubReport()
        if chunk.done and self._replicas is not None and file.sha256 is not None:
            found = len(report.corrupted), len(report.missing), len(report.down)
            copies_done = await verify_copies_of(
                self._replicas,
                file.name,
                file.sha256,
                since=parse_time(pass_started).timestamp(),
                deadline=started + budget,
                report=report,
                partials=self._partials,
                progress=self.progress,
            )
            copy_notes = _copy_notes(report, found)
        else:
            copies_done, copy_notes = True, ""
        if not (chunk.done and copies_done):
            values = replace(
                row,
                resume_offset=chunk.next_offset,
                pass_records=records,
                pass_problems=problems,
                pass_started_at=pass_started,
            )
            await self.transition(
                obj, SCRUB_VERIFYING_TO_VERIFYING, retry_at=utcnow(), values=values
            )
            return
        result = _summary(file.name, records, problems) + copy_notes
        wake: tuple[Wake, ...] = ()
        if not problems and needs_move(self.layout, file) and file.sha256 is not None:
            note, wake = await self._to_current_layout(
                file, started + self.tick_limit_s * self.move_share
            )
            result += note
        # The pass is over: its outcome kept, the next pass starts from the beginning.
        values = replace(
            row,
            resume_offset=0,
            pass_records=0,
            pass_problems=(),
            pass_started_at=None,
            verified_at=format_time(utcnow()),
            records=records,
            problems=problems,
            result=result,
            passes=row.passes + 1,
        )
        if problems:
            logger.warning(
                "scrub: warcs/%s is damaged: %s; `gateway store repair` restores it from a "
                "verified copy (or salvages it when no copy holds it)",
                file.name,
                result,
                extra={"job_type": "scrub", "job_id": obj.id, "file": file.name},
            )
            if self.copy_report is not None:
                self.copy_report.damaged.append((file.name, result))
            retry_at = self.due_in(min(self.interval_s, DAMAGED_RECHECK_S))
            await self.transition(obj, SCRUB_VERIFYING_TO_DAMAGED, retry_at=retry_at, values=values)
        else:
            logger.debug("scrub: warcs/%s %s", file.name, result)
            await self.transition(
                obj,
                SCRUB_VERIFYING_TO_GOOD,
                retry_at=self.due_in(self.interval_s),
                values=values,
                wake=wake,
            )

    async def _to_current_layout(
        self, file: FileRow, stop_at: float
    ) -> tuple[str, tuple[Wake, ...]]:
        """Move ``file`` to the current layout before its result is recorded, until ``stop_at``.

        ``stop_at``: ``time.monotonic()`` at which the move stops (it keeps
        its partial copy). Returns a note for the result and what the
        transition wakes: nothing when the file moved (or was merged, or
        someone else moved it), else the migrator's object, which moves it
        later. Raises only on index failures.
        """
        layout = self.layout

        def move(cancel: threading.Event) -> MoveResult:
            if self._writer is None:
                self._writer = IndexDB(layout.db_path, synchronous="FULL")
            writer = self._writer

            def stop() -> bool:
                return cancel.is_set() or time.monotonic() >= stop_at

            fresh = writer.file_by_id(file.id)
            if fresh is None or fresh.fs_version != file.fs_version:
                return MoveResult(fresh or file, "skipped")
            return ensure_current(layout, writer, fresh, mover=Mover(layout, writer, stop=stop))

        result = await in_thread(move)
        if result.outcome in ("moved", "merged", "skipped", "current"):
            if result.outcome == "moved":
                logger.info(
                    "scrub: %s verified and moved to layout %d",
                    file.name,
                    result.file.fs_version,
                )
                return f"; moved to layout {result.file.fs_version}", ()
            return "", ()
        migrate_id = await self.ctx.db.call(read_migrate_object_id, layout.current)
        wake: tuple[Wake, ...] = () if migrate_id is None else ((MIGRATE, (migrate_id,)),)
        return f"; stays in layout {file.fs_version} for now ({result.outcome})", wake


def _copy_notes(report: ScrubReport, before: tuple[int, int, int]) -> str:
    """What the verification of one file's copies found: the report past the counts ``before``."""
    damaged = [f"{place} corrupted" for _, place, _ in report.corrupted[before[0] :]]
    damaged += [f"{place} missing" for _, place, _ in report.missing[before[1] :]]
    down = list(report.down)[before[2] :]
    notes = [f"copies: {', '.join(damaged)} (replication makes new ones)"] if damaged else []
    notes += [f"not verified on {', '.join(down)} (down)"] if down else []
    return "".join(f"; {note}" for note in notes)
