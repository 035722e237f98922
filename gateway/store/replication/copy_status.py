"""The copy status: where each closed WARC file is present (issue 13 §2).

For each (file, storage) pair the store keeps the Software Heritage
archiver's status and its ``mtime`` (the time of its last change, Unix
seconds), in the ``copies`` table of its index (schema step 3)::

    copies(name, storage, sha256, status, mtime, verified_at, archived, detail, holder)
        name      the file's name: its CDX ``filename``, and the object name on
                  every storage
        storage   a ``store.storages`` name, or ``primary`` (the store's own
                  ``warcs/``)
        sha256    the bytes the row is about: a row whose SHA-256 is not the
                  file's (the file was rewritten, or the name reused) does not
                  apply to it, and the copy counts as missing
        status    ``missing``   no copy there
                  ``ongoing``   a copy is being made since ``mtime`` by
                                ``holder``: a claim, never a copy. The
                                director plans no second copy while it
                                stands; it is released (``missing``) when
                                its run ends, whether it exits or fails,
                                and at once by the next run when its
                                holder's process is gone; a claim of another
                                host, or of an older release, expires after
                                ``archival_max_age_s``
                  ``present``   the copy was verified (SHA-256) at ``mtime``
                  ``corrupted`` an object is there under the name with other
                                bytes: damaged since it was made
                                (``archived`` 1: the archiver may replace it
                                with a good copy), or another object that was
                                there first (``archived`` 0: reported, left as
                                it is unless ``store repair --replace-copies``)
        verified_at  when the copy's bytes were last checked (made or scrubbed)
        archived  1 once the archiver has verified a copy of its own there
        detail    the last problem or how the copy was verified, in words
        holder    ``HOST PID`` of the process whose claim made an ``ongoing``
                  row (schema step 7; '' on other rows and older claims)
    publications(name, target, sha256, mtime, captures)
        a file whose captures were published to a Redis index (``target``)

A closed file with no row for a storage has no copy there, except on the
``primary``, where no row means present: the file was closed there, and a
row appears only once something (a scrub, a failed read, a restore) has
looked. A file that is still ``.open`` has no copies at all.

The functions below are the lifecycle spec's kinds: ``read_*`` (no side
effects) and ``write_*`` (one atomic statement each), on a
:class:`sqlite3.Connection` of the index in autocommit mode
(:class:`gateway.store.db.IndexDB`'s); callers run them in a worker thread.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from gateway.storage.settings import PRIMARY

__all__ = [
    "COPY_STATUSES",
    "CopyRow",
    "CopyStatus",
    "CopySummary",
    "FileCopies",
    "claim_holder",
    "holder_is_gone",
    "iter_file_copies",
    "read_claim_holders",
    "read_copy_summary",
    "read_file_copies",
    "read_files_needing_copies",
    "read_present_copy",
    "read_unpublished",
    "write_copy_claim",
    "write_copy_present",
    "write_copy_release",
    "write_copy_status",
    "write_copy_verified",
    "write_publication",
    "write_release_claims",
]

CopyStatus = Literal["missing", "ongoing", "present", "corrupted"]
COPY_STATUSES: Final[tuple[CopyStatus, ...]] = get_args(CopyStatus)

_COPY_COLUMNS: Final = "name, storage, sha256, status, mtime, verified_at, archived, detail"
_C_COLUMNS: Final = ", ".join(f"c.{column}" for column in _COPY_COLUMNS.split(", "))
_SQL_COPY = tuple[str, str, str, CopyStatus, float, float | None, int, str]


@dataclass(frozen=True, slots=True)
class CopyRow:
    """One row of ``copies`` (see the module docstring)."""

    name: str
    storage: str
    sha256: str
    status: CopyStatus
    mtime: float
    verified_at: float | None = None
    archived: bool = False
    detail: str = ""

    def safe(self, cutoff: float) -> bool:
        """True when the director need not plan this copy: ``present``, or a claim
        ``ongoing`` since after ``cutoff`` (now minus ``archival_max_age_s``).
        Not what makes a file safe: that is :mod:`gateway.store.integrity.safety`."""
        return self.status == "present" or (self.status == "ongoing" and self.mtime > cutoff)


def _copy(values: _SQL_COPY) -> CopyRow:
    name, storage, sha256, status, mtime, verified_at, archived, detail = values
    return CopyRow(name, storage, sha256, status, mtime, verified_at, bool(archived), detail)


@dataclass(frozen=True, slots=True)
class FileCopies:
    """A closed file and the rows of its copies that apply to it (by storage).

    ``origin``, ``fs_version`` and ``date`` are the file's row's
    (:class:`~gateway.store.rows.FileRow`; the last two place it,
    :meth:`Layout.place <gateway.store.layout.Layout.place>`); ``sha256`` is None for files of an
    older release that never had it computed (they cannot be replicated).
    """

    id: int
    name: str
    sha256: str | None
    origin: str
    fs_version: int
    date: str | None
    copies: dict[str, CopyRow] = field(default_factory=dict)

    def status(self, storage: str, cutoff: float) -> CopyStatus:
        """The copy's status on ``storage``, an expired ``ongoing`` read as ``missing``."""
        row = self.copies.get(storage)
        if row is None:
            return "present" if storage == PRIMARY else "missing"
        if row.status == "ongoing" and not row.safe(cutoff):
            return "missing"
        return row.status

    def present_places(self, places: Sequence[str], cutoff: float) -> list[str]:
        """The places of ``places`` holding a verified copy (``present``)."""
        return [p for p in places if self.status(p, cutoff) == "present"]


