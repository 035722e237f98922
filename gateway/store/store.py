"""Store: the snapshot store's public face (open, record, look up, import, close).

::

    store = await Store.open(StoreSettings(root="./archive"))   # runs recovery
    ack = await store.record(CaptureInput(url=..., response=..., payload=...))
    async for capture in store.lookup(query): ...              # sorted (urlkey, timestamp)
    await store.close()

A capture is findable through :meth:`lookup` as soon as :meth:`record`
returns: the ack is given only after the index row is committed. Same-second
captures of one URL are all kept; they share the 14-digit timestamp and keep
their acknowledgement order (WARC-Date carries microseconds), so ascending
lookups list them oldest first and ``sort=reverse&limit=1`` gives the last
one acknowledged.

Records' CDX ``filename`` is relative to ``<root>/warcs/``: a collection
serving ``$store`` loads them with an ordinary WARC loader whose prefix is
that directory (:attr:`Store.warc_dir`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from gateway.cdxj import CdxRecord
from gateway.query import CaptureQuery
from gateway.store.capture import CaptureAck, CaptureInput, format_warc_date
from gateway.store.db import IndexDB
from gateway.store.errors import StoreClosed, StoreError
from gateway.store.importer import ImportResult, import_warc, prepare_import
from gateway.store.layout import Layout, StoreLock
from gateway.store.reader import StoreReader
from gateway.store.recovery import RecoveryReport, recover
from gateway.store.settings import StoreSettings
from gateway.store.verify import Progress
from gateway.store.warcfile import FaultInjector
from gateway.store.writer import StoreWriter, WriteStats

__all__ = ["Store"]

logger = logging.getLogger(__name__)

_SYNCHRONOUS: Final = {"always": "FULL", "close": "NORMAL", "never": "OFF"}


class Store:
    """An open snapshot store; create with :meth:`open`, release with :meth:`close`."""

    def __init__(
        self,
        settings: StoreSettings,
        layout: Layout,
        lock: StoreLock,
        db: IndexDB,
        writer: StoreWriter,
        recovery: RecoveryReport,
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.recovery = recovery
        self._lock = lock
        self._db = db
        self.reader = StoreReader(layout.db_path)
        self._writer = writer
        self._closed = False

    @property
    def write_stats(self) -> WriteStats:
        """The writer's counters of captures and bytes written (``/metrics``)."""
        return self._writer.stats

    # -------------------------------------------------------------- lifecycle
    @classmethod
    async def open(
        cls, settings: StoreSettings, *, fault_injector: FaultInjector | None = None
    ) -> Store:
        """Open (creating if needed) the store at ``settings.root`` and recover it.

        Takes the exclusive store lock (raises
        :class:`~gateway.store.errors.StoreLocked` when another process holds
        it), runs :func:`~gateway.store.recovery.recover` and starts the writer
        task. ``fault_injector`` is a test hook (see
        :data:`~gateway.store.warcfile.FaultInjector`).
        """
        layout = Layout(settings.root_path)
        lock = StoreLock(layout.lock_path)

        def start() -> tuple[IndexDB, RecoveryReport]:
            layout.create()
            lock.acquire("exclusive")
            try:
                db = IndexDB(layout.db_path, synchronous=_SYNCHRONOUS[settings.fsync])
                try:
                    return db, recover(layout, db)
                except BaseException:
                    db.close()
                    raise
            except BaseException:
                lock.release()
                raise

        try:
            db, report = await asyncio.to_thread(start)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store at {layout.root}: {exc}") from exc
        if report.changed:
            logger.warning("store: recovery at %s: %s", layout.root, "; ".join(report.describe()))
        writer = StoreWriter(layout, db, settings, fault_injector)
        writer.start()
        return cls(settings, layout, lock, db, writer, report)

    async def close(self) -> None:
        """Finish queued captures, close the open WARC file, release the lock."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._writer.close()
        finally:
            self.reader.close()
            self._db.close()
            self._lock.release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def root(self) -> Path:
        return self.layout.root

    @property
    def warc_dir(self) -> Path:
        """The directory CDX ``filename`` values are relative to (the WARC prefix)."""
        return self.layout.warcs

    # --------------------------------------------------------------- recording
    async def submit(self, capture: CaptureInput) -> asyncio.Future[CaptureAck]:
        """Queue ``capture`` for the writer and return the future of its ack.

        Waits only while the queue is full (``max_queued_captures``). The
        write proceeds whatever happens to the caller; a failure is logged
        (WARNING) and set on the future as
        :class:`~gateway.store.errors.StoreWriteError`. A payload file is
        owned by the store from this call on.
        """
        self._check_open()
        when = capture.warc_date or datetime.now(UTC)
        return await self._writer.submit(capture, format_warc_date(when))

    async def record(self, capture: CaptureInput) -> CaptureAck:
        """Store ``capture`` and return once it is durable and indexed.

        Cancelling the caller does not cancel the write (it is shielded).
        Raises :class:`~gateway.store.errors.StoreWriteError` when nothing was
        stored, :class:`~gateway.store.errors.StoreClosed` after :meth:`close`.
        """
        future = await self.submit(capture)
        return await asyncio.shield(future)

    async def add_warc(self, path: Path, *, progress: Progress | None = None) -> ImportResult:
        """Import a WARC file: verify it (framing and warcio digests), copy, index.

        ``progress(n)`` is called (from a worker thread) as the verification
        reads ``n`` more bytes, twice the file's size in all. Raises
        :class:`~gateway.store.errors.ImportRejected` when the file is not a
        valid WARC or a different file of that name is in the store.
        """
        self._check_open()
        plan = await asyncio.to_thread(prepare_import, self.layout, path, progress=progress)
        return await self._writer.call(lambda: import_warc(self.layout, self._db, plan))

    # ----------------------------------------------------------------- lookups
    def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Yield captures in ``[query.key, query.end_key)`` sorted by (urlkey, timestamp).

        See :meth:`StoreReader.lookup <gateway.store.reader.StoreReader.lookup>`;
        raises :class:`~gateway.store.errors.StoreError` on index failures.
        """
        self._check_open()
        return self.reader.lookup(query)

    async def history(
        self,
        url: str,
        *,
        at: str | None = None,
        from_ts: str | None = None,
        to_ts: str | None = None,
        latest: bool = False,
    ) -> list[CdxRecord]:
        """A URL's versions, oldest first (:meth:`StoreReader.history
        <gateway.store.reader.StoreReader.history>`)."""
        self._check_open()
        return await self.reader.history(url, at=at, from_ts=from_ts, to_ts=to_ts, latest=latest)

    async def recent_capture(
        self, url: str, *, max_age_days: float, now: datetime | None = None
    ) -> CdxRecord | None:
        """The latest capture of ``url`` at most ``max_age_days`` old, else None.

        For a recording step's ``skip_if_updated_days``.
        """
        self._check_open()
        return await self.reader.recent_capture(url, max_age_days=max_age_days, now=now)

    # ---------------------------------------------------------------- helpers
    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"the store at {self.layout.root} is closed")
