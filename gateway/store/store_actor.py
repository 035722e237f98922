"""StoreActorType: the base of actor types that work on the store (import, scrub, ...).

Each actor holds its own connection to the store's index (:class:`IndexDB`),
opened when the actor starts and closed when it exits, and knows the store's
layout. ``index_access`` is ``"write"`` for actors that add files and rows
(the import), ``"read"`` for those that only look (the scrub).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gateway.jobs.actors import ActorType, JobContext
from gateway.store.connection import Access
from gateway.store.db import IndexDB
from gateway.store.layout import Layout
from gateway.store.settings import StoreSettings

__all__ = ["StoreActorType", "StoreContext", "store_context"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreContext:
    """The store's part of a :class:`~gateway.jobs.actors.JobContext` (its ``app``).

    ``root``: the store directory, absolute (the actor types build their
    layout from it); ``settings``: the store's settings (its storages and
    retention policy, for the replication's actor types; None where a caller
    runs only actor types that need no more than ``root``).
    """

    root: Path
    settings: StoreSettings | None = None


def store_context(ctx: JobContext[Any]) -> StoreContext:
    """``ctx.app`` as the store's context; :class:`TypeError` when it is another's."""
    app = ctx.app
    if not isinstance(app, StoreContext):
        raise TypeError(f"a store actor type needs a StoreContext, not {type(app).__name__}")
    return app


class StoreActorType(ActorType):
    """An actor type with an index connection per actor (see the module docstring)."""

    index_access: ClassVar[Access] = "read"
    _index: IndexDB | None = None

    @property
    def store(self) -> StoreContext:
        """The store the jobs belong to."""
        return store_context(self.ctx)

    @property
    def layout(self) -> Layout:
        """The layout of the store the jobs belong to."""
        return Layout(self.store.root)

    @property
    def index(self) -> IndexDB:
        """This actor's index connection (between :meth:`on_startup` and :meth:`on_shutdown`)."""
        assert self._index is not None, "the actor has not started"
        return self._index

    async def on_startup(self) -> None:
        self._index = await asyncio.to_thread(
            IndexDB, self.layout.db_path, access=self.index_access
        )

    async def on_shutdown(self) -> None:
        if self._index is not None:
            index, self._index = self._index, None
            await asyncio.to_thread(index.close)