def _in(places: Sequence[str]) -> str:
    """``?, ?, ...`` for an ``IN (...)`` of ``places``."""
    if not places:
        raise ValueError("no places: the primary is always one")
    return ", ".join("?" for _ in places)


# ----------------------------------------------------------------------- reads
def read_files_needing_copies(
    conn: sqlite3.Connection,
    places: Sequence[str],
    copies: int,
    cutoff: float,
    *,
    after_id: int = 0,
    limit: int = 100,
) -> list[int]:
    """The director's query: ids of closed files with fewer than ``copies`` safe
    copies among ``places``, ascending, after ``after_id``, at most ``limit``
    (one batch).

    Safe: ``present``, or ``ongoing`` with ``mtime`` after ``cutoff``; the
    primary without a row counts as present. Rows of other storages (no
    longer configured) and rows about other bytes do not count. A file of an
    older release with no SHA-256 has only its primary.
    """
    sql = f"""
        SELECT f.id FROM files f
        LEFT JOIN copies c ON c.name = f.name AND c.sha256 = f.sha256
            AND c.storage IN ({_in(places)})
        WHERE f.state = 'closed' AND f.id > ?
        GROUP BY f.id
        HAVING COALESCE(SUM(c.status = 'present' OR (c.status = 'ongoing' AND c.mtime > ?)), 0)
            + (COALESCE(MAX(c.storage = ?), 0) = 0) < ?
        ORDER BY f.id
        LIMIT ?
    """
    params = (*places, after_id, cutoff, PRIMARY, copies, limit)
    return [int(fid) for (fid,) in conn.execute(sql, params).fetchall()]


def read_file_copies(
    conn: sqlite3.Connection,
    places: Sequence[str],
    *,
    ids: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
) -> list[FileCopies]:
    """Closed files (by ``ids``, by ``names``, or all of them) with their copy rows
    on ``places`` that apply to them, ordered by file id.

    Without ``ids`` and ``names`` this reads every closed file (``store
    copies``): O(files).
    """
    where, params = ["f.state = 'closed'"], list[object]()
    if ids is not None:
        where.append(f"f.id IN ({', '.join('?' for _ in ids) or 'NULL'})")
        params.extend(ids)
    if names is not None:
        where.append(f"f.name IN ({', '.join('?' for _ in names) or 'NULL'})")
        params.extend(names)
    sql = (
        f"SELECT f.id, f.name, f.sha256, f.origin, f.fs_version, f.date, {_C_COLUMNS}"
        " FROM files f LEFT JOIN copies c ON c.name = f.name AND c.sha256 = f.sha256"
        f" AND c.storage IN ({_in(places)})"
        f" WHERE {' AND '.join(where)} ORDER BY f.id"
    )
    found: dict[int, FileCopies] = {}
    for values in conn.execute(sql, (*places, *params)):
        fid, name, sha256, origin, fs_version, date = values[:6]
        entry = found.get(fid)
        if entry is None:
            entry = found[fid] = FileCopies(fid, name, sha256, origin, fs_version, date)
        if values[6] is not None:
            row = _copy(values[6:])
            entry.copies[row.storage] = row
    return list(found.values())


