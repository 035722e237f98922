"""Coroutines started in the calling task and given a timer only if they wait.

A lookup in a local index file, or the load of a record from a local WARC
file, usually finishes without ever waiting on the event loop. Wrapping it in
``asyncio.timeout`` (a timer handle armed and cancelled) or in a task costs
more than the work itself. :func:`run_within` starts the coroutine at once,
in the calling task, as Python 3.12's eager tasks do; only when it has to
wait does the rest run under ``asyncio.timeout_at`` the deadline counted from
the call, so the bound is the one ``asyncio.timeout(timeout_s)`` gives.
:class:`Resumed` lets any task await a coroutine that was started this way.

A coroutine that waits must be resumed in the task that started it when it
may have captured that task (aiohttp's client timeouts do): :func:`run_within`
does so. Handing one to another task is only safe for coroutines that wait on
nothing but ``asyncio.sleep(0)`` (the checkpoints of a local scan).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["Resumed", "run_within"]

_T = TypeVar("_T")


async def run_within(coro: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
    """Await ``coro`` with a deadline of ``timeout_s`` seconds, started eagerly.

    Returns what ``coro`` returns; raises what it raises, and TimeoutError
    when it is still waiting at the deadline (it is then cancelled, as
    ``asyncio.timeout`` cancels).
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        pending = coro.send(None)
    except StopIteration as done:
        result: _T = done.value
        return result
    async with asyncio.timeout_at(deadline):
        return await Resumed(coro, pending)


class Resumed(Generic[_T]):
    """Awaits a coroutine already started by hand and suspended on ``pending``.

    What ``await`` would do from there on: hands ``pending`` to the running
    task, then forwards values and exceptions (a cancellation included) until
    the coroutine finishes.
    """

    __slots__ = ("_pending", "_step")

    def __init__(self, step: Coroutine[Any, Any, _T], pending: object) -> None:
        self._step = step
        self._pending = pending

    def __await__(self) -> Generator[Any, Any, _T]:
        step, pending = self._step, self._pending
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                step.close()
                raise
            except BaseException as exc:  # forwarded to the coroutine, not handled
                try:
                    pending = step.throw(exc)
                except StopIteration as done:
                    result: _T = done.value
                    return result
                continue
            try:
                pending = step.send(sent)
            except StopIteration as done:
                result = done.value
                return result
