"""The store's index, :class:`IndexDB`: WARC files and capture rows in SQLite (WAL mode).

The columns, the indexes and the row types are in :mod:`gateway.store.rows`;
opening a connection is :mod:`gateway.store.connection`.

A row is committed only after its bytes are written (and fsynced under
``fsync: always``), so a committed row, which is what lookups and the dedup
index see, always points at a whole record. A file's row is written before
the file is created, so no crash leaves a file of the store that the index
does not know.

Every method is blocking and each :class:`IndexDB` connection is used by
one thread at a time (the writer's, an import's, recovery's). Several
processes write the same index (the recording gateway, ``store add``,
background workers): every write is one short ``BEGIN IMMEDIATE``
transaction, and a connection waits up to
:data:`~gateway.store.connection.BUSY_TIMEOUT_MS` for another's to end, so
no user sees ``database is locked``. Lookups run in worker threads on
:class:`~gateway.store.reader_pool.ReaderPool` connections (WAL readers
never wait).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from gateway.store.connection import Access, connect
from gateway.store.indexing import FULL_RECORD_TYPES, IndexRow, extra_to_json
from gateway.store.object_types import write_director_wake, write_scrub_of_closed_file
from gateway.store.rows import (
    FILE_COLUMNS,
    ROW_COLUMNS,
    ROWS_FROM,
    FileRow,
    FileState,
    Origin,
    StoredRow,
    file_row,
    stored_row,
)
from gateway.store.schema import migrate

__all__ = ["IndexDB"]


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
        self.conn = connect(path, synchronous=synchronous, access=access)
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
        sql = f"SELECT {FILE_COLUMNS} FROM files WHERE {where} ORDER BY id"
        return [file_row(r) for r in self.conn.execute(sql, params).fetchall()]

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
        sql = f"SELECT {FILE_COLUMNS} FROM files WHERE {where} ORDER BY id DESC LIMIT ?"
        return [file_row(r) for r in self.conn.execute(sql, (*params, limit)).fetchall()]

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
            f"SELECT {ROW_COLUMNS} {ROWS_FROM} WHERE c.file_id = ? AND c.offset >= ?"
            " AND c.offset < ? ORDER BY c.offset",
            (file_id, start, end if end is not None else 1 << 62),
        ).fetchall()
        return [stored_row(r) for r in rows]

    def find_original(self, digest: str) -> StoredRow | None:
        """The earliest committed full record with payload ``digest`` (dedup index)."""
        r = self.conn.execute(
            f"SELECT {ROW_COLUMNS} {ROWS_FROM} WHERE c.digest = ?"
            " AND c.rec_type IN ('response', 'resource') ORDER BY c.id LIMIT 1",
            (digest,),
        ).fetchone()
        return stored_row(r) if r else None

    def latest_of(self, urlkey: str) -> StoredRow | None:
        """The latest committed capture of ``urlkey`` (by timestamp, then id)."""
        r = self.conn.execute(
            f"SELECT {ROW_COLUMNS} {ROWS_FROM} WHERE c.urlkey = ?"
            " ORDER BY c.timestamp DESC, c.id DESC LIMIT 1",
            (urlkey,),
        ).fetchone()
        return stored_row(r) if r else None

    def by_record_id(self, record_id: str) -> StoredRow | None:
        r = self.conn.execute(
            f"SELECT {ROW_COLUMNS} {ROWS_FROM} WHERE c.record_id = ? LIMIT 1", (record_id,)
        ).fetchone()
        return stored_row(r) if r else None


assert FULL_RECORD_TYPES == ("response", "resource")  # the SQL above spells them out
