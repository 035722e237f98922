"""The replication worker (``replication_worker``) and the ``replication_batch``
objects it ticks (issue 13 §3).

**A worker** ticks one ``replication_batch``
object: it re-reads its files' needs, checks what cannot be copied, plans
and claims the copies (:func:`~gateway.store.replication.director.plan_batch`,
:func:`~gateway.store.replication.director.claim_copy`: ``ongoing`` with the batch's
``mtime``), groups them by (source, destination) pair and hands each group
to a copier: the batch moves to ``copying`` and, as that transition's side
effect, one ``replication_copy`` object per group is written (one
transaction). Written after the transition, so that no copier can end
before the batch waits for it (a wake leaves a leased object alone); a
worker killed between the two leaves the groups in the batch's
``pending``, and the batch's next tick writes the missing objects (a
unique key on (batch, source, destination) makes that write idempotent).
Each copy object's final transition wakes the batch; once every one is
final, the batch's next tick gathers their outcomes and reasons and ends
it, as a batch ended before copiers were objects of their own. Until then
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

import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from gateway.jobs.db import JobObject, Value, utcnow, write_objects
from gateway.jobs.settings import JobsSettings
from gateway.store.object_types import BATCH, COPY
from gateway.store.replication.actor_base import (
    TICK_BUDGET_SHARE,
    ReplicationActor,
    summary,
    sums,
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

__all__ = ["ReplicationWorker", "read_batch_copies", "write_batches", "write_copies"]

logger = logging.getLogger(__name__)


#: How long a batch in ``copying`` waits before it looks at its copy objects again
#: (at most; its copies' last transition wakes it), seconds.
COPYING_LOOK_S: Final = 60.0


def read_batch_copies(conn: sqlite3.Connection, batch_id: int) -> list[JobObject]:
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

    ``replace_conflicts``: its worker replaces objects of other bytes found
    under a file's name (``store repair --replace-copies``).
    """
    rows: list[dict[str, Value]] = [
        {
            "pass_id": pass_id,
            "file_ids": json.dumps(list(ids)),
            "max_rounds": max_rounds,
            "replace_conflicts": int(replace_conflicts),
        }
        for ids in batches
    ]
    return write_objects(conn, BATCH, now, rows) if rows else []


def write_copies(
    conn: sqlite3.Connection,
    batch_id: int,
    max_rounds: int,
    groups: Sequence[Sequence[Any]],
    now: datetime,
) -> list[int]:
    """One ``replication_copy`` object per group of batch ``batch_id``, due now (one
    transaction); a group that has its object already is skipped (the unique key on
    (batch, source, destination)). ``groups``: ``[source, destination, mtime,
    [[name, replace], ...]]`` as the batch's ``pending`` holds them; each file's
    claim is ``ongoing`` since ``mtime``."""
    rows: list[dict[str, Value]] = [
        {
            "batch_id": batch_id,
            "source": source,
            "destination": destination,
            "mtime": mtime,
            "max_rounds": max_rounds,
            "files": json.dumps([name for name, _ in files]),
            "todo": json.dumps([[name, replace, mtime] for name, replace in files]),
        }
        for source, destination, mtime, files in groups
    ]
    return write_objects(conn, COPY, now, rows, ignore_existing=True) if rows else []


