"""The store's object types, declared once as data, and the writes a closing file makes.

Each :class:`~gateway.jobs.model.ObjectType` names its states, transitions and
own columns (ArchiveBox's lifecycle model; the rows are
:mod:`gateway.store.job_rows`), and each transition is named once, by a
constant below (``BATCH_COPYING_TO_DONE``), which the actors pass to
:meth:`~gateway.jobs.actors.ActorType.transition`. The jobs engine creates the tables
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
from typing import Any, Final

from gateway.jobs.db import format_time
from gateway.jobs.model import ObjectType
from gateway.store.job_rows import (
    BatchColumns,
    CopyColumns,
    DirectorColumns,
    ImportColumns,
    MigrateColumns,
    ScrubColumns,
)

__all__ = [
    "BATCH",
    "BATCH_COPYING_TO_COPYING",
    "BATCH_COPYING_TO_DONE",
    "BATCH_COPYING_TO_UNSAFE",
    "BATCH_QUEUED_TO_COPYING",
    "BATCH_QUEUED_TO_DONE",
    "BATCH_QUEUED_TO_UNSAFE",
    "COPY",
    "COPY_QUEUED_TO_DONE",
    "COPY_QUEUED_TO_FAILED",
    "COPY_QUEUED_TO_QUEUED",
    "DIRECTOR",
    "DIRECTOR_WAITING_TO_WAITING",
    "FIRST_INTERVAL_S",
    "IMPORT",
    "IMPORT_QUEUED_TO_FAILED",
    "IMPORT_QUEUED_TO_REFUSED",
    "IMPORT_QUEUED_TO_VERIFIED",
    "IMPORT_VERIFIED_TO_FAILED",
    "IMPORT_VERIFIED_TO_IMPORTED",
    "IMPORT_VERIFIED_TO_PRESENT",
    "IMPORT_VERIFIED_TO_REFUSED",
    "MIGRATE",
    "MIGRATE_CURRENT_TO_MOVING",
    "MIGRATE_CURRENT_TO_SUPERSEDED",
    "MIGRATE_MOVING_TO_CURRENT",
    "MIGRATE_MOVING_TO_MOVING",
    "MIGRATE_MOVING_TO_SUPERSEDED",
    "MIGRATE_MOVING_TO_WAITING",
    "MIGRATE_WAITING_TO_MOVING",
    "MIGRATE_WAITING_TO_SUPERSEDED",
    "OBJECT_TYPES",
    "SCRUB",
    "SCRUB_DAMAGED_TO_MISSING",
    "SCRUB_DAMAGED_TO_VERIFYING",
    "SCRUB_GOOD_TO_MISSING",
    "SCRUB_GOOD_TO_VERIFYING",
    "SCRUB_VERIFYING_TO_DAMAGED",
    "SCRUB_VERIFYING_TO_GOOD",
    "SCRUB_VERIFYING_TO_MISSING",
    "SCRUB_VERIFYING_TO_VERIFYING",
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
    row=ScrubColumns,
    unique=(("file_name",),),
    attention_states=("damaged",),
    label_column="file_name",
    detail_column="result",
)

# The transitions of scrub, each named once by its constant.
SCRUB_VERIFYING_TO_VERIFYING: Final = SCRUB.transition("verifying", "verifying")
SCRUB_VERIFYING_TO_GOOD: Final = SCRUB.transition("verifying", "good")
SCRUB_VERIFYING_TO_DAMAGED: Final = SCRUB.transition("verifying", "damaged")
SCRUB_VERIFYING_TO_MISSING: Final = SCRUB.transition("verifying", "missing")
SCRUB_GOOD_TO_VERIFYING: Final = SCRUB.transition("good", "verifying")
SCRUB_GOOD_TO_MISSING: Final = SCRUB.transition("good", "missing")
SCRUB_DAMAGED_TO_VERIFYING: Final = SCRUB.transition("damaged", "verifying")
SCRUB_DAMAGED_TO_MISSING: Final = SCRUB.transition("damaged", "missing")


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
    row=ImportColumns,
    indexes=(("batch",),),
    attention_states=("refused", "failed"),
    label_column="source_path",
    detail_column="reason",
)

# The transitions of import, each named once by its constant.
IMPORT_QUEUED_TO_VERIFIED: Final = IMPORT.transition("queued", "verified")
IMPORT_QUEUED_TO_REFUSED: Final = IMPORT.transition("queued", "refused")
IMPORT_QUEUED_TO_FAILED: Final = IMPORT.transition("queued", "failed")
IMPORT_VERIFIED_TO_IMPORTED: Final = IMPORT.transition("verified", "imported")
IMPORT_VERIFIED_TO_PRESENT: Final = IMPORT.transition("verified", "present")
IMPORT_VERIFIED_TO_REFUSED: Final = IMPORT.transition("verified", "refused")
IMPORT_VERIFIED_TO_FAILED: Final = IMPORT.transition("verified", "failed")


DIRECTOR: Final = ObjectType(
    name="replication_director",
    description="the retention policy's director: a batch object per batch_size files"
    " with too few safe copies, periodically",
    states=("waiting",),
    initial="waiting",
    final=(),
    transitions=(("waiting", "waiting"),),
    row=DirectorColumns,
    unique=(("policy",),),
    label_column="policy",
)

# The transitions of replication_director, each named once by its constant.
DIRECTOR_WAITING_TO_WAITING: Final = DIRECTOR.transition("waiting", "waiting")


BATCH: Final = ObjectType(
    name="replication_batch",
    description="a batch of files: their copies planned, claimed and handed to copy objects,"
    " until each file has its safe copies",
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
    row=BatchColumns,
    indexes=(("pass_id",),),
    attention_states=("unsafe",),
    label_column="pass_id",
    detail_column="result",
)

# The transitions of replication_batch, each named once by its constant.
BATCH_QUEUED_TO_COPYING: Final = BATCH.transition("queued", "copying")
BATCH_QUEUED_TO_DONE: Final = BATCH.transition("queued", "done")
BATCH_QUEUED_TO_UNSAFE: Final = BATCH.transition("queued", "unsafe")
BATCH_COPYING_TO_COPYING: Final = BATCH.transition("copying", "copying")
BATCH_COPYING_TO_DONE: Final = BATCH.transition("copying", "done")
BATCH_COPYING_TO_UNSAFE: Final = BATCH.transition("copying", "unsafe")


COPY: Final = ObjectType(
    name="replication_copy",
    description="a group of a batch: its files copied from one source to one destination",
    states=("queued", "done", "failed"),
    initial="queued",
    final=("done", "failed"),
    transitions=(("queued", "queued"), ("queued", "done"), ("queued", "failed")),
    row=CopyColumns,
    unique=(("batch_id", "source", "destination"),),
    attention_states=("failed",),
    label_column="destination",
    detail_column="result",
)

# The transitions of replication_copy, each named once by its constant.
COPY_QUEUED_TO_QUEUED: Final = COPY.transition("queued", "queued")
COPY_QUEUED_TO_DONE: Final = COPY.transition("queued", "done")
COPY_QUEUED_TO_FAILED: Final = COPY.transition("queued", "failed")


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
    row=MigrateColumns,
    unique=(("fs_version",),),
    attention_states=("waiting",),
    label_column="fs_version",
    detail_column="result",
)

# The transitions of migrate, each named once by its constant.
MIGRATE_MOVING_TO_MOVING: Final = MIGRATE.transition("moving", "moving")
MIGRATE_MOVING_TO_CURRENT: Final = MIGRATE.transition("moving", "current")
MIGRATE_MOVING_TO_WAITING: Final = MIGRATE.transition("moving", "waiting")
MIGRATE_WAITING_TO_MOVING: Final = MIGRATE.transition("waiting", "moving")
MIGRATE_CURRENT_TO_MOVING: Final = MIGRATE.transition("current", "moving")
MIGRATE_MOVING_TO_SUPERSEDED: Final = MIGRATE.transition("moving", "superseded")
MIGRATE_WAITING_TO_SUPERSEDED: Final = MIGRATE.transition("waiting", "superseded")
MIGRATE_CURRENT_TO_SUPERSEDED: Final = MIGRATE.transition("current", "superseded")


#: Every object type of the store, in the order their tables are created.
OBJECT_TYPES: Final[tuple[ObjectType[Any], ...]] = (IMPORT, SCRUB, MIGRATE, DIRECTOR, BATCH, COPY)


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
