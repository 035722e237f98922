"""The jobs database's tables, and a connection to it.

:func:`connect` opens the database (autocommit, WAL, ``busy_timeout``);
:func:`create_schema` makes a table per object type, its indexes, and the
``jobs_object_types`` registry. What is read and written in them:
:mod:`gateway.jobs.db`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from gateway.jobs.model import COMMON_COLUMNS, ObjectType

__all__ = ["BUSY_TIMEOUT_MS", "connect", "create_schema"]

#: How long a writer waits for another process's commit before SQLite gives
#: up with ``database is locked``. Every write (:mod:`gateway.jobs.db`) is one
#: short statement, so reaching it means a stuck process, not contention.
BUSY_TIMEOUT_MS: Final = 60_000


def connect(path: Path, *, read_only: bool = False) -> sqlite3.Connection:
    """A connection for :mod:`gateway.jobs.db`'s functions (autocommit, WAL, ``busy_timeout``).

    ``synchronous = NORMAL``: in WAL mode a commit survives a crash of the
    process; a power loss may undo the last ones, which only makes their
    objects due again (every tick is idempotent). ``read_only`` opens with
    ``mode=ro`` (``gateway jobs``); it raises :class:`sqlite3.OperationalError`
    when the database does not exist.
    """
    if read_only:
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
        )
    else:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if not read_only:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    return conn


_REGISTRY_TABLE: Final = """
CREATE TABLE IF NOT EXISTS jobs_object_types (
    name TEXT PRIMARY KEY,
    table_name TEXT NOT NULL,
    states TEXT NOT NULL,
    final TEXT NOT NULL
)"""


def _table_sql(object_type: ObjectType[Any]) -> list[str]:
    table = object_type.table
    columns = ",\n    ".join(f"{c} {decl}" for c, decl in (*COMMON_COLUMNS, *object_type.columns))
    statements = [
        f"CREATE TABLE IF NOT EXISTS {table} (\n    {columns}\n)",
        # The queue: due objects, oldest retry_at first.
        f"CREATE INDEX IF NOT EXISTS {table}_due ON {table}(retry_at) WHERE retry_at IS NOT NULL",
        f"CREATE INDEX IF NOT EXISTS {table}_status ON {table}(status)",
        f"CREATE INDEX IF NOT EXISTS {table}_errors ON {table}(last_error_at)"
        " WHERE last_error_at IS NOT NULL",
    ]
    for kind, keys in (("UNIQUE INDEX", object_type.unique), ("INDEX", object_type.indexes)):
        for columns_ in keys:
            statements.append(
                f"CREATE {kind} IF NOT EXISTS {table}_{'_'.join(columns_)}"
                f" ON {table}({', '.join(columns_)})"
            )
    return statements


def create_schema(conn: sqlite3.Connection, object_types: Iterable[ObjectType[Any]]) -> None:
    """Create the tables of ``object_types`` if missing.

    One ``BEGIN IMMEDIATE`` transaction; idempotent, safe to run from several
    processes at once. Each type is also recorded in ``jobs_object_types``,
    so that an orchestrator can tell objects of a type it has no actor for
    (a plugin no longer configured) and warn about them. The engine knows
    no object type of its own: the application hands its declarations in
    (the store's are :data:`gateway.store.object_types.OBJECT_TYPES`).
    """
    types = list(object_types)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_REGISTRY_TABLE)
        for object_type in types:
            for statement in _table_sql(object_type):
                conn.execute(statement)
            # An upsert that writes nothing when the row is already right: opening
            # a database must not change it (``store add`` of a refused file).
            conn.execute(
                "INSERT INTO jobs_object_types (name, table_name, states, final)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
                " table_name = excluded.table_name, states = excluded.states,"
                " final = excluded.final WHERE (table_name, states, final)"
                " IS NOT (excluded.table_name, excluded.states, excluded.final)",
                (
                    object_type.name,
                    object_type.table,
                    json.dumps(object_type.states),
                    json.dumps(object_type.final),
                ),
            )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