class ReplicationWorker(ReplicationActor):
    """Ticks one batch: its copies planned, claimed and handed to copy objects, then
    its end gathered from them (see the module docstring)."""

    name = "replication_worker"
    object_type = BATCH
    queue_states = ("queued", "copying")
    max_concurrent = 1
    max_tick_s = 3600.0
    backoff_base_s = 10.0
    backoff_max_s = 600.0

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return cls.max_concurrent, settings.replicate_max_tick_s

    async def tick(self, obj: JobObject) -> None:
        if obj.status == "copying":
            await self._gather(obj)
            return
        replicas = self.replicas
        deadline = time.monotonic() + self.tick_limit_s * TICK_BUDGET_SHARE
        mtime = time.time()
        ids = [int(i) for i in json.loads(str(obj["file_ids"]))]
        report, planned = await plan_batch(
            replicas, ids, replace_conflicts=bool(obj["replace_conflicts"]), deadline=deadline
        )
        claimed: list[CopyPlan] = []
        for copy in planned:
            if await claim_copy(replicas, copy, mtime):
                claimed.append(copy)
            else:
                report.count("claimed_elsewhere")
        values = _totals(obj, report)
        if not claimed:
            await self._end(obj, values)
            return
        groups = [
            [source, destination, mtime, [[c.file.name, c.replace] for c in copies]]
            for (source, destination), copies in group_by_pair(claimed).items()
        ]
        values["pending"] = json.dumps(groups)
        if await self.transition_replication_batch_queued_to_copying(
            obj, retry_at=self.due_in(self._look_s()), values=values
        ):
            await self.ctx.db.call(
                write_copies, obj.id, int(obj["max_rounds"] or 1), groups, utcnow()
            )

    async def _gather(self, obj: JobObject) -> None:
        """A batch in ``copying``: wait for its copy objects, then end it with their outcomes."""
        copies = await self.ctx.db.call(read_batch_copies, obj.id)
        groups: list[list[Any]] = json.loads(str(obj["pending"]))
        made = {(str(c["source"]), str(c["destination"])) for c in copies}
        missing = [g for g in groups if (g[0], g[1]) not in made]
        if missing or any(c.retry_at is not None for c in copies):
            if (
                await self.transition_replication_batch_copying_to_copying(
                    obj, retry_at=self.due_in(self._look_s())
                )
                and missing
            ):
                # The worker that moved the batch died before it wrote them.
                max_rounds = int(obj["max_rounds"] or 1)
                await self.ctx.db.call(write_copies, obj.id, max_rounds, missing, utcnow())
            return
        report = ReplicationReport()
        rounds = int(obj["rounds"] or 0)
        for copy in copies:
            rounds = max(rounds, int(copy["rounds"] or 0))
            report.bytes_copied += int(copy["bytes_copied"] or 0)
            for outcome, n in json.loads(str(copy["outcomes"])).items():
                report.outcomes[outcome] = report.outcomes.get(outcome, 0) + int(n)
            for name, whys in json.loads(str(copy["problems"])).items():
                report.unsafe.setdefault(name, []).extend(whys)
        values = _totals(obj, report)
        values["rounds"] = rounds
        values["deferred"] = int(report.outcomes.get("deferred", 0))
        await self._end(obj, values)

    async def _end(self, obj: JobObject, values: dict[str, Value]) -> None:
        """The batch's last transition: ``done``, or ``unsafe`` with the files still not
        safe and why (a file whose problem a later copy mended is not named)."""
        problems: dict[str, list[str]] = json.loads(str(values["problems"]))
        unsafe = await self._still_unsafe(problems)
        values["problems"] = json.dumps({name: problems[name] for name in unsafe})
        if unsafe:
            values["result"] = f"{len(unsafe)} file(s) not safe: " + "; ".join(
                f"{name}: {'; '.join(dict.fromkeys(problems[name]))}" for name in unsafe[:3]
            )
            logger.warning("replication: batch #%d: %s", obj.id, values["result"])
            if obj.status == "copying":
                won = await self.transition_replication_batch_copying_to_unsafe(obj, values=values)
            else:
                won = await self.transition_replication_batch_queued_to_unsafe(obj, values=values)
        else:
            values["result"] = summary(values)
            if obj.status == "copying":
                won = await self.transition_replication_batch_copying_to_done(obj, values=values)
            else:
                won = await self.transition_replication_batch_queued_to_done(obj, values=values)
        if won:
            # The side effect of the end: the files it made safe are published now,
            # not at the director's next pass (store.publish; a fleet sees them at once).
            await publish(self.replicas)

    def _look_s(self) -> float:
        return min(COPYING_LOOK_S, self.tick_limit_s)

    async def _still_unsafe(self, problems: dict[str, list[str]]) -> list[str]:
        """The files of ``problems`` that still have fewer present copies than the policy."""
        if not problems:
            return []
        replicas = self.replicas
        files = await replicas.index.call(read_file_copies, replicas.places, names=list(problems))
        cutoff, wanted = replicas.cutoff(), replicas.policy.copies
        return [f.name for f in files if len(f.present_places(replicas.places, cutoff)) < wanted]

    async def transition_replication_batch_queued_to_copying(
        self, obj: JobObject, *, retry_at: datetime, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "copying", retry_at=retry_at, values=values)

    async def transition_replication_batch_queued_to_done(
        self, obj: JobObject, *, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "done", retry_at=None, values=values)

    async def transition_replication_batch_queued_to_unsafe(
        self, obj: JobObject, *, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "queued", "unsafe", retry_at=None, values=values)

    async def transition_replication_batch_copying_to_copying(
        self, obj: JobObject, *, retry_at: datetime
    ) -> bool:
        return await self.transition(obj, "copying", "copying", retry_at=retry_at)

    async def transition_replication_batch_copying_to_done(
        self, obj: JobObject, *, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "copying", "done", retry_at=None, values=values)

    async def transition_replication_batch_copying_to_unsafe(
        self, obj: JobObject, *, values: dict[str, Value]
    ) -> bool:
        return await self.transition(obj, "copying", "unsafe", retry_at=None, values=values)


def _totals(obj: JobObject, report: ReplicationReport) -> dict[str, Value]:
    """The batch's columns with ``report`` added: counts summed, problems gathered."""
    problems: dict[str, list[str]] = json.loads(str(obj["problems"]))
    for name, whys in report.unsafe.items():
        problems.setdefault(name, []).extend(whys)
    return {
        **sums(obj, report),
        "files": int(obj["files"] or 0) + report.files,
        "problems": json.dumps(problems),
    }
