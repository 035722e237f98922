"""What an open store needs to keep its files replicated and to read them back.

:class:`Replicas` is one store's replication context (``Store.replicas``):
the retention policy, the places a file can be (``primary``, then the
``store.storages`` in config order), their storages opened on first use
(:class:`~gateway.storage.pool.StoragePool`), the primary as a storage
(:class:`~gateway.store.replication.primary.PrimaryStorage`), and one connection to the
index used from one worker thread (:class:`IndexThread`) for the copy status
(:mod:`gateway.store.replication.copy_status`). The director, batch and copy actors,
scrub and publisher (:mod:`~gateway.store.replication.director`,
:mod:`~gateway.store.integrity.copy_scrub`, :mod:`~gateway.store.replication.publication`)
all work through it.

**Reading from replicas** (issue 13 §4). The store's record loader tries the
file's place at the primary first, then one :class:`ReplicaLocation` per
storage (:meth:`Replicas.locations`): a location costs nothing until the
primary has failed, and then opens the copy only when the index says it is
``present`` for the file's current bytes (range reads; on S3 one
``GetObject`` with ``Range``). The first replica a load reaches reports the
primary's failure: one WARNING per file and ten minutes, the counters of
``/metrics`` and ``/_status`` (:class:`ReplicaReadStats`), and, when the
file is gone from its place, its primary copy is marked ``missing`` so
that the next replication pass restores it.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, ParamSpec, TypeVar

from gateway.errors import ArchiveFileNotFound, LoadError
from gateway.jobs.sqlite_thread import SqliteThread
from gateway.storage.base import RangeReader, Storage
from gateway.storage.errors import StorageError
from gateway.storage.pool import StoragePool
from gateway.storage.ranges import open_storage_range, storage_load_error
from gateway.storage.settings import PRIMARY
from gateway.store.connection import BUSY_TIMEOUT_MS
from gateway.store.db import IndexDB
from gateway.store.layout import OPEN_SUFFIX, Layout, Placed
from gateway.store.replication.copy_status import (
    CopySummary,
    read_copy_summary,
    read_file_copies,
    read_present_copy,
    write_copy_status,
)
from gateway.store.replication.primary import PrimaryStorage
from gateway.store.settings import StoreSettings

__all__ = [
    "SUMMARY_MAX_AGE_S",
    "CachedSummary",
    "IndexThread",
    "ReplicaLocation",
    "ReplicaReadStats",
    "Replicas",
]

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: A file's primary failure is logged at most once per this many seconds.
WARN_EVERY_S: Final = 600.0
#: How long a copy summary (``/metrics``, ``/_status``) is reused, in seconds.
SUMMARY_MAX_AGE_S: Final = 30.0
_SYNCHRONOUS: Final = {"always": "FULL", "close": "NORMAL", "never": "OFF"}


class IndexThread(SqliteThread[IndexDB]):
    """One writing connection to the index, used from one worker thread
    (a :class:`~gateway.jobs.sqlite_thread.SqliteThread` of an :class:`IndexDB`,
    opened by the first call).

    :meth:`call` runs ``fn(conn, *args)`` there (calls are serialized, as a
    SQLite connection wants), :meth:`call_db` ``fn(index)``. Every ``write_*``
    of :mod:`gateway.store.replication.copy_status` is one statement in
    autocommit mode, waiting for other writers up to the index's busy timeout.
    """

    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        self.path = path
        super().__init__(
            "store-copies",
            lambda: IndexDB(path, synchronous=synchronous),
            lambda db: db.conn,
            lambda db: db.close(),
        )

    async def call_db(self, fn: Callable[[IndexDB], _T]) -> _T:
        """``fn(index)`` on the index thread, with the :class:`IndexDB` itself."""
        return await self.call_handle(fn)


class CachedSummary:
    """The copy summary of a store, computed
    (:func:`~gateway.store.replication.copy_status.read_copy_summary`) on a
    read-only connection of its own at most every ``max_age_s`` seconds;
    :meth:`get` is blocking and thread-safe (scrapes run in threads)."""

    def __init__(self, replicas: Replicas, max_age_s: float = SUMMARY_MAX_AGE_S) -> None:
        self.replicas = replicas
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._made: tuple[float, CopySummary] | None = None

    def get(self) -> CopySummary:
        with self._lock:
            made = self._made
            if made is not None and time.monotonic() - made[0] < self.max_age_s:
                return made[1]
            path = self.replicas.layout.db_path.resolve()
            conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
            try:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
                replicas = self.replicas
                summary = read_copy_summary(
                    conn, replicas.places, replicas.policy.copies, replicas.cutoff()
                )
            finally:
                conn.close()
            self._made = (time.monotonic(), summary)
            return summary


@dataclass(slots=True)
class ReplicaReadStats:
    """What reads from replicas did (``/metrics``, ``/_status``).

    ``primary_failures``: loads whose file failed at the primary and went on
    to the replicas; ``served``: records opened from each storage;
    ``failed``: replica attempts that failed, by storage; ``last``: the last
    primary failure in words, and when (Unix seconds).
    """

    primary_failures: int = 0
    served: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    last: tuple[float, str] | None = None
    _warned: dict[str, float] = field(default_factory=dict)

    def count(self, table: dict[str, int], storage: str) -> None:
        table[storage] = table.get(storage, 0) + 1


class Replicas:
    """One store's replication context (see the module docstring); close with :meth:`close`."""

    def __init__(self, settings: StoreSettings, layout: Layout) -> None:
        self.settings = settings
        self.layout = layout
        self.policy = settings.retention
        #: Every place a file can be, the primary first, then storages in config order.
        self.places: tuple[str, ...] = (PRIMARY, *settings.storages)
        self.pool = StoragePool(settings.storages)
        self.index = IndexThread(layout.db_path, synchronous=_SYNCHRONOUS[settings.fsync])
        #: The rows (name, ``fs_version``, date) of files seen by the actors
        #: and the scrub: where the primary keeps them (:meth:`Layout.place`).
        self.rows: dict[str, Placed] = {}
        self.primary = PrimaryStorage(layout, self.rows.get)
        self.reads = ReplicaReadStats()
        self.summary = CachedSummary(self)

    def cutoff(self, now: float | None = None) -> float:
        """The time before which an ``ongoing`` copy counts as missing (Unix seconds)."""
        return (time.time() if now is None else now) - self.policy.archival_max_age_s

    async def storage(self, place: str) -> Storage:
        """The storage of ``place`` (``primary`` or a configured name), opened.

        Raises :class:`~gateway.storage.errors.StorageError` when it cannot
        be opened.
        """
        if place == PRIMARY:
            return self.primary
        return await self.pool.get(place)

    def locations(self, filename: str) -> list[ReplicaLocation]:
        """Where else to read ``filename`` after the primary: one location per storage,
        in config order (none for a file still ``.open``). Costs no I/O."""
        if filename.endswith(OPEN_SUFFIX) or not self.pool.names:
            return []
        attempt = _Attempt(filename)
        return [ReplicaLocation(self, name, filename, attempt) for name in self.pool.names]

    async def report_primary_failure(self, name: str) -> None:
        """Log, count and (when its file is gone) mark the primary copy of ``name`` missing."""
        reads = self.reads
        reads.primary_failures += 1
        # Its row places it (a layout migration may have moved it since the
        # last read): gone only when no layout's place holds it.
        files = await self.index.call(read_file_copies, self.places, names=[name])
        if files:
            self.rows[name] = files[0]
        places = self.layout.candidates(files[0]) if files else [self.layout.warcs / name]
        path = places[0]
        gone = not any(await asyncio.to_thread(lambda: [p.exists() for p in places]))
        why = "missing" if gone else "unreadable or damaged at the record asked for"
        now = time.time()
        reads.last = (now, f"{name}: {why} at the primary ({path})")
        warned = reads._warned.get(name)
        if warned is None or now - warned >= WARN_EVERY_S:
            reads._warned[name] = now
            logger.warning(
                "store: warcs/%s is %s at the primary (%s); serving it from a replica%s",
                name,
                why,
                path,
                "; the next `gateway store replicate` restores it"
                if gone
                else "; run `gateway store scrub` to verify it",
            )
        if gone:
            await self.index.call(_mark_primary_missing, name, now)

    async def close(self) -> None:
        """Close the storages and the index connection."""
        await self.pool.close()
        await self.index.close()


