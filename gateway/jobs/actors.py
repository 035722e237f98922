"""Actor types and actors: claim a due object, tick it under a time limit, repeat.

An *actor type* (ArchiveBox "States & Lifecycles", D. Actor) is a subclass
of :class:`ActorType` declaring:

- ``object_type`` and ``queue_states``: its queue is the objects of that
  type in those states whose ``retry_at`` has passed, oldest first;
- ``max_concurrent`` (actors at once per orchestrator) and ``max_tick_s``
  (the time limit of one tick, and the length of a claim's lease);
- ``tick(obj)``: reads, decides, and makes exactly one transition, a
  single :meth:`ActorType.transition` naming a declared
  :class:`~gateway.jobs.model.Transition` by its constant (one
  compare-and-swap write, then its side effects). It returns nothing and
  raises on failure.

An *actor* is one instance running :meth:`ActorType.run` as an asyncio
task. It claims an object by bumping its ``retry_at`` to ``now +
max_tick_s`` (one UPDATE; the lease; after a tick's transition the next
claim is made on the same trip to the database thread, and given back if
the actor stops before ticking it), ticks it under
``asyncio.timeout_at`` (the deadline falls before the lease ends), and on a
failure (an exception, an overrun, a tick that made no transition) keeps
the attempt count and the error on the object and makes it due again after
an exponential backoff (``backoff_base_s * 2**(attempts - 1)``, at most
``backoff_max_s``: :func:`gateway.backoff.backoff_s`); after ``max_attempts``
failures in a row the object moves to ``give_up_state`` (a final state)
instead, when the type has one, by the declared transition from its state.
The actor exits when its queue is empty, or when asked to stop (after the
tick in hand).

A process that dies mid-tick leaves its object leased; the lease expires
at ``retry_at`` and another actor claims it again. Ticks must therefore be
idempotent: what a tick does before its transition may be done twice (a
copy made again, a file verified again), never with a different result.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Final, Generic, TypeVar

from gateway.backoff import backoff_s
from gateway.jobs.db import (
    JobObject,
    Value,
    utcnow,
    write_claim,
    write_failure,
    write_release,
    write_transition,
    write_wake,
)
from gateway.jobs.hooks import Hooks
from gateway.jobs.jobs_db import JobsDB
from gateway.jobs.model import ObjectType, Transition
from gateway.jobs.settings import JobsSettings

__all__ = [
    "ActorType",
    "JobContext",
    "TickError",
    "TickTimeout",
    "WorkCancelled",
    "in_thread",
    "object_types_of",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
#: The row of an object's type.
_R = TypeVar("_R")

#: A side effect of a transition: objects of a type to make due now.
Wake = tuple[ObjectType[Any], Sequence[int]]

_NO_WAKE: Final[tuple[Wake, ...]] = ()


class TickError(Exception):
    """A tick broke the rules of the machinery (it made no transition)."""


class TickTimeout(TimeoutError):
    """A tick ran past its actor type's ``max_tick_s`` and was cancelled."""


class WorkCancelled(Exception):
    """Raised by blocking work of a tick that saw its tick cancelled (see :func:`in_thread`)."""


async def in_thread(fn: Callable[[threading.Event], _T]) -> _T:
    """Run blocking work of a tick in a worker thread; return its result.

    A thread cannot be interrupted: when the tick is cancelled (it ran past
    its ``max_tick_s``, before its lease ends), the event passed to ``fn``
    is set, and ``fn`` is expected to check it between steps (a chunk read,
    a record verified) and stop, raising :class:`WorkCancelled`, so that
    the work of a cancelled tick does not go on beside the next claim's.
    """
    cancel = threading.Event()
    try:
        return await asyncio.to_thread(fn, cancel)
    except asyncio.CancelledError:
        cancel.set()
        raise


#: The application's part of a :class:`JobContext` (the store's is
#: :class:`gateway.store.store_actor.StoreContext`); the engine never looks into it.
AppT = TypeVar("AppT")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobContext(Generic[AppT]):
    """What every actor of one process shares.

    ``db``: the jobs database; ``hooks``: the plugins' hooks; ``settings``:
    the ``jobs:`` section; ``owner``: who claims, written as ``lease_owner``
    (``serve 1234``, ``worker 1234``, ``store-add 1234``); ``app``: what the
    application's actor types need (for the store's, its root and settings).
    The engine reads only the first four.
    """

    db: JobsDB
    hooks: Hooks
    settings: JobsSettings
    owner: str
    app: AppT


