"""Store: the snapshot store's public face (open, record, look up, import, close).

::

    store = await Store.open(StoreSettings(root="./archive/store"))   # the writer
    ack = await store.record(CaptureInput(url=..., response=..., payload=...))
    async for capture in store.lookup(query): ...              # sorted (urlkey, timestamp)
    await store.close()

A store is opened by one *writer* (``mode="write"``: the process that
records, holding ``writer.lock``) and any number of *shared* processes
(``mode="shared"``: serving, importing with :meth:`Store.add_warc`,
background work), at the same time; see :mod:`gateway.store.layout` for the
locks. Opening migrates the index's schema and recovers only what the index
says is unfinished (:mod:`gateway.store.recovery`): it takes the same time
for a store of any size.

A capture is findable through :meth:`lookup` as soon as :meth:`record`
returns: the ack is given only after the index row is committed. Same-second
captures of one URL are all kept; they share the 14-digit timestamp and keep
their acknowledgement order (WARC-Date carries microseconds), so ascending
lookups list them oldest first and ``sort=reverse&limit=1`` gives the last
one acknowledged.

Records' CDX ``filename`` is a file's name, not its path: where the file is
under ``<root>/warcs/`` depends on the layout its row records
(:mod:`gateway.store.layout`), and :meth:`Store.locate` lists where to look,
which is what a ``$store`` member's loader does.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final, Literal, Self

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery
from gateway.store.capture import CaptureAck, CaptureInput, format_warc_date
from gateway.store.db import IndexDB
from gateway.store.errors import StoreClosed, StoreError
from gateway.store.importer import ImportResult, VerifiedSource, publish, stage, verify_source
from gateway.store.layout import OPEN_SUFFIX, Layout, StoreLock, layout_for
from gateway.store.reader import StoreReader
from gateway.store.recovery import RecoveryReport, recover_imports, recover_open_files
from gateway.store.schema import SCHEMA_VERSION, schema_version
from gateway.store.settings import StoreSettings
from gateway.store.verify import Progress
from gateway.store.warcfile import FaultInjector
from gateway.store.writer import StoreWriter, WriteStats

if TYPE_CHECKING:
    from gateway.store.replication.replicas import ReplicaLocation, Replicas

__all__ = ["Store", "StoreMode", "check_store"]

#: ``write``: this process records (one per store); ``shared``: it reads,
#: imports and updates the index beside the writer.
StoreMode = Literal["write", "shared"]

logger = logging.getLogger(__name__)

_SYNCHRONOUS: Final = {"always": "FULL", "close": "NORMAL", "never": "OFF"}


def check_store(settings: StoreSettings) -> None:
    """Raise :class:`StoreError` for what would stop :meth:`Store.open` and can be
    known without opening or creating anything: the default root empty while an
    earlier release's store sits at its old default (:func:`layout_for`), an
    index written by a newer release. ``gateway serve`` asks before it says
    "serving"; blocking, a stat and at most one read-only SQLite open."""
    layout = layout_for(settings.root)
    if not layout.db_path.is_file():
        return
    try:
        conn = sqlite3.connect(f"{layout.db_path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            version = schema_version(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the store's index {layout.db_path}: {exc}") from exc
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the store at {layout.root} has schema version {version}, newer than this "
            f"release's {SCHEMA_VERSION}: it was written by a newer gateway; upgrade this one"
        )


class Store:
    """An open snapshot store; create with :meth:`open`, release with :meth:`close`."""

    def __init__(
        self,
        settings: StoreSettings,
        layout: Layout,
        locks: tuple[StoreLock, StoreLock | None],
        db: IndexDB,
        writer: StoreWriter | None,
        recovery: RecoveryReport,
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.recovery = recovery
        self._store_lock, self._writer_lock = locks
        self._db = db
        self.reader = StoreReader(layout.db_path)
        self._writer = writer
        self._replicas: Replicas | None = None
        self._closed = False

    @property
    def mode(self) -> StoreMode:
        return "shared" if self._writer is None else "write"

    @property
    def write_stats(self) -> WriteStats:
        """The writer's counters of captures and bytes written (``/metrics``).

        A shared process writes no WARC file: its counters stay at zero.
        """
        return self._writer.stats if self._writer is not None else WriteStats()

    # -------------------------------------------------------------- lifecycle
    @classmethod
    async def open(
        cls,
        settings: StoreSettings,
        *,
        mode: StoreMode = "write",
        fault_injector: FaultInjector | None = None,
    ) -> Store:
        """Open (creating if needed) the store at ``settings.root`` and recover it.

        Takes ``store.lock`` shared and, for ``mode="write"``, ``writer.lock``
        exclusive; raises :class:`~gateway.store.errors.StoreLocked` when
        ``store repair`` runs, or (``write``) another process records.
        Migrates the index's schema, finishes or undoes interrupted imports,
        and (``write``) closes the files a previous writer left open, then
        starts the writer task. Raises :class:`StoreError` naming the root on
        I/O and index errors. ``fault_injector`` is a test hook (see
        :data:`~gateway.store.warcfile.FaultInjector`).
        """
        layout = layout_for(settings.root)
        store_lock = StoreLock(layout.lock_path)
        writer_lock = StoreLock(layout.writer_lock_path, exclusive_only=True)

        def start() -> tuple[IndexDB, RecoveryReport]:
            layout.create()
            store_lock.acquire(
                "shared", hint="`gateway store repair` is running; retry when it has finished"
            )
            try:
                if mode == "write":
                    writer_lock.acquire(
                        "exclusive",
                        hint="another process records into this store, and only one may "
                        "write WARC files; stop it, or open this one without recording",
                    )
                db = IndexDB(layout.db_path, synchronous=_SYNCHRONOUS[settings.fsync])
                try:
                    report = RecoveryReport()
                    recover_imports(layout, db, report)
                    if mode == "write":
                        recover_open_files(layout, db, report)
                    return db, report
                except BaseException:
                    db.close()
                    raise
            except BaseException:
                writer_lock.release()
                store_lock.release()
                raise

        try:
            db, report = await asyncio.to_thread(start)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store at {layout.root}: {exc}") from exc
        if report.changed:
            logger.warning("store: recovery at %s: %s", layout.root, "; ".join(report.describe()))
        writer: StoreWriter | None = None
        if mode == "write":
            writer = StoreWriter(layout, db, settings, fault_injector)
            writer.start(await asyncio.to_thread(db.pending_links))
        locks = (store_lock, writer_lock if mode == "write" else None)
        return cls(settings, layout, locks, db, writer, report)

    async def close(self) -> None:
        """Finish queued captures, close the open WARC file, release the locks."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._writer is not None:
                await self._writer.close()
            if self._replicas is not None:
                await self._replicas.close()
        finally:
            self.reader.close()
            self._db.close()
            if self._writer_lock is not None:
                self._writer_lock.release()
            self._store_lock.release()

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
        """The directory every layout places the store's WARC files under."""
        return self.layout.warcs

    def locate(self, filename: str) -> list[Path]:
        """Where the WARC file a CDX ``filename`` names may be, in the order to try.

        The place its row gives first, then every other layout's place
        (:meth:`Layout.candidates <gateway.store.layout.Layout.candidates>`):
        a file that moves between a lookup and the load is found in one of
        them. A ``.open`` name of a file closed since the lookup is also
        tried under its closed name (the same bytes at the same offsets). A
        name the index does not know is looked for in ``warcs/`` itself.
        Reads the file's row at once, without a worker thread. Raises
        :class:`StoreError` on index failures or for a layout this release
        does not know.
        """
        self._check_open()
        name = filename.removesuffix(OPEN_SUFFIX)
        file = self.reader.file_row(name)
        if file is None:
            return [self.layout.warcs / filename]
        if name == filename:
            return self.layout.candidates(file)
        places = self.layout.candidates(file, open_=True)
        if not file.open:
            places.extend(self.layout.candidates(file))
        return places

    @property
    def replicas(self) -> Replicas:
        """The replication context: copy status, storages, reads from replicas
        (:mod:`gateway.store.replication.replicas`); made on first use, closed with the store."""
        self._check_open()
        if self._replicas is None:
            from gateway.store.replication.replicas import Replicas

            self._replicas = Replicas(self.settings, self.layout)
        return self._replicas

    def replica_locations(self, filename: str) -> list[ReplicaLocation]:
        """Where to read ``filename`` when its place at the primary fails: each
        storage's copy, tried only then (none without ``store.storages``)."""
        if not self.settings.storages:
            return []
        return self.replicas.locations(filename)

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
        if self._writer is None:
            if not isinstance(capture.payload, bytes):
                capture.payload.close()
            raise StoreError(
                f"the store at {self.layout.root} is open shared in this process: only the "
                "process that holds its writer lock records captures"
            )
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
        """Import a WARC or ARC file: verify it, copy it in, index it (:mod:`~.importer`).

        ``progress(n)`` is called (from a worker thread) as the verification
        reads ``n`` more bytes, three times the file's size in all. Works in
        both modes, beside a writer in another process; its captures are
        findable by every process once it returns. Raises
        :class:`~gateway.store.errors.ImportRejected` (the store unchanged)
        when the file is not one the gateway serves whole, or a different file
        of that name is in the store; :class:`StoreError` on I/O errors.
        """
        self._check_open()
        source = await asyncio.to_thread(verify_source, path, progress=progress)
        return await self.add_verified(source)

    async def add_verified(self, source: VerifiedSource) -> ImportResult:
        """Import a file :func:`~gateway.store.importer.verify_source` accepted (stage, publish).

        Raises as :meth:`add_warc` does.
        """
        self._check_open()

        def run() -> ImportResult:
            db = IndexDB(self.layout.db_path, synchronous=_SYNCHRONOUS[self.settings.fsync])
            try:
                staged = stage(self.layout, db, source)
                if isinstance(staged, ImportResult):
                    return staged
                return publish(self.layout, db, staged)
            finally:
                db.close()

        try:
            return await asyncio.to_thread(run)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                f"importing {source.path} into {self.layout.root} failed: {exc}"
            ) from exc

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
