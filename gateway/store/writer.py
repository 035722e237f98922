"""The writer task: the single owner of the open WARC file (in the process holding
``writer.lock``, see :mod:`gateway.store.layout`).

Callers put captures on a bounded queue and wait on a future (the *ack*). One
asyncio task takes them off in batches and runs each batch in a worker thread
(:meth:`StoreWriter._write_batch`): for every capture it decides
full/revisit/skip, writes the records, and then makes the batch durable in
one step (fsync under ``fsync: always``, then one index transaction) before
any future is resolved. A caller that is cancelled (a client disconnect)
never cancels this work: the capture is finished or rolled back whole.

Deduplication (WARC 1.1 §6.7.2, ``identical-payload-digest`` profile):

- only committed rows are looked up, and a row is committed only once its
  record is durable, so a dedup entry is visible only after its original is
  durable; a capture whose payload matches one written earlier *in the same
  batch* first makes the batch durable, then looks up again;
- originals are full records (``response``/``resource``) only, so a revisit
  never refers to another revisit;
- a lookup that fails is logged and the full record is written (fail open).

Failure: a capture whose write fails is truncated away and its future gets
:class:`StoreWriteError`; a failed fsync or index commit truncates the whole
uncommitted group. The next capture proceeds normally.

Files are created in the current layout, so closing one never moves it; a
file an older release's writer left open (closed by recovery under its old
layout) moves to the current one once its close is complete
(:func:`~gateway.store.migration.layout_steps.ensure_current`, in a thread of its own,
awaited by :meth:`StoreWriter.close`).

After each commit the file's SHA-256 is extended over the committed bytes
(:meth:`OpenWarc.hash_to <gateway.store.warcfile.OpenWarc.hash_to>`), and the
``.open`` name a close keeps for :data:`LINK_GRACE_S` is removed through the
writer's queue, so its index update uses the writer's connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

from gateway.store.capture import CaptureAck, CaptureInput, Outcome
from gateway.store.db import IndexDB
from gateway.store.errors import StoreClosed, StoreWriteError
from gateway.store.indexing import IndexRow
from gateway.store.layout import Layout
from gateway.store.migration.layout_steps import ensure_current, needs_move
from gateway.store.records import prepare_capture, write_capture
from gateway.store.rows import FileRow, StoredRow
from gateway.store.settings import DedupPolicy, StoreSettings
from gateway.store.warcfile import FaultInjector, OpenWarc, remove_open_link

__all__ = ["StoreWriter", "WriteStats"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: How long the ``.open`` name of a closed file stays linked (a lookup that
#: returned it just before the close can still load the record).
LINK_GRACE_S = 30.0


def _no_fault(point: str) -> None:
    return None


@dataclass(slots=True)
class _Job:
    capture: CaptureInput
    policy: DedupPolicy
    warc_date: str
    future: asyncio.Future[CaptureAck]


@dataclass(slots=True)
class _Call(Generic[_T]):
    """Blocking work that needs the writer's connection (removing a kept ``.open`` name)."""

    fn: Callable[[], _T]
    future: asyncio.Future[_T]


@dataclass(slots=True)
class _Written:
    job: _Job
    outcome: Outcome
    row: IndexRow
    original: StoredRow | None


@dataclass(slots=True)
class _Batch:
    results: list[CaptureAck | BaseException | None]
    group: list[tuple[int, _Written]] = field(default_factory=list)
    group_start: int = 0
    #: Payload digests of full records in ``group`` (possible originals, not durable yet).
    originals: set[str] = field(default_factory=set)
    #: Digest of the latest capture of each urlkey in ``group``.
    latest: dict[str, str] = field(default_factory=dict)
    closed_links: list[tuple[FileRow, Path]] = field(default_factory=list)


class WriteStats:
    """What the writer finished, for ``/metrics``: plain counters, event loop side.

    ``captures`` counts by ``(dedup policy, outcome)``: ``full``,
    ``revisit`` and ``skipped`` once acknowledged (durable), ``failed`` for a
    capture not stored; ``bytes_written`` adds the WARC record bytes of the
    acknowledged full and revisit records.
    """

    __slots__ = ("bytes_written", "captures")

    def __init__(self) -> None:
        self.captures: dict[tuple[str, str], int] = {}
        self.bytes_written = 0

    def count(self, policy: str, ack: CaptureAck | None) -> None:
        """Count one finished capture: its ``ack``, or None when it was not stored."""
        key = (policy, ack.outcome if ack is not None else "failed")
        self.captures[key] = self.captures.get(key, 0) + 1
        if ack is not None and ack.outcome != "skipped":
            self.bytes_written += ack.capture.length or 0