class ActorType:
    """Base class of actor types; see the module docstring.

    Class attributes declare the type; an instance is one actor. Subclasses
    define :meth:`tick`, and may override :meth:`limits` (limits from
    the ``jobs:`` settings), :meth:`get_actors_to_spawn`, :meth:`seed`,
    :meth:`on_startup` and :meth:`on_shutdown` (resources an actor holds).
    """

    #: The actor type's name (logs, ``queues`` of the hooks): its object type's
    #: name, the same pair of words for actor and object.
    name: ClassVar[str]
    object_type: ClassVar[ObjectType[Any]]
    #: The states whose due objects this actor type ticks.
    queue_states: ClassVar[tuple[str, ...]]
    max_concurrent: ClassVar[int] = 1
    max_tick_s: ClassVar[float] = 60.0
    backoff_base_s: ClassVar[float] = 1.0
    backoff_max_s: ClassVar[float] = 3600.0
    #: Failed ticks in a row after which the object moves to ``give_up_state``
    #: (a final state; by the declared ``<state> -> <give_up_state>``, the error
    #: kept as its last).
    max_attempts: ClassVar[int | None] = None
    give_up_state: ClassVar[str | None] = None
    #: ``{queue state: its transition to give_up_state}``, derived.
    give_up: ClassVar[Mapping[str, Transition]] = {}

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        object_type = getattr(cls, "object_type", None)
        if object_type is None:  # an abstract intermediate class
            return
        where = f"actor type {cls.__name__}"
        for state in cls.queue_states:
            if state not in object_type.active_states:
                raise TypeError(f"{where}: queue state {state!r} is not an active state")
        if (cls.max_attempts is None) != (cls.give_up_state is None):
            raise TypeError(f"{where}: max_attempts and give_up_state go together")
        if cls.name != object_type.name:
            raise TypeError(f"{where}: named {cls.name!r}, not its object type's name")
        if cls.give_up_state is not None:
            if cls.give_up_state not in object_type.final:
                raise TypeError(f"{where}: give_up_state {cls.give_up_state!r} is not final")
            try:
                cls.give_up = {
                    s: object_type.transition(s, cls.give_up_state) for s in cls.queue_states
                }
            except ValueError as exc:
                raise TypeError(f"{where}: {exc}") from None

    def __init__(
        self,
        ctx: JobContext[Any],
        *,
        number: int = 1,
        max_tick_s: float | None = None,
        where: tuple[str, Sequence[Value]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.number = number
        self.tick_limit_s = max_tick_s if max_tick_s is not None else self.limits_for(ctx)[1]
        #: An extra SQL condition on the queue (``store add``: its own files).
        self.where = where
        self.stopping = False
        self.ticks = 0
        self.current: JobObject[Any] | None = None
        self._outcomes: list[tuple[Transition, bool]] = []
        #: An object claimed along with the last transition, and its tick's deadline.
        self._next: tuple[JobObject[Any], float] | None = None

    def __repr__(self) -> str:
        return f"{self.name}#{self.number} ({self.ctx.owner})"

    # ----------------------------------------------------------- declarations
    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        """``(max_concurrent, max_tick_s)`` under ``settings`` (default: the class's)."""
        return cls.max_concurrent, cls.max_tick_s

    @classmethod
    def limits_for(cls, ctx: JobContext[Any]) -> tuple[int, float]:
        """``(max_concurrent, max_tick_s)`` in ``ctx``: :meth:`limits` under its ``jobs:``
        settings; a type whose limits come from elsewhere in the config overrides
        this (the replication copy actor: ``store.retention.parallel_copies``)."""
        return cls.limits(ctx.settings)

    @classmethod
    def get_actors_to_spawn(cls, queue_length: int, running: int, max_concurrent: int) -> int:
        """How many actors to start now: one per due object, up to ``max_concurrent``."""
        return max(0, min(queue_length, max_concurrent) - running)

    @classmethod
    async def seed(cls, ctx: JobContext[Any]) -> None:
        """Create objects ordinary code may not have created; once per orchestrator start.

        (The scrub actor type creates the scrub objects of files closed
        before this process started.) Default: nothing.
        """

    async def on_startup(self) -> None:
        """Acquire what this actor holds while it runs (default: nothing)."""

    async def on_shutdown(self) -> None:
        """Release what :meth:`on_startup` acquired (default: nothing)."""

    async def tick(self, obj: JobObject[Any]) -> None:
        """Read, decide and make one transition of ``obj``; raise on failure."""
        raise NotImplementedError

    # ------------------------------------------------------------- transitions
    async def transition(
        self,
        obj: JobObject[_R],
        transition: Transition,
        *,
        retry_at: datetime | None,
        values: _R | None = None,
        wake: Iterable[Wake] = _NO_WAKE,
        error: str | None = None,
    ) -> bool:
        """Make the declared ``transition`` of ``obj``; return whether it won.

        One compare-and-swap write (:func:`~gateway.jobs.db.write_transition`:
        the new status, ``retry_at``, the own columns ``values`` (the
        object's row after it: ``dataclasses.replace(obj.row, ...)``)
        changes, and ``error`` as the object's last error when it gives up),
        then, only if it won, its
        side effects: the objects in ``wake`` become due now. Write and side
        effects run together on the database thread, so a tick cancelled
        at its time limit interrupts neither once the write is submitted.
        The per-transition hooks run before and after. Raises
        :class:`ValueError` when ``transition`` is not one of the object's
        type or does not leave its status (a bug).
        """
        if obj.status != transition.source or (
            obj.type.transition(transition.source, transition.target) != transition
        ):
            raise ValueError(f"{obj}: cannot make transition {transition.name}")
        self.ctx.hooks.transition_start(transition.name, actor=self, obj=obj)
        wakes = tuple((object_type, tuple(ids)) for object_type, ids in wake)
        # The actor's next claim rides along (one trip to the database thread
        # instead of two); its deadline is taken before its lease begins.
        claim = None if self.stopping or self._outcomes or self._next else self._claim_args()
        deadline = asyncio.get_running_loop().time() + self.tick_limit_s
        future = self.ctx.db.submit(
            _write_transition_then_claim, obj, transition, retry_at, values, error, wakes, claim
        )
        try:
            won, claimed = await asyncio.shield(future)
        except asyncio.CancelledError:
            # Cancelled at the tick's limit while the write was in flight: it goes
            # on in the database thread; report its outcome, then let the
            # cancellation through.
            won, claimed = await future
            self._transition_done(obj, transition, won, claimed, deadline)
            raise
        self._transition_done(obj, transition, won, claimed, deadline)
        return won

    def _transition_done(
        self,
        obj: JobObject[Any],
        transition: Transition,
        won: bool,
        claimed: JobObject[Any] | None,
        deadline: float,
    ) -> None:
        if claimed is not None:
            self._next = (claimed, deadline)
        if won:
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(
                    "jobs: %s %s -> %s by %r",
                    obj,
                    transition.source,
                    transition.target,
                    self,
                    extra=_extra(obj, job_transition=transition.name, job_actor=repr(self)),
                )
        else:
            logger.warning(
                "jobs: %s: transition %s lost: another actor moved the object"
                " (the lease had expired)",
                obj,
                transition.name,
                extra=_extra(obj, job_transition=transition.name, job_actor=repr(self)),
            )
        self._outcomes.append((transition, won))
        self.ctx.hooks.transition_end(transition.name, actor=self, obj=obj, won=won)

    @staticmethod
    def due_in(seconds: float) -> datetime:
        """The time ``seconds`` from now (a ``retry_at``)."""
        return utcnow() + timedelta(seconds=seconds)

    # ---------------------------------------------------------------- the loop
    async def run(self) -> None:
        """Claim and tick due objects until the queue is empty or :attr:`stopping`."""
        hooks = self.ctx.hooks
        hooks.call("on_actor_startup", actor=self)
        try:
            await self.on_startup()
            try:
                while not self.stopping:
                    claimed, self._next = self._next, None
                    if claimed is None:
                        claimed = await self._claim()
                    if claimed is None:
                        break
                    await self._tick(*claimed)
            finally:
                await self._release_next()
                await self.on_shutdown()
        finally:
            hooks.call("on_actor_shutdown", actor=self)

    def _claim_args(self) -> _Claim:
        return (self.object_type, self.queue_states, self.tick_limit_s, self.ctx.owner, self.where)

    async def _claim(self) -> tuple[JobObject[Any], float] | None:
        # The deadline is taken before the lease is computed: a tick is
        # cancelled no later than its lease ends.
        deadline = asyncio.get_running_loop().time() + self.tick_limit_s
        obj = await self.ctx.db.call(_write_claim, self._claim_args())
        return (obj, deadline) if obj is not None else None

    async def _release_next(self) -> None:
        """Give back an object claimed along with the last transition but never ticked."""
        if self._next is not None:
            (obj, _), self._next = self._next, None
            await self.ctx.db.call(write_release, obj, utcnow())

    async def _tick(self, obj: JobObject[Any], deadline: float) -> None:
        hooks = self.ctx.hooks
        self.current = obj
        self._outcomes = []
        self.ticks += 1
        hooks.call("on_actor_tick_start", actor=self, obj=obj)
        try:
            await self._run_tick(obj, deadline)
            if not self._outcomes:
                raise TickError(f"{self.name}.tick made no transition of {obj}")
        except Exception as exc:
            hooks.call("on_actor_tick_exception", actor=self, obj=obj, error=exc)
            await self._failed(obj, exc)
        finally:
            self.current = None
            hooks.call("on_actor_tick_end", actor=self, obj=obj)

    async def _run_tick(self, obj: JobObject[Any], deadline: float) -> None:
        scope = asyncio.timeout_at(deadline)
        try:
            async with scope:
                await self.tick(obj)
        except TimeoutError as exc:
            if scope.expired():
                raise TickTimeout(
                    f"the tick ran past its limit of {self.tick_limit_s:g} s and was cancelled"
                ) from exc
            raise

    async def _failed(self, obj: JobObject[Any], exc: Exception) -> None:
        if any(won for _, won in self._outcomes):
            # The transition was made; what failed came after it.
            logger.warning(
                "jobs: %s: %r failed after its transition: %s: %s",
                obj,
                self,
                type(exc).__name__,
                exc,
                exc_info=exc,
                extra=_extra(obj),
            )
            return
        attempts = obj.attempts + 1
        error = f"{type(exc).__name__}: {exc}"
        trace = not isinstance(exc, TickTimeout | TickError | OSError)
        if self.max_attempts is not None and attempts >= self.max_attempts:
            logger.warning(
                "jobs: %s: tick failed %d times in a row, giving up (%s): %s",
                obj,
                attempts,
                self.give_up_state,
                error,
                exc_info=exc if trace else None,
                extra=_extra(obj, job_attempts=attempts, job_error=error),
            )
            await self.transition(obj, self.give_up[obj.status], retry_at=None, error=error)
            return
        delay = backoff_s(attempts, self.backoff_base_s, self.backoff_max_s)
        now = utcnow()
        recorded = await self.ctx.db.call(
            write_failure, obj, now, error, now + timedelta(seconds=delay)
        )
        logger.warning(
            "jobs: %s: tick failed (attempt %d, retry in %g s): %s%s",
            obj,
            attempts,
            delay,
            error,
            "" if recorded else " (not recorded: the object moved on)",
            exc_info=exc if trace else None,
            extra=_extra(obj, job_attempts=attempts, job_error=error),
        )


#: What :func:`~gateway.jobs.db.write_claim` needs: type, states, lease, owner, condition.
_Claim = tuple[ObjectType[Any], tuple[str, ...], float, str, tuple[str, Sequence[Value]] | None]


def _write_claim(conn: sqlite3.Connection, claim: _Claim) -> JobObject[Any] | None:
    object_type, states, lease_s, owner, where = claim
    return write_claim(conn, object_type, states, utcnow(), lease_s, owner, where=where)


def _write_transition_then_claim(
    conn: sqlite3.Connection,
    obj: JobObject[_R],
    transition: Transition,
    retry_at: datetime | None,
    values: _R | None,
    error: str | None,
    wakes: tuple[tuple[ObjectType[Any], tuple[int, ...]], ...],
    claim: _Claim | None,
) -> tuple[bool, JobObject[Any] | None]:
    """On the database thread: a transition's write, its side effects if it won,
    then the actor's next claim (each its own atomic statement)."""
    now = utcnow()
    won = write_transition(
        conn, obj, transition, now, retry_at=retry_at, values=values, error=error
    )
    if won:
        for object_type, ids in wakes:
            write_wake(conn, object_type, ids, now)
    return won, _write_claim(conn, claim) if claim is not None else None


def _extra(obj: JobObject[Any], **more: object) -> dict[str, object]:
    """Structured fields of a log record (for JSON log formatters)."""
    return {"job_type": obj.type.name, "job_id": obj.id, "job_status": obj.status, **more}


def object_types_of(actor_types: Iterable[type[ActorType]]) -> list[ObjectType[Any]]:
    """The object types of ``actor_types``, each once, in first-seen order.

    Raises :class:`ValueError` when two different declarations share a name.
    """
    seen: dict[str, ObjectType[Any]] = {}
    for actor_type in actor_types:
        object_type = actor_type.object_type
        known = seen.setdefault(object_type.name, object_type)
        if known != object_type:
            raise ValueError(f"two different object types are named {object_type.name!r}")
    return list(seen.values())