@dataclass(slots=True)
class CopySummary:
    """Counts over every closed file (``store copies``, ``/metrics``, ``/_status``).

    ``by_status``: copies per (storage, status), the primary's implicit
    ``present`` included; files ``safe`` (at least ``copies`` present),
    ``pending`` (safe only counting copies still ``ongoing``),
    ``under_replicated`` (fewer safe copies than the policy asks),
    ``corrupted`` (a corrupted copy somewhere, in any of the classes above),
    ``no_sha256`` (files of an older release, not replicable).
    """

    files: int = 0
    safe: int = 0
    pending: int = 0
    under_replicated: int = 0
    corrupted: int = 0
    no_sha256: int = 0
    by_status: dict[tuple[str, CopyStatus], int] = field(default_factory=dict)

    def count(self, storage: str, status: CopyStatus, n: int = 1) -> None:
        key = (storage, status)
        self.by_status[key] = self.by_status.get(key, 0) + n


def read_copy_summary(
    conn: sqlite3.Connection, places: Sequence[str], copies: int, cutoff: float
) -> CopySummary:
    """Count copies by storage and status, and files by safety (one pass: O(files))."""
    summary = CopySummary()
    sql = f"""
        SELECT f.sha256 IS NULL,
            COALESCE(SUM(c.status = 'present'), 0),
            COALESCE(SUM(c.status = 'ongoing' AND c.mtime > ?), 0),
            COALESCE(SUM(c.status = 'corrupted'), 0),
            COALESCE(MAX(c.storage = ?), 0)
        FROM files f
        LEFT JOIN copies c ON c.name = f.name AND c.sha256 = f.sha256
            AND c.storage IN ({_in(places)})
        WHERE f.state = 'closed'
        GROUP BY f.id
    """
    for no_sha, present, ongoing, corrupted, has_primary in conn.execute(
        sql, (cutoff, PRIMARY, *places)
    ):
        summary.files += 1
        if no_sha:
            summary.no_sha256 += 1
            continue
        present += 0 if has_primary else 1
        if present >= copies:
            summary.safe += 1
        elif present + ongoing >= copies:
            summary.pending += 1
        else:
            summary.under_replicated += 1
        if corrupted:
            summary.corrupted += 1
    rows = conn.execute(
        f"""SELECT c.storage, CASE WHEN c.status = 'ongoing' AND c.mtime <= ? THEN 'missing'
                ELSE c.status END, COUNT(*)
            FROM copies c JOIN files f ON f.name = c.name AND f.sha256 = c.sha256
            WHERE f.state = 'closed' AND c.storage IN ({_in(places)})
            GROUP BY 1, 2""",
        (cutoff, *places),
    )
    for storage, status, n in rows:
        summary.count(storage, status, n)
    (implicit,) = conn.execute(
        "SELECT COUNT(*) FROM files f WHERE f.state = 'closed' AND f.sha256 IS NOT NULL"
        " AND NOT EXISTS (SELECT 1 FROM copies c WHERE c.name = f.name"
        " AND c.sha256 = f.sha256 AND c.storage = ?)",
        (PRIMARY,),
    ).fetchone()
    summary.count(PRIMARY, "present", int(implicit))
    return summary


def read_present_copy(conn: sqlite3.Connection, name: str, storage: str) -> CopyRow | None:
    """The ``present`` row of ``name`` on ``storage`` for the file's current bytes, else None."""
    values = conn.execute(
        f"SELECT {_C_COLUMNS} FROM copies c"
        " JOIN files f ON f.name = c.name AND f.sha256 = c.sha256"
        " WHERE c.name = ? AND c.storage = ? AND c.status = 'present' AND f.state = 'closed'",
        (name, storage),
    ).fetchone()
    return _copy(values) if values else None


