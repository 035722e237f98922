"""The pool of read-only connections that lookups use from worker threads.

Rows as in :mod:`gateway.store.rows`; connections as in :mod:`gateway.store.connection`.
"""

from __future__ import annotations

import queue
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gateway.store.connection import connect
from gateway.store.rows import ROW_COLUMNS, ROWS_FROM, StoredRow, stored_row

__all__ = ["ReaderPool"]


class ReaderPool:
    """Read-only connections for lookups from worker threads (WAL readers never block).

    :meth:`range_page` is blocking; run it with ``asyncio.to_thread``.
    """

    def __init__(self, path: Path, size: int = 4) -> None:
        self.path = path
        self._idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []
        self._size = size

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            conn = connect(self.path, synchronous="NORMAL", access="read")
            self._all.append(conn)
        try:
            yield conn
        finally:
            self._idle.put(conn)

    def close(self) -> None:
        for conn in self._all:
            conn.close()
        self._all.clear()

    def range_page(
        self,
        key: str,
        end_key: str,
        *,
        from_ts: str | None = None,
        to_ts: str | None = None,
        after: tuple[str, str, int] | None = None,
        before: tuple[str, str, int] | None = None,
        descending: bool = False,
        limit: int = 1000,
    ) -> list[StoredRow]:
        """Rows with ``key <= urlkey < end_key`` (and ``from_ts <= timestamp <= to_ts``).

        Ordered by ``(urlkey, timestamp, id)`` ascending, or descending with
        ``descending``; ``after``/``before`` continue past a previous page's
        last ``(urlkey, timestamp, id)`` (keyset pagination).
        """
        where = ["c.urlkey >= ?", "c.urlkey < ?"]
        params: list[object] = [key, end_key]
        if from_ts:
            where.append("c.timestamp >= ?")
            params.append(from_ts)
        if to_ts:
            where.append("c.timestamp <= ?")
            params.append(to_ts)
        if after is not None:
            where.append("(c.urlkey, c.timestamp, c.id) > (?, ?, ?)")
            params.extend(after)
        if before is not None:
            where.append("(c.urlkey, c.timestamp, c.id) < (?, ?, ?)")
            params.extend(before)
        order = "DESC" if descending else "ASC"
        sql = (
            f"SELECT {ROW_COLUMNS} {ROWS_FROM} WHERE {' AND '.join(where)}"
            f" ORDER BY c.urlkey {order}, c.timestamp {order}, c.id {order} LIMIT ?"
        )
        params.append(limit)
        with self.connection() as conn:
            return [stored_row(r) for r in conn.execute(sql, params).fetchall()]
