"""The ``replication_copy`` objects and their actor type (issue 13 §3).

**A copy actor** (``retention.parallel_copies`` at
once) ticks one ``replication_copy`` object: the files of one group, one
by one, through :func:`~gateway.store.replication.director.claim_and_copy` (the
claim checked, or renewed for a retry; integrity at both ends; create-only
verified puts; the copy status recorded). A tick starts copies for half of
``jobs.replicate_max_tick_s`` and leaves the rest to the next tick of the
same object, due at once (one copy must fit in the other half). Files
whose copy failed for a transient reason (a storage down) keep their
``ongoing`` claim and are tried again by the same object after a backoff
(5, 10, 20, 40, 80 s), up to ``max_rounds`` rounds (6; 1 for ``store
replicate --once``); then the object is ``failed`` and gives those claims
back (``missing``), so that no report counts them as under way and the
director's next pass plans the copies again. A copy that failed for a lasting
reason (no space, refused) gives its claim back at once
(:func:`~gateway.store.replication.director.claim_and_copy`). Copy objects
are written by their batch's tick
(:func:`~gateway.store.replication.batch.write_copies`).

::

    queued --(files left when the tick's time was up: at once;
              or copies failed transiently: after a backoff)--> queued
    queued --> done      every file of the group copied and verified
    queued --> failed    a file not copied (the reasons kept in ``problems``)
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Final

from gateway.backoff import backoff_s
from gateway.jobs.actors import JobContext, Wake
from gateway.jobs.db import JobObject
from gateway.jobs.settings import JobsSettings
from gateway.store.job_rows import CopyColumns, CopyTodo
from gateway.store.object_types import (
    BATCH,
    COPY,
    COPY_QUEUED_TO_DONE,
    COPY_QUEUED_TO_FAILED,
    COPY_QUEUED_TO_QUEUED,
)
from gateway.store.replication.actor_base import (
    TICK_BUDGET_SHARE,
    ReplicationActor,
    added_outcomes,
    summary,
)
from gateway.store.replication.copy_status import CopyRow, read_file_copies, write_copy_release
from gateway.store.replication.director import (
    COPIED,
    DEFAULT_RETRY,
    CopyPlan,
    Progress,
    ReplicationReport,
    claim_and_copy,
)
from gateway.store.store_actor import store_context

__all__ = ["ROUND_BACKOFF_BASE_S", "ROUND_BACKOFF_MAX_S", "CopyActor"]

logger = logging.getLogger(__name__)


#: Backoff between the rounds of a copy object whose copies failed transiently (seconds).
ROUND_BACKOFF_BASE_S: Final = 5.0
ROUND_BACKOFF_MAX_S: Final = 300.0


class CopyActor(ReplicationActor):
    """Ticks one copy object: its files copied one by one (see the module docstring)."""

    name = "replication_copy"
    object_type = COPY
    queue_states = ("queued",)
    max_concurrent = 4
    max_tick_s = 3600.0
    backoff_base_s = 10.0
    backoff_max_s = 600.0
    #: Called with the bytes of each copy made (``store replicate``'s progress bar).
    progress: Progress | None = None
    #: Seconds a tick starts copies for (None: ``TICK_BUDGET_SHARE`` of its limit).
    budget_s: float | None = None

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return cls.max_concurrent, settings.replicate_max_tick_s

    @classmethod
    def limits_for(cls, ctx: JobContext[Any]) -> tuple[int, float]:
        """``retention.parallel_copies`` copy actors at once (the class's default without
        store settings), each tick limited by ``jobs.replicate_max_tick_s``."""
        store = store_context(ctx).settings
        parallel = store.retention.parallel_copies if store is not None else cls.max_concurrent
        return parallel, ctx.settings.replicate_max_tick_s

    async def tick(self, obj: JobObject[CopyColumns]) -> None:
        row = obj.row
        replicas = self.replicas
        budget_s = self.budget_s
        deadline = time.monotonic() + (
            self.tick_limit_s * TICK_BUDGET_SHARE if budget_s is None else budget_s
        )
        todo, retry, rounds = list(row.todo), list(row.retry), row.rounds
        problems = {name: list(whys) for name, whys in row.problems.items()}
        names = sorted({item.name for item in todo})
        files = await replicas.index.call(read_file_copies, replicas.places, names=names)
        by_name = {f.name: f for f in files}
        replicas.rows.update(by_name)  # where the primary keeps them
        report = ReplicationReport()
        started = False
        while todo and not (started and time.monotonic() >= deadline):
            item = todo.pop(0)
            file = by_name.get(item.name)
            if file is not None and file.sha256 is not None:  # else it left the index
                started = True
                seen = CopyRow(item.name, row.destination, file.sha256, "ongoing", item.claimed)
                copy = CopyPlan(file, row.source, row.destination, seen, item.replace)
                # The batch's claim is kept; a retry renews it (the copy's new mtime).
                mtime = time.time() if rounds else item.claimed
                outcome = await claim_and_copy(
                    replicas, copy, mtime, DEFAULT_RETRY, report, self.progress
                )
                if outcome in COPIED:
                    problems.pop(item.name, None)
        retry += [CopyTodo(c.file.name, c.replace, claimed) for c, claimed in report.retry]
        for name, whys in report.unsafe.items():
            problems.setdefault(name, []).extend(whys)
        if todo:
            report.outcomes["deferred"] = len(todo)
        values = replace(
            row,
            outcomes=added_outcomes(row.outcomes, report.outcomes),
            bytes_copied=row.bytes_copied + report.bytes_copied,
            problems={name: tuple(whys) for name, whys in problems.items()},
        )
        if todo:  # the tick's time is up: the rest at once, by the next tick
            values = replace(values, todo=tuple(todo), retry=tuple(retry))
            await self.transition(
                obj, COPY_QUEUED_TO_QUEUED, retry_at=self.due_in(0.0), values=values
            )
            return
        if retry:
            rounds += 1
            values = replace(values, rounds=rounds)
            if rounds < (row.max_rounds or 1):
                delay = backoff_s(rounds, ROUND_BACKOFF_BASE_S, ROUND_BACKOFF_MAX_S)
                values = replace(values, todo=tuple(retry), retry=())
                await self.transition(
                    obj, COPY_QUEUED_TO_QUEUED, retry_at=self.due_in(delay), values=values
                )
                return
        values = replace(values, todo=(), retry=tuple(retry))
        wake: list[Wake] = [(BATCH, [row.batch_id])]
        if not problems:
            result = summary(len(row.files), values.outcomes, values.bytes_copied)
            values = replace(values, result=result)
            await self.transition(obj, COPY_QUEUED_TO_DONE, retry_at=None, values=values, wake=wake)
            return
        result = f"{len(problems)} file(s) not copied: " + "; ".join(
            f"{name}: {'; '.join(dict.fromkeys(whys))}" for name, whys in list(problems.items())[:3]
        )
        # (INFO: its batch warns with the same reasons once it has gathered them.)
        logger.info("replication: copy #%d: %s", obj.id, result)
        values = replace(values, result=result)
        if await self.transition(
            obj, COPY_QUEUED_TO_FAILED, retry_at=None, values=values, wake=wake
        ):
            # Its rounds are used up: the claims it kept for them are given back.
            now = time.time()
            for item in retry:
                last = problems.get(item.name, ["?"])[-1]
                await replicas.index.call(
                    write_copy_release,
                    item.name,
                    row.destination,
                    item.claimed,
                    "missing",
                    mtime=now,
                    detail=f"released after {max(rounds, 1)} round(s); last: {last}",
                )
