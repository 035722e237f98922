"""An object on one of the snapshot store's storages, as a location read by range.

``storage:NAME/KEY`` names the object ``KEY`` of the storage ``NAME`` of the
store's ``storages:`` section (a local directory, an S3 bucket and prefix:
:mod:`gateway.storage`), read with the storage's own ``open_range`` and
``stat``, with its credentials and settings. A WACZ kept there is served in
place (:mod:`gateway.sources.wacz`). The store is opened by the app after the
sources are built, so the storage is looked up at the first read
(``SharedClients.store``).
"""

from __future__ import annotations

from typing import Final

from gateway.clients import SharedClients
from gateway.errors import ArchiveFileNotFound, ArchiveUnavailable
from gateway.storage.base import RangeReader, Storage
from gateway.storage.errors import InvalidObjectName, ObjectNotFound, StorageError
from gateway.storage.ranges import open_storage_range, storage_load_error

__all__ = ["STORAGE_PREFIX", "StorageObject"]

#: How a path names an object of a store's storage: ``storage:NAME/KEY``.
STORAGE_PREFIX: Final = "storage:"


class StorageObject:
    """``KEY`` on the store's storage ``NAME``: a
    :class:`~gateway.loaders.warc_sources.RangeLocationWithSize`.

    Reads raise :class:`~gateway.errors.ArchiveUnavailable` when no store is
    open or it has no storage ``NAME``, :class:`~gateway.errors.ArchiveFileNotFound`
    when the object is not there, and the storage's failures as load errors.
    """

    __slots__ = ("_clients", "key", "storage_name")

    def __init__(self, path: str, clients: SharedClients) -> None:
        """``path`` is ``storage:NAME/KEY``; raises ValueError otherwise."""
        name, _, key = path.removeprefix(STORAGE_PREFIX).partition("/")
        if not path.startswith(STORAGE_PREFIX) or not name or not key:
            raise ValueError(f"{path!r}: expected storage:NAME/KEY (a storage of store.storages)")
        self.storage_name = name
        self.key = key
        self._clients = clients

    def __str__(self) -> str:
        return f"{STORAGE_PREFIX}{self.storage_name}/{self.key}"

    async def _storage(self) -> Storage:
        where = str(self)
        store = self._clients.store
        if store is None:
            reason = "no snapshot store is open (a storage: path needs the store: section)"
            raise ArchiveUnavailable(f"{where}: {reason}", {where: reason})
        try:
            return await store.replicas.storage(self.storage_name)
        except KeyError:
            reason = f"the store has no storage {self.storage_name!r} (see store.storages)"
            raise ArchiveUnavailable(f"{where}: {reason}", {where: reason}) from None
        except StorageError as exc:
            raise storage_load_error(exc, where) from exc

    async def open_range(self, offset: int, length: int | None) -> RangeReader:
        storage = await self._storage()
        return await open_storage_range(storage, self.key, offset, length, where=str(self))

    async def size(self) -> int:
        """The object's size in bytes (the storage's ``stat``)."""
        storage, where = await self._storage(), str(self)
        try:
            return (await storage.stat(self.key)).size
        except (ObjectNotFound, InvalidObjectName) as exc:
            raise ArchiveFileNotFound(f"{where}: {exc.problem}", {where: exc.problem}) from exc
        except StorageError as exc:
            raise storage_load_error(exc, where) from exc
