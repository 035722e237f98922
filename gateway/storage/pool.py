"""The configured storages of a store, each opened on first use and kept open.

Replication, the scrub and reads from replicas all ask a :class:`StoragePool`
for a storage by its ``store.storages`` name. A storage is opened once (an
S3 storage's client and connection pool live as long as the pool), by one
caller at a time; a storage that cannot be opened (its server down, its disk
not mounted) is reported as such, and opening it again is tried at most
every ``reopen_after_s`` seconds, so that a down storage costs one failed
attempt per interval rather than one per record read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Final

from gateway.storage.base import Storage
from gateway.storage.errors import StorageError, StorageUnavailable
from gateway.storage.settings import StorageSpec

__all__ = ["REOPEN_AFTER_S", "StoragePool"]

logger = logging.getLogger(__name__)

#: Seconds between two attempts to open a storage that failed to open.
REOPEN_AFTER_S: Final = 5.0


class StoragePool:
    """Storages by name (``specs``: ``store.storages``), opened lazily; close with :meth:`close`."""

    def __init__(
        self, specs: Mapping[str, StorageSpec], *, reopen_after_s: float = REOPEN_AFTER_S
    ) -> None:
        self.specs = dict(specs)
        self.reopen_after_s = reopen_after_s
        self._open: dict[str, Storage] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: name -> (monotonic time of the failure, its message)
        self._failed: dict[str, tuple[float, str]] = {}
        self._closed = False

    @property
    def names(self) -> tuple[str, ...]:
        """The storages' names, in config order."""
        return tuple(self.specs)

    async def get(self, name: str) -> Storage:
        """The open storage ``name``; opens it on first use.

        Raises :class:`KeyError` for a name not configured and
        :class:`~gateway.storage.errors.StorageError` when it cannot be
        opened (within ``reopen_after_s`` of a failure, without trying again).
        """
        opened = self._open.get(name)
        if opened is not None:
            return opened
        spec = self.specs[name]
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            opened = self._open.get(name)
            if opened is not None:
                return opened
            if self._closed:
                raise StorageUnavailable(name, "", "the store is closing")
            failed = self._failed.get(name)
            if failed is not None and time.monotonic() - failed[0] < self.reopen_after_s:
                raise StorageUnavailable(name, "", f"{failed[1]} (tried again shortly)")
            from gateway.storage import STORAGE_TYPES

            try:
                opened = await STORAGE_TYPES[spec.type].open(name, spec.config)
            except StorageError as exc:
                self._failed[name] = (time.monotonic(), exc.problem)
                logger.warning("storage %s cannot be opened: %s", name, exc)
                raise
            self._failed.pop(name, None)
            self._open[name] = opened
            return opened

    def down(self) -> dict[str, str]:
        """Storages whose last attempt to open failed, with the reason."""
        return {name: problem for name, (_, problem) in self._failed.items()}

    async def close(self) -> None:
        """Close every storage opened; the pool opens none afterwards."""
        self._closed = True
        opened, self._open = self._open, {}
        for storage in opened.values():
            try:
                await storage.close()
            except StorageError as exc:  # closing is best effort
                logger.warning("storage %s: closing failed: %s", storage.name, exc)
