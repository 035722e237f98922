"""The schema of the store's SQLite index, as an ordered chain of migration steps.

The database carries its schema version in ``PRAGMA user_version`` (0 for a
new file, and for an index written by the release at af8b42d, which had no
version). Opening the store for writing runs :func:`migrate`: every step past
the stored version, in order, each in its own ``BEGIN IMMEDIATE`` transaction
that also sets ``user_version`` to the step's number, so a step is either
applied whole and recorded, or not at all (SQLite transactions cover DDL and
the header's ``user_version``). A kill -9 at any moment leaves the database at
the last committed step, and the next open continues from there; several
processes opening the same store at once apply each step once (the version
is read again inside the step's transaction).

Adding a step (a new table, a column): write one function taking the
connection, with plain SQL inside, and append it to :data:`STEPS`; its number
is its position in the list, from 1. It runs inside the transaction: it must
not ``COMMIT``, ``BEGIN`` or change ``journal_mode``, and it must not read or
write WARC files (opening a store stays O(1) in its size; see
:mod:`gateway.store.layout`). Never edit or reorder a released step; a
database whose version is past the end of :data:`STEPS` was written by a
newer release and is refused (:class:`~gateway.store.errors.StoreError`).

The schema after every step (``sqlite3 index.sqlite3 .schema`` shows it)::

    files(id, name UNIQUE, origin, indexed_end,             -- step 1
          state, open_link, sha256, fs_version, date)       -- step 2
    captures(id, urlkey, timestamp, file_id, offset, length, rec_type,
             url, mime, status, digest, warc_date, record_id, extra)  -- step 1
    jobs_object_types, jobs_import, jobs_scrub                  -- step 3
        (the background jobs' objects: :mod:`gateway.jobs`)
    copies(name, storage, sha256, status, mtime, verified_at,
           archived, detail)                                -- step 4
    publications(name, target, sha256, mtime, captures)     -- step 4
    jobs_replication_director, jobs_replication_batch       -- step 4
    jobs_migrate                                                -- step 5
        (the migrator's objects: :mod:`gateway.store.migration.actor`)
    jobs_replication_copy                                       -- step 6
        (the replication copy objects: :mod:`gateway.store.replication.copy`)

:mod:`gateway.store.rows` says what each column of ``files`` and ``captures``
means, :mod:`gateway.store.replication.copy_status` those of ``copies`` and ``publications``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Final

from gateway.store.errors import StoreError

__all__ = ["SCHEMA_VERSION", "STEPS", "Step", "migrate", "schema_version"]

#: One migration step: DDL and data changes on the open connection, inside
#: the transaction :func:`migrate` holds.
Step = Callable[[sqlite3.Connection], None]


def create_index_tables(conn: sqlite3.Connection) -> None:
    """Step 1: ``files`` and ``captures`` as the release at af8b42d created them.

    ``IF NOT EXISTS`` throughout: that release's databases have the tables but
    no ``user_version``, and pass through this step unchanged.
    """
    conn.execute(
        """CREATE TABLE IF NOT EXISTS files (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            open INTEGER NOT NULL,
            origin TEXT NOT NULL,
            indexed_end INTEGER NOT NULL DEFAULT 0
        )"""
    )
    conn.execute(
        """CREATE TABLE IF NOT EXISTS captures (
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
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS captures_key ON captures(urlkey, timestamp, id)")
    conn.execute(
        "CREATE INDEX IF NOT EXISTS captures_original ON captures(digest, id)"
        " WHERE rec_type IN ('response', 'resource')"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS captures_file ON captures(file_id, offset)")
    conn.execute("CREATE INDEX IF NOT EXISTS captures_record_id ON captures(record_id)")


#: ``gateway-20250301120000-00001.warc.gz``: the date in a name the store wrote.
#: A released step must do the same forever, so it keeps its own pattern
#: rather than :mod:`gateway.store.layout`'s, which may grow.
_WRITTEN_NAME_DATE: Final = re.compile(r"-(\d{14})-\d{5,}\.warc\.gz$")


def add_file_facts(conn: sqlite3.Connection) -> None:
    """Step 2: what replication and layout migration need to know of each file.

    - ``state`` (``open``, ``importing``, ``closed``) replaces the ``open``
      flag; ``open_link`` marks a closed file whose ``.open`` name is still
      linked (the grace period after a close);
    - ``sha256`` of the whole file: NULL on rows of older releases until
      something computes it;
    - ``fs_version`` 1 (flat ``warcs/``) for every existing file;
    - ``date``: the file's 14-digit creation date, taken from the names the
      store wrote; NULL for other files of older releases.

    Partial indexes keep the start-up queries (unfinished files, pending
    links, the writer's newest file) independent of the store's size.
    """
    conn.execute(
        "ALTER TABLE files ADD COLUMN state TEXT NOT NULL DEFAULT 'closed'"
        " CHECK (state IN ('open', 'importing', 'closed'))"
    )
    conn.execute("UPDATE files SET state = 'open' WHERE open != 0")
    conn.execute("ALTER TABLE files DROP COLUMN open")
    conn.execute("ALTER TABLE files ADD COLUMN open_link INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE files ADD COLUMN sha256 TEXT")
    conn.execute("ALTER TABLE files ADD COLUMN fs_version INTEGER NOT NULL DEFAULT 1")
    conn.execute("ALTER TABLE files ADD COLUMN date TEXT")
    written = conn.execute("SELECT id, name FROM files WHERE origin = 'written'").fetchall()
    for file_id, name in written:
        match = _WRITTEN_NAME_DATE.search(name)
        if match:
            conn.execute("UPDATE files SET date = ? WHERE id = ?", (match.group(1), file_id))
    conn.execute("CREATE INDEX files_unfinished ON files(id) WHERE state != 'closed'")
    conn.execute("CREATE INDEX files_written ON files(id) WHERE origin = 'written'")
    conn.execute("CREATE INDEX files_open_link ON files(id) WHERE open_link != 0")
    conn.execute("CREATE INDEX files_sha256 ON files(sha256) WHERE sha256 IS NOT NULL")


def add_jobs_tables(conn: sqlite3.Connection) -> None:
    """Step 3: the background jobs' tables: ``import`` and ``scrub`` objects.

    The DDL :func:`gateway.jobs.schema.create_schema` makes from the object
    types' declarations (:mod:`gateway.store.online_import`,
    :mod:`gateway.store.integrity.scrub`) as they are at this step, written out so
    that the step stays the same forever; a test holds the two equal, so a
    change to either declaration comes with a step of its own. Closed files
    of older releases get their scrub objects from the scrub actor type's
    seeding, not here (this step reads no WARC file and stays O(1)).
    """
    statements = (
        """CREATE TABLE IF NOT EXISTS jobs_object_types (
            name TEXT PRIMARY KEY,
            table_name TEXT NOT NULL,
            states TEXT NOT NULL,
            final TEXT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS jobs_import (
            id INTEGER PRIMARY KEY,
            status TEXT NOT NULL,
            retry_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            last_error_at TEXT,
            lease_owner TEXT,
            batch TEXT NOT NULL DEFAULT '',
            source_path TEXT NOT NULL,
            name TEXT NOT NULL DEFAULT '',
            size INTEGER NOT NULL DEFAULT 0,
            sha256 TEXT NOT NULL DEFAULT '',
            date TEXT,
            records INTEGER NOT NULL DEFAULT 0,
            notes TEXT NOT NULL DEFAULT '[]',
            stored_as TEXT NOT NULL DEFAULT '',
            captures INTEGER NOT NULL DEFAULT 0,
            reason TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX IF NOT EXISTS jobs_import_due ON jobs_import(retry_at)"
        " WHERE retry_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS jobs_import_status ON jobs_import(status)",
        "CREATE INDEX IF NOT EXISTS jobs_import_errors ON jobs_import(last_error_at)"
        " WHERE last_error_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS jobs_import_batch ON jobs_import(batch)",
        """CREATE TABLE IF NOT EXISTS jobs_scrub (
            id INTEGER PRIMARY KEY,
            status TEXT NOT NULL,
            retry_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            last_error_at TEXT,
            lease_owner TEXT,
            file_name TEXT NOT NULL,
            resume_offset INTEGER NOT NULL DEFAULT 0,
            pass_started_at TEXT,
            pass_records INTEGER NOT NULL DEFAULT 0,
            pass_problems TEXT NOT NULL DEFAULT '[]',
            verified_at TEXT,
            records INTEGER NOT NULL DEFAULT 0,
            problems TEXT NOT NULL DEFAULT '[]',
            result TEXT NOT NULL DEFAULT '',
            passes INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX IF NOT EXISTS jobs_scrub_due ON jobs_scrub(retry_at)"
        " WHERE retry_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS jobs_scrub_status ON jobs_scrub(status)",
        "CREATE INDEX IF NOT EXISTS jobs_scrub_errors ON jobs_scrub(last_error_at)"
        " WHERE last_error_at IS NOT NULL",
        "CREATE UNIQUE INDEX IF NOT EXISTS jobs_scrub_file_name ON jobs_scrub(file_name)",
    )
    for statement in statements:
        conn.execute(statement)
    conn.executemany(
        "INSERT OR REPLACE INTO jobs_object_types (name, table_name, states, final)"
        " VALUES (?, ?, ?, ?)",
        [
            (
                "import",
                "jobs_import",
                '["queued", "verified", "imported", "present", "refused", "failed"]',
                '["imported", "present", "refused", "failed"]',
            ),
            (
                "scrub",
                "jobs_scrub",
                '["verifying", "good", "damaged", "missing"]',
                '["missing"]',
            ),
        ],
    )


def add_copy_status(conn: sqlite3.Connection) -> None:
    """Step 4: the replication status of every copy, what was published, and the
    replication's background objects (issue 13).

    ``copies``: one row per (file name, storage) that replication has
    touched, with the Software Heritage archiver's status (``missing``,
    ``ongoing``, ``present``, ``corrupted``) and ``mtime``; a closed file
    with no row for a storage has no copy there, except on the store's own
    ``primary``, where no row means present. ``publications``: the files
    whose captures were published to a Redis index. Both are keyed by the
    file's name and carry the SHA-256 they are about, so a row outlives
    neither a change of the file's bytes nor a later file of the same name.
    The partial index serves the scrub (least recently verified first).
    ``jobs_replication_director`` and ``jobs_replication_batch``: the
    objects of the director and the batches (:mod:`gateway.store.replication.director_actor`,
    :mod:`gateway.store.replication.batch`).
    """
    conn.execute(
        """CREATE TABLE copies (
            name TEXT NOT NULL,
            storage TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            status TEXT NOT NULL
                CHECK (status IN ('missing', 'ongoing', 'present', 'corrupted')),
            mtime REAL NOT NULL,
            verified_at REAL,
            archived INTEGER NOT NULL DEFAULT 0,
            detail TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (name, storage)
        ) WITHOUT ROWID"""
    )
    conn.execute("CREATE INDEX copies_unverified ON copies(verified_at) WHERE status = 'present'")
    conn.execute(
        """CREATE TABLE publications (
            name TEXT NOT NULL,
            target TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            mtime REAL NOT NULL,
            captures INTEGER NOT NULL,
            PRIMARY KEY (name, target)
        ) WITHOUT ROWID"""
    )
    # The replication's object types (gateway.store.object_types), as
    # gateway.jobs.schema.create_schema makes them at this step (a test holds them equal).
    statements = (
        """CREATE TABLE IF NOT EXISTS jobs_replication_director (
            id INTEGER PRIMARY KEY,
            status TEXT NOT NULL,
            retry_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            last_error_at TEXT,
            lease_owner TEXT,
            policy TEXT NOT NULL,
            passes INTEGER NOT NULL DEFAULT 0,
            last_pass_at TEXT,
            last_batches INTEGER NOT NULL DEFAULT 0,
            last_files INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX IF NOT EXISTS jobs_replication_director_due"
        " ON jobs_replication_director(retry_at) WHERE retry_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS jobs_replication_director_status"
        " ON jobs_replication_director(status)",
        "CREATE INDEX IF NOT EXISTS jobs_replication_director_errors"
        " ON jobs_replication_director(last_error_at) WHERE last_error_at IS NOT NULL",
        "CREATE UNIQUE INDEX IF NOT EXISTS jobs_replication_director_policy"
        " ON jobs_replication_director(policy)",
        """CREATE TABLE IF NOT EXISTS jobs_replication_batch (
            id INTEGER PRIMARY KEY,
            status TEXT NOT NULL,
            retry_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            last_error_at TEXT,
            lease_owner TEXT,
            pass_id TEXT NOT NULL,
            file_ids TEXT NOT NULL,
            max_rounds INTEGER NOT NULL DEFAULT 6,
            replace_conflicts INTEGER NOT NULL DEFAULT 0,
            rounds INTEGER NOT NULL DEFAULT 0,
            deferred INTEGER NOT NULL DEFAULT 0,
            files INTEGER NOT NULL DEFAULT 0,
            outcomes TEXT NOT NULL DEFAULT '{}',
            bytes_copied INTEGER NOT NULL DEFAULT 0,
            problems TEXT NOT NULL DEFAULT '{}',
            pending TEXT NOT NULL DEFAULT '[]',
            result TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX IF NOT EXISTS jobs_replication_batch_due"
        " ON jobs_replication_batch(retry_at) WHERE retry_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS jobs_replication_batch_status"
        " ON jobs_replication_batch(status)",
        "CREATE INDEX IF NOT EXISTS jobs_replication_batch_errors"
        " ON jobs_replication_batch(last_error_at) WHERE last_error_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS jobs_replication_batch_pass_id"
        " ON jobs_replication_batch(pass_id)",
    )
    for statement in statements:
        conn.execute(statement)
    conn.executemany(
        "INSERT OR REPLACE INTO jobs_object_types (name, table_name, states, final)"
        " VALUES (?, ?, ?, ?)",
        [
            ("replication_director", "jobs_replication_director", '["waiting"]', "[]"),
            (
                "replication_batch",
                "jobs_replication_batch",
                '["queued", "done", "unsafe"]',
                '["done", "unsafe"]',
            ),
        ],
    )


def add_migrate_table(conn: sqlite3.Connection) -> None:
    """Step 5: the migrator's objects (:mod:`gateway.store.migration.actor`), one per layout.

    Written out like steps 3 and 4, and held equal to the declaration by the same
    test. Makes no object: the actor type's seeding does, when an
    orchestrator starts (this step stays O(1)).
    """
    statements = (
        """CREATE TABLE IF NOT EXISTS jobs_migrate (
            id INTEGER PRIMARY KEY,
            status TEXT NOT NULL,
            retry_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            last_error_at TEXT,
            lease_owner TEXT,
            fs_version INTEGER NOT NULL,
            cursor_id INTEGER,
            pass_started_at TEXT,
            processed INTEGER NOT NULL DEFAULT 0,
            migrated INTEGER NOT NULL DEFAULT 0,
            merged INTEGER NOT NULL DEFAULT 0,
            left_behind INTEGER NOT NULL DEFAULT 0,
            passes INTEGER NOT NULL DEFAULT 0,
            result TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX IF NOT EXISTS jobs_migrate_due ON jobs_migrate(retry_at)"
        " WHERE retry_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS jobs_migrate_status ON jobs_migrate(status)",
        "CREATE INDEX IF NOT EXISTS jobs_migrate_errors ON jobs_migrate(last_error_at)"
        " WHERE last_error_at IS NOT NULL",
        "CREATE UNIQUE INDEX IF NOT EXISTS jobs_migrate_fs_version ON jobs_migrate(fs_version)",
    )
    for statement in statements:
        conn.execute(statement)
    conn.execute(
        "INSERT OR REPLACE INTO jobs_object_types (name, table_name, states, final)"
        " VALUES (?, ?, ?, ?)",
        (
            "migrate",
            "jobs_migrate",
            '["moving", "waiting", "current", "superseded"]',
            '["superseded"]',
        ),
    )


def add_copier_table(conn: sqlite3.Connection) -> None:
    """Step 6: the replication copy objects (:mod:`gateway.store.replication.copy`),
    one per (source, destination) group of a batch, and the batch's new state
    ``copying`` (it waits there for its copy objects).

    Written out like steps 3 to 5, and held equal to the declaration by the same
    test. A batch of the release before left ``queued`` is planned afresh by the
    new batch actor (copies it claimed count as under way until ``archival_max_age_s``).
    """
    statements = (
        """CREATE TABLE IF NOT EXISTS jobs_replication_copy (
            id INTEGER PRIMARY KEY,
            status TEXT NOT NULL,
            retry_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            last_error_at TEXT,
            lease_owner TEXT,
            batch_id INTEGER NOT NULL,
            source TEXT NOT NULL,
            destination TEXT NOT NULL,
            mtime REAL NOT NULL,
            max_rounds INTEGER NOT NULL DEFAULT 6,
            files TEXT NOT NULL,
            todo TEXT NOT NULL,
            retry TEXT NOT NULL DEFAULT '[]',
            rounds INTEGER NOT NULL DEFAULT 0,
            outcomes TEXT NOT NULL DEFAULT '{}',
            bytes_copied INTEGER NOT NULL DEFAULT 0,
            problems TEXT NOT NULL DEFAULT '{}',
            result TEXT NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX IF NOT EXISTS jobs_replication_copy_due ON jobs_replication_copy(retry_at)"
        " WHERE retry_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS jobs_replication_copy_status ON jobs_replication_copy(status)",
        "CREATE INDEX IF NOT EXISTS jobs_replication_copy_errors"
        " ON jobs_replication_copy(last_error_at) WHERE last_error_at IS NOT NULL",
        "CREATE UNIQUE INDEX IF NOT EXISTS jobs_replication_copy_batch_id_source_destination"
        " ON jobs_replication_copy(batch_id, source, destination)",
    )
    for statement in statements:
        conn.execute(statement)
    conn.executemany(
        "INSERT OR REPLACE INTO jobs_object_types (name, table_name, states, final)"
        " VALUES (?, ?, ?, ?)",
        [
            (
                "replication_batch",
                "jobs_replication_batch",
                '["queued", "copying", "done", "unsafe"]',
                '["done", "unsafe"]',
            ),
            (
                "replication_copy",
                "jobs_replication_copy",
                '["queued", "done", "failed"]',
                '["done", "failed"]',
            ),
        ],
    )


def add_claim_holders(conn: sqlite3.Connection) -> None:
    """Step 7: who holds each claim (``copies.holder``, ``HOST PID``; issue 25 §3).

    A claim (``ongoing``) is released when its run ends and, when its holder's
    process is gone, by the next run at once
    (:func:`gateway.store.replication.copy_status.write_release_claims`);
    claims of the release before (no holder) expire after
    ``archival_max_age_s`` as they did.
    """
    conn.execute("ALTER TABLE copies ADD COLUMN holder TEXT NOT NULL DEFAULT ''")


#: The chain, in order; step ``n`` (from 1) brings the database to version ``n``.
#: A new step that adds a jobs table creates it from its declaration
#: (:func:`gateway.jobs.db.create_schema` with the type of
#: :mod:`gateway.store.object_types`); steps 3 to 6 are written out and frozen.
STEPS: Final[list[Step]] = [
    create_index_tables,
    add_file_facts,
    add_jobs_tables,
    add_copy_status,
    add_migrate_table,
    add_copier_table,
    add_claim_holders,
]

#: The version this release writes.
SCHEMA_VERSION: Final = len(STEPS)


def schema_version(conn: sqlite3.Connection) -> int:
    """The database's ``PRAGMA user_version`` (0 for a new or unversioned file)."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    return int(version)


def migrate(conn: sqlite3.Connection, steps: list[Step] | None = None) -> list[int]:
    """Bring the database up to ``len(steps)`` (default :data:`STEPS`); return what ran.

    ``conn`` must be in autocommit mode (``isolation_level=None``). Each
    step runs in ``BEGIN IMMEDIATE`` ... ``COMMIT`` together with
    ``PRAGMA user_version = n``; an exception rolls the step back and
    propagates. Raises :class:`StoreError` for a database newer than
    ``steps``.
    """
    chain = STEPS if steps is None else steps
    found = schema_version(conn)
    if found > len(chain):
        raise StoreError(
            f"the store's index has schema version {found}, newer than this release's "
            f"{len(chain)}: it was written by a newer gateway; upgrade this one to open it"
        )
    applied: list[int] = []
    for number, step in enumerate(chain, start=1):
        if schema_version(conn) >= number:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            if schema_version(conn) < number:  # another process may have done it meanwhile
                step(conn)
                conn.execute(f"PRAGMA user_version = {number:d}")
                applied.append(number)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return applied
