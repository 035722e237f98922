"""The orchestrator: start actors for the queues that have due objects.

(ArchiveBox "States & Lifecycles", C. Orchestrator.) One asyncio task loops:

1. reads every actor type's queue length (due objects, counted up to 1000)
   and the earliest future ``retry_at``, in one call to the database thread;
2. calls ``on_orchestrator_tick_started``;
3. for each actor type, starts the actors that
   :meth:`~gateway.jobs.actors.ActorType.get_actors_to_spawn` asks for, up
   to its ``max_concurrent`` (an actor type whose last actor failed to
   start waits a backoff before the next try);
4. when no queue has due objects and no actor runs: ``on_orchestrator_idle``
   and, at most once a minute, the orphan check: due objects that no actor
   type here takes (a status no queue holds, or a type whose plugin is not
   loaded) are reported once per (type, status), at WARNING;
5. sleeps until an actor exits, :meth:`Orchestrator.wake` is called, the
   earliest ``retry_at`` comes, or ``poll_s`` passes (objects made by other
   processes are seen within ``poll_s``); never a busy wait.

:meth:`Orchestrator.stop` (SIGTERM) stops claiming: each actor finishes the
tick in hand (within its limit) and exits; nothing is released, since an
unfinished object's lease expires by itself.

:class:`HostLock` (``flock`` on ``<store>/jobs.lock``) keeps to one the
orchestrators that serving processes run on one host for one store
(``gateway serve`` on several processes); each ``gateway worker`` adds an
orchestrator of its own on purpose (claims are compare-and-swap writes, so
any number of processes may share the work).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from gateway.backoff import backoff_s
from gateway.jobs.actors import ActorType, JobContext
from gateway.jobs.db import (
    read_next_retry_at,
    read_orphans,
    read_queue_length,
    read_registered_types,
    utcnow,
)

__all__ = ["HostLock", "Orchestrator"]

logger = logging.getLogger(__name__)

#: Seconds between two orphan checks (they run only when idle).
ORPHAN_CHECK_EVERY_S: Final = 60.0
#: Queue lengths are counted up to this many objects.
QUEUE_COUNT_CAP: Final = 1000


class Orchestrator:
    """Runs actors of ``actor_types`` over the objects of ``ctx.db``; see the module docstring.

    ``actor_types`` must have distinct names. :meth:`run` returns after
    :meth:`stop`, once every actor has exited.
    """

    def __init__(self, ctx: JobContext[Any], actor_types: Sequence[type[ActorType]]) -> None:
        names = [t.name for t in actor_types]
        if len(set(names)) != len(names):
            raise ValueError(f"actor types with the same name: {sorted(names)}")
        self.ctx = ctx
        self.actor_types = list(actor_types)
        self.limits = {t.name: t.limits_for(ctx) for t in actor_types}
        self.running: dict[str, set[asyncio.Task[None]]] = {t.name: set() for t in actor_types}
        self.actors: dict[asyncio.Task[None], ActorType] = {}
        self.queues: dict[str, int] = {}
        self.loops = 0
        self._numbers = dict.fromkeys(names, 0)
        self._failures = dict.fromkeys(names, 0)
        self._not_before = dict.fromkeys(names, 0.0)
        self._stopping = False
        self._wakeup = asyncio.Event()
        self._warned: set[tuple[str, str]] = set()
        self._orphans_checked = float("-inf")

    def __repr__(self) -> str:
        return f"orchestrator ({self.ctx.owner})"

    # ---------------------------------------------------------------- control
    def wake(self) -> None:
        """Read the queues now (an object was just created in this process)."""
        self._wakeup.set()

    def stop(self) -> None:
        """Stop claiming; :meth:`run` returns once the ticks in hand are done."""
        self._stopping = True
        for actor in self.actors.values():
            actor.stopping = True
        self._wakeup.set()

    def running_count(self) -> dict[str, int]:
        """``{actor type: actors running}`` in this process."""
        return {name: len(tasks) for name, tasks in self.running.items()}

    # ---------------------------------------------------------------- the loop
    async def run(self) -> None:
        """Loop until :meth:`stop`; see the module docstring."""
        hooks = self.ctx.hooks
        hooks.call("on_orchestrator_startup", orchestrator=self)
        try:
            for actor_type in self.actor_types:
                try:
                    await actor_type.seed(self.ctx)
                except (OSError, sqlite3.Error) as exc:
                    logger.warning("jobs: %s: seeding failed: %s", actor_type.name, exc)
            while not self._stopping:
                await self._loop_once()
        finally:
            self._stopping = True
            for actor in self.actors.values():
                actor.stopping = True
            tasks = list(self.actors)
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            hooks.call("on_orchestrator_shutdown", orchestrator=self)

    async def _loop_once(self) -> None:
        self.loops += 1
        self._wakeup.clear()
        now = utcnow()
        self.queues, next_due = await self.ctx.db.call(self._read_queues, now)
        self.ctx.hooks.call("on_orchestrator_tick_started", orchestrator=self, queues=self.queues)
        self._spawn()
        busy = any(self.queues.values()) or any(self.running.values())
        if not busy:
            self.ctx.hooks.call("on_orchestrator_idle", orchestrator=self)
            if time.monotonic() - self._orphans_checked >= ORPHAN_CHECK_EVERY_S:
                self._orphans_checked = time.monotonic()
                await self._check_orphans()
        timeout = self.ctx.settings.poll_s
        if next_due is not None:
            timeout = min(timeout, max(0.0, (next_due - utcnow()).total_seconds()))
        if self._stopping:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), timeout)

    def _read_queues(
        self, conn: sqlite3.Connection, now: datetime
    ) -> tuple[dict[str, int], datetime | None]:
        queues = {
            t.name: read_queue_length(conn, t.object_type, t.queue_states, now, cap=QUEUE_COUNT_CAP)
            for t in self.actor_types
        }
        next_due = read_next_retry_at(
            conn, [(t.object_type, t.queue_states) for t in self.actor_types], now
        )
        return queues, next_due

    def _spawn(self) -> None:
        if self._stopping:
            return
        for actor_type in self.actor_types:
            name = actor_type.name
            if time.monotonic() < self._not_before[name]:
                continue
            max_concurrent, max_tick_s = self.limits[name]
            running = len(self.running[name])
            wanted = actor_type.get_actors_to_spawn(self.queues[name], running, max_concurrent)
            for _ in range(max(0, min(wanted, max_concurrent - running))):
                self._numbers[name] += 1
                actor = actor_type(self.ctx, number=self._numbers[name], max_tick_s=max_tick_s)
                task = asyncio.get_running_loop().create_task(
                    actor.run(), name=f"jobs-{name}-{actor.number}"
                )
                self.running[name].add(task)
                self.actors[task] = actor
                task.add_done_callback(self._actor_done)

    def _actor_done(self, task: asyncio.Task[None]) -> None:
        actor = self.actors.pop(task)
        name = actor.name
        self.running[name].discard(task)
        if task.cancelled():
            pass
        elif (exc := task.exception()) is not None:
            self._failures[name] += 1
            delay = backoff_s(self._failures[name], 1.0, 300.0)
            self._not_before[name] = time.monotonic() + delay
            logger.error(
                "jobs: %r stopped on an error (next actor in %g s): %s: %s",
                actor,
                delay,
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
        else:
            self._failures[name] = 0
        self._wakeup.set()

    async def _check_orphans(self) -> None:
        handled: dict[str, set[str]] = {}
        for actor_type in self.actor_types:
            handled.setdefault(actor_type.object_type.name, set()).update(actor_type.queue_states)

        def read(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
            now = utcnow()
            return {
                name: read_orphans(conn, table, handled.get(name, ()), now)
                for name, (table, _states) in read_registered_types(conn).items()
            }

        try:
            orphans = await self.ctx.db.call(read)
        except sqlite3.Error as exc:
            logger.warning("jobs: the orphan check failed: %s", exc)
            return
        for type_name, by_status in orphans.items():
            for status, count in by_status.items():
                if (type_name, status) in self._warned:
                    continue
                self._warned.add((type_name, status))
                why = (
                    f"no actor type here takes {type_name!r} objects"
                    " (is its plugin in jobs.plugins?)"
                    if type_name not in handled
                    else f"no actor type here takes {type_name!r} objects in state {status!r}"
                )
                logger.warning(
                    "jobs: %d %s object(s) in state %r are due but will never be ticked: %s",
                    count,
                    type_name,
                    status,
                    why,
                    extra={"job_type": type_name, "job_status": status, "job_count": count},
                )


class HostLock:
    """``flock`` on a file: held by at most one process of a host at a time.

    :meth:`try_acquire` never waits; the holder writes its pid into the
    file, which :meth:`holder` reads for messages. Released by
    :meth:`release` or when the process exits (even by SIGKILL).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd
        return True

    def holder(self) -> str:
        """The pid the holder wrote, or "" (for messages)."""
        try:
            return self.path.read_text("ascii").strip()
        except OSError:
            return ""

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
