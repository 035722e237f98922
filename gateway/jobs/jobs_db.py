"""``JobsDB``: the jobs database's connection on a thread of its own, for the event loop.

The functions it runs are :mod:`gateway.jobs.db`'s; it opens the database
with :mod:`gateway.jobs.schema`, on a :class:`~gateway.jobs.sqlite_thread.SqliteThread`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gateway.jobs.model import ObjectType
from gateway.jobs.schema import connect, create_schema
from gateway.jobs.sqlite_thread import SqliteThread

__all__ = ["JobsDB"]


class JobsDB(SqliteThread[sqlite3.Connection]):
    """The jobs database at ``path``, with the tables of ``object_types``.

    ``await db.call(read_queue_length, object_type, states, now)`` runs
    ``read_queue_length(conn, ...)`` on the connection's thread (see
    :class:`~gateway.jobs.sqlite_thread.SqliteThread`); :meth:`open` connects
    and creates the schema (idempotent) before the first call.
    """

    def __init__(self, path: Path, object_types: Iterable[ObjectType[Any]]) -> None:
        self.path = path
        types = list(object_types)

        def opener() -> sqlite3.Connection:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = connect(path)
            try:
                create_schema(conn, types)
            except BaseException:
                conn.close()
                raise
            return conn

        super().__init__("jobs-db", opener, lambda conn: conn, lambda conn: conn.close())
