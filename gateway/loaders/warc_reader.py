"""One WARC or ARC record at (location, offset, length): headers parsed, block streamed.

:func:`open_record` reads the record's first bytes from a local file
(``os.pread``) or an ``http(s)://`` URL (one ``Range`` request on the shared
``aiohttp`` session), gunzips them when they start with the gzip magic (one
gzip member per record, as WARC 1.1 Annex D writes them), and parses the WARC
(or ARC) header block and the HTTP header block with warcio, exactly as pywb's
``BlockArcWarcRecordLoader`` does (see :mod:`gateway.loaders.warc_headers`).
No thread and no whole record is needed for that: the rest of the block
streams from :class:`RecordBody`, at most ``chunk_bytes`` read and 256 KiB
inflated at a time, bounded by the record's ``Content-Length`` (warcio's
``LimitReader`` idea), so memory stays flat whatever the record size.

Where the work happens: records whose CDX ``length`` is at most
``inline_read_max_bytes`` (and every first read, at most ``chunk_bytes``) are
read and inflated on the event loop -- a ``pread`` of 256 KiB from the page
cache costs microseconds and a thread hop costs ~45 us. With the default
256 KiB reads a record of up to 256 KiB (compressed) and 256 KiB (inflated)
takes one ``pread`` and one inflate call, and its whole block is then in
memory: :attr:`RecordBody.whole` offers it as a view of the inflated bytes
(no copy), so the Resource API answers in one piece. Inflation itself is the
floor (for the 225 KB font of the sample, ~0.6 ms of the request's CPU).
Longer records, or records of unknown length, read and inflate every later
piece in a worker thread (zlib releases the GIL, so this also spreads
inflation over cores), and a slow disk cannot stall the loop. ISA-L's inflate
(PyPI ``isal``, identical output, 2-3x faster) is used when it is installed.
Bytes are not copied on the way: the block after the header blocks is a
view until a consumer iterates it, and pieces are cut only when the
record's end falls inside them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import os
import zlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from warcio.limitreader import LimitReader

from gateway.errors import ArchiveFileNotFound, ArchiveUnavailable, LoadError, RecordFormatError
from gateway.loaders.warc_headers import (
    ARC_URI,
    PARSE_ERRORS,
    RECORD_LOADER,
    WARC_START,
    HeaderWindow,
    NeedMore,
    arc_url,
)
from gateway.storage.base import RangeReader
from gateway.storage.errors import (
    RangeNotSatisfiable,
    StorageError,
)
from gateway.storage.integrity import INFLATE_ERRORS, ZLIB
from gateway.storage.ranges import open_storage_range

if TYPE_CHECKING:  # aiohttp is imported by the time a session exists
    import aiohttp

__all__ = [
    "Location",
    "OpenedRecord",
    "RangeLocation",
    "RecordBody",
    "StoredMember",
    "open_record",
    "open_storage_range",
]

_GZIP_MAGIC: Final = b"\x1f\x8b"
#: Largest piece inflated from compressed input at a time (decompression bombs).
_INFLATE_OUT_BYTES: Final = 256 * 1024
#: First piece inflated for the header blocks of a record read by workers.
_HEADER_PROBE_BYTES: Final = 16 * 1024
#: Compressed bytes fed to the inflater for that first piece (more follow when needed).
_HEADER_PROBE_INPUT_BYTES: Final = 4 * 1024
#: Header blocks larger than this (decompressed) are not a record we can serve.
_MAX_HEADER_BYTES: Final = 4 * 1024 * 1024
_HTTP_SCHEMES: Final = ("http://", "https://")
_T = TypeVar("_T")

# ISA-L's inflate (PyPI ``isal``) when installed: 2-3x faster than zlib on
# the same deflate streams, with identical output (gateway.storage.integrity).
_ZLIB: Any = ZLIB
_INFLATE_ERRORS: Final = INFLATE_ERRORS


# ------------------------------------------------------------ raw sources
class _RawSource(Protocol):
    location: str

    async def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of the record range; ``b""`` at its end."""
        ...

    #: The same read as a blocking call safe to run in a worker thread, if any.
    read_blocking: Callable[[int], bytes] | None

    def close(self) -> None: ...


class _LocalRaw:
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
        return ArchiveUnavailable(
            f"{self.location}: reading the record failed: {exc.problem}",
            {self.location: exc.problem},
        )

    def close(self) -> None:
        self._reader.close()


