"""The raw bytes of one record range: a local file, an HTTP range, a storage object.

:func:`open_source` opens the ``length`` bytes (to the end of the file when
``length`` is None) from byte ``offset`` of a :data:`Location`:

- an absolute local path, read with ``os.pread`` (also from a worker thread:
  :attr:`RawSource.read_blocking`);
- an ``http(s)://`` URL, read with one ``Range: bytes=offset-end`` request on
  the shared ``aiohttp`` session (RFC 9110 section 14; ``206 Partial
  Content``, or ``200`` for a range from byte 0), its body read as it
  arrives;
- a :class:`RangeLocation`, an object in a storage that opens its own range
  (:meth:`~gateway.storage.base.Storage.open_range`), its storage errors
  turned into load errors.

The bytes are as stored (still gzipped, for a ``.warc.gz``); a
:class:`RawSource` reads up to ``size`` bytes at a time and returns ``b""``
at the end of the range.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

from gateway.errors import (
    ArchiveFileNotFound,
    ArchiveUnavailable,
    LoadError,
    PlaceUnreachable,
    RecordFormatError,
)
from gateway.storage.base import RangeReader
from gateway.storage.errors import (
    RangeNotSatisfiable,
    StorageError,
)
from gateway.storage.ranges import storage_load_error

if TYPE_CHECKING:  # aiohttp is imported by the time a session exists
    import aiohttp

__all__ = [
    "LocalRaw",
    "Location",
    "RangeLocation",
    "RangeLocationWithSize",
    "RawSource",
    "open_source",
]

_HTTP_SCHEMES: Final = ("http://", "https://")


class RawSource(Protocol):
    location: str

    async def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of the record range; ``b""`` at its end."""
        ...

    #: The same read as a blocking call safe to run in a worker thread, if any.
    read_blocking: Callable[[int], bytes] | None

    def close(self) -> None: ...


class LocalRaw:
    __slots__ = ("_end", "_fd", "_pos", "_start", "location", "read_blocking")

    def __init__(self, location: str, fd: int, offset: int, end: int | None) -> None:
        self.location = location
        self._fd = fd
        self._start = offset
        self._pos = offset
        self._end = end
        self.read_blocking: Callable[[int], bytes] | None = self._read

    async def read(self, size: int) -> bytes:
        return self._read(size)

    def _read(self, size: int) -> bytes:
        if self._fd < 0:
            return b""
        if self._end is not None:
            size = min(size, self._end - self._pos)
            if size <= 0:
                return b""
        try:
            data = os.pread(self._fd, size, self._pos)
        except OSError as exc:
            raise LoadError(
                f"{self.location}: read failed at byte {self._pos}: {exc.strerror or exc}",
                {self.location: str(exc)},
            ) from exc
        self._pos += len(data)
        return data

    def pread_tail(self, length: int) -> bytes:
        """The last 4 bytes of the ``length`` bytes from the record's offset."""
        if self._fd < 0:
            return b""
        try:
            return os.pread(self._fd, 4, self._start + length - 4)
        except OSError:
            return b""

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class _HttpRaw:
    __slots__ = ("_left", "_response", "location", "read_blocking")

    def __init__(self, location: str, response: aiohttp.ClientResponse, length: int | None):
        self.location = location
        self._response: aiohttp.ClientResponse | None = response
        self._left = length
        self.read_blocking: Callable[[int], bytes] | None = None

    async def read(self, size: int) -> bytes:
        response = self._response
        if response is None:
            return b""
        if self._left is not None:
            size = min(size, self._left)
            if size <= 0:
                return b""
        from aiohttp import ClientError  # loaded: this response came from a session

        try:
            data = await response.content.read(size)
        except (ClientError, TimeoutError) as exc:
            raise LoadError(
                f"{self.location}: reading the record failed: {exc or type(exc).__name__}",
                {self.location: str(exc) or type(exc).__name__},
            ) from exc
        if self._left is not None:
            self._left -= len(data)
        return data

    def close(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            # A connection with unread body bytes cannot be reused: close it.
            if self._left == 0 or response.content.at_eof():
                response.release()
            else:
                response.close()


class RangeLocation(Protocol):
    """A location that is neither a path nor a URL: an object in a storage
    (an S3 replica, :mod:`gateway.loaders.s3_resolver`; a copy of a store
    file, :mod:`gateway.store.replication.replicas`). It opens a byte range itself.

    ``str()`` of it names it in messages.
    """

    async def open_range(self, offset: int, length: int | None) -> RangeReader:
        """The bytes ``[offset, offset + length)``; raises
        :class:`~gateway.errors.ArchiveFileNotFound` when the object is not
        there, another :class:`~gateway.errors.LoadError` when it cannot be
        read."""
        ...


class RangeLocationWithSize(RangeLocation, Protocol):
    """A :class:`RangeLocation` that can say its size (a WACZ read in place)."""

    async def size(self) -> int:
        """The object's size in bytes; raises a :class:`~gateway.errors.LoadError`."""
        ...


#: What a resolver hands the loader: a local path, an ``http(s)://`` URL, or
#: a :class:`RangeLocation`.
Location = str | RangeLocation


class _StorageRaw:
    """A :class:`RangeLocation`'s reader as a raw source: storage errors become load errors."""

    __slots__ = ("_reader", "location", "read_blocking")

    def __init__(self, location: str, reader: RangeReader) -> None:
        self.location = location
        self._reader = reader
        blocking = reader.read_blocking
        self.read_blocking: Callable[[int], bytes] | None = (
            None if blocking is None else self._blocking
        )

    async def read(self, size: int) -> bytes:
        try:
            return await self._reader.read(size)
        except StorageError as exc:
            raise self._failed(exc) from exc

    def _blocking(self, size: int) -> bytes:
        read = self._reader.read_blocking
        assert read is not None
        try:
            return read(size)
        except StorageError as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: StorageError) -> LoadError:
        if isinstance(exc, RangeNotSatisfiable):
            return RecordFormatError(
                f"{self.location}: record truncated: {exc.problem}",
                {self.location: "record truncated"},
            )
        return storage_load_error(exc, f"{self.location}: reading the record failed")

    def close(self) -> None:
        self._reader.close()


