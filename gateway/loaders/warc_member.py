"""A record's gzip member exactly as stored, to send without inflating it.

WARC 1.1 Annex D: a record compressed on its own is one gzip member;
decompressed, it is the record followed by its ``CRLF CRLF`` trailer. A
member's last 4 bytes are its ISIZE, the size of its decompressed data
modulo 2^32 (RFC 1952 section 2.3.1); they are read from the record's first
read, or with one more ``pread`` from a local file (over HTTP or from a
storage that would take another request: such a member is not offered).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from gateway.errors import RecordFormatError
from gateway.loaders.warc_sources import LocalRaw, RawSource
from gateway.loaders.warc_stream import RecordBody

__all__ = ["StoredMember", "stored_member"]


class StoredMember:
    """A record's gzip member exactly as stored (see the module docstring).

    Only made for a member that ends where the CDX ``length`` says and
    whose gzip trailer (ISIZE) gives exactly the
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


def stored_member(
    first: bytes, length: int | None, total: int, body: RecordBody, raw: RawSource
) -> StoredMember | None:
    """The :class:`StoredMember` of a gzip record of ``total`` decompressed bytes, or None."""
    if length is None or length < 18:  # a gzip header and trailer take 18 bytes
        return None
    if len(first) >= length:
        trailer = first[length - 4 : length]
    elif body.still_open() and isinstance(raw, LocalRaw):
        trailer = raw.pread_tail(length)
    else:
        return None  # over HTTP the trailer would take another request
    if len(trailer) != 4 or int.from_bytes(trailer, "little") != total % 2**32:
        return None
    return StoredMember(first, length, body)
