"""What the replication actor types share: their base class, with its own
:class:`~gateway.store.replication.replicas.Replicas`, the share of a tick spent
starting work, and the counts their objects keep.

A batch or copy actor killed in the middle of a tick leaves its object leased:
the lease (``jobs.replicate_max_tick_s``) expires and another actor ticks
it again; a copy left ``ongoing`` by a dead copy actor is made again by the
same object, or, once a director's pass finds its holder gone, released and
planned again (:func:`~gateway.store.replication.director.release_orphan_claims`);
an object it half-wrote is never ``present`` (the copier's create-only,
verified puts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gateway.jobs.actors import ActorType
from gateway.store.errors import StoreError
from gateway.store.layout import Layout
from gateway.store.replication.replicas import Replicas
from gateway.store.store_actor import store_context

__all__ = ["TICK_BUDGET_SHARE", "ReplicationActor", "added_outcomes", "summary"]

#: The share of a copy actor's tick limit spent starting copies; the rest lets the
#: last one finish (a copy must fit in the rest: ``jobs.replicate_max_tick_s``). The
#: batch actor moves files to the current layout for as long.
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


def added_outcomes(outcomes: Mapping[str, int], more: Mapping[str, int]) -> dict[str, int]:
    """Copies by outcome: ``outcomes`` with ``more`` added."""
    total = dict(outcomes)
    for outcome, n in more.items():
        total[outcome] = total.get(outcome, 0) + n
    return total


def summary(files: int, outcomes: Mapping[str, int], bytes_copied: int) -> str:
    """The result line of an object that ended: files, copies by outcome, bytes copied."""
    done = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "nothing to copy"
    return f"{files} file(s): {done}; {bytes_copied} bytes copied"
