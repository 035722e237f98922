"""The store's index: WARC files and capture rows in SQLite (WAL mode).

The schema and its versions are in :mod:`gateway.store.schema`. Columns::

    files(id, name UNIQUE, origin, indexed_end, state, open_link,
          sha256, fs_version, date)
        name: the closed name (``x.warc.gz``), which is the CDX ``filename``;
        state: ``open`` (being written; on disk as ``name.open``),
            ``importing`` (``store add`` copying it in; staged in
            ``incoming/``), ``closed``;
        open_link: 1 while a closed file's ``.open`` name is still linked
            (the writer removes it after a grace period);
        origin: ``written`` by the store's writer, ``imported`` by
            ``store add`` (the store wrote the copy), ``found`` (adopted by
            an older release's recovery: a file the store did not write);
        indexed_end: bytes of the file covered by index rows (the end of its
            last whole record);
        sha256: hex digest of the whole file, set when it is closed or
            imported (NULL on rows of older releases until computed);
        fs_version: the layout the file is stored under
            (:meth:`Layout.place <gateway.store.layout.Layout.place>`);
        date: the file's creation date, 14 digits UTC (from the store's own
            file name, or the first record's WARC-Date for imported files).
    captures(id, urlkey, timestamp, file_id, offset, length, rec_type, url,
             mime, status, digest, warc_date, record_id, extra)
        id grows with acknowledgement order: the tie-break between captures
        of one URL in the same second (both are kept, ordered by id).

Indexes: ``(urlkey, timestamp, id)`` for lookups, ``(digest, id)`` over full
records (``response``/``resource``) for deduplication, ``(file_id, offset)``
and ``(record_id)`` for recovery and checks; partial indexes over unfinished
files and pending links (start-up reads only those) and over ``sha256``.

A row is committed only after its bytes are written (and fsynced under
``fsync: always``), so a committed row, which is what lookups and the dedup
index see, always points at a whole record. A file's row is written before
the file is created, so no crash leaves a file of the store that the index
does not know.

Every method is blocking and each :class:`IndexDB` connection is used by
one thread at a time (the writer's, an import's, recovery's). Several
processes write the same index (the recording gateway, ``store add``,
background workers): every write is one short ``BEGIN IMMEDIATE``
transaction, and a connection waits up to :data:`BUSY_TIMEOUT_MS` for
another's to end, so no user sees ``database is locked``. Lookups run in
worker threads on :class:`ReaderPool` connections (WAL readers never wait).
"""

from __future__ import annotations

import queue
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from gateway.store.indexing import FULL_RECORD_TYPES, IndexRow, extra_from_json, extra_to_json
from gateway.store.layout import OPEN_SUFFIX
from gateway.store.object_types import write_director_wake, write_scrub_of_closed_file
from gateway.store.schema import migrate

__all__ = [
    "BUSY_TIMEOUT_MS",
    "OWNED_ORIGINS",
    "FileRow",
    "FileState",
    "IndexDB",
    "Origin",
    "ReaderPool",
    "StoredRow",
    "connect_reader",
    "file_by_name",
]

Origin = Literal["written", "imported", "found"]
FileState = Literal["open", "importing", "closed"]

#: Origins of the files the store owns: the only ones it may move, rename
#: or delete. A ``found`` file (adopted by an older release) is read, never moved.
OWNED_ORIGINS: Final[frozenset[Origin]] = frozenset({"written", "imported"})

#: How long a connection waits for another process's write transaction.
BUSY_TIMEOUT_MS: Final = 30_000

_FILE_COLUMNS: Final = "id, name, state, origin, indexed_end, open_link, sha256, fs_version, date"
_ROW_COLUMNS: Final = (
    "c.id, c.urlkey, c.timestamp, c.rec_type, c.url, c.mime, c.status, c.digest, "
    "c.offset, c.length, c.warc_date, c.record_id, c.extra, f.name, f.state = 'open'"
)
_FROM: Final = "FROM captures c JOIN files f ON f.id = c.file_id"
_SQL_ROW = tuple[int, str, str, str, str, str, str, str, int, int, str, str, str, str, int]
_SQL_FILE = tuple[int, str, FileState, Origin, int, int, str | None, int, str | None]