def read_unpublished(
    conn: sqlite3.Connection,
    target: str,
    storage: str,
    places: Sequence[str],
    copies: int,
    *,
    limit: int,
) -> list[tuple[int, str, str]]:
    """Files safe under the policy (``copies`` present among ``places``) and
    present on ``storage``, whose captures are not yet published to ``target``:
    ``(id, name, sha256)`` by id, at most ``limit``."""
    sql = f"""
        SELECT f.id, f.name, f.sha256 FROM files f
        JOIN copies s ON s.name = f.name AND s.sha256 = f.sha256 AND s.storage = ?
            AND s.status = 'present'
        LEFT JOIN copies c ON c.name = f.name AND c.sha256 = f.sha256
            AND c.storage IN ({_in(places)})
        WHERE f.state = 'closed' AND NOT EXISTS (
            SELECT 1 FROM publications p WHERE p.name = f.name AND p.target = ?
                AND p.sha256 = f.sha256)
        GROUP BY f.id
        HAVING COALESCE(SUM(c.status = 'present'), 0)
            + (COALESCE(MAX(c.storage = ?), 0) = 0) >= ?
        ORDER BY f.id LIMIT ?
    """
    params = (storage, *places, target, PRIMARY, copies, limit)
    return [(int(i), str(n), str(s)) for i, n, s in conn.execute(sql, params)]


def iter_file_copies(
    conn: sqlite3.Connection, places: Sequence[str], *, page: int = 1000
) -> Iterator[FileCopies]:
    """Every closed file with its copies, by id, read ``page`` files at a time."""
    after = 0
    while True:
        ids = [
            int(fid)
            for (fid,) in conn.execute(
                "SELECT id FROM files WHERE state = 'closed' AND id > ? ORDER BY id LIMIT ?",
                (after, page),
            )
        ]
        if not ids:
            return
        yield from read_file_copies(conn, places, ids=ids)
        after = ids[-1]


# ---------------------------------------------------------------------- writes
def write_copy_claim(
    conn: sqlite3.Connection,
    name: str,
    storage: str,
    sha256: str,
    seen: CopyRow | None,
    mtime: float,
) -> bool:
    """Mark a copy ``ongoing`` since ``mtime``, if its row is still the one the
    batch read (``seen``; None: no row applied). One compare-and-swap
    statement; returns whether it won (another batch may have claimed it).
    """
    holder = claim_holder()
    if seen is None:
        cursor = conn.execute(
            f"INSERT INTO copies ({_COPY_COLUMNS}, holder)"
            " VALUES (?, ?, ?, 'ongoing', ?, NULL, 0, '', ?)"
            " ON CONFLICT (name, storage) DO UPDATE SET sha256 = excluded.sha256,"
            " status = 'ongoing', mtime = excluded.mtime, detail = '', archived = 0,"
            " verified_at = NULL, holder = excluded.holder WHERE copies.sha256 != excluded.sha256",
            (name, storage, sha256, mtime, holder),
        )
    else:
        cursor = conn.execute(
            "UPDATE copies SET status = 'ongoing', mtime = ?, detail = '', holder = ?"
            " WHERE name = ? AND storage = ? AND sha256 = ? AND status = ? AND mtime = ?",
            (mtime, holder, name, storage, sha256, seen.status, seen.mtime),
        )
    return cursor.rowcount == 1


def claim_holder() -> str:
    """``HOST PID``: who claims, as the ``holder`` of the claims this process makes."""
    return f"{socket.gethostname()} {os.getpid()}"


def holder_is_gone(holder: str) -> bool:
    """True when ``holder`` is a process of this host that no longer runs.

    A holder of another host, or one of an older release (''), is not known
    to be gone: its claims expire after ``archival_max_age_s``.

    >>> holder_is_gone(claim_holder()), holder_is_gone(""), holder_is_gone("elsewhere 1")
    (False, False, False)
    """
    host, _, pid = holder.rpartition(" ")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def read_claim_holders(conn: sqlite3.Connection) -> list[str]:
    """The distinct holders of ``ongoing`` claims (the claims of older releases, '', left out)."""
    rows = conn.execute(
        "SELECT DISTINCT holder FROM copies WHERE status = 'ongoing' AND holder != ''"
    )
    return sorted(holder for (holder,) in rows)