def _open_local(location: str, offset: int, length: int | None) -> _RawSource:
    try:
        fd = os.open(location, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise ArchiveFileNotFound(f"{location}: no such file", {location: "no such file"}) from exc
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENOTDIR:
            raise ArchiveFileNotFound(f"{location}: {reason}", {location: reason}) from exc
        raise LoadError(f"{location}: cannot open: {reason}", {location: reason}) from exc
    end = None if length is None else offset + length
    return _LocalRaw(location, fd, offset, end)


async def _open_http(
    session: aiohttp.ClientSession, location: str, offset: int, length: int | None
) -> _RawSource:
    from aiohttp import ClientError  # loaded: the session exists
    from yarl import URL

    last = f"{offset + length - 1}" if length is not None else ""
    headers = {"Range": f"bytes={offset}-{last}", "Accept-Encoding": "identity"}
    try:
        response = await session.get(URL(location, encoded=True), headers=headers)
    except (ClientError, TimeoutError, ValueError) as exc:
        reason = str(exc) or type(exc).__name__
        raise LoadError(f"{location}: request failed: {reason}", {location: reason}) from exc
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
    if status == 200:
        reason = "HTTP 200: the server ignored the Range header; serve WARCs with range support"
    raise LoadError(f"{location}: {reason}", {location: reason})


# ------------------------------------------------------------- inflating
class _Decoder:
    """Gunzips one member (or passes plain bytes), at most 256 KiB out per call."""

    __slots__ = ("done", "location", "tail", "zobj")

    def __init__(self, gzipped: bool, location: str, module: Any = None) -> None:
        module = _ZLIB if module is None else module
        self.zobj: Any = module.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
        self.tail = b""
        self.done = False
        self.location = location

    def decode(self, raw: bytes, max_out: int = _INFLATE_OUT_BYTES) -> bytes:
        zobj = self.zobj
        if zobj is None:
            return raw
        tail = self.tail
        data = (tail + raw if raw else tail) if tail else raw
        try:
            out: bytes = zobj.decompress(data, max_out)
        except _INFLATE_ERRORS as exc:
            self.done = True
            self.tail = b""
            raise RecordFormatError(
                f"{self.location}: corrupt gzip data: {exc}; the file may be damaged "
                "(check it with 'warcio check')",
                {self.location: f"corrupt gzip data: {exc}"},
            ) from exc
        self.tail = zobj.unconsumed_tail
        if zobj.eof:
            # One member per record: anything after it belongs to the next record.
            self.done = True
            self.tail = b""
        return out


class OpenedRecord:
    """A parsed record: warcio's ``ArcWarcRecord`` plus its streaming block.

    ``record.rec_headers``/``record.http_headers`` are warcio
    ``StatusAndHeaders``; ``http_consumed`` is the number of block bytes the
    HTTP header parse consumed when the block length is known (pywb's
    ``raw_stream.tell()``), else 0; ``body`` yields the rest of the block and
    ``remaining`` is its exact length when the record declares one.

    ``stored_head`` is the record's header blocks as stored (decompressed,
    through the HTTP header block), and ``member`` the record's gzip member
    as stored, when it was opened with ``gzip_member=True`` and is one
    (see :class:`StoredMember`); else None.
    """

    __slots__ = (
        "body",
        "http_consumed",
        "is_arc",
        "location",
        "member",
        "record",
        "remaining",
        "stored_head",
    )

    def __init__(
        self,
        location: str,
        record: Any,
        is_arc: bool,
        http_consumed: int,
        remaining: int | None,
        body: RecordBody,
        stored_head: bytes = b"",
        member: StoredMember | None = None,
    ) -> None:
        self.location = location
        self.record = record
        self.is_arc = is_arc
        self.http_consumed = http_consumed
        self.remaining = remaining
        self.body = body
        self.stored_head = stored_head
        self.member = member

    @property
    def rec_type(self) -> str:
        return str(self.record.rec_type or "")

    def close(self) -> None:
        self.body.close()


class RecordBody:
    """Async iterator over the rest of a record block, then closes its source.

    With ``offload``, each step (local read plus inflation, or inflation of
    bytes read over HTTP) runs in a worker thread; a source is never closed
    while a worker still uses it. Raises :class:`RecordFormatError` when the
    block ends before its declared length (a truncated file or gzip member),
    so a response already under way is aborted rather than silently cut short.

    ``whole`` is the entire rest of the block when it was in memory at once
    (a view of the inflated bytes; the source is closed already), until the
    iterator is first advanced; else None (see
    :meth:`~gateway.loaders.base.LoadedRecord.body_in_memory`).
    """

    __slots__ = (
        "_chunk_bytes",
        "_decoder",
        "_inflight",
        "_offload",
        "_pending",
        "_raw",
        "_remaining",
        "whole",
    )

    def __init__(
        self,
        buf: bytes,
        start: int,
        decoder: _Decoder,
        raw: _RawSource,
        remaining: int | None,
        *,
        chunk_bytes: int,
        offload: bool,
    ) -> None:
        self._decoder = decoder
        self._raw: _RawSource | None = raw
        self._chunk_bytes = chunk_bytes
        self._offload = offload
        self._inflight: concurrent.futures.Future[bytes | None] | None = None
        stop = len(buf)
        complete = remaining is not None and stop - start >= remaining
        if remaining is not None:
            if complete:
                stop = start + remaining
                self.close()  # the whole block is in memory already
            remaining -= stop - start
        view = memoryview(buf)[start:stop]
        self.whole: memoryview | None = view if complete else None
        #: Inflated block bytes not yet yielded (a view: sliced out only if iterated).
        self._pending: memoryview | None = view if stop > start else None
        #: Block bytes still to be produced after ``_pending``.
        self._remaining = remaining

    def __aiter__(self) -> RecordBody:
        return self

    async def __anext__(self) -> bytes:
        while True:
            pending = self._pending
            if pending is not None:
                self._pending = None
                self.whole = None  # iterated: no longer the whole of what is left
                return pending.tobytes()
            raw = self._raw
            if raw is None or self._remaining == 0:
                raise StopAsyncIteration
            try:
                pulled = await self._pull(raw)
            except BaseException:
                self.close()
                raise
            if pulled is None:
                self.close()
                if self._remaining:
                    raise RecordFormatError(
                        f"{raw.location}: record truncated, {self._remaining} bytes missing "
                        "at the end of its block",
                        {raw.location: "record truncated"},
                    )
                raise StopAsyncIteration
            out = pulled
            remaining = self._remaining
            if remaining is not None:
                if len(out) >= remaining:
                    if len(out) > remaining:
                        out = out[:remaining]
                    self.close()
                    self._remaining = 0
                else:
                    self._remaining = remaining - len(out)
            if out:
                return out

    async def _pull(self, raw: _RawSource) -> bytes | None:
        decoder = self._decoder
        if self._offload:
            read_blocking = raw.read_blocking
            if read_blocking is not None:
                return await self._in_worker(self._step_blocking, read_blocking)
            if decoder.zobj is not None and decoder.tail:
                return await self._in_worker(decoder.decode, b"")
        if decoder.tail:
            return decoder.decode(b"")
        if decoder.done:
            return None
        data = await raw.read(self._chunk_bytes)
        if not data:
            return None
        if self._offload and decoder.zobj is not None:
            return await self._in_worker(decoder.decode, data)
        return decoder.decode(data)

    @property
    def chunk_bytes(self) -> int:
        return self._chunk_bytes

    @property
    def location(self) -> str:
        raw = self._raw
        return "" if raw is None else raw.location

    def still_open(self) -> bool:
        """True while the raw source is open (the block was not read whole)."""
        return self._raw is not None

    async def read_raw(self, size: int) -> bytes:
        """Up to ``size`` more raw (still compressed) bytes of the record, not inflated.

        For :class:`StoredMember`; never mixed with iterating this body.
        A local read happens in a worker thread when this body offloads.
        """
        raw = self._raw
        if raw is None:
            return b""
        try:
            read_blocking = raw.read_blocking
            if self._offload and read_blocking is not None:
                return await self._in_worker(read_blocking, size) or b""
            return await raw.read(size)
        except BaseException:
            self.close()
            raise

    def _step_blocking(self, read_blocking: Callable[[int], bytes]) -> bytes | None:
        decoder = self._decoder
        if decoder.tail:
            return decoder.decode(b"")
        if decoder.done:
            return None
        data = read_blocking(self._chunk_bytes)
        return decoder.decode(data) if data else None

    async def _in_worker(self, function: Callable[[_T], bytes | None], arg: _T) -> bytes | None:
        future = _worker_pool().submit(function, arg)
        self._inflight = future
        try:
            return await asyncio.wrap_future(future)
        finally:
            if future.done():
                self._inflight = None

    def close(self) -> None:
        raw, self._raw = self._raw, None
        if raw is None:
            return
        inflight = self._inflight
        if inflight is not None and not inflight.done():
            # Cancelled while a worker reads: close once it is finished with the file.
            inflight.add_done_callback(lambda _: raw.close())
        else:
            raw.close()


class StoredMember:
    """A record's gzip member exactly as stored, to send without inflating it.

    WARC 1.1 Annex D: a record compressed on its own is one gzip member;
    decompressed, it is the record followed by its ``CRLF CRLF`` trailer.
    Only made for a member that ends where the CDX ``length`` says and
    whose gzip trailer (ISIZE, RFC 1952 section 2.3.1) gives exactly the
    size of the header blocks, the block and the 4-byte trailer, so the
    member holds this record and nothing else. ``length`` is its size in
    bytes; ``whole`` the member when it was read in full by the first read
    (else None: iterate the member for its bytes, read ``chunk_bytes`` at a
    time, in a worker thread for records read by workers).
    """

    __slots__ = ("_body", "_first", "length", "whole")

    def __init__(self, first: bytes, length: int, body: RecordBody) -> None:
        self._first = first
        self._body = body
        self.length = length
        self.whole: bytes | None = first if len(first) >= length else None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        body = self._body
        left = self.length
        first = self._first[:left]
        left -= len(first)
        yield first
        while left > 0:
            piece = await body.read_raw(min(left, body.chunk_bytes))
            if not piece:
                raise RecordFormatError(
                    f"{body.location}: gzip member truncated, {left} bytes missing",
                    {body.location: "record truncated"},
                )
            left -= len(piece)
            yield piece


def _stored_member(
    first: bytes, length: int | None, total: int, body: RecordBody, raw: _RawSource
) -> StoredMember | None:
    """The :class:`StoredMember` of a gzip record of ``total`` decompressed bytes, or None."""
    if length is None or length < 18:  # a gzip header and trailer take 18 bytes
        return None
    if len(first) >= length:
        trailer = first[length - 4 : length]
    elif body.still_open() and isinstance(raw, _LocalRaw):
        trailer = raw.pread_tail(length)
    else:
        return None  # over HTTP the trailer would take another request
    if len(trailer) != 4 or int.from_bytes(trailer, "little") != total % 2**32:
        return None
    return StoredMember(first, length, body)


_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _worker_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that read and inflate long records (created on first use)."""
    global _POOL
    if _POOL is None:
        workers = min(32, (os.cpu_count() or 1) + 4)
        _POOL = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="warc-read")
    return _POOL


def _format_error(location: str, offset: int, problem: str) -> RecordFormatError:
    if len(problem) > 200:
        problem = problem[:200] + "..."
    return RecordFormatError(
        f"{location} at offset {offset}: {problem}; expected a WARC or ARC record there "
        "(check the CDX offset and length, and that the file is the one indexed)",
        {location: problem},
    )


async def open_record(
    location: Location,
    offset: int,
    length: int | None,
    *,
    session: Callable[[], aiohttp.ClientSession],
    chunk_bytes: int,
    inline_read_max_bytes: int,
    gzip_member: bool = False,
) -> OpenedRecord:
    """Open and parse the record at ``offset`` (``length`` raw bytes, if known).

    ``location`` is an absolute path, an ``http(s)://`` URL or a
    :class:`RangeLocation`; ``session`` returns the shared ``aiohttp``
    session (only called for URLs). With ``gzip_member``, a record stored
    as its own gzip member is inflated only as far as its header blocks,
    and the result's ``member`` offers the member as stored (see
    :class:`StoredMember`; the body still streams inflated when iterated
    instead). Raises
    :class:`ArchiveFileNotFound` when the location does not hold the file,
    :class:`RecordFormatError` when the bytes are not a record, and
    :class:`LoadError` for any other I/O failure. The caller owns the result
    and must ``close`` it.
    """
    raw: _RawSource
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
    offload = length is None or length > inline_read_max_bytes
    try:
        return await _parse(raw, offset, length, chunk_bytes, offload, gzip_member)
    except BaseException:
        raw.close()
        raise


def _fit_to_length(
    record: Any, is_arc: bool, remaining: int, available: int, location: str, offset: int
) -> int:
    """The bytes of an uncompressed block left to serve, given ``available`` in
    the record's indexed length after its header blocks.

    A WARC record whose block ends before its ``Content-Length`` is torn: a
    :class:`RecordFormatError`, never a record served short. An ARC record
    may declare more than it holds: writers that counted the URL
    percent-encoded (warcio's ``example-space-in-url.arc``: 12 bytes for six
    spaces) wrote a length that runs past the record; the block is served as
    it is in the file, its ``Content-Length`` made to fit.
    """
    short = remaining - available
    if short <= 0:
        return remaining
    if not is_arc:
        raise _format_error(
            location,
            offset,
            f"the record ends {short} bytes before its Content-Length (a torn record)",
        )
    declared = record.rec_headers.get_header("Content-Length")
    with contextlib.suppress(TypeError, ValueError):
        record.rec_headers.replace_header("Content-Length", str(int(declared) - short))
    record.raw_stream.limit = available
    return available


async def _parse(
    raw: _RawSource,
    offset: int,
    length: int | None,
    chunk_bytes: int,
    offload: bool,
    gzip_member: bool,
) -> OpenedRecord:
    location = raw.location
    first_read = chunk_bytes if length is None else min(chunk_bytes, length)
    first = await raw.read(first_read)
    if not first:
        raise _format_error(location, offset, "no bytes (the file ends before the offset)")
    gzipped = first[:2] == _GZIP_MAGIC
    decoder = _Decoder(gzipped, location)
    window = HeaderWindow()
    # A long record, or one whose member may be sent as stored, inflates only
    # a first piece here, for the header blocks; the rest is inflated (by
    # workers for a long record) as the body streams, if it is iterated.
    step = _HEADER_PROBE_BYTES if offload or gzip_member else _INFLATE_OUT_BYTES
    if step == _HEADER_PROBE_BYTES and gzipped:
        # Feed the inflater only the start of the member: ISA-L asked for at
        # most ``step`` bytes out of the whole input still does most of the
        # work of inflating it (measured: 1.7M instructions for a 117 KB member).
        window.buf = decoder.decode(first[:_HEADER_PROBE_INPUT_BYTES], step)
        if not decoder.done:
            rest = first[_HEADER_PROBE_INPUT_BYTES:]
            decoder.tail = decoder.tail + rest if decoder.tail else rest
    else:
        window.buf = decoder.decode(first, step)
    exhausted = False
    while True:
        window.pos = 0
        window.final = exhausted or (decoder.done and not decoder.tail)
        try:
            record = RECORD_LOADER.parse_record_stream(window)
            break
        except NeedMore:
            pass
        except PARSE_ERRORS as exc:
            raise _format_error(location, offset, str(exc) or type(exc).__name__) from exc
        if len(window.buf) > _MAX_HEADER_BYTES:
            raise _format_error(
                location, offset, f"no end of the header blocks in {_MAX_HEADER_BYTES} bytes"
            )
        if decoder.tail:
            window.buf += decoder.decode(b"", step)
        elif decoder.done:
            exhausted = True
        else:
            more = await raw.read(chunk_bytes)
            if more:
                first += more
                window.buf += decoder.decode(more, step)
            else:
                exhausted = True

    if not record.rec_headers.protocol and not record.rec_headers.headers:
        raise _format_error(location, offset, "a blank line instead of a record header")
    stream = record.raw_stream
    if isinstance(stream, LimitReader):
        remaining: int | None = stream.limit
        consumed = stream.tell()
    else:
        remaining, consumed = None, 0
    is_arc = WARC_START.match(window.buf) is None
    if is_arc and not ARC_URI.match(arc_url(record.rec_headers)):
        # warcio takes any line of five space-separated fields for an ARC header,
        # binary junk included; a real one starts with a URL.
        line = window.buf[: window.buf.find(b"\n")].decode("latin-1")
        raise _format_error(location, offset, f"not an ARC header line: {line!r}")
    if remaining is not None and length is not None and decoder.zobj is None:
        remaining = _fit_to_length(record, is_arc, remaining, length - window.pos, location, offset)
    body = RecordBody(
        window.buf,
        window.pos,
        decoder,
        raw,
        remaining,
        chunk_bytes=chunk_bytes,
        offload=offload,
    )
    member = None
    if gzip_member and gzipped and remaining is not None and not is_arc:
        total = window.pos + remaining + 4  # the header blocks, the block, CRLF CRLF
        member = _stored_member(first, length, total, body, raw)
    stored_head = window.buf[: window.pos] if gzip_member else b""
    return OpenedRecord(location, record, is_arc, consumed, remaining, body, stored_head, member)
