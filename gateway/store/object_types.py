"""The store's object types, declared once as data, and the writes a closing file makes.

Each :class:`~gateway.jobs.model.ObjectType` names its states, transitions and
own columns (ArchiveBox's lifecycle model); the jobs engine creates the tables
from these declarations (:func:`gateway.jobs.schema.create_schema`) and the actor
types that tick them live with the work they do: :mod:`gateway.store.online_import`
(``IMPORT``), :mod:`gateway.store.integrity.scrub` (``SCRUB``),
:mod:`gateway.store.migration.actor` (``MIGRATE``) and
:mod:`gateway.store.replication.director_actor` (``DIRECTOR``),
:mod:`gateway.store.replication.batch` (``BATCH``) and
:mod:`gateway.store.replication.copy` (``COPY``).

Two writes below run inside the transaction that closes a file
(:meth:`gateway.store.db.IndexDB.close_file`), so that a closed file never
lacks its scrub object and the replication director wakes to copy it; the
third follows a restore of a damaged primary, so that no report goes on
calling a restored file damaged.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from typing import Final

from gateway.jobs.db import format_time
from gateway.jobs.model import ObjectType

__all__ = [
    "BATCH",
    "COPY",
    "DIRECTOR",
    "FIRST_INTERVAL_S",
    "IMPORT",
    "MIGRATE",
    "OBJECT_TYPES",
    "SCRUB",
    "write_director_wake",
    "write_scrub_of_closed_file",
    "write_scrub_recheck",
]

SCRUB: Final = ObjectType(
    name="scrub",
    description="a closed WARC file verified again and again (records, digests, index)",
    states=("verifying", "good", "damaged", "missing"),
    initial="verifying",
    final=("missing",),
    transitions=(
        ("verifying", "verifying"),
        ("verifying", "good"),
        ("verifying", "damaged"),
        ("verifying", "missing"),
        ("good", "verifying"),
        ("good", "missing"),
        ("damaged", "verifying"),
        ("damaged", "missing"),
    ),
    columns=(
        ("file_name", "TEXT NOT NULL"),
        ("resume_offset", "INTEGER NOT NULL DEFAULT 0"),
        ("pass_started_at", "TEXT"),
        ("pass_records", "INTEGER NOT NULL DEFAULT 0"),
        ("pass_problems", "TEXT NOT NULL DEFAULT '[]'"),
        ("verified_at", "TEXT"),
        ("records", "INTEGER NOT NULL DEFAULT 0"),
        ("problems", "TEXT NOT NULL DEFAULT '[]'"),
        ("result", "TEXT NOT NULL DEFAULT ''"),
        ("passes", "INTEGER NOT NULL DEFAULT 0"),
    ),
    unique=(("file_name",),),
    attention_states=("damaged",),
    label_column="file_name",
    detail_column="result",
)


#: When a file verified on import is first verified again (``scrub_interval_days``
#: applies from its next pass on: the store's own code does not read settings).
FIRST_INTERVAL_S: Final = 30 * 86_400.0


def write_scrub_of_closed_file(
    conn: sqlite3.Connection, file_id: int, now: datetime, *, verified: bool
) -> None:
    """Give a file that was just closed its scrub object: one statement.

    Run by :class:`~gateway.store.db.IndexDB` inside the transaction that
    closes the file (the writer's close, recovery's, an import's), so a
    closed file never lacks one. ``INSERT OR IGNORE``: once per file.
    ``verified``: the file was verified just now (an import), so it starts
    ``good``, due again in :data:`FIRST_INTERVAL_S`; otherwise it is due now.
    """
    stamp = format_time(now)
    if verified:
        status, due = "good", format_time(now + timedelta(seconds=FIRST_INTERVAL_S))
        verified_at, result = stamp, "ok (verified on import)"
    else:
        status, due, verified_at, result = SCRUB.initial, stamp, None, ""
    conn.execute(
        f"INSERT OR IGNORE INTO {SCRUB.table} (status, retry_at, created_at, updated_at,"
        " file_name, verified_at, result) SELECT ?, ?, ?, ?, name, ?, ? FROM files WHERE id = ?",
        (status, due, stamp, stamp, verified_at, result, file_id),
    )


IMPORT: Final = ObjectType(
    name="import",
    description="a WARC or ARC file handed to the store (gateway store add)",
    states=("queued", "verified", "imported", "present", "refused", "failed"),
    initial="queued",
    final=("imported", "present", "refused", "failed"),
    transitions=(
        ("queued", "verified"),
        ("queued", "refused"),
        ("queued", "failed"),
        ("verified", "imported"),
        ("verified", "present"),
        ("verified", "refused"),
        ("verified", "failed"),
    ),
    columns=(
        ("batch", "TEXT NOT NULL DEFAULT ''"),
        ("source_path", "TEXT NOT NULL"),
        ("name", "TEXT NOT NULL DEFAULT ''"),
        ("size", "INTEGER NOT NULL DEFAULT 0"),
        ("sha256", "TEXT NOT NULL DEFAULT ''"),
        ("date", "TEXT"),
        ("records", "INTEGER NOT NULL DEFAULT 0"),
        ("notes", "TEXT NOT NULL DEFAULT '[]'"),
        ("stored_as", "TEXT NOT NULL DEFAULT ''"),
        ("captures", "INTEGER NOT NULL DEFAULT 0"),
        ("reason", "TEXT NOT NULL DEFAULT ''"),
    ),
    indexes=(("batch",),),
    attention_states=("refused", "failed"),
    label_column="source_path",
    detail_column="reason",
)


DIRECTOR: Final = ObjectType(
    name="replication_director",
    description="the retention policy's director: a batch object per batch_size files"
    " with too few safe copies, periodically",
    states=("waiting",),
    initial="waiting",
    final=(),
    transitions=(("waiting", "waiting"),),
    columns=(
        ("policy", "TEXT NOT NULL"),
        ("passes", "INTEGER NOT NULL DEFAULT 0"),
        ("last_pass_at", "TEXT"),
        ("last_batches", "INTEGER NOT NULL DEFAULT 0"),
        ("last_files", "INTEGER NOT NULL DEFAULT 0"),
    ),
    unique=(("policy",),),
    label_column="policy",
)


BATCH: Final = ObjectType(
    name="replication_batch",
    description="a replication worker's batch: its files' copies planned, claimed and handed"
    " to copiers, until each file has its safe copies",
    states=("queued", "copying", "done", "unsafe"),
    initial="queued",
    final=("done", "unsafe"),
    transitions=(
        ("queued", "copying"),
        ("queued", "done"),
        ("queued", "unsafe"),
        ("copying", "copying"),
        ("copying", "done"),
        ("copying", "unsafe"),
    ),
    # rounds: the most rounds one of its copy objects took; deferred: files its
    # copiers left to a later tick; pending: the groups handed to copy objects,
    # [[source, destination, mtime, [[name, replace], ...]], ...].
    columns=(
        ("pass_id", "TEXT NOT NULL"),
        ("file_ids", "TEXT NOT NULL"),
        ("max_rounds", "INTEGER NOT NULL DEFAULT 6"),
        ("replace_conflicts", "INTEGER NOT NULL DEFAULT 0"),
        ("rounds", "INTEGER NOT NULL DEFAULT 0"),
        ("deferred", "INTEGER NOT NULL DEFAULT 0"),
        ("files", "INTEGER NOT NULL DEFAULT 0"),
        ("outcomes", "TEXT NOT NULL DEFAULT '{}'"),
        ("bytes_copied", "INTEGER NOT NULL DEFAULT 0"),
        ("problems", "TEXT NOT NULL DEFAULT '{}'"),
        ("pending", "TEXT NOT NULL DEFAULT '[]'"),
        ("result", "TEXT NOT NULL DEFAULT ''"),
    ),
    indexes=(("pass_id",),),
    attention_states=("unsafe",),
    label_column="pass_id",
    detail_column="result",
)


COPY: Final = ObjectType(
    name="replication_copy",
    description="a copier's group: files of one batch copied from one source to one destination",
    states=("queued", "done", "failed"),
    initial="queued",
    final=("done", "failed"),
    transitions=(("queued", "queued"), ("queued", "done"), ("queued", "failed")),
    # files: the group, [name, ...]; todo: what is left of this round, and retry: what
    # failed transiently in it, each [[name, replace, claimed mtime], ...].
    columns=(
        ("batch_id", "INTEGER NOT NULL"),
        ("source", "TEXT NOT NULL"),
        ("destination", "TEXT NOT NULL"),
        ("mtime", "REAL NOT NULL"),
        ("max_rounds", "INTEGER NOT NULL DEFAULT 6"),
        ("files", "TEXT NOT NULL"),
        ("todo", "TEXT NOT NULL"),
        ("retry", "TEXT NOT NULL DEFAULT '[]'"),
        ("rounds", "INTEGER NOT NULL DEFAULT 0"),
        ("outcomes", "TEXT NOT NULL DEFAULT '{}'"),
        ("bytes_copied", "INTEGER NOT NULL DEFAULT 0"),
        ("problems", "TEXT NOT NULL DEFAULT '{}'"),
        ("result", "TEXT NOT NULL DEFAULT ''"),
    ),
    unique=(("batch_id", "source", "destination"),),
    attention_states=("failed",),
    label_column="destination",
    detail_column="result",
)


def write_director_wake(conn: sqlite3.Connection, now: datetime) -> int:
    """Make the director due now (a file was closed: it may need copies), unless a
    live actor holds it or it is due already; one statement, a wake only."""
    stamp = format_time(now)
    cursor = conn.execute(
        f"UPDATE {DIRECTOR.table} SET retry_at = ? WHERE retry_at > ? AND lease_owner IS NULL",
        (stamp, stamp),
    )
    return cursor.rowcount


MIGRATE: Final = ObjectType(
    name="migrate",
    description="the store's files moved to the layout this release writes, newest first",
    states=("moving", "waiting", "current", "superseded"),
    initial="moving",
    final=("superseded",),
    transitions=(
        ("moving", "moving"),
        ("moving", "current"),
        ("moving", "waiting"),
        ("waiting", "moving"),
        ("current", "moving"),
        ("moving", "superseded"),
        ("waiting", "superseded"),
        ("current", "superseded"),
    ),
    columns=(
        ("fs_version", "INTEGER NOT NULL"),
        ("cursor_id", "INTEGER"),
        ("pass_started_at", "TEXT"),
        ("processed", "INTEGER NOT NULL DEFAULT 0"),
        ("migrated", "INTEGER NOT NULL DEFAULT 0"),
        ("merged", "INTEGER NOT NULL DEFAULT 0"),
        ("left_behind", "INTEGER NOT NULL DEFAULT 0"),
        ("passes", "INTEGER NOT NULL DEFAULT 0"),
        ("result", "TEXT NOT NULL DEFAULT ''"),
    ),
    unique=(("fs_version",),),
    attention_states=("waiting",),
    label_column="fs_version",
    detail_column="result",
)


#: Every object type of the store, in the order their tables are created.
OBJECT_TYPES: Final[tuple[ObjectType, ...]] = (IMPORT, SCRUB, MIGRATE, DIRECTOR, BATCH, COPY)


def write_scrub_recheck(conn: sqlite3.Connection, file_name: str, now: datetime) -> int:
    """A file restored from a verified copy: its ``damaged`` scrub object becomes
    ``verifying``, due now (the declared ``damaged -> verifying``; one statement,
    a compare-and-swap on the state, never under a live lease). The next scrub
    verifies it again; meanwhile no report calls it damaged. Returns 1 when it
    took effect."""
    stamp = format_time(now)
    cursor = conn.execute(
        f"UPDATE {SCRUB.table} SET status = 'verifying', retry_at = ?, updated_at = ?,"
        " result = 'restored from a verified copy; verified again next'"
        " WHERE file_name = ? AND status = 'damaged' AND (lease_owner IS NULL OR retry_at <= ?)",
        (stamp, stamp, file_name, stamp),
    )
    return cursor.rowcount
