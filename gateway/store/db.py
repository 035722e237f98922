"""The store's index: capture rows and WARC files in SQLite (WAL mode).

Schema::

    files(id, name UNIQUE, open, origin, indexed_end)
        name is the closed name (``x.warc.gz``); while ``open`` is 1 the file
        on disk carries ``.open``. ``indexed_end``: bytes of the file covered
        by index rows (the end of its last whole record). ``origin``:
        ``written`` by the store, ``imported`` by ``store add``, ``found``
        by recovery.
    captures(id, urlkey, timestamp, file_id, offset, length, rec_type, url,
             mime, status, digest, warc_date, record_id, extra)
        id grows with acknowledgement order: the tie-break between captures
        of one URL in the same second (both are kept, ordered by id).

The same database holds the background jobs' tables (``jobs_*``, made by
:func:`gateway.jobs.db.create_schema`): the objects of the import and scrub
actor types, among others.

Indexes: ``(urlkey, timestamp, id)`` for lookups, ``(digest, id)`` over full
records (``response``/``resource``) for deduplication, ``(file_id, offset)``
and ``(record_id)`` for recovery and checks.

A row is committed only after its bytes are written (and fsynced under
``fsync: always``), so a committed row, which is what lookups and the dedup
index see, always points at a whole record. Every method is blocking: the
writer connection is used by one thread at a time (the writer task's, or
recovery before the writer starts); lookups run in worker threads on
:class:`ReaderPool` connections.
"""

from __future__ import annotations

import queue
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from gateway.jobs.db import create_schema as create_jobs_schema
from gateway.store.indexing import FULL_RECORD_TYPES, IndexRow, extra_from_json, extra_to_json
from gateway.store.layout import OPEN_SUFFIX

__all__ = ["Access", "FileRow", "IndexDB", "Origin", "ReaderPool", "StoredRow"]