class StoreWriter:
    """Owns the open WARC file and the index's writer connection once started."""

    def __init__(
        self,
        layout: Layout,
        db: IndexDB,
        settings: StoreSettings,
        fault_injector: FaultInjector | None = None,
    ) -> None:
        self.layout = layout
        self.db = db
        self.settings = settings
        self._inject = fault_injector or _no_fault
        self._queue: asyncio.Queue[_Job | _Call[Any] | None] = asyncio.Queue(
            settings.max_queued_captures
        )
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._warc: OpenWarc | None = None
        #: When the open file was created (``time.monotonic()``), for ``rollover_s``.
        self._opened_at = 0.0
        self._links: list[asyncio.TimerHandle] = []
        self._cleanup: set[asyncio.Task[None]] = set()
        #: Moves of closed files to the current layout (awaited, never cancelled, at close).
        self._moves: set[asyncio.Task[None]] = set()
        self.stats = WriteStats()

    # ------------------------------------------------------------- async side
    def start(self, pending_links: Sequence[FileRow] = ()) -> None:
        """Start the writer task; ``pending_links``: closed files whose ``.open`` name remains."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="store-writer")
        for file in pending_links:
            self._keep_link(file, self.layout.place(file, open_=True))

    async def submit(self, capture: CaptureInput, warc_date: str) -> asyncio.Future[CaptureAck]:
        """Queue a capture (waiting while the queue is full); return its ack future."""
        if self._closing or self._task is None or self._task.done():
            _close_payload(capture.payload)
            raise StoreClosed("the snapshot store is closed; no more captures are accepted")
        future: asyncio.Future[CaptureAck] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_log_failure)
        job = _Job(capture, capture.dedup or self.settings.dedup, warc_date, future)
        try:
            await self._queue.put(job)
        except BaseException:
            _close_payload(capture.payload)
            raise
        return future

    async def call(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` in a thread between two batches (exclusive use of file and index)."""
        if self._closing or self._task is None or self._task.done():
            raise StoreClosed("the snapshot store is closed")
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Call(fn, future))
        return await asyncio.shield(future)

    async def close(self) -> None:
        """Finish every queued capture, close the WARC file, remove kept ``.open`` names."""
        if self._closing:
            return
        self._closing = True
        for handle in self._links:
            handle.cancel()
        self._links.clear()
        if self._task is not None and not self._task.done():
            await self._queue.put(None)
            await asyncio.shield(self._task)
        for task in self._cleanup:
            task.cancel()
        if self._cleanup:
            await asyncio.gather(*self._cleanup, return_exceptions=True)
        if self._moves:
            await asyncio.gather(*self._moves, return_exceptions=True)
        await asyncio.to_thread(self._close_file)

    async def _run(self) -> None:
        held: _Call[Any] | _Job | None = None
        has_held = False
        while True:
            item = held if has_held else await self._next()
            has_held = False
            if item is None:
                return
            if isinstance(item, _Call):
                await self._run_call(item)
                continue
            jobs = [item]
            while len(jobs) < self.settings.max_batch_captures and not self._queue.empty():
                nxt = self._queue.get_nowait()
                if not isinstance(nxt, _Job):
                    held, has_held = nxt, True
                    break
                jobs.append(nxt)
            await self._run_batch(jobs)

    async def _next(self) -> _Job | _Call[Any] | None:
        """The next queued item; while none comes, the open file is closed once it has
        been open ``rollover_s`` (a capture never waits longer to be replicated)."""
        while True:
            if self._warc is None:
                return await self._queue.get()
            left_s = self._opened_at + self.settings.rollover_s - time.monotonic()
            try:
                async with asyncio.timeout(max(left_s, 0.0)):
                    return await self._queue.get()
            except TimeoutError:
                batch = _Batch(results=[])
                await asyncio.to_thread(self._rotate_if_full, batch)
                for file, path in batch.closed_links:
                    self._keep_link(file, path)

    async def _run_call(self, call: _Call[Any]) -> None:
        try:
            result = await asyncio.to_thread(call.fn)
        except Exception as exc:
            if not call.future.done():
                call.future.set_exception(exc)
        else:
            if not call.future.done():
                call.future.set_result(result)

    async def _run_batch(self, jobs: list[_Job]) -> None:
        try:
            batch = await asyncio.to_thread(self._write_batch, jobs)
            results: list[CaptureAck | BaseException | None] = batch.results
            links = batch.closed_links
        except Exception as exc:  # a bug: fail the batch, keep the writer alive
            logger.exception("store: writer batch failed")
            results = [StoreWriteError(f"capture not stored: internal error: {exc}")] * len(jobs)
            links = []
        for job, result in zip(jobs, results, strict=True):
            self.stats.count(job.policy, result if isinstance(result, CaptureAck) else None)
            if job.future.done():
                continue
            if isinstance(result, CaptureAck):
                job.future.set_result(result)
            else:
                job.future.set_exception(result or StoreWriteError("capture not stored"))
        for file, path in links:
            self._keep_link(file, path)

    def _keep_link(self, file: FileRow, path: Path) -> None:
        """Remove the ``.open`` name of a closed file after :data:`LINK_GRACE_S`."""
        loop = asyncio.get_running_loop()
        self._links.append(loop.call_later(LINK_GRACE_S, self._unlink_later, file, path))

    def _unlink_later(self, file: FileRow, path: Path) -> None:
        if self._closing:  # close() removes every kept name
            return
        task = asyncio.get_running_loop().create_task(self._unlink(file, path))
        self._cleanup.add(task)
        task.add_done_callback(self._cleanup.discard)

    async def _unlink(self, file: FileRow, path: Path) -> None:
        try:
            await self.call(lambda: remove_open_link(self.db, file, path))
        except (OSError, sqlite3.Error, StoreClosed) as exc:
            logger.warning("store: removing %s failed (%s); retried at the next start", path, exc)
            return
        if needs_move(self.layout, replace(file, open_link=False)):
            # The close is complete: a file of an older layout (one a writer of
            # an older release left open) moves now, beside the writer's work.
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._move, file))
            self._moves.add(task)
            task.add_done_callback(self._moves.discard)

    def _move(self, file: FileRow) -> None:
        """Bring a closed file to the current layout, on a connection of its own (a thread)."""
        db = IndexDB(self.layout.db_path, synchronous="FULL")
        try:
            fresh = db.file_by_id(file.id)
            if fresh is not None:
                ensure_current(self.layout, db, fresh)
        except (OSError, sqlite3.Error) as exc:
            logger.warning("store: moving %s to the current layout failed: %s", file.name, exc)
        finally:
            db.close()

    # ------------------------------------------------------------ thread side
    @property
    def _durable_each(self) -> bool:
        return self.settings.fsync == "always"

    def _close_file(self) -> None:
        """Close the open file and remove every kept ``.open`` name (the index lists them)."""
        if self._warc is not None:
            warc, self._warc = self._warc, None
            warc.close(self.db, durable=self.settings.fsync != "never")
        for file in self.db.pending_links():
            remove_open_link(self.db, file, self.layout.place(file, open_=True))

    def _current(self) -> OpenWarc:
        if self._warc is None:
            self._opened_at = time.monotonic()
            self._warc = OpenWarc.create(
                self.layout,
                self.db,
                prefix=self.settings.warc_prefix,
                durable=self._durable_each,
                inject=self._inject,
            )
        return self._warc

    def _write_batch(self, jobs: list[_Job]) -> _Batch:
        batch = _Batch(results=[None] * len(jobs))
        for index, job in enumerate(jobs):
            try:
                batch.results[index] = self._write_one(batch, index, job)
            except StoreWriteError as exc:
                batch.results[index] = exc
            except Exception as exc:  # a bug; nothing of this capture was kept
                logger.exception("store: capture of %s failed", job.capture.url)
                batch.results[index] = StoreWriteError(
                    f"capture of {job.capture.url} not stored: internal error: {exc!r}"
                )
            finally:
                _close_payload(job.capture.payload)
        self._make_durable(batch)
        self._rotate_if_full(batch)
        return batch

    def _rotate_if_full(self, batch: _Batch) -> None:
        """Close the open file once it reaches ``rollover_bytes`` or has been open
        ``rollover_s`` (after its group is durable)."""
        warc = self._warc
        if warc is None:
            return
        age_s = time.monotonic() - self._opened_at
        if warc.size < self.settings.rollover_bytes and age_s < self.settings.rollover_s:
            return
        self._make_durable(batch)
        if self._warc is not warc:  # abandoned while making the group durable
            return
        self._warc = None
        try:
            link = warc.close(self.db, durable=self.settings.fsync != "never")
        except (OSError, sqlite3.Error):
            logger.exception(
                "store: closing %s failed; recovery finishes it at the next start", warc.open_path
            )
            return
        if link is not None:
            batch.closed_links.append((warc.file, link))

    def _write_one(self, batch: _Batch, index: int, job: _Job) -> CaptureAck | None:
        """Write one capture (or decide to skip it); its ack comes with the group's commit."""
        capture = job.capture
        try:
            prepared = prepare_capture(capture)
        except (OSError, ValueError) as exc:
            raise StoreWriteError(f"capture of {capture.url} not stored: {exc}") from exc
        outcome, original = self._decide(
            batch, job, prepared.urlkey, prepared.payload_digest, prepared.length
        )
        if outcome == "skipped":
            assert original is not None
            existing = original.row.to_cdx(original.filename)
            return CaptureAck(
                outcome="skipped",
                capture=existing,
                record_id=original.row.record_id,
                payload_digest=prepared.payload_digest,
                original=existing,
            )
        self._rotate_if_full(batch)
        try:
            warc = self._current()
        except (OSError, sqlite3.Error) as exc:
            raise StoreWriteError(f"capture of {capture.url} not stored: {exc}") from exc
        if not batch.group:
            batch.group_start = warc.size
        start = warc.size
        sink = warc.sink(self._inject)
        try:
            row = write_capture(
                sink, prepared, job.warc_date, original.row if original is not None else None
            )
        except Exception as exc:
            self._rollback(start, batch)
            raise StoreWriteError(f"capture of {capture.url} not stored: {exc}") from exc
        warc.size = sink.position
        warc.captures += 1
        batch.group.append((index, _Written(job, outcome, row, original)))
        if outcome == "full":
            batch.originals.add(prepared.payload_digest)
        batch.latest[prepared.urlkey] = prepared.payload_digest
        return None

    def _decide(
        self, batch: _Batch, job: _Job, urlkey: str, digest: str, length: int
    ) -> tuple[Outcome, StoredRow | None]:
        if job.policy == "keep" or length < self.settings.dedup_min_payload_bytes:
            return "full", None
        if digest in batch.originals or (job.policy == "skip" and urlkey in batch.latest):
            # A possible match (an original, or the URL's latest capture) is in
            # this batch and not durable yet: make the batch durable first.
            self._make_durable(batch)
        try:
            self._inject("dedup_lookup")
            if job.policy == "skip":
                latest = self.db.latest_of(urlkey)
                if latest is not None and latest.row.digest == digest:
                    return "skipped", latest
            original = self.db.find_original(digest)
        except (OSError, sqlite3.Error) as exc:
            logger.warning(
                "store: dedup lookup for %s failed (%s); writing the full record",
                job.capture.url,
                exc,
            )
            return "full", None
        return ("revisit", original) if original is not None else ("full", None)

    def _rollback(self, offset: int, batch: _Batch) -> None:
        warc = self._warc
        if warc is None:
            return
        try:
            warc.rollback(offset)
        except OSError:
            logger.exception("store: truncating %s back to %d failed", warc.open_path, offset)
            self._abandon(batch)

    def _abandon(self, batch: _Batch) -> None:
        warc, self._warc = self._warc, None
        if warc is not None:
            warc.abandon()
        for index, _ in batch.group:
            batch.results[index] = StoreWriteError("capture not stored: WARC file abandoned")
        batch.group.clear()
        batch.originals.clear()
        batch.latest.clear()

    def _make_durable(self, batch: _Batch) -> None:
        """fsync (policy ``always``) and commit the group; then its acks are ready."""
        if not batch.group:
            return
        warc = self._warc
        assert warc is not None
        group, batch.group = batch.group, []
        batch.originals.clear()
        batch.latest.clear()
        try:
            self._inject("fsync")
            if self._durable_each:
                os.fsync(warc.fd)
            self._inject("commit")
            self.db.append_rows(warc.file.id, [w.row for _, w in group], warc.size)
        except (OSError, sqlite3.Error) as exc:
            logger.error("store: making %d capture(s) durable failed: %s", len(group), exc)
            for index, written in group:
                batch.results[index] = StoreWriteError(
                    f"capture of {written.job.capture.url} not stored: {exc}"
                )
            warc.captures -= len(group)
            self._rollback(batch.group_start, batch)
            return
        try:
            warc.hash_to(warc.size)
        except OSError as exc:  # the close tries again; failing there, recovery does it
            logger.warning("store: reading back %s for its SHA-256 failed: %s", warc.open_path, exc)
        filename = warc.file.disk_name
        for index, written in group:
            original = written.original
            batch.results[index] = CaptureAck(
                outcome=written.outcome,
                capture=written.row.to_cdx(filename),
                record_id=written.row.record_id,
                payload_digest=written.row.digest,
                original=original.row.to_cdx(original.filename) if original else None,
            )
        batch.group_start = warc.size


def _close_payload(payload: bytes | IO[bytes]) -> None:
    if not isinstance(payload, bytes):
        try:
            payload.close()
        except OSError:
            logger.warning("store: closing a capture payload file failed", exc_info=True)


def _log_failure(future: asyncio.Future[CaptureAck]) -> None:
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        logger.warning("store: %s", exc)
