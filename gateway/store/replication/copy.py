"""The replication copier (``replication_copier``) and the ``replication_copy``
objects it ticks (issue 13 §3).

**A copier** (``retention.parallel_copies`` at
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
are written by their batch's worker
(:func:`~gateway.store.replication.batch.write_copies`).

::

    queued --(files left when the tick's time was up: at once;
              or copies failed transiently: after a backoff)--> queued
    queued --> done      every file of the group copied and verified
    queued --> failed    a file not copied (the reasons kept in ``problems``)
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from typing import Any, Final

from gateway.backoff import backoff_s
from gateway.jobs.actors import JobContext, Wake
from gateway.jobs.db import JobObject, Value
from gateway.jobs.settings import JobsSettings
from gateway.store.object_types import BATCH, COPY
from gateway.store.replication.actor_base import (
    TICK_BUDGET_SHARE,
    ReplicationActor,
    summary,
    sums,
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

__all__ = ["ROUND_BACKOFF_BASE_S", "ROUND_BACKOFF_MAX_S", "CopierActor"]

logger = logging.getLogger(__name__)


#: Backoff between the rounds of a copy object whose copies failed transiently (seconds).
ROUND_BACKOFF_BASE_S: Final = 5.0
ROUND_BACKOFF_MAX_S: Final = 300.0


class CopierActor(ReplicationActor):
    """Ticks one copy object: its files copied one by one (see the module docstring)."""

    name = "replication_copier"
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
        """``retention.parallel_copies`` copiers at once (the class's default without
        store settings), each tick limited by ``jobs.replicate_max_tick_s``."""
        store = store_context(ctx).settings
        parallel = store.retention.parallel_copies if store is not None else cls.max_concurrent
        return parallel, ctx.settings.replicate_max_tick_s

    async def tick(self, obj: JobObject) -> None:
        replicas = self.replicas
        budget_s = self.budget_s
        deadline = time.monotonic() + (
            self.tick_limit_s * TICK_BUDGET_SHARE if budget_s is None else budget_s
        )
        source, destination = str(obj["source"]), str(obj["destination"])
        todo: list[list[Any]] = json.loads(str(obj["todo"]))
        retry: list[list[Any]] = json.loads(str(obj["retry"]))
        rounds = int(obj["rounds"] or 0)
        problems: dict[str, list[str]] = json.loads(str(obj["problems"]))
        names = sorted({str(item[0]) for item in todo})
        files = await replicas.index.call(read_file_copies, replicas.places, names=names)
        by_name = {f.name: f for f in files}
        replicas.rows.update(by_name)  # where the primary keeps them
        report = ReplicationReport()
        started = False
        while todo and not (started and time.monotonic() >= deadline):
            name, replace, claimed = todo[0]
            file = by_name.get(name)
            if file is not None and file.sha256 is not None:  # else it left the index
                started = True
                seen = CopyRow(name, destination, file.sha256, "ongoing", float(claimed))
                copy = CopyPlan(file, source, destination, seen, bool(replace))
                # The worker's claim is kept; a retry renews it (the copy's new mtime).
                mtime = time.time() if rounds else float(claimed)
                outcome = await claim_and_copy(
                    replicas, copy, mtime, DEFAULT_RETRY, report, self.progress
                )
                if outcome in COPIED:
                    problems.pop(name, None)
            todo.pop(0)
        retry += [[c.file.name, c.replace, claimed] for c, claimed in report.retry]
        for name, whys in report.unsafe.items():
            problems.setdefault(name, []).extend(whys)
        if todo:
            report.outcomes["deferred"] = len(todo)
        values = sums(obj, report)
        values["problems"] = json.dumps(problems)
        if todo:  # the tick's time is up: the rest at once, by the next tick
            values.update(todo=json.dumps(todo), retry=json.dumps(retry))
            await self.transition_replication_copy_queued_to_queued(
                obj, retry_at=self.due_in(0.0), values=values
            )
            return
        if retry:
            rounds += 1
            values["rounds"] = rounds
            if rounds < int(obj["max_rounds"] or 1):
                values.update(todo=json.dumps(retry), retry="[]")
                delay = backoff_s(rounds, ROUND_BACKOFF_BASE_S, ROUND_BACKOFF_MAX_S)
                await self.transition_replication_copy_queued_to_queued(
                    obj, retry_at=self.due_in(delay), values=values
                )
                return
        values.update(todo="[]", retry=json.dumps(retry))
        wake: list[Wake] = [(BATCH, [int(obj["batch_id"] or 0)])]
        if problems:
            values["result"] = f"{len(problems)} file(s) not copied: " + "; ".join(
                f"{name}: {'; '.join(dict.fromkeys(whys))}"
                for name, whys in list(problems.items())[:3]
            )
            # (INFO: its batch warns with the same reasons once it has gathered them.)
            logger.info("replication: copy #%d: %s", obj.id, values["result"])
            if await self.transition_replication_copy_queued_to_failed(
                obj, values=values, wake=wake
            ):
                # Its rounds are used up: the claims it kept for them are given back.
                now = time.time()
                for name, _replace, claimed in retry:
                    last = problems.get(str(name), ["?"])[-1]
                    await replicas.index.call(
                        write_copy_release,
                        str(name),
                        destination,
                        float(claimed),
                        "missing",
                        mtime=now,
                        detail=f"released after {max(rounds, 1)} round(s); last: {last}",
                    )
            return
        values["result"] = summary({**values, "files": len(json.loads(str(obj["files"])))})
        await self.transition_replication_copy_queued_to_done(obj, values=values, wake=wake)

    async def transition_replication_copy_queued_to_queued(
        self, obj: JobObject, *, retry_at: datetime, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "queued", retry_at=retry_at, values=values)

    async def transition_replication_copy_queued_to_done(
        self, obj: JobObject, *, values: dict[str, Value], wake: list[Wake]
    ) -> bool:
        return await self.transition(obj, "queued", "done", retry_at=None, values=values, wake=wake)

    async def transition_replication_copy_queued_to_failed(
        self, obj: JobObject, *, values: dict[str, Value], wake: list[Wake]
    ) -> bool:
        return await self.transition(
            obj, "queued", "failed", retry_at=None, values=values, wake=wake
        )
