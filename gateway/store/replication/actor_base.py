"""What the replication actor types share: their base class, with its own
:class:`~gateway.store.replication.replicas.Replicas`, the share of a tick spent
starting work, and the counts their objects keep.

A worker or copier killed in the middle of a tick leaves its object leased:
the lease (``jobs.replicate_max_tick_s``) expires and another actor ticks
it again; a copy left ``ongoing`` by a dead copier is made again by the
same object, or, once a director's pass finds its holder gone, released and
planned again (:func:`~gateway.store.replication.director.release_orphan_claims`);
an object it half-wrote is never ``present`` (the copier's create-only,
verified puts).
"""

from __future__ import annotations

import json
from typing import Final

from gateway.jobs.actors import ActorType
from gateway.jobs.db import JobObject, Value
from gateway.store.errors import StoreError
from gateway.store.layout import Layout
from gateway.store.replication.director import ReplicationReport
from gateway.store.replication.replicas import Replicas
from gateway.store.store_actor import store_context

__all__ = ["TICK_BUDGET_SHARE", "ReplicationActor", "summary", "sums"]

#: The share of a copier's tick limit spent starting copies; the rest lets the last
#: one finish (a copy must fit in the rest: ``jobs.replicate_max_tick_s``). The
#: worker moves files to the current layout for as long.
TICK_BUDGET_SHARE: Final = 0.5


class ReplicationActor(ActorType):
    """An actor with its own :class:`Replicas` (storages opened on first use)."""

    _replicas: Replicas | None = None

    @property
    def replicas(self) -> Replicas:
        assert self._replicas is not None, "the actor has not started"
        return self._replicas

    async def on_startup(self) -> None:
        context = store_context(self.ctx)
        if context.settings is None:
            raise StoreError(f"{self.name}: the jobs context carries no store settings")
        self._replicas = Replicas(context.settings, Layout(context.root))

    async def on_shutdown(self) -> None:
        if self._replicas is not None:
            replicas, self._replicas = self._replicas, None
            await replicas.close()


def sums(obj: JobObject, report: ReplicationReport) -> dict[str, Value]:
    """The object's counts (``outcomes``, ``bytes_copied``) with ``report``'s added."""
    outcomes: dict[str, int] = json.loads(str(obj["outcomes"]))
    for outcome, n in report.outcomes.items():
        outcomes[outcome] = outcomes.get(outcome, 0) + n
    return {
        "outcomes": json.dumps(outcomes, sort_keys=True),
        "bytes_copied": int(obj["bytes_copied"] or 0) + report.bytes_copied,
    }


def summary(values: dict[str, Value]) -> str:
    """The result line of an object ended with ``values``: files, outcomes, bytes copied."""
    outcomes: dict[str, int] = json.loads(str(values["outcomes"]))
    done = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "nothing to copy"
    return f"{values['files']} file(s): {done}; {int(values['bytes_copied'] or 0)} bytes copied"
