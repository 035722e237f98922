"""``$store``: the snapshot store as an index source.

The store is app-wide (one ``store:`` section), so the source has no
settings of its own: ``$store`` in an ``index``/``index_group`` selects it.
The :class:`~gateway.store.store.Store` is opened by the app's
``cleanup_ctx`` after the sources are built, so the source reaches it at
lookup time through ``SharedClients.store`` (``Store | None``).

Records carry ``filename`` relative to the store's ``warcs/`` directory
(``Store.warc_dir``). The source brings its own resource loader
(:meth:`StoreSource.resource_loaders`): the gateway's WARC loader over that
directory, accepting only this member's captures (``source-coll``), so a
collection needs nothing but ``index: $store``. An ordinary WARC prefix
``<store root>/warcs/`` loads the same records. A name may end in ``.open``
while its file is being written; it stays loadable for a grace period after
the file is closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Self

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.errors import SourceUnavailable
from gateway.loaders.base import ResourceLoader
from gateway.loaders.store import SHORTHAND, StoreGetter, StoreRecordLoader
from gateway.sources.base import Page, SourceConfig
from gateway.sources.wacz_index import parse_pages
from gateway.store.errors import StoreError

if TYPE_CHECKING:
    from gateway.store.store import Store

__all__ = ["StoreRecordLoader", "StoreSource", "StoreSourceConfig"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSourceConfig:
    """``$store`` (no settings: the store is configured in the ``store:`` section)."""

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """Accept exactly ``$store``; raises ValueError otherwise."""
        if text != SHORTHAND:
            raise ValueError(f"{text!r} is not the snapshot store; expected {SHORTHAND!r}")
        return cls()


class StoreSource:
    """Index source over the snapshot store (pywb warcserver ``IndexSource`` role)."""

    config_type: ClassVar[type[SourceConfig]] = StoreSourceConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = (SHORTHAND,)

    def __init__(
        self, *, name: str, store: StoreGetter, clients: SharedClients | None = None
    ) -> None:
        self.name = name
        self._store = store
        self._loader = StoreRecordLoader(name=name, store=store, clients=clients or SharedClients())

    @classmethod
    def from_config(cls, config: SourceConfig, *, name: str, clients: SharedClients) -> StoreSource:
        """Build the source; the store is taken from ``clients.store`` at lookup time."""
        if not isinstance(config, StoreSourceConfig):
            raise TypeError(f"expected StoreSourceConfig, got {type(config).__name__}")

        def current() -> Store | None:
            return clients.store

        return cls(name=name, store=current, clients=clients)

    @classmethod
    def for_store(cls, store: Store, *, name: str = "store") -> StoreSource:
        """A source over an already opened store (tests, embedding)."""
        return cls(name=name, store=lambda: store)

    async def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Yield captures in ``[query.key, query.end_key)`` sorted by (urlkey, timestamp).

        Raises :class:`~gateway.errors.SourceUnavailable` when the store is not
        open or its index fails.
        """
        store = self._store()
        if store is None:
            raise SourceUnavailable(
                self.name, "the snapshot store is not open (is a store: section configured?)"
            )
        try:
            async for record in store.lookup(query):
                yield record
        except StoreError as exc:
            raise SourceUnavailable(self.name, exc.message) from exc

    async def pages(self, limit: int) -> tuple[list[Page], int]:
        """The page lists of the WACZ files added to the store (``store add x.wacz``
        keeps each as ``<root>/pages/<name>.jsonl``), by file name then list order:
        up to ``limit`` pages and the total. None while the store is not open."""
        store = self._store()
        if store is None:
            return [], 0
        folder = Path(store.root) / "pages"

        def read() -> list[Page]:
            pages: list[Page] = []
            for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else ():
                pages += parse_pages(path.read_bytes(), origin=f"{path.stem}.wacz")
            return pages

        try:
            pages = await asyncio.to_thread(read)
        except OSError as exc:
            logger.warning("%s: cannot read the store's page lists: %s", self.name, exc)
            return [], 0
        return pages[:limit], len(pages)

    def describe(self) -> str:
        store = self._store()
        where = f"{store.root}" if store is not None else "the configured store: root"
        return f"snapshot store ($store) at {where}"

    def resource_loaders(self) -> Sequence[ResourceLoader]:
        """The loader of this member's captures (records in the store's ``warcs/``)."""
        return (self._loader,)

    async def aclose(self) -> None:
        """Nothing to release: the app owns the store."""
        return None
