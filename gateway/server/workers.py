"""``gateway serve --workers N``: N processes on one listening socket, each with its own loop.

A gateway process uses one core (one event loop, the GIL). With ``--workers
N`` the parent process binds the listening socket once (so a busy port is
one clear error, and no other program can share the port as
``SO_REUSEPORT`` would allow), then forks N workers. Each worker builds the
app from the config again, with its own event loop (uvloop when installed),
its own upstream connection pools and Redis clients, and accepts
connections on the inherited socket; the kernel hands each new connection
to one waiting worker. The parent only supervises:

- a worker that exits while the gateway is running (a crash, SIGKILL, the
  OOM killer) is logged at WARNING and replaced at once; one that dies
  within :data:`QUICK_EXIT_S` of its start is replaced after a pause that
  doubles from :data:`FIRST_BACKOFF_S` up to :data:`MAX_BACKOFF_S`
  (:func:`gateway.backoff.backoff_s`; a worker that cannot start does not
  make the parent spin);
- SIGTERM or SIGINT to the parent stops every worker gracefully (SIGTERM,
  aiohttp's shutdown: requests in flight finish) and, after
  :data:`STOP_TIMEOUT_S`, kills what is left;
- a worker whose parent is gone (killed with SIGKILL) notices within a
  second and shuts down, so no orphan keeps the port.

The snapshot store has exactly one writer: the process that records holds
its ``writer.lock`` (:meth:`gateway.store.Store.open`, ``mode="write"``),
any number of others open it *shared* (lookups, record loads, imports,
background work). Every worker opens it shared but worker 0 when the
config records: worker 0 is the recorder, and the others forward the
recording collections' requests to it (:mod:`gateway.server.recorder_link`). The
background work runs in one worker at a time (``jobs.lock``:
:class:`gateway.server.jobs_service.JobsService`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from aiohttp import web

from gateway.backoff import backoff_s

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess


__all__ = [
    "FIRST_BACKOFF_S",
    "MAX_BACKOFF_S",
    "QUICK_EXIT_S",
    "STOP_TIMEOUT_S",
    "Supervisor",
    "parse_workers",
    "watch_parent",
]

logger = logging.getLogger(__name__)

#: A worker that exits sooner than this after its start is restarted after a pause.
QUICK_EXIT_S: Final = 5.0
#: The pause before restarting a worker that died at start-up (doubled each time in a row).
FIRST_BACKOFF_S: Final = 0.5
#: The longest pause before restarting a worker that keeps dying at start-up.
MAX_BACKOFF_S: Final = 30.0
#: How long stopping waits for workers to finish their requests before SIGKILL.
STOP_TIMEOUT_S: Final = 15.0
#: How often a worker checks that its parent is still there.
PARENT_CHECK_S: Final = 1.0


def parse_workers(text: str) -> int:
    """``--workers`` value: a positive integer, or ``auto`` (the cores this process may use).

    >>> parse_workers("3")
    3
    >>> parse_workers("auto") >= 1
    True

    Raises :class:`ValueError` with a message otherwise (argparse shows it).
    """
    if text == "auto":
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # pragma: no cover - not Linux
            return os.cpu_count() or 1
    try:
        count = int(text)
    except ValueError:
        raise ValueError(f"{text!r}: expected a number of processes or 'auto'") from None
    if count < 1:
        raise ValueError(f"{count}: expected at least 1 process")
    return count


@dataclass(slots=True)
class _Slot:
    """One worker position: its current process and its restart history.

    ``quick_exits``: its processes that died within :data:`QUICK_EXIT_S` of
    their start, in a row (the restart pause grows with it).
    """

    index: int
    process: BaseProcess | None = None
    started_at: float = 0.0
    quick_exits: int = 0
    backoff_s: float = 0.0
    restart_at: float | None = None
    restarts: int = field(default=0)


class Supervisor:
    """Runs ``serve(sock, index, parent)`` in ``count`` forked workers and keeps them running.

    ``serve`` runs in the child with the inherited listening socket, the
    worker's index (0 .. count-1) and the supervisor's pid (for
    :func:`watch_parent`); it returns when the worker should exit.
    :meth:`run` blocks until SIGTERM or SIGINT, then stops the workers.
    """

    def __init__(
        self, sock: socket.socket, count: int, serve: Callable[[socket.socket, int, int], None]
    ) -> None:
        self.sock = sock
        self.serve = serve
        self.slots = [_Slot(i) for i in range(count)]
        self._context = multiprocessing.get_context("fork")
        self._stopping = False

    def run(self) -> int:
        """Start the workers, replace those that die, stop them on SIGTERM/SIGINT.

        Returns the exit status: 0 after a requested stop.
        """
        previous = {
            signum: signal.signal(signum, self._request_stop)
            for signum in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            for slot in self.slots:
                self._start(slot)
            while not self._stopping:
                self._watch()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._stop_all()
        return 0

    def _request_stop(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        logger.info("received %s: stopping %d workers", name, len(self.slots))
        self._stopping = True

    def _start(self, slot: _Slot) -> None:
        process = self._context.Process(
            target=_worker_main,
            args=(self.serve, self.sock, slot.index, os.getpid()),
            name=f"gateway-worker-{slot.index}",
            daemon=False,
        )
        process.start()
        slot.process = process
        slot.started_at = time.monotonic()
        slot.restart_at = None
        logger.info("worker %d started (pid %s)", slot.index, process.pid)

    def _watch(self) -> None:
        """Wait (at most a second) for a worker to exit; restart the ones due."""
        now = time.monotonic()
        for slot in self.slots:
            if slot.process is None and slot.restart_at is not None and now >= slot.restart_at:
                self._start(slot)
        running = {slot.process.sentinel: slot for slot in self.slots if slot.process is not None}
        if not running:
            time.sleep(0.2)
            return
        for sentinel in multiprocessing.connection.wait(list(running), timeout=1.0):
            slot = running[sentinel]  # type: ignore[index]
            self._exited(slot)

    def _exited(self, slot: _Slot) -> None:
        process = slot.process
        assert process is not None
        process.join()
        slot.process = None
        if self._stopping:
            return
        lived_s = time.monotonic() - slot.started_at
        if lived_s < QUICK_EXIT_S:
            slot.quick_exits += 1
            slot.backoff_s = backoff_s(slot.quick_exits, FIRST_BACKOFF_S, MAX_BACKOFF_S)
        else:
            slot.quick_exits = 0
            slot.backoff_s = 0.0
        slot.restarts += 1
        slot.restart_at = time.monotonic() + slot.backoff_s
        logger.warning(
            "worker %d (pid %s) exited with %s after %.1f s; starting a new one%s",
            slot.index,
            process.pid,
            _describe_exit(process.exitcode),
            lived_s,
            f" in {slot.backoff_s:g} s" if slot.backoff_s else "",
        )

    def _stop_all(self) -> None:
        live = [slot.process for slot in self.slots if slot.process is not None]
        for process in live:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in live:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive() and process.pid is not None:
                logger.warning("worker pid %s did not stop in time: killing it", process.pid)
                os.kill(process.pid, signal.SIGKILL)
                process.join()
        for slot in self.slots:
            slot.process = None


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


def _worker_main(
    serve: Callable[[socket.socket, int, int], None],
    sock: socket.socket,
    index: int,
    parent: int,
) -> None:
    """A worker's life: default signal handling, then ``serve`` until told to stop."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        serve(sock, index, parent)
    finally:
        sys.stderr.flush()
    # A worker that returns was asked to stop (or lost its parent): exit 0.


def watch_parent(app: web.Application, parent: int) -> None:
    """Make a worker's ``app`` shut down (as on SIGTERM) once ``parent`` is gone.

    Checked every :data:`PARENT_CHECK_S` seconds: a supervisor killed with
    SIGKILL cannot stop its workers, so they stop themselves.
    """

    async def watcher(app: web.Application) -> AsyncIterator[None]:
        async def check() -> None:
            # Polled: nothing in the standard library signals a parent's death.
            while True:
                await asyncio.sleep(PARENT_CHECK_S)
                if os.getppid() != parent:
                    break
            logger.warning("supervisor (pid %d) is gone: worker %d stops", parent, os.getpid())
            os.kill(os.getpid(), signal.SIGTERM)

        task = asyncio.create_task(check())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.cleanup_ctx.append(watcher)
