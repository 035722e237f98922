"""Errors of the snapshot store, a branch of :class:`~gateway.errors.GatewayError`.

::

    GatewayError
    └── StoreError                500  the snapshot store failed
        ├── StoreLocked                ... another process holds the store
        ├── StoreClosed                ... used after Store.close()
        ├── StoreWriteError            ... a capture was not stored (I/O error)
        ├── ImportRejected             ... a WARC given to `store add` is invalid
        └── MoveFailed                 ... a file stays in its layout for now

A recording step treats :class:`StoreWriteError` as degraded service: the
client has its response already, the capture is logged as lost (WARNING).
"""

from __future__ import annotations

from gateway.errors import GatewayError

__all__ = [
    "ImportRejected",
    "MoveFailed",
    "StoreClosed",
    "StoreError",
    "StoreLocked",
    "StoreWriteError",
]


class StoreError(GatewayError):
    """The snapshot store failed (HTTP 500 if it ever reaches a client)."""


class StoreLocked(StoreError):
    """Another process (a running gateway, ``store add``, ``store repair``) holds the store."""


class StoreClosed(StoreError):
    """The store was used after :meth:`Store.close <gateway.store.store.Store.close>`."""


class StoreWriteError(StoreError):
    """A capture could not be written; nothing of it is stored or indexed.

    The WARC file was truncated back to the offset before the capture, so the
    store stays consistent and the next capture can succeed.
    """


class ImportRejected(StoreError):
    """A WARC file given to ``gateway store add`` was not imported.

    ``problems`` lists what is wrong (``offset N: reason``), as ``store check``
    reports it.
    """

    def __init__(self, path: str, problems: list[str]) -> None:
        super().__init__(f"{path}: not imported: " + "; ".join(problems[:5]))
        self.path = path
        self.problems = problems


class MoveFailed(StoreError):
    """A file could not be moved to a newer layout; it stays where its row says, whole.

    ``kind`` says why: ``busy`` (another process moves it, or changed its
    row), ``clash`` (another file has its name at the new place; both are
    kept), ``damaged`` (its bytes differ from the SHA-256 its row records),
    ``missing`` (it is at no layout's place).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
