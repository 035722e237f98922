"""Opening a connection to the store's index (``index.sqlite3``).

Writing (WAL mode), read-only beside writers, or immutable (:data:`Access`);
every one waits :data:`BUSY_TIMEOUT_MS` for another process's transaction.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Final, Literal

__all__ = ["BUSY_TIMEOUT_MS", "Access", "connect", "connect_reader"]

#: How long a connection waits for another process's write transaction.
BUSY_TIMEOUT_MS: Final = 30_000

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


def connect(path: Path, *, synchronous: str, access: Access) -> sqlite3.Connection:
    """A connection to the index at ``path``; ``synchronous`` is SQLite's setting (writers)."""
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


def connect_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection to the index, beside writers (WAL readers never wait)."""
    return connect(path, synchronous="NORMAL", access="read")
