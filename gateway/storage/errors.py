"""Errors of the storage backends, a branch of :class:`~gateway.errors.GatewayError`.

::

    GatewayError
    └── StorageError               500  a storage operation failed
        ├── StorageUnavailable          ... transient: refused, reset, timeout,
        │                                   5xx, throttled; the same call may work later
        ├── StorageRefused              ... lasting: no credentials, access denied,
        │                                   no bucket or directory, disk full
        ├── InvalidObjectName           ... not a name a storage accepts
        ├── ObjectNotFound              ... no object under that name
        ├── RangeNotSatisfiable         ... the object ends before the range asked for
        ├── CorruptObject               ... its bytes are not what they must be (a gzip
        │                                   member that does not inflate)
        ├── ObjectConflict              ... create-only put: the name holds other bytes
        └── DigestMismatch              ... put: the bytes given are not the ones declared

Every error names the storage (its configured name) and the object. A backend
translates its library's exceptions into these at its boundary; nothing else
escapes a :class:`~gateway.storage.base.Storage` method but
:class:`asyncio.CancelledError` and exceptions raised by the data a caller
hands to ``put``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.storage.base import ObjectInfo

__all__ = [
    "CorruptObject",
    "DigestMismatch",
    "InvalidObjectName",
    "ObjectConflict",
    "ObjectNotFound",
    "RangeNotSatisfiable",
    "StorageError",
    "StorageRefused",
    "StorageUnavailable",
]


class StorageError(GatewayError):
    """A storage operation failed; ``storage`` is its configured name, ``name`` the object."""

    #: True when the same call may succeed later (retry with backoff).
    retryable: bool = False

    def __init__(self, storage: str, name: str, problem: str) -> None:
        where = f"{storage}: {name}" if name else storage
        super().__init__(f"{where}: {problem}")
        self.storage = storage
        self.name = name
        self.problem = problem


class StorageUnavailable(StorageError):
    """A transient failure: connection refused or reset, timeout, HTTP 5xx or throttling,
    a short read from the network. Nothing was left under the final name."""

    retryable = True


class StorageRefused(StorageError):
    """A lasting failure an operator must fix: missing credentials, access denied, no
    such bucket or directory, no space left. Nothing was left under the final name."""


class InvalidObjectName(StorageError):
    """The name is empty, absolute, has ``.``/``..``/hidden segments (reserved for
    temporary names), a NUL, or is longer than 1024 bytes."""


class ObjectNotFound(StorageError):
    """No object is stored under the name."""


class RangeNotSatisfiable(StorageError):
    """The object holds fewer bytes than ``offset + length`` (HTTP 416 on S3)."""


class CorruptObject(StorageError):
    """The object's bytes are damaged: read whole, they are not what the file must be
    (:mod:`gateway.storage.integrity`: a gzip member that does not inflate)."""


class ObjectConflict(StorageError):
    """A create-only put found another object under the name (another size or SHA-256).

    The object is left as it is (storages are append-only to the archiver);
    ``existing`` describes it and ``existing_sha256`` is its SHA-256 when known.
    """

    def __init__(
        self, storage: str, name: str, existing: ObjectInfo, existing_sha256: str | None
    ) -> None:
        digest = existing_sha256 or "not read"
        super().__init__(
            storage,
            name,
            f"already holds another object ({existing.size} bytes, sha256 {digest}); left as it is",
        )
        self.existing = existing
        self.existing_sha256 = existing_sha256


class DigestMismatch(StorageError):
    """The bytes handed to ``put`` do not have the declared size and SHA-256.

    Nothing was left under the final name. ``size`` and ``sha256`` describe
    the bytes received (``sha256`` is None when the put stopped early because
    more bytes came than declared).
    """

    def __init__(
        self,
        storage: str,
        name: str,
        *,
        expected_size: int,
        expected_sha256: str,
        size: int,
        sha256: str | None,
    ) -> None:
        if sha256 is None:
            problem = f"more than the declared {expected_size} bytes were given"
        else:
            problem = (
                f"the bytes given ({size} bytes, sha256 {sha256}) are not the ones declared "
                f"({expected_size} bytes, sha256 {expected_sha256}); nothing was stored"
            )
        super().__init__(storage, name, problem)
        self.expected_size = expected_size
        self.expected_sha256 = expected_sha256
        self.size = size
        self.sha256 = sha256
