"""StoreReader: lookups in the store's index (versions, latest, nearest, ranges).

Read-only and lock-free (SQLite WAL readers never block the writer), so it
serves :class:`~gateway.store.store.Store` and ``gateway store history``
while a gateway is recording into the same store.

Same-second captures of one URL share the 14-digit timestamp; they keep
their acknowledgement order (the index row id), so ascending results list
them oldest first and the last one is the latest.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery, pad_timestamp
from gateway.store.connection import connect_reader
from gateway.store.errors import StoreError
from gateway.store.reader_pool import ReaderPool
from gateway.store.rows import FileRow, StoredRow, file_by_name

__all__ = ["StoreReader"]

_PAGE: Final = 1000


def _cdx(stored: StoredRow) -> CdxRecord:
    return stored.row.to_cdx(stored.filename)


class StoreReader:
    """Lookups over ``index.sqlite3``; every method raises :class:`StoreError` on index failure."""

    def __init__(self, db_path: Path) -> None:
        self._path = db_path
        self._pool = ReaderPool(db_path)
        #: The connection of :meth:`file_row`, used on the event loop's thread only.
        self._files: sqlite3.Connection | None = None

    def close(self) -> None:
        self._pool.close()
        if self._files is not None:
            self._files.close()
            self._files = None

    def file_row(self, name: str) -> FileRow | None:
        """The row of the file ``name``, read at once (not in a worker thread).

        One lookup in the unique index on names, on a WAL reader that never
        waits for writers: cheaper than the hop to a thread it would take.
        Raises :class:`StoreError` on index failure.
        """
        try:
            if self._files is None:
                self._files = connect_reader(self._path)
            return file_by_name(self._files, name)
        except sqlite3.Error as exc:
            raise StoreError(f"store index lookup failed for the file {name}: {exc}") from exc

    async def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Yield captures in ``[query.key, query.end_key)`` sorted by (urlkey, timestamp).

        ``from_ts``/``to_ts`` are applied here. Without filters, ``sort=reverse``
        with a limit reads only the last ``limit`` rows, and ``closest`` (exact
        matches) reads ``limit`` rows on each side of it; the aggregator applies
        every operation again, so these are only shortcuts.
        """
        hints = not query.filters and not query.extra
        if hints and query.sort == "reverse" and query.limit:
            rows = await self._page(query, descending=True, limit=query.limit)
            for stored in reversed(rows):
                yield _cdx(stored)
            return
        if hints and query.sort == "closest" and query.closest and query.match_type == "exact":
            # "~" sorts after every digit: (key, closest + "~") splits the rows
            # of ``key`` into timestamp <= closest and timestamp > closest.
            pivot = (query.key, query.closest + "~", 0)
            before = await self._page(query, before=pivot, descending=True, limit=query.limit)
            after = await self._page(query, after=pivot, limit=query.limit)
            for stored in (*reversed(before), *after):
                yield _cdx(stored)
            return
        cursor: tuple[str, str, int] | None = None
        while True:
            rows = await self._page(query, after=cursor, limit=_PAGE)
            for stored in rows:
                yield _cdx(stored)
            if len(rows) < _PAGE:
                return
            last = rows[-1]
            cursor = (last.row.urlkey, last.row.timestamp, last.id)

    async def history(
        self,
        url: str,
        *,
        at: str | None = None,
        from_ts: str | None = None,
        to_ts: str | None = None,
        latest: bool = False,
    ) -> list[CdxRecord]:
        """The versions of ``url`` (exact urlkey match), oldest first.

        ``at``: only the nearest capture at or before it (1-14 digits, padded
        up: ``--at 2014`` means "as of the end of 2014"); ``from_ts``/``to_ts``:
        an inclusive range (padded down/up); ``latest``: only the last capture.
        Raises ValueError on a URL that cannot be canonicalized.
        """
        query = CaptureQuery.for_url(url)
        if at is not None:
            query = query.evolve(to_ts=pad_timestamp(at, up=True), sort="reverse", limit=1)
        elif latest:
            query = query.evolve(sort="reverse", limit=1)
        else:
            query = query.evolve(
                from_ts=pad_timestamp(from_ts, up=False) if from_ts else None,
                to_ts=pad_timestamp(to_ts, up=True) if to_ts else None,
            )
        records = [record async for record in self.lookup(query)]
        return records[-1:] if (at is not None or latest) else records

    async def recent_capture(
        self, url: str, *, max_age_days: float, now: datetime | None = None
    ) -> CdxRecord | None:
        """The latest capture of ``url`` at most ``max_age_days`` old, else None.

        For ``skip_if_updated_days``: the recording step serves it instead of
        fetching again. Raises ValueError on a bad URL.
        """
        moment = (now or datetime.now(UTC)) - timedelta(days=max_age_days)
        since = moment.astimezone(UTC).strftime("%Y%m%d%H%M%S")
        found = await self.history(url, latest=True)
        if found and found[-1].timestamp >= since:
            return found[-1]
        return None

    async def _page(
        self,
        query: CaptureQuery,
        *,
        after: tuple[str, str, int] | None = None,
        before: tuple[str, str, int] | None = None,
        descending: bool = False,
        limit: int,
    ) -> list[StoredRow]:
        def run() -> list[StoredRow]:
            return self._pool.range_page(
                query.key,
                query.end_key,
                from_ts=query.from_ts,
                to_ts=query.to_ts,
                after=after,
                before=before,
                descending=descending,
                limit=limit,
            )

        try:
            return await asyncio.to_thread(run)
        except sqlite3.Error as exc:
            raise StoreError(f"store index lookup failed for {query.url}: {exc}") from exc
