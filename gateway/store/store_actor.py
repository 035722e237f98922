"""StoreActorType: the base of actor types that work on the store (import, scrub, ...).

Each actor holds its own connection to the store's index (:class:`IndexDB`),
opened when the actor starts and closed when it exits, and knows the store's
layout. ``index_access`` is ``"write"`` for actors that add files and rows
(the import), ``"read"`` for those that only look (the scrub).
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from gateway.jobs.actors import ActorType
from gateway.store.db import Access, IndexDB
from gateway.store.layout import Layout

__all__ = ["StoreActorType"]


class StoreActorType(ActorType):
    """An actor type with an index connection per actor (see the module docstring)."""

    index_access: ClassVar[Access] = "read"
    _index: IndexDB | None = None

    @property
    def layout(self) -> Layout:
        """The layout of the store the jobs belong to."""
        return Layout(self.ctx.store_root)

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