def _open_local(location: str, offset: int, length: int | None) -> RawSource:
    try:
        fd = os.open(location, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise ArchiveFileNotFound(f"{location}: no such file", {location: "no such file"}) from exc
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOTDIR:
            raise ArchiveFileNotFound(f"{location}: {reason}", {location: reason}) from exc
        raise ArchiveUnavailable(f"{location}: cannot open: {reason}", {location: reason}) from exc
    end = None if length is None else offset + length
    return LocalRaw(location, fd, offset, end)


async def _open_http(
    session: aiohttp.ClientSession, location: str, offset: int, length: int | None
) -> RawSource:
    from aiohttp import ClientError  # loaded: the session exists
    from yarl import URL

    last = f"{offset + length - 1}" if length is not None else ""
    headers = {"Range": f"bytes={offset}-{last}", "Accept-Encoding": "identity"}
    try:
        response = await session.get(URL(location, encoded=True), headers=headers)
    except ValueError as exc:
        reason = str(exc) or type(exc).__name__
        raise LoadError(f"{location}: request failed: {reason}", {location: reason}) from exc
    except (ClientError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise PlaceUnreachable(f"{location}: request failed: {reason}", {location: reason}) from exc
    status = response.status
    if status == 206 or (status == 200 and offset == 0):
        return _HttpRaw(location, response, length)
    response.close()
    reason = f"HTTP {status} {response.reason or ''}".rstrip()
    if status in (404, 410):
        raise ArchiveFileNotFound(f"{location}: {reason}", {location: reason})
    if status == 416:
        raise RecordFormatError(
            f"{location}: {reason}: offset {offset} is past the end of the file; "
            "check the CDX offset",
            {location: reason},
        )
    if status >= 500:
        raise PlaceUnreachable(f"{location}: {reason}", {location: reason})
    if status == 200:
        reason = "HTTP 200: the server ignored the Range header; serve WARCs with range support"
    raise LoadError(f"{location}: {reason}", {location: reason})


async def open_source(
    location: Location,
    offset: int,
    length: int | None,
    session: Callable[[], aiohttp.ClientSession],
) -> RawSource:
    """The raw bytes ``[offset, offset + length)`` of ``location`` (to its end without
    ``length``); ``session`` returns the shared ``aiohttp`` session (only called for
    URLs). Raises :class:`ArchiveFileNotFound` when the location does not hold the
    file, :class:`RecordFormatError` for an offset past its end (HTTP 416), and
    :class:`LoadError` for any other failure or an unsupported location.
    """
    raw: RawSource
    if not isinstance(location, str):
        raw = _StorageRaw(str(location), await location.open_range(offset, length))
    elif location.startswith(_HTTP_SCHEMES):
        raw = await _open_http(session(), location, offset, length)
    elif location.startswith("/"):
        raw = _open_local(location, offset, length)
    else:
        scheme = location.split(":", 1)[0]
        raise LoadError(
            f"{location}: no reader for {scheme!r} locations; expected a local path "
            "or an http(s):// URL",
            {location: "unsupported location"},
        )
    return raw