def _mark_primary_missing(conn: sqlite3.Connection, name: str, now: float) -> None:
    row = conn.execute(
        "SELECT sha256 FROM files WHERE name = ? AND state = 'closed' AND sha256 IS NOT NULL",
        (name,),
    ).fetchone()
    if row is not None:
        write_copy_status(
            conn, name, PRIMARY, row[0], "missing", mtime=now, detail="missing when read"
        )


@dataclass(slots=True)
class _Attempt:
    """One load's walk through the replicas of a file: the primary's failure is
    reported by the first replica reached, once."""

    filename: str
    reported: bool = False


class ReplicaLocation:
    """A copy of a store file on one storage, as a
    :class:`~gateway.loaders.warc_sources.RangeLocation` (see the module docstring)."""

    __slots__ = ("_attempt", "_replicas", "filename", "storage")

    def __init__(self, replicas: Replicas, storage: str, filename: str, attempt: _Attempt) -> None:
        self._replicas = replicas
        self.storage = storage
        self.filename = filename
        self._attempt = attempt

    def __str__(self) -> str:
        return f"replica {self.storage}:{self.filename}"

    async def open_range(self, offset: int, length: int | None) -> RangeReader:
        replicas, where = self._replicas, str(self)
        if not self._attempt.reported:
            self._attempt.reported = True
            await replicas.report_primary_failure(self.filename)
        row = await replicas.index.call(read_present_copy, self.filename, self.storage)
        if row is None:
            raise ArchiveFileNotFound(
                f"{where}: no verified copy there", {where: "no present copy"}
            )
        try:
            try:
                storage = await replicas.pool.get(self.storage)
            except StorageError as exc:
                raise storage_load_error(exc, where) from exc
            reader = await open_storage_range(storage, self.filename, offset, length, where=where)
        except LoadError:
            replicas.reads.count(replicas.reads.failed, self.storage)
            raise
        replicas.reads.count(replicas.reads.served, self.storage)
        return reader
