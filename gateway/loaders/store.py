"""The snapshot store's resource loader: WARC records under ``<store root>/warcs/``.

:class:`StoreRecordLoader` is the gateway's WARC loader
(:mod:`gateway.loaders.warc`) with one resolver, :class:`StoreResolver`,
mapping a CDX ``filename`` to the places the open store may keep it, in
order (:meth:`Store.locate <gateway.store.store.Store.locate>`: the place
its row gives, then the other layouts'; a file moving to a new layout is in
one of them), then to the file's copies on the store's storages
(``store.storages``), which are read only when every place at the primary
fails. The loader tries each in turn. It
accepts only captures of its ``$store`` member (``source-coll``), so each
``$store`` member loads its own captures; :mod:`gateway.sources.store`
returns it from ``resource_loaders()``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from gateway.cdx.cdxj import CdxRecord
from gateway.clients import SharedClients
from gateway.errors import ArchiveFileNotFound, ArchiveUnavailable, LoadError
from gateway.loaders.base import LoadContext, LoadedRecord
from gateway.loaders.resolvers import check_filename
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig
from gateway.loaders.warc_sources import Location
from gateway.store.errors import StoreError

if TYPE_CHECKING:
    # The store (warcio, SQLite, the writer) is imported by the app that opens it.
    from gateway.store.store import Store

__all__ = ["SHORTHAND", "StoreGetter", "StoreRecordLoader", "StoreResolver", "StoreResolverConfig"]

#: The shorthand that selects the snapshot store (``index: $store``).
SHORTHAND = "$store"

StoreGetter = Callable[[], "Store | None"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreResolverConfig:
    """The store's ``warcs/`` directory as a WARC location (no settings)."""

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        if text != SHORTHAND:
            raise ValueError(f"{text!r} is not the snapshot store; expected {SHORTHAND!r}")
        return cls()


class StoreResolver:
    """Resolver: a CDX ``filename`` -> the paths the store may keep it at, in order,
    then the file's copies on the store's storages (tried only when those fail)."""

    def __init__(self, store: StoreGetter) -> None:
        self._store = store

    async def locate(self, filename: str) -> list[Location]:
        """The candidate paths at the primary (:meth:`Store.locate`), the row's place
        first, then a replica location per storage (issue 13 §4:
        :mod:`gateway.store.replication.replicas`).

        Raises UnsafeFilename, ArchiveFileNotFound (the store is not open) or
        LoadError (its index failed, or the row names an unknown layout).
        """
        check_filename(filename)
        store = self._store()
        if store is None:
            raise ArchiveFileNotFound(
                f"{filename}: the snapshot store is not open", {filename: "store not open"}
            )
        try:
            places: list[Location] = [str(path) for path in store.locate(filename)]
        except StoreError as exc:
            raise LoadError(f"{filename}: {exc.message}", {filename: exc.message}) from exc
        return [*places, *store.replica_locations(filename)]

    def describe(self) -> str:
        store = self._store()
        return f"snapshot store {store.warc_dir}/" if store is not None else "snapshot store"


class StoreRecordLoader:
    """Loads the captures of one ``$store`` member with the gateway's WARC loader.

    ``accepts`` only captures tagged with this member's name (``source-coll``)
    that name a file and offset; revisits resolve through the step's
    ``find_original`` as for any WARC capture.
    """

    def __init__(self, *, name: str, store: StoreGetter, clients: SharedClients) -> None:
        self.name = name
        config = WarcLoaderConfig(resolvers=(StoreResolverConfig(),))
        self._warc = WarcLoader(config, clients=clients, resolvers=[StoreResolver(store)])

    def accepts(self, capture: CdxRecord) -> bool:
        return capture.fields.get("source-coll") == self.name and self._warc.accepts(capture)

    async def load(self, capture: CdxRecord, ctx: LoadContext) -> LoadedRecord:
        """Load the record (see :meth:`WarcLoader.load <gateway.loaders.warc.WarcLoader.load>`).

        A file found at none of its places is looked for once more, its row
        read again: a row of an older release names no date, so its places
        are the flat layout's only, and a migrator (another process) may
        record the date, move the file and remove the old copy between the
        read of the row and the open. Raises what the WARC loader raises, but a
        file of the store found at no place and no copy is the store's own failure,
        not "not archived": :class:`~gateway.errors.ArchiveUnavailable` naming it.
        """
        try:
            return await self._warc.load(capture, ctx)
        except ArchiveFileNotFound:
            try:
                return await self._warc.load(capture, ctx)
            except ArchiveFileNotFound as exc:
                raise ArchiveUnavailable(
                    f"the store's own file {capture.filename!r} is at none of its places "
                    f"and in no copy ({exc.message}); `gateway store check` says more, "
                    "`gateway store repair` restores it from a copy when one verifies",
                    exc.errors,
                ) from exc

    def describe(self) -> str:
        return self._warc.describe()
