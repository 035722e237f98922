"""The index's rows as Python sees them: :class:`FileRow`, :class:`StoredRow`, and their SQL.

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

:class:`~gateway.store.db.IndexDB` reads and writes these rows;
:class:`~gateway.store.reader_pool.ReaderPool` reads captures for lookups.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Final, Literal

from gateway.store.indexing import IndexRow, extra_from_json
from gateway.store.layout import OPEN_SUFFIX

__all__ = [
    "FILE_COLUMNS",
    "OWNED_ORIGINS",
    "ROWS_FROM",
    "ROW_COLUMNS",
    "FileRow",
    "FileState",
    "Origin",
    "StoredRow",
    "file_by_name",
    "file_row",
    "stored_row",
]

Origin = Literal["written", "imported", "found"]
FileState = Literal["open", "importing", "closed"]

#: Origins of the files the store owns: the only ones it may move, rename
#: or delete. A ``found`` file (adopted by an older release) is read, never moved.
OWNED_ORIGINS: Final[frozenset[Origin]] = frozenset({"written", "imported"})

FILE_COLUMNS: Final = "id, name, state, origin, indexed_end, open_link, sha256, fs_version, date"
ROW_COLUMNS: Final = (
    "c.id, c.urlkey, c.timestamp, c.rec_type, c.url, c.mime, c.status, c.digest, "
    "c.offset, c.length, c.warc_date, c.record_id, c.extra, f.name, f.state = 'open'"
)
ROWS_FROM: Final = "FROM captures c JOIN files f ON f.id = c.file_id"
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


_FILE_BY_NAME: Final = f"SELECT {FILE_COLUMNS} FROM files WHERE name = ?"


def file_by_name(conn: sqlite3.Connection, name: str) -> FileRow | None:
    """The row of the file ``name`` on ``conn`` (one lookup in the unique index on names)."""
    found = conn.execute(_FILE_BY_NAME, (name,)).fetchone()
    return file_row(found) if found else None


def file_row(values: _SQL_FILE) -> FileRow:
    """The :class:`FileRow` of a row selected as :data:`FILE_COLUMNS`."""
    fid, name, state, origin, end, link, sha256, fs_version, date = values
    return FileRow(fid, name, state, origin, end, bool(link), sha256, fs_version, date)


@dataclass(frozen=True, slots=True)
class StoredRow:
    """An index row as stored: ``id`` (acknowledgement order) and the file's current name."""

    id: int
    row: IndexRow
    filename: str


def stored_row(values: _SQL_ROW) -> StoredRow:
    """The :class:`StoredRow` of a row selected as :data:`ROW_COLUMNS` :data:`ROWS_FROM`."""
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
