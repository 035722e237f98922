"""Reading the parts of a ZipNum cluster: a range's summary lines, a block's lines.

Shared by :mod:`gateway.sources.zipnum` (clusters on disk, HTTP or S3) and
:mod:`gateway.sources.wacz_index` (the ZipNum indexes inside a WACZ). The
formats are pywb's (``pywb.warcserver.index.zipnum``): a summary line is
``urlkey timestamp<TAB>part<TAB>offset<TAB>length[<TAB>lineno]``, a block
one gzip member of sorted index lines.
"""

from __future__ import annotations

import bisect
import os
import zlib
from collections.abc import Generator
from typing import TYPE_CHECKING, Final

from gateway.errors import SourceBadAnswer
from gateway.sources.cdxj_scan import Handle, search_offset

if TYPE_CHECKING:
    from gateway.sources.zipnum_remote import BlockCache

__all__ = ["Block", "inflate_block", "summary_lines"]

#: Largest summary read at a time while scanning it.
_SUMMARY_READ_BYTES: Final = 64 * 1024
#: Most text one block may inflate to (a block holds a few thousand lines).
_MAX_BLOCK_TEXT: Final = 64 * 1024 * 1024
#: Text inflated from a block at a time (a lookup stops inflating past its range).
_INFLATE_PIECE: Final = 64 * 1024
#: What a block being inflated holds besides its text: zlib's state (a 32 KiB window).
_INFLATER_BYTES: Final = 48 * 1024
#: A summary line longer than this is not a summary line.
_MAX_SUMMARY_LINE: Final = 64 * 1024


def inflate_block(member: bytes, *, source: str, part: str, offset: int) -> list[bytes]:
    """The lines of one block, all at once (a WACZ's ZipNum index,
    :mod:`gateway.sources.wacz_index`); raises as :meth:`Block.more` does."""
    block = Block(member, source=source, part=part, offset=offset)
    while not block.done:
        block.more()
    return block.lines


class Block:
    """A ZipNum block's lines (a gzip member of sorted CDX(J) lines at
    ``offset`` of ``part``), inflated as far as lookups asked: pywb reads a
    block line by line through gzip and stops at the end of its range, and
    so does a lookup here (:meth:`index_of`, :meth:`more`), inflating
    :data:`_INFLATE_PIECE` of text at a time. The next lookup of the block
    goes on from there (the block cache keeps the block, inflater and all).

    ``lines`` are the complete lines so far; ``done`` once the member is
    inflated to its end. ``size`` is what the block holds in memory: its
    text, plus the compressed rest and zlib's state until it is done.
    ``cache`` is the :class:`~gateway.sources.zipnum_remote.BlockCache`
    holding it (told of its growth), if any.
    """

    __slots__ = (
        "_inflater",
        "_input",
        "_pending",
        "_produced",
        "_where",
        "cache",
        "done",
        "lines",
        "size",
    )

    def __init__(self, member: bytes, *, source: str, part: str, offset: int) -> None:
        self.lines: list[bytes] = []
        self.done = False
        self.size = len(member) + _INFLATER_BYTES
        self.cache: BlockCache | None = None
        self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._input = member
        self._pending = bytearray()  # text after the last line end (a long line stays linear)
        self._produced = 0
        self._where = (source, part, offset)

    def index_of(self, key: bytes) -> int:
        """The index in :attr:`lines` of the first line at or after ``key``
        (a block's lines are sorted: the format), inflating until it is known;
        ``len(lines)`` when there is none. Raises as :meth:`more` does."""
        lines = self.lines
        index = bisect.bisect_left(lines, key)
        while index == len(lines) and not self.done:
            self.more()
            index = bisect.bisect_left(lines, key, index)
        return index

    def more(self) -> None:
        """Inflate the next piece of text and cut its complete lines.

        Raises :class:`SourceBadAnswer` (naming the part and offset) for bytes
        that are not a gzip member, a member cut short, or one inflating past
        64 MiB.
        """
        source, part, offset = self._where
        inflater = self._inflater
        try:
            text = inflater.decompress(self._input, _INFLATE_PIECE)
        except zlib.error as exc:
            raise SourceBadAnswer(
                source,
                f"ZipNum shard {part}: block at offset {offset} is not a gzip "
                f"member ({exc}); the summary and the shard do not match",
            ) from exc
        self._input = inflater.unconsumed_tail
        self._produced += len(text)
        if self._produced > _MAX_BLOCK_TEXT:
            raise SourceBadAnswer(
                source,
                f"ZipNum shard {part}: block at offset {offset} inflates past "
                f"{_MAX_BLOCK_TEXT} bytes; expected a block of a few thousand lines",
            )
        pending = self._pending
        if inflater.eof:
            self.lines += (bytes(pending) + text).splitlines()
            self.done = True
            self._input = b""
            self._pending = bytearray()
        elif not self._input and len(text) < _INFLATE_PIECE:
            raise SourceBadAnswer(
                source,
                f"ZipNum shard {part}: block at offset {offset} ends before its gzip "
                "member does; the summary and the shard do not match",
            )
        else:
            cut = text.rfind(b"\n")
            if cut < 0:
                pending += text
            else:
                self.lines += (bytes(pending) + text[:cut]).splitlines()
                self._pending = bytearray(text[cut + 1 :])
        before = self.size
        self.size = self._produced + (0 if self.done else len(self._input) + _INFLATER_BYTES)
        if self.cache is not None:
            self.cache.grew(self, self.size - before)


def summary_lines(handle: Handle, key: bytes, end: bytes) -> Generator[bytes, None, None]:
    """The last summary line before ``key``, then every later line before ``end``.

    The block a line names starts with that line's key, so the block before the
    first line >= ``key`` may hold ``key`` too (pywb ``iter_range`` with
    ``prev_size=1``). Raises OSError from the reads, ValueError for a line
    too long to be a summary line.
    """
    fd, size = handle.fd, handle.size
    pos = search_offset(handle, key)
    if pos > 0:
        # Every line before the one holding byte pos - 1 sorts before key;
        # that line may be the last one before key: start at its beginning.
        pos = _line_start(fd, pos - 1)
    previous: bytes | None = None
    buffer = b""
    while pos < size or buffer:
        if pos < size:
            data = os.pread(fd, min(_SUMMARY_READ_BYTES, size - pos), pos)
            if not data:
                break
            pos += len(data)
            buffer += data
            lines = buffer.split(b"\n")
            buffer = lines.pop()
            if len(buffer) > _MAX_SUMMARY_LINE:
                raise ValueError(f"a line longer than {_MAX_SUMMARY_LINE} bytes")
        else:
            lines, buffer = [buffer], b""
        for line in lines:
            if not line.strip():
                continue
            if line < key:
                previous = line
                continue
            if previous is not None:
                yield previous
                previous = None
            if line >= end:
                return
            yield line
    if previous is not None:
        yield previous


def _line_start(fd: int, pos: int) -> int:
    """The offset of the start of the line holding byte ``pos``."""
    while pos > 0:
        start = max(0, pos - 4096)
        window = os.pread(fd, pos - start, start)
        newline = window.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        pos = start
    return 0