@dataclass(frozen=True, slots=True)
class FileRow:
    """A WARC file known to the index (columns as in the module docstring)."""

    id: int
    name: str
    state: FileState
    origin: Origin
    indexed_end: int
    open_link: bool = False
    sha256: str | None = None
    fs_version: int = 1
    date: str | None = None

    @property
    def open(self) -> bool:
        """True while the writer appends to it (on disk as ``name.open``)."""
        return self.state == "open"

    @property
    def owned(self) -> bool:
        """True when the store wrote this file and may move, rename or delete it."""
        return self.origin in OWNED_ORIGINS

    @property
    def disk_name(self) -> str:
        """The file's current name in its directory (``name.open`` while open)."""
        return self.name + OPEN_SUFFIX if self.open else self.name


_FILE_BY_NAME: Final = f"SELECT {_FILE_COLUMNS} FROM files WHERE name = ?"


def file_by_name(conn: sqlite3.Connection, name: str) -> FileRow | None:
    """The row of the file ``name`` on ``conn`` (one lookup in the unique index on names)."""
    found = conn.execute(_FILE_BY_NAME, (name,)).fetchone()
    return _file(found) if found else None


def connect_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection to the index, beside writers (WAL readers never wait)."""
    return _connect(path, synchronous="NORMAL", access="read")


def _insert_file(conn: sqlite3.Connection, file: FileRow) -> FileRow:
    """Insert ``file``'s row (inside the caller's transaction); it, with its new id."""
    cur = conn.execute(
        "INSERT INTO files (name, state, origin, indexed_end, open_link, sha256, fs_version, date)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            file.name,
            file.state,
            file.origin,
            file.indexed_end,
            int(file.open_link),
            file.sha256,
            file.fs_version,
            file.date,
        ),
    )
    assert cur.lastrowid is not None
    return replace(file, id=cur.lastrowid)


def _insert_rows(conn: sqlite3.Connection, file_id: int, rows: Iterable[IndexRow]) -> list[int]:
    """Insert index entries of one file (inside the caller's transaction); their new ids."""
    ids: list[int] = []
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
    return ids


def _file(values: _SQL_FILE) -> FileRow:
    fid, name, state, origin, end, link, sha256, fs_version, date = values
    return FileRow(fid, name, state, origin, end, bool(link), sha256, fs_version, date)


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


#: ``write``: a writing connection (migrates the schema on open). ``read``:
#: read-only, alongside writers (SQLite may create its ``-wal``/``-shm``
#: files). ``immutable``: read-only and touching no file at all; only valid
#: while no other process has the store open.
Access = Literal["write", "read", "immutable"]


def _set_wal(conn: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode = WAL``, waiting out a concurrent first open.

    Switching the journal mode takes an exclusive lock on the file for a
    moment and does not always wait through ``busy_timeout``: another process
    opening a new store at the same instant is retried for as long as a busy
    transaction would be.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _connect(path: Path, *, synchronous: str, access: Access) -> sqlite3.Connection:
    if access == "write":
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
        _set_wal(conn)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        return conn
    flags = "mode=ro" if access == "read" else "mode=ro&immutable=1"
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?{flags}", uri=True, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
    return conn


def _schedule_scrub(conn: sqlite3.Connection, file_id: int, *, verified: bool) -> None:
    """A closed file's background work, made in the transaction that closes it: its
    verification (its scrub object), and the replication director woken to copy it
    (:mod:`gateway.store.object_types`)."""
    now = datetime.now(UTC)
    write_scrub_of_closed_file(conn, file_id, now, verified=verified)
    write_director_wake(conn, now)


class IndexDB:
    """A connection to the index: files, rows, dedup lookups.

    ``synchronous`` is SQLite's setting (``FULL`` under ``fsync: always``,
    ``NORMAL`` under ``close``, ``OFF`` under ``never``). ``access="write"``
    (the default) applies the schema's migration steps first
    (:func:`gateway.store.schema.migrate`); other accesses open read-only
    (``store check``) and expect an up-to-date schema. Raises
    :class:`sqlite3.Error` on failures (callers translate) and
    :class:`~gateway.store.errors.StoreError` for an index newer than this
    release.
    """

    def __init__(self, path: Path, *, synchronous: str = "FULL", access: Access = "write") -> None:
        self.path = path
        self.conn = _connect(path, synchronous=synchronous, access=access)
        if access == "write":
            try:
                migrate(self.conn)
            except BaseException:
                self.conn.close()
                raise

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
    def _files_where(self, where: str, params: tuple[object, ...] = ()) -> list[FileRow]:
        sql = f"SELECT {_FILE_COLUMNS} FROM files WHERE {where} ORDER BY id"
        return [_file(r) for r in self.conn.execute(sql, params).fetchall()]

    def files(self) -> list[FileRow]:
        """Every file, by id (``store check`` and ``repair`` only: O(files))."""
        return self._files_where("1")

    def unfinished_files(self) -> list[FileRow]:
        """Files ``open`` or ``importing``: what recovery looks at (a partial index)."""
        return self._files_where("state != 'closed'")

    def pending_links(self) -> list[FileRow]:
        """Closed files whose ``.open`` name is still linked (a partial index)."""
        return self._files_where("open_link != 0")

    def file_by_name(self, name: str) -> FileRow | None:
        found = self._files_where("name = ?", (name,))
        return found[0] if found else None

    def file_by_id(self, file_id: int) -> FileRow | None:
        found = self._files_where("id = ?", (file_id,))
        return found[0] if found else None

    def files_with_sha256(self, sha256: str) -> list[FileRow]:
        return self._files_where("sha256 = ?", (sha256,))

    def written_names(self) -> Iterator[str]:
        """Names of the files the store wrote, newest first (read lazily, a partial index)."""
        cursor = self.conn.execute(
            "SELECT name FROM files WHERE origin = 'written' ORDER BY id DESC"
        )
        try:
            for (name,) in cursor:
                yield str(name)
        finally:
            cursor.close()

    def add_file(
        self,
        name: str,
        *,
        state: FileState,
        origin: Origin,
        fs_version: int,
        date: str | None = None,
        sha256: str | None = None,
    ) -> FileRow:
        """Insert a file's row, placed under layout ``fs_version``.

        Raises :class:`sqlite3.IntegrityError` when the name is taken.
        """
        file = FileRow(0, name, state, origin, 0, False, sha256, fs_version, date)
        with self.transaction() as conn:
            return _insert_file(conn, file)

    def add_closed_file(
        self,
        name: str,
        *,
        origin: Origin,
        fs_version: int,
        date: str,
        sha256: str,
        rows: Iterable[IndexRow],
        indexed_end: int,
    ) -> FileRow:
        """Insert a closed file's row and its index entries in one transaction.

        For a file already in place under ``warcs/`` (adopted by ``store
        migrate``): it becomes known whole or not at all, with no
        ``importing`` state for recovery to undo. Raises
        :class:`sqlite3.IntegrityError` when the name is taken.
        """
        file = FileRow(0, name, "closed", origin, indexed_end, False, sha256, fs_version, date)
        with self.transaction() as conn:
            file = _insert_file(conn, file)
            _insert_rows(conn, file.id, rows)
        return file

    def close_file(self, file_id: int, *, sha256: str, open_link: bool) -> None:
        """Mark a file ``closed`` with its SHA-256; ``open_link``: its ``.open`` name remains."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE files SET state = 'closed', sha256 = ?, open_link = ? WHERE id = ?",
                (sha256, int(open_link), file_id),
            )
            _schedule_scrub(conn, file_id, verified=False)

    def clear_open_link(self, file_id: int) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE files SET open_link = 0 WHERE id = ?", (file_id,))

    def set_sha256(self, file_id: int, sha256: str) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE files SET sha256 = ? WHERE id = ?", (sha256, file_id))

    def set_date(self, file_id: int, date: str) -> None:
        """Record the creation date of a file whose row has none (never changes a set one)."""
        with self.transaction() as conn:
            conn.execute("UPDATE files SET date = ? WHERE id = ? AND date IS NULL", (date, file_id))

    def set_fs_version(self, file_id: int, fs_version: int, *, expected: int) -> bool:
        """Record that a closed file now lives under layout ``fs_version`` (compare-and-swap).

        True when the row was at ``expected`` and is changed; False when it
        is gone or another process changed it first.
        """
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE files SET fs_version = ? WHERE id = ? AND fs_version = ?"
                " AND state = 'closed'",
                (fs_version, file_id, expected),
            )
        return cur.rowcount == 1

    def merge_file(self, duplicate: FileRow, kept: FileRow) -> int | None:
        """Point the index entries of ``duplicate`` at ``kept`` (the same bytes), forget it.

        In one transaction: entries of ``duplicate`` at offsets ``kept`` has
        no entry for move to ``kept`` (same offsets: same bytes); the others
        are dropped (``kept`` has them); the row of ``duplicate`` is deleted.
        Only while both rows are closed with the SHA-256 both were read with,
        and ``duplicate`` is still under the layout it was read with (its
        bytes are removed from that place after the commit); returns the
        number of entries moved, or None when a row changed first (nothing
        is written then).
        """
        with self.transaction() as conn:
            (both,) = conn.execute(
                "SELECT COUNT(*) FROM files WHERE ((id = ? AND fs_version = ?) OR id = ?)"
                " AND state = 'closed' AND sha256 = ?",
                (duplicate.id, duplicate.fs_version, kept.id, kept.sha256),
            ).fetchone()
            if both != 2 or duplicate.sha256 != kept.sha256:
                return None
            cur = conn.execute(
                "UPDATE captures SET file_id = ? WHERE file_id = ? AND offset NOT IN"
                " (SELECT offset FROM captures WHERE file_id = ?)",
                (kept.id, duplicate.id, kept.id),
            )
            moved = cur.rowcount
            conn.execute("DELETE FROM captures WHERE file_id = ?", (duplicate.id,))
            conn.execute("DELETE FROM files WHERE id = ?", (duplicate.id,))
        return int(moved)

    def files_to_move(self, *, below_id: int | None, fs_version: int, limit: int) -> list[FileRow]:
        """Closed files the store owns under a layout older than ``fs_version``, newest first.

        Ordered by id descending (the order the store got them), starting at
        ``below_id`` inclusive (None: the newest); at most ``limit`` rows. A
        walk of the primary key: rows already moved are skipped as it goes.
        """
        where = "state = 'closed' AND origin IN ('written', 'imported') AND fs_version < ?"
        params: tuple[object, ...] = (fs_version,)
        if below_id is not None:
            where += " AND id <= ?"
            params += (below_id,)
        sql = f"SELECT {_FILE_COLUMNS} FROM files WHERE {where} ORDER BY id DESC LIMIT ?"
        return [_file(r) for r in self.conn.execute(sql, (*params, limit)).fetchall()]

    def count_files(self) -> int:
        """How many files the index knows (O(files))."""
        (count,) = self.conn.execute("SELECT COUNT(*) FROM files").fetchone()
        return int(count)

    def count_files_to_move(self, fs_version: int) -> int:
        """How many rows :meth:`files_to_move` would list in all (O(files))."""
        (count,) = self.conn.execute(
            "SELECT COUNT(*) FROM files WHERE state = 'closed'"
            " AND origin IN ('written', 'imported') AND fs_version < ?",
            (fs_version,),
        ).fetchone()
        return int(count)

    def remove_file(self, file_id: int) -> int:
        """Forget a file and every row pointing into it; return the rows dropped."""
        with self.transaction() as conn:
            cur = conn.execute("DELETE FROM captures WHERE file_id = ?", (file_id,))
            conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
        return int(cur.rowcount)

    # ------------------------------------------------------------------- rows
    def append_rows(
        self,
        file_id: int,
        rows: Iterable[IndexRow],
        indexed_end: int,
        *,
        closed_sha256: str | None = None,
    ) -> list[int]:
        """Insert ``rows`` and move the file's ``indexed_end``, in one transaction.

        With ``closed_sha256`` the same transaction marks the file ``closed``
        with that digest (an import becomes visible whole or not at all).
        Returns the new row ids (acknowledgement order).
        """
        with self.transaction() as conn:
            ids = _insert_rows(conn, file_id, rows)
            conn.execute("UPDATE files SET indexed_end = ? WHERE id = ?", (indexed_end, file_id))
            if closed_sha256 is not None:
                conn.execute(
                    "UPDATE files SET state = 'closed', sha256 = ? WHERE id = ?",
                    (closed_sha256, file_id),
                )
                _schedule_scrub(conn, file_id, verified=True)
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
