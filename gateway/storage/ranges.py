"""A range of a stored object, opened for a reader of records: storage errors as load errors.

The Resource API and the store's replicas read records from storages by
range (WARC 1.1 records at a CDX ``offset``/``length``); what a storage raises
becomes the :mod:`gateway.errors` load error the API answers with.
"""

from __future__ import annotations

from gateway.errors import (
    ArchiveFileNotFound,
    ArchiveUnavailable,
    PlaceUnreachable,
    RecordFormatError,
)
from gateway.storage.base import RangeReader, Storage
from gateway.storage.errors import (
    InvalidObjectName,
    ObjectNotFound,
    RangeNotSatisfiable,
    StorageError,
)

__all__ = ["open_storage_range", "storage_load_error"]


async def open_storage_range(
    storage: Storage, name: str, offset: int, length: int | None, *, where: str
) -> RangeReader:
    """``storage.open_range(name, offset, length)`` for a :class:`RangeLocation` named
    ``where``, its failures as load errors: no such object (or a name the storage
    cannot hold) :class:`~gateway.errors.ArchiveFileNotFound`, a range past the
    end :class:`~gateway.errors.RecordFormatError` (check the CDX offset),
    anything else :func:`storage_load_error`."""
    try:
        return await storage.open_range(name, offset, length)
    except (ObjectNotFound, InvalidObjectName) as exc:
        raise ArchiveFileNotFound(f"{where}: {exc.problem}", {where: exc.problem}) from exc
    except RangeNotSatisfiable as exc:
        raise RecordFormatError(
            f"{where}: {exc.problem}; check the CDX offset and length", {where: exc.problem}
        ) from exc
    except StorageError as exc:
        raise storage_load_error(exc, where) from exc


def storage_load_error(exc: StorageError, where: str) -> ArchiveUnavailable:
    """The load error of a storage failure at ``where``: :class:`PlaceUnreachable`
    when the storage could not be reached or answered a transient failure
    (``exc.retryable``: refused, reset, timed out, 5xx), else
    :class:`~gateway.errors.ArchiveUnavailable` (it refused: no permission, ...)."""
    kind = PlaceUnreachable if exc.retryable else ArchiveUnavailable
    return kind(f"{where}: {exc.problem}", {where: exc.problem})
