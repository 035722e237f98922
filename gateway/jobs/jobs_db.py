"""``JobsDB``: the jobs database's connection on a thread of its own, for the event loop.

The functions it runs are :mod:`gateway.jobs.db`'s; it opens the database
with :mod:`gateway.jobs.schema`.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from gateway.jobs.model import ObjectType
from gateway.jobs.schema import connect, create_schema

__all__ = ["JobsDB"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


class JobsDB:
    """One connection and the one thread that uses it, for the event loop.

    ``await db.call(read_queue_length, object_type, states, now)`` runs
    ``read_queue_length(conn, ...)`` on the connection's thread. Calls run
    one at a time in the order they were made; a caller cancelled while
    waiting does not stop a write already started (its outcome is read
    back by the next compare-and-swap).
    """

    def __init__(self, path: Path, object_types: Iterable[ObjectType]) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobs-db")
        self._conn: sqlite3.Connection | None = None
        self._types = list(object_types)

    async def open(self) -> None:
        """Connect and create the schema of the object types (idempotent)."""
        await self._run(self._open)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(self.path)
        try:
            create_schema(conn, self._types)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    async def call(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """``fn(conn, *args, **kwargs)`` on the database thread."""
        return await self.submit(fn, *args, **kwargs)

    def submit(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> asyncio.Future[_T]:
        """Like :meth:`call`, but return the future at once (it runs whatever the caller does)."""

        def run() -> _T:
            if self._conn is None:
                raise RuntimeError(f"the jobs database {self.path} is not open")
            return fn(self._conn, *args, **kwargs)

        return asyncio.get_running_loop().run_in_executor(self._executor, run)

    async def _run(self, fn: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def close(self) -> None:
        """Close the connection after the calls already made."""
        await self._run(self._close)
        self._executor.shutdown(wait=True)

    def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()
