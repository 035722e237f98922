"""The Storage protocol every storage backend implements, and what they share.

A storage holds **objects**: closed WARC files, each under a **name** (the
file's name, relative: ``gateway-20250301120000-00001.warc.gz``, or a path of
such segments joined by ``/``) and identified by its SHA-256, as the Software
Heritage archiver identifies the objects it replicates. Storages are
append-only to the archiver (issue 13 §2):

- :meth:`Storage.put` is **create-only and verified**: it stores the bytes
  under the name only if they have the declared size and SHA-256
  (:class:`~gateway.storage.errors.DigestMismatch` otherwise), and never
  replaces an object already there unless ``replace=True`` is asked for: an
  object with the same SHA-256 is ``already_present``, another one is an
  :class:`~gateway.storage.errors.ObjectConflict`. While a put runs, and
  after it failed, was cancelled or its process was killed, nothing
  incomplete is ever visible under the final name: bytes go to a temporary
  name first (hidden names, which are never object names) and the final name
  appears in one atomic step.
- :meth:`Storage.get_range` streams bytes ``[offset, offset + length)``;
  :meth:`Storage.open_range` opens them as a :class:`RangeReader`, read a
  piece at a time and closed without awaiting (what a record loader needs:
  :mod:`gateway.loaders.warc_sources`).
- :meth:`Storage.stat` and :meth:`Storage.iter` describe objects
  (:class:`ObjectInfo`); ``iter`` streams a listing, never holding it whole.
- :meth:`Storage.digest` reads an object back and returns its SHA-256.
- :meth:`Storage.remove_leftovers` removes the temporary objects that a killed
  process left behind (only names of the form the backend itself writes).

Every failure is a :class:`~gateway.storage.errors.StorageError`;
:attr:`~gateway.storage.errors.StorageError.retryable` tells a transient one
(retry with backoff) from one an operator must fix.

Digests are lowercase hexadecimal SHA-256 strings (64 characters).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal, Protocol, cast, runtime_checkable

from gateway.storage.errors import (
    DigestMismatch,
    InvalidObjectName,
    ObjectConflict,
    ObjectNotFound,
    StorageUnavailable,
)

__all__ = [
    "MAX_NAME_BYTES",
    "Backend",
    "Intake",
    "ObjectInfo",
    "PutOutcome",
    "PutResult",
    "RangeReader",
    "Storage",
    "StorageFactory",
    "check_name",
    "check_range",
    "check_sha256",
    "hash_chunk",
    "settle_existing",
    "settle_taken",
    "sha256_of",
]

#: The longest object name accepted, in UTF-8 bytes (S3's key limit).
MAX_NAME_BYTES: Final = 1024
#: Chunks at least this long are hashed in a worker thread (hashlib releases the GIL).
_THREAD_HASH_BYTES: Final = 256 * 1024
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

#: ``created``: the bytes are stored under the name now. ``already_present``:
#: an object with the same size and SHA-256 was there already (nothing was
#: written). ``replaced``: ``replace=True`` was asked and another object was
#: replaced by the verified bytes.
PutOutcome = Literal["created", "already_present", "replaced"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectInfo:
    """One stored object.

    ``size`` in bytes; ``mtime`` the time of its last change in seconds since
    the epoch; ``sha256`` its full SHA-256 when the storage knows it without
    reading the object (an S3 server's checksum of a single-part object),
    else None.
    """

    name: str
    size: int
    mtime: float
    sha256: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PutResult:
    """What :meth:`Storage.put` did: ``outcome``, the object as stored, and how
    its bytes were verified (``verified_by``, for logs and reports)."""

    outcome: PutOutcome
    info: ObjectInfo
    verified_by: str


class RangeReader(Protocol):
    """Bytes of one object range, read a piece at a time (:meth:`Storage.open_range`).

    ``read(size)`` returns up to ``size`` bytes, ``b""`` once the range is
    read (raising :class:`~gateway.storage.errors.StorageError` when the
    storage fails, or the object turns out shorter than the range);
    ``read_blocking`` is the same read as a blocking call safe to run in a
    worker thread, when the storage has one (a local file), else None;
    ``close()`` releases the file or connection at once, without awaiting,
    and may be called twice. ``location`` names the object for messages.
    """

    location: str
    read_blocking: Callable[[int], bytes] | None

    async def read(self, size: int) -> bytes: ...

    def close(self) -> None: ...


@runtime_checkable
class Storage(Protocol):
    """A place objects are replicated to (a local directory, an S3 bucket prefix)."""

    #: The configured name (``store.storages.<name>``), used in messages and status rows.
    name: str
    #: Objects per page of :meth:`iter`: the most a listing holds at once.
    page_size: int

    async def put(
        self,
        name: str,
        data: AsyncIterable[bytes],
        *,
        size: int,
        sha256: str,
        replace: bool = False,
    ) -> PutResult:
        """Store ``data`` (``size`` bytes with SHA-256 ``sha256``) under ``name``, create-only.

        Consumes ``data`` only when something must be written (an object
        already there is compared first). Raises
        :class:`~gateway.storage.errors.DigestMismatch` when ``data`` is not
        what was declared, :class:`~gateway.storage.errors.ObjectConflict`
        when another object holds the name (``replace=False``), another
        :class:`~gateway.storage.errors.StorageError` when the storage fails;
        exceptions raised by ``data`` itself propagate unchanged. In every
        failure nothing is left under ``name`` that was not there before.
        """
        ...

    def get_range(
        self, name: str, offset: int = 0, length: int | None = None
    ) -> AsyncGenerator[bytes, None]:
        """Yield the bytes ``[offset, offset + length)`` of the object in order
        (to its end when ``length`` is None), in chunks of at most 1 MiB.

        Raises :class:`~gateway.storage.errors.ObjectNotFound`, or
        :class:`~gateway.storage.errors.RangeNotSatisfiable` when the object
        holds fewer than ``offset + length`` bytes (possibly after yielding
        the bytes it has).
        """
        ...

    async def open_range(self, name: str, offset: int, length: int | None = None) -> RangeReader:
        """Open the bytes ``[offset, offset + length)`` of the object (to its end when
        ``length`` is None) for reading piece by piece; the caller closes it.

        Raises :class:`~gateway.storage.errors.ObjectNotFound`, or
        :class:`~gateway.storage.errors.RangeNotSatisfiable` when the object
        holds fewer than ``offset + length`` bytes (at once or, on S3, when
        the short answer is read).
        """
        ...

    async def stat(self, name: str) -> ObjectInfo:
        """The object under ``name``; raises :class:`~gateway.storage.errors.ObjectNotFound`."""
        ...

    def iter(self, prefix: str = "") -> AsyncGenerator[ObjectInfo, None]:
        """Yield every object whose name starts with ``prefix``, streamed page by page.

        Order: by name (UTF-8 bytes) on S3; in no particular order in a local
        directory. Temporary names are never listed.
        """
        ...

    async def digest(self, name: str) -> str:
        """Read the object back whole and return its SHA-256 (hex)."""
        ...

    async def remove_leftovers(self, older_than_s: float) -> list[str]:
        """Remove temporary objects of this backend's own form older than
        ``older_than_s`` seconds (left by killed puts); return what was removed."""
        ...

    def describe(self) -> str:
        """One line for logs and ``gateway check-config``: type and location."""
        ...

    async def close(self) -> None:
        """Release connections and threads; the storage is unusable afterwards."""
        ...


class StorageFactory(Protocol):
    """A storage class: its config dataclass and how to open one."""

    #: The frozen, slotted, keyword-only dataclass of its ``store.storages`` entry.
    config_type: ClassVar[type[Any]]

    @classmethod
    async def open(cls, name: str, config: Any) -> Storage:
        """Open the storage named ``name``; raises :class:`~gateway.storage.errors.StorageError`."""
        ...

    @classmethod
    def describe_config(cls, config: Any) -> str:
        """What :meth:`Storage.describe` will say, from the config alone (nothing opened)."""
        ...


def check_name(storage: str, name: str) -> str:
    """Return ``name`` if it can name an object, else raise :class:`InvalidObjectName`.

    A name is one or more segments joined by ``/``; no segment is empty,
    ``.``, ``..`` or starts with ``.`` (hidden names are the temporary names
    of puts in progress); no NUL; at most 1024 UTF-8 bytes.

    >>> check_name("backup", "2025/gateway-20250301120000-00001.warc.gz")
    '2025/gateway-20250301120000-00001.warc.gz'
    >>> check_name("backup", "../etc/passwd")
    Traceback (most recent call last):
    ...
    gateway.storage.errors.InvalidObjectName: backup: ../etc/passwd: ...
    """
    problem = None
    if not name:
        problem = "empty name"
    elif "\0" in name:
        problem = "a name cannot hold a NUL character"
    elif len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        problem = f"longer than {MAX_NAME_BYTES} bytes"
    elif any(not part or part.startswith(".") for part in name.split("/")):
        problem = (
            "expected segments joined by '/', none empty or starting with '.' "
            "(hidden names are reserved for temporary files)"
        )
    if problem is not None:
        raise InvalidObjectName(storage, name, problem)
    return name


def check_sha256(sha256: str) -> str:
    """Return ``sha256`` if it is 64 lowercase hexadecimal digits, else raise ValueError.

    >>> check_sha256("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")[:8]
    'e3b0c442'
    """
    if not _SHA256_HEX.fullmatch(sha256):
        raise ValueError(f"sha256: {sha256!r} is not 64 lowercase hexadecimal digits")
    return sha256


async def hash_chunk(digest: Any, chunk: bytes | bytearray | memoryview) -> None:
    """``digest.update(chunk)``, in a worker thread for chunks of 256 KiB and more."""
    if len(chunk) >= _THREAD_HASH_BYTES:
        await asyncio.to_thread(digest.update, chunk)
    else:
        digest.update(chunk)


async def sha256_of(storage: Storage, name: str) -> str:
    """Read object ``name`` back whole from ``storage`` and return its SHA-256 (hex)."""
    digest = hashlib.sha256()
    stream = storage.get_range(name)
    try:
        async for chunk in stream:
            await hash_chunk(digest, chunk)
    finally:
        await stream.aclose()
    return digest.hexdigest()


async def settle_existing(
    storage: Storage, existing: ObjectInfo, size: int, sha256: str, *, replace: bool
) -> PutResult | None:
    """A put's answer when ``existing`` already holds its name.

    ``already_present`` when it holds ``size`` bytes with SHA-256 ``sha256``
    (sizes first, then the storage's own checksum when it has one, and only
    then the object read back with :func:`sha256_of`); when it differs,
    raises :class:`ObjectConflict`, or returns None if ``replace`` asks to
    write anyway. With ``replace`` the object is always read back: a caller
    replacing an object suspects its bytes, and a checksum the storage
    recorded when the object was written says nothing of what became of them.
    """
    found: str | None = None if replace else existing.sha256
    if existing.size == size:
        found = found or await sha256_of(storage, existing.name)
        if found == sha256:
            how = "the storage's SHA-256" if existing.sha256 else "read back"
            return PutResult(outcome="already_present", info=existing, verified_by=how)
    if replace:
        return None
    raise ObjectConflict(storage.name, existing.name, existing, found)


async def settle_taken(
    storage: Storage, theirs: ObjectInfo | None, name: str, size: int, sha256: str
) -> PutResult:
    """A put's answer when its final step found the name taken by a concurrent put
    (``theirs``, as it is now): ``already_present`` or :class:`ObjectConflict`."""
    if theirs is None:
        raise StorageUnavailable(
            storage.name, name, "the name was taken, then freed, during the put"
        )
    settled = await settle_existing(storage, theirs, size, sha256, replace=False)
    assert settled is not None  # not replacing: settled or raised
    return settled


class Intake:
    """What a put has received so far, against what was declared.

    :meth:`count` each chunk as it arrives (more bytes than declared stop the
    put at once), hash it into :attr:`digest` where the backend likes, and
    :meth:`check` at the end; both raise :class:`DigestMismatch`.
    """

    def __init__(self, storage: str, name: str, size: int, sha256: str) -> None:
        self.storage = storage
        self.name = name
        self.size = size
        self.sha256 = check_sha256(sha256)
        if size < 0:
            raise ValueError(f"size {size} is negative")
        self.digest = hashlib.sha256()
        self.received = 0

    def _mismatch(self, got: str | None) -> DigestMismatch:
        return DigestMismatch(
            self.storage,
            self.name,
            expected_size=self.size,
            expected_sha256=self.sha256,
            size=self.received,
            sha256=got,
        )

    def count(self, chunk: bytes | bytearray) -> None:
        """Add ``chunk``'s length; raise when it goes past the declared size."""
        self.received += len(chunk)
        if self.received > self.size:
            raise self._mismatch(None)

    def check(self) -> None:
        """Raise unless exactly the declared size came, with the declared SHA-256."""
        got = self.digest.hexdigest()
        if self.received != self.size or got != self.sha256:
            raise self._mismatch(got)


def check_range(offset: int, length: int | None) -> None:
    """Raise ValueError for a negative ``offset`` or ``length``."""
    if offset < 0 or (length is not None and length < 0):
        raise ValueError(f"offset {offset} and length {length} must not be negative")


class Backend:
    """What every backend does the same way, over its own ``_lookup`` (the object, or
    None when it is missing) and ``_create`` (write new bytes under a name).

    :meth:`put` checks its arguments, compares an object already under the name
    (:func:`settle_existing`) and only then calls ``_create``, with
    ``replacing=True`` when an object with other bytes is to be replaced.
    """

    name: str

    async def _lookup(self, name: str) -> ObjectInfo | None:
        raise NotImplementedError

    async def _create(
        self, name: str, data: AsyncIterable[bytes], size: int, sha256: str, replacing: bool
    ) -> PutResult:
        raise NotImplementedError

    async def put(
        self,
        name: str,
        data: AsyncIterable[bytes],
        *,
        size: int,
        sha256: str,
        replace: bool = False,
    ) -> PutResult:
        """See :meth:`Storage.put`."""
        Intake(self.name, check_name(self.name, name), size, sha256)  # the arguments, first
        existing = await self._lookup(name)
        if existing is not None:
            settled = await settle_existing(
                cast(Storage, self), existing, size, sha256, replace=replace
            )
            if settled is not None:
                return settled
        return await self._create(name, data, size, sha256, existing is not None)

    async def stat(self, name: str) -> ObjectInfo:
        """The object under ``name``; raises :class:`ObjectNotFound`."""
        info = await self._lookup(name)
        if info is None:
            raise ObjectNotFound(self.name, name, "no such object")
        return info

    async def digest(self, name: str) -> str:
        """Read the object back whole and return its SHA-256 (hex)."""
        return await sha256_of(cast(Storage, self), name)