Origin = Literal["written", "imported", "found"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    open INTEGER NOT NULL,
    origin TEXT NOT NULL,
    indexed_end INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS captures (
    id INTEGER PRIMARY KEY,
    urlkey TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    file_id INTEGER NOT NULL REFERENCES files(id),
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    rec_type TEXT NOT NULL,
    url TEXT NOT NULL,
    mime TEXT NOT NULL,
    status TEXT NOT NULL,
    digest TEXT NOT NULL,
    warc_date TEXT NOT NULL,
    record_id TEXT NOT NULL,
    extra TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS captures_key ON captures(urlkey, timestamp, id);
CREATE INDEX IF NOT EXISTS captures_original ON captures(digest, id)
    WHERE rec_type IN ('response', 'resource');
CREATE INDEX IF NOT EXISTS captures_file ON captures(file_id, offset);
CREATE INDEX IF NOT EXISTS captures_record_id ON captures(record_id);
"""

_ROW_COLUMNS: Final = (
    "c.id, c.urlkey, c.timestamp, c.rec_type, c.url, c.mime, c.status, c.digest, "
    "c.offset, c.length, c.warc_date, c.record_id, c.extra, f.name, f.open"
)
_FROM: Final = "FROM captures c JOIN files f ON f.id = c.file_id"
_SQL_ROW = tuple[int, str, str, str, str, str, str, str, int, int, str, str, str, str, int]


@dataclass(frozen=True, slots=True)
class FileRow:
    """A WARC file known to the index; ``disk_name`` is its current name on disk."""

    id: int
    name: str
    open: bool
    origin: Origin
    indexed_end: int

    @property
    def disk_name(self) -> str:
        return self.name + OPEN_SUFFIX if self.open else self.name


@dataclass(frozen=True, slots=True)
class StoredRow:
    """An index row as stored: ``id`` (acknowledgement order) and the file's current name."""

    id: int
    row: IndexRow
    filename: str


def _stored(values: _SQL_ROW) -> StoredRow:
    (rid, urlkey, ts, rec_type, url, mime, status, digest, offset, length, date, rec_id) = values[
        :12
    ]
    extra, name, is_open = values[12], values[13], values[14]
    row = IndexRow(
        urlkey=urlkey,
        timestamp=ts,
        rec_type=rec_type,
        url=url,
        mime=mime,
        status=status,
        digest=digest,
        offset=offset,
        length=length,
        warc_date=date,
        record_id=rec_id,
        extra=extra_from_json(extra),
    )
    return StoredRow(rid, row, name + OPEN_SUFFIX if is_open else name)


#: ``write``: the writer connection. ``read``: read-only, alongside a writer
#: (SQLite may create its ``-wal``/``-shm`` files). ``immutable``: read-only
#: and touching no file at all; only valid while no writer exists.
Access = Literal["write", "read", "immutable"]


def _connect(path: Path, *, synchronous: str, access: Access) -> sqlite3.Connection:
    if access == "write":
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        return conn
    flags = "mode=ro" if access == "read" else "mode=ro&immutable=1"
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?{flags}", uri=True, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    return conn


class IndexDB:
    """The writer connection: schema, files, rows, dedup lookups.

    ``synchronous`` is SQLite's setting (``FULL`` under ``fsync: always``,
    ``NORMAL`` under ``close``, ``OFF`` under ``never``); ``access`` other
    than ``write`` opens it read-only (``store check``). Raises
    :class:`sqlite3.Error` on failures; callers translate.
    """

    def __init__(self, path: Path, *, synchronous: str = "FULL", access: Access = "write") -> None:
        self.path = path
        self.conn = _connect(path, synchronous=synchronous, access=access)
        if access == "write":
            self.conn.executescript(_SCHEMA)
            create_jobs_schema(self.conn)

    def quick_check(self) -> str:
        """SQLite's ``PRAGMA quick_check``: "ok" or the problems found."""
        rows = self.conn.execute("PRAGMA quick_check").fetchall()
        return "; ".join(str(r[0]) for r in rows)

    def count_rows(self, file_id: int) -> int:
        (count,) = self.conn.execute(
            "SELECT COUNT(*) FROM captures WHERE file_id = ?", (file_id,)
        ).fetchone()
        return int(count)

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any exception)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # ------------------------------------------------------------------ files
    def files(self) -> list[FileRow]:
        rows = self.conn.execute(
            "SELECT id, name, open, origin, indexed_end FROM files ORDER BY id"
        ).fetchall()
        return [FileRow(r[0], r[1], bool(r[2]), r[3], r[4]) for r in rows]

    def file_by_name(self, name: str) -> FileRow | None:
        r = self.conn.execute(
            "SELECT id, name, open, origin, indexed_end FROM files WHERE name = ?", (name,)
        ).fetchone()
        return FileRow(r[0], r[1], bool(r[2]), r[3], r[4]) if r else None

    def add_file(self, name: str, *, is_open: bool, origin: Origin) -> FileRow:
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO files (name, open, origin, indexed_end) VALUES (?, ?, ?, 0)",
                (name, int(is_open), origin),
            )
        assert cur.lastrowid is not None
        return FileRow(cur.lastrowid, name, is_open, origin, 0)

    def set_open(self, file_id: int, is_open: bool) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE files SET open = ? WHERE id = ?", (int(is_open), file_id))

    def remove_file(self, file_id: int) -> None:
        """Forget a file and every row pointing into it."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM captures WHERE file_id = ?", (file_id,))
            conn.execute("DELETE FROM files WHERE id = ?", (file_id,))

    # ------------------------------------------------------------------- rows
    def append_rows(self, file_id: int, rows: Iterable[IndexRow], indexed_end: int) -> list[int]:
        """Insert ``rows`` and move the file's ``indexed_end``, in one transaction.

        Returns the new row ids (acknowledgement order).
        """
        ids: list[int] = []
        with self.transaction() as conn:
            for row in rows:
                cur = conn.execute(
                    "INSERT INTO captures (urlkey, timestamp, file_id, offset, length, rec_type,"
                    " url, mime, status, digest, warc_date, record_id, extra)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        row.urlkey,
                        row.timestamp,
                        file_id,
                        row.offset,
                        row.length,
                        row.rec_type,
                        row.url,
                        row.mime,
                        row.status,
                        row.digest,
                        row.warc_date,
                        row.record_id,
                        extra_to_json(row.extra),
                    ),
                )
                assert cur.lastrowid is not None
                ids.append(cur.lastrowid)
            conn.execute("UPDATE files SET indexed_end = ? WHERE id = ?", (indexed_end, file_id))
        return ids

    def truncate_file_rows(self, file_id: int, size: int) -> int:
        """Drop rows ending past ``size`` (the file is shorter than its index says).

        ``indexed_end`` becomes the end of the last remaining row, so recovery
        re-scans whatever whole records follow it. Returns the rows dropped.
        """
        with self.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM captures WHERE file_id = ? AND offset + length > ?", (file_id, size)
            )
            dropped = cur.rowcount
            (end,) = conn.execute(
                "SELECT COALESCE(MAX(offset + length), 0) FROM captures WHERE file_id = ?",
                (file_id,),
            ).fetchone()
            conn.execute("UPDATE files SET indexed_end = ? WHERE id = ?", (end, file_id))
        return int(dropped)

    def reset_file(self, file_id: int) -> None:
        """Drop every row of a file and set its ``indexed_end`` to 0 (before re-indexing)."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM captures WHERE file_id = ?", (file_id,))
            conn.execute("UPDATE files SET indexed_end = 0 WHERE id = ?", (file_id,))

    def rows_of_file(self, file_id: int, start: int = 0, end: int | None = None) -> list[StoredRow]:
        """Rows of one file ordered by offset; with ``start``/``end``, those at offsets in range."""
        rows = self.conn.execute(
            f"SELECT {_ROW_COLUMNS} {_FROM} WHERE c.file_id = ? AND c.offset >= ?"
            " AND c.offset < ? ORDER BY c.offset",
            (file_id, start, end if end is not None else 1 << 62),
        ).fetchall()
        return [_stored(r) for r in rows]

    def find_original(self, digest: str) -> StoredRow | None:
        """The earliest committed full record with payload ``digest`` (dedup index)."""
        r = self.conn.execute(
            f"SELECT {_ROW_COLUMNS} {_FROM} WHERE c.digest = ?"
            " AND c.rec_type IN ('response', 'resource') ORDER BY c.id LIMIT 1",
            (digest,),
        ).fetchone()
        return _stored(r) if r else None

    def latest_of(self, urlkey: str) -> StoredRow | None:
        """The latest committed capture of ``urlkey`` (by timestamp, then id)."""
        r = self.conn.execute(
            f"SELECT {_ROW_COLUMNS} {_FROM} WHERE c.urlkey = ?"
            " ORDER BY c.timestamp DESC, c.id DESC LIMIT 1",
            (urlkey,),
        ).fetchone()
        return _stored(r) if r else None

    def by_record_id(self, record_id: str) -> StoredRow | None:
        r = self.conn.execute(
            f"SELECT {_ROW_COLUMNS} {_FROM} WHERE c.record_id = ? LIMIT 1", (record_id,)
        ).fetchone()
        return _stored(r) if r else None


assert FULL_RECORD_TYPES == ("response", "resource")  # the SQL above spells them out


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
            conn = _connect(self.path, synchronous="NORMAL", access="read")
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
            f"SELECT {_ROW_COLUMNS} {_FROM} WHERE {' AND '.join(where)}"
            f" ORDER BY c.urlkey {order}, c.timestamp {order}, c.id {order} LIMIT ?"
        )
        params.append(limit)
        with self.connection() as conn:
            return [_stored(r) for r in conn.execute(sql, params).fetchall()]
