"""One SQLite handle and the one thread that uses it, for the event loop.

A SQLite connection belongs to the thread that uses it, and its calls block:
the event loop hands each call to one worker thread, in order. Both the jobs
database (:class:`~gateway.jobs.jobs_db.JobsDB`) and the store's copy-status
index (:class:`~gateway.store.replication.replicas.IndexThread`) are this
class with their own ``opener``: the handle is made on the thread by the
first call (or by :meth:`open`), and every call runs ``fn(connection, ...)``
(or ``fn(handle)``) there, one at a time, in the order the calls were made.
A caller cancelled while waiting does not stop a call already started.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Concatenate, Generic, ParamSpec, TypeVar

__all__ = ["SqliteThread"]

_H = TypeVar("_H")
_P = ParamSpec("_P")
_T = TypeVar("_T")


class SqliteThread(Generic[_H]):
    """``opener()`` makes the handle (a connection, or an object holding one:
    ``connection(handle)`` gives it, ``closer(handle)`` closes it), on the thread.

    ``name`` names the thread (``thread_name_prefix``). After :meth:`close` a
    call raises :class:`RuntimeError`.
    """

    def __init__(
        self,
        name: str,
        opener: Callable[[], _H],
        connection: Callable[[_H], sqlite3.Connection],
        closer: Callable[[_H], None],
    ) -> None:
        self._opener = opener
        self._connection = connection
        self._closer = closer
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._handle: _H | None = None
        self._closed = False

    def _open(self) -> _H:
        if self._closed:
            raise RuntimeError("the database thread is closed")
        if self._handle is None:
            self._handle = self._opener()
        return self._handle

    async def open(self) -> None:
        """Make the handle now, so that opening fails here rather than at a first call."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self._open)

    def submit(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> asyncio.Future[_T]:
        """``fn(connection, *args, **kwargs)`` on the thread; the future at once (the
        call runs whatever the caller does)."""

        def run() -> _T:
            return fn(self._connection(self._open()), *args, **kwargs)

        return asyncio.get_running_loop().run_in_executor(self._executor, run)

    async def call(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        """``fn(connection, *args, **kwargs)`` on the thread."""
        return await self.submit(fn, *args, **kwargs)

    async def call_handle(self, fn: Callable[[_H], _T]) -> _T:
        """``fn(handle)`` on the thread, with the handle itself."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, lambda: fn(self._open())
        )

    def _close(self) -> None:
        self._closed = True
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self._closer(handle)

    async def close(self) -> None:
        """Close the handle after the calls already made, then the thread."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=True)