def write_release_claims(
    conn: sqlite3.Connection, holder: str, *, mtime: float, detail: str
) -> int:
    """Every ``ongoing`` claim of ``holder`` back to ``missing`` since ``mtime``, saying
    why (the claim's last problem kept after it); one statement; returns how many.
    Run when a run ends (its own claims) and for a holder that is gone
    (:func:`holder_is_gone`)."""
    cursor = conn.execute(
        "UPDATE copies SET status = 'missing', mtime = ?, holder = '',"
        " detail = CASE WHEN detail = '' THEN ? ELSE ? || ' (last: ' || detail || ')' END"
        " WHERE status = 'ongoing' AND holder = ?",
        (mtime, detail, detail, holder),
    )
    return cursor.rowcount


def write_copy_present(
    conn: sqlite3.Connection,
    name: str,
    storage: str,
    sha256: str,
    *,
    mtime: float,
    verified_at: float,
    detail: str,
) -> None:
    """Record a copy verified at its destination: ``present`` since ``mtime`` (the
    batch's), ``archived`` (the archiver's own). One upsert."""
    conn.execute(
        f"INSERT INTO copies ({_COPY_COLUMNS}) VALUES (?, ?, ?, 'present', ?, ?, 1, ?)"
        " ON CONFLICT (name, storage) DO UPDATE SET sha256 = excluded.sha256,"
        " status = 'present', mtime = excluded.mtime, verified_at = excluded.verified_at,"
        " archived = 1, detail = excluded.detail",
        (name, storage, sha256, mtime, verified_at, detail),
    )


def write_copy_status(
    conn: sqlite3.Connection,
    name: str,
    storage: str,
    sha256: str,
    status: CopyStatus,
    *,
    mtime: float,
    detail: str,
    archived: bool | None = None,
) -> None:
    """Set a copy's status (``missing``, ``corrupted``) and why; one upsert.

    ``archived`` None keeps the row's flag (a new row: 0).
    """
    keep = "copies.archived" if archived is None else str(int(archived))
    conn.execute(
        f"INSERT INTO copies ({_COPY_COLUMNS}) VALUES (?, ?, ?, ?, ?, NULL, ?, ?)"
        " ON CONFLICT (name, storage) DO UPDATE SET sha256 = excluded.sha256,"
        f" status = excluded.status, mtime = excluded.mtime, archived = {keep},"
        " detail = excluded.detail",
        (name, storage, sha256, status, mtime, int(bool(archived)), detail),
    )


def write_copy_release(
    conn: sqlite3.Connection,
    name: str,
    storage: str,
    claimed_mtime: float,
    status: CopyStatus,
    *,
    mtime: float,
    detail: str,
) -> bool:
    """Give back a claim that ended without a copy (its source turned out bad):
    ``ongoing`` since ``claimed_mtime`` becomes ``status`` again. One
    compare-and-swap; False when the claim was not ours any more."""
    cursor = conn.execute(
        "UPDATE copies SET status = ?, mtime = ?, detail = ?"
        " WHERE name = ? AND storage = ? AND status = 'ongoing' AND mtime = ?",
        (status, mtime, detail, name, storage, claimed_mtime),
    )
    return cursor.rowcount == 1


def write_copy_verified(
    conn: sqlite3.Connection, name: str, storage: str, sha256: str, *, verified_at: float
) -> None:
    """A scrub found the copy whole: ``present`` (mtime kept, or ``verified_at``
    for a primary that had no row), ``verified_at`` set. One upsert."""
    conn.execute(
        f"INSERT INTO copies ({_COPY_COLUMNS}) VALUES (?, ?, ?, 'present', ?, ?, 1, '')"
        " ON CONFLICT (name, storage) DO UPDATE SET verified_at = excluded.verified_at"
        " WHERE copies.sha256 = excluded.sha256 AND copies.status = 'present'",
        (name, storage, sha256, verified_at, verified_at),
    )


def write_publication(
    conn: sqlite3.Connection, name: str, target: str, sha256: str, *, mtime: float, captures: int
) -> None:
    """Record that ``captures`` index lines of the file were published to ``target``."""
    conn.execute(
        "INSERT INTO publications (name, target, sha256, mtime, captures) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (name, target) DO UPDATE SET sha256 = excluded.sha256,"
        " mtime = excluded.mtime, captures = excluded.captures",
        (name, target, sha256, mtime, captures),
    )
