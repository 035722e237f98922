"""The block of a record after its header blocks, streamed.

:class:`RecordBody` yields the rest of a record's block, at most
``chunk_bytes`` read and 256 KiB inflated at a time, bounded by the record's
``Content-Length`` (warcio's ``LimitReader`` idea), so memory stays flat
whatever the record size; its ``read_raw`` reads the same source still
compressed, for :class:`~gateway.loaders.warc_member.StoredMember`.

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
inflation over cores), and a slow disk cannot stall the loop. Bytes are not
copied on the way: the block after the header blocks is a view until a
consumer iterates it, and pieces are cut only when the record's end falls
inside them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Callable
from typing import TypeVar

from gateway.errors import RecordFormatError
from gateway.loaders.warc_inflate import Decoder
from gateway.loaders.warc_sources import RawSource

__all__ = ["RecordBody"]

_T = TypeVar("_T")


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
        decoder: Decoder,
        raw: RawSource,
        remaining: int | None,
        *,
        chunk_bytes: int,
        offload: bool,
    ) -> None:
        self._decoder = decoder
        self._raw: RawSource | None = raw
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

    async def _pull(self, raw: RawSource) -> bytes | None:
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

        For :class:`~gateway.loaders.warc_member.StoredMember`; never mixed with iterating
        this body.
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


_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _worker_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that read and inflate long records (created on first use)."""
    global _POOL
    if _POOL is None:
        workers = min(32, (os.cpu_count() or 1) + 4)
        _POOL = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="warc-read")
    return _POOL
