"""The ``replication_batch`` objects and their actor type (issue 13 §3).

**A batch actor** ticks one ``replication_batch``
object: it re-reads its files' needs, checks what cannot be copied, plans
and claims the copies (:func:`~gateway.store.replication.director.plan_batch`,
:func:`~gateway.store.replication.director.claim_copy`: ``ongoing`` with the batch's
``mtime``), groups them by (source, destination) pair and hands each group
to a copy object: the batch moves to ``copying`` and, as that transition's side
effect, one ``replication_copy`` object per group is written (one
transaction). Written after the transition, so that no copy object can end
before the batch waits for it (a wake leaves a leased object alone); a
batch actor killed between the two leaves the groups in the batch's
``pending``, and the batch's next tick writes the missing objects (a
unique key on (batch, source, destination) makes that write idempotent).
Each copy object's final transition wakes the batch; once every one is
final, the batch's next tick gathers their outcomes and reasons and ends
it. Until then
it looks again at least every ``min(60 s, jobs.replicate_max_tick_s)`` (a
copy object that ends while such a look leases the batch does not wake it:
the batch ends at its next look instead).

::

    queued --> copying   copies claimed and handed to copy objects
    queued --> done      nothing to copy: every file of the batch has its safe copies
    queued --> unsafe    nothing could be copied, and a file is not safe (reasons in ``problems``)
    copying --> copying  copy objects still at work (looked at again later)
    copying --> done     every copy object final and every file safe
    copying --> unsafe   a file could not be made safe (the reasons gathered from its copies)

Batch objects are made by the director's pass
(:mod:`~gateway.store.replication.director_actor`) or a command's
(:mod:`~gateway.store.replication.passes`), both through :func:`write_batches`.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Final

from gateway.jobs.db import JobObject, utcnow, write_objects
from gateway.jobs.settings import JobsSettings
from gateway.store.job_rows import (
    BatchColumns,
    CopyColumns,
    CopyGroup,
    CopyTodo,
    GroupFile,
)
from gateway.store.object_types import (
    BATCH,
    BATCH_COPYING_TO_COPYING,
    BATCH_COPYING_TO_DONE,
    BATCH_COPYING_TO_UNSAFE,
    BATCH_QUEUED_TO_COPYING,
    BATCH_QUEUED_TO_DONE,
    BATCH_QUEUED_TO_UNSAFE,
    COPY,
)
from gateway.store.replication.actor_base import (
    TICK_BUDGET_SHARE,
    ReplicationActor,
    added_outcomes,
    summary,
)
from gateway.store.replication.copy_status import read_file_copies
from gateway.store.replication.director import (
    CopyPlan,
    ReplicationReport,
    claim_copy,
    group_by_pair,
    plan_batch,
)
from gateway.store.replication.pass_effects import publish

__all__ = ["BatchActor", "read_batch_copies", "write_batches", "write_copies"]

logger = logging.getLogger(__name__)


#: How long a batch in ``copying`` waits before it looks at its copy objects again
#: (at most; its copies' last transition wakes it), seconds.
COPYING_LOOK_S: Final = 60.0


def read_batch_copies(conn: sqlite3.Connection, batch_id: int) -> list[JobObject[CopyColumns]]:
    """The copy objects of batch ``batch_id``, in the order they were made."""
    rows = conn.execute(
        f"SELECT {', '.join(COPY.column_names)} FROM {COPY.table} WHERE batch_id = ? ORDER BY id",
        (batch_id,),
    ).fetchall()
    return [JobObject.from_row(COPY, row) for row in rows]


def write_batches(
    conn: sqlite3.Connection,
    batches: Sequence[Sequence[int]],
    pass_id: str,
    now: datetime,
    *,
    max_rounds: int = 6,
    replace_conflicts: bool = False,
) -> list[int]:
    """One ``replication_batch`` object per batch of file ids, due now (one transaction).

    ``replace_conflicts``: its copies replace objects of other bytes found
    under a file's name (``store repair --replace-copies``).
    """
    rows = [
        BatchColumns(
            pass_id=pass_id,
            file_ids=tuple(ids),
            max_rounds=max_rounds,
            replace_conflicts=replace_conflicts,
        )
        for ids in batches
    ]
    return write_objects(conn, BATCH, now, rows) if rows else []


def write_copies(
    conn: sqlite3.Connection,
    batch_id: int,
    max_rounds: int,
    groups: Sequence[CopyGroup],
    now: datetime,
) -> list[int]:
    """One ``replication_copy`` object per group of batch ``batch_id``, due now (one
    transaction); a group that has its object already is skipped (the unique key on
    (batch, source, destination)). ``groups``: as the batch's ``pending`` holds them;
    each file's claim is ``ongoing`` since its group's ``mtime``."""
    rows = [
        CopyColumns(
            batch_id=batch_id,
            source=group.source,
            destination=group.destination,
            mtime=group.mtime,
            max_rounds=max_rounds,
            files=tuple(f.name for f in group.files),
            todo=tuple(CopyTodo(f.name, f.replace, group.mtime) for f in group.files),
        )
        for group in groups
    ]
    return write_objects(conn, COPY, now, rows, ignore_existing=True) if rows else []


class BatchActor(ReplicationActor):
    """Ticks one batch: its copies planned, claimed and handed to copy objects, then
    its end gathered from them (see the module docstring)."""

    name = "replication_batch"
    object_type = BATCH
    queue_states = ("queued", "copying")
    max_concurrent = 1
    max_tick_s = 3600.0
    backoff_base_s = 10.0
    backoff_max_s = 600.0

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return cls.max_concurrent, settings.replicate_max_tick_s

    async def tick(self, obj: JobObject[BatchColumns]) -> None:
        if obj.status == "copying":
            await self._gather(obj)
            return
        replicas = self.replicas
        deadline = time.monotonic() + self.tick_limit_s * TICK_BUDGET_SHARE
        mtime = time.time()
        report, planned = await plan_batch(
            replicas,
            list(obj.row.file_ids),
            replace_conflicts=obj.row.replace_conflicts,
            deadline=deadline,
        )
        claimed: list[CopyPlan] = []
        for copy in planned:
            if await claim_copy(replicas, copy, mtime):
                claimed.append(copy)
            else:
                report.count("claimed_elsewhere")
        values = _totals(obj.row, report)
        if not claimed:
            await self._end(obj, values)
            return
        groups = tuple(
            CopyGroup(
                source, destination, mtime, tuple(GroupFile(c.file.name, c.replace) for c in copies)
            )
            for (source, destination), copies in group_by_pair(claimed).items()
        )
        values = replace(values, pending=groups)
        if await self.transition(
            obj, BATCH_QUEUED_TO_COPYING, retry_at=self.due_in(self._look_s()), values=values
        ):
            await self.ctx.db.call(write_copies, obj.id, obj.row.max_rounds or 1, groups, utcnow())

    async def _gather(self, obj: JobObject[BatchColumns]) -> None:
        """A batch in ``copying``: wait for its copy objects, then end it with their outcomes."""
        copies = await self.ctx.db.call(read_batch_copies, obj.id)
        made = {(c.row.source, c.row.destination) for c in copies}
        missing = [g for g in obj.row.pending if (g.source, g.destination) not in made]
        if missing or any(c.retry_at is not None for c in copies):
            looked = await self.transition(
                obj, BATCH_COPYING_TO_COPYING, retry_at=self.due_in(self._look_s())
            )
            if looked and missing:
                # The batch actor that moved the batch died before it wrote them.
                max_rounds = obj.row.max_rounds or 1
                await self.ctx.db.call(write_copies, obj.id, max_rounds, missing, utcnow())
            return
        report = ReplicationReport()
        rounds = obj.row.rounds
        for copy in copies:
            rounds = max(rounds, copy.row.rounds)
            report.bytes_copied += copy.row.bytes_copied
            for outcome, n in copy.row.outcomes.items():
                report.outcomes[outcome] = report.outcomes.get(outcome, 0) + n
            for name, whys in copy.row.problems.items():
                report.unsafe.setdefault(name, []).extend(whys)
        values = replace(
            _totals(obj.row, report),
            rounds=rounds,
            deferred=report.outcomes.get("deferred", 0),
        )
        await self._end(obj, values)

    async def _end(self, obj: JobObject[BatchColumns], values: BatchColumns) -> None:
        """The batch's last transition: ``done``, or ``unsafe`` with the files still not
        safe and why (a file whose problem a later copy mended is not named)."""
        problems = values.problems
        unsafe = await self._still_unsafe(problems)
        values = replace(values, problems={name: problems[name] for name in unsafe})
        copying = obj.status == "copying"
        if unsafe:
            result = f"{len(unsafe)} file(s) not safe: " + "; ".join(
                f"{name}: {'; '.join(dict.fromkeys(problems[name]))}" for name in unsafe[:3]
            )
            logger.warning("replication: batch #%d: %s", obj.id, result)
            end = BATCH_COPYING_TO_UNSAFE if copying else BATCH_QUEUED_TO_UNSAFE
        else:
            result = summary(values.files, values.outcomes, values.bytes_copied)
            end = BATCH_COPYING_TO_DONE if copying else BATCH_QUEUED_TO_DONE
        if await self.transition(obj, end, retry_at=None, values=replace(values, result=result)):
            # The side effect of the end: the files it made safe are published now,
            # not at the director's next pass (store.publish; a fleet sees them at once).
            await publish(self.replicas)

    def _look_s(self) -> float:
        return min(COPYING_LOOK_S, self.tick_limit_s)

    async def _still_unsafe(self, problems: Mapping[str, Sequence[str]]) -> list[str]:
        """The files of ``problems`` that still have fewer present copies than the policy."""
        if not problems:
            return []
        replicas = self.replicas
        files = await replicas.index.call(read_file_copies, replicas.places, names=list(problems))
        cutoff, wanted = replicas.cutoff(), replicas.policy.copies
        return [f.name for f in files if len(f.present_places(replicas.places, cutoff)) < wanted]


def _totals(row: BatchColumns, report: ReplicationReport) -> BatchColumns:
    """The batch's row with ``report`` added: counts summed, problems gathered."""
    problems = {name: list(whys) for name, whys in row.problems.items()}
    for name, whys in report.unsafe.items():
        problems.setdefault(name, []).extend(whys)
    return replace(
        row,
        outcomes=added_outcomes(row.outcomes, report.outcomes),
        bytes_copied=row.bytes_copied + report.bytes_copied,
        files=row.files + report.files,
        problems={name: tuple(whys) for name, whys in problems.items()},
    )
