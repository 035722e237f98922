"""Reading the parts of a ZipNum cluster: a range's summary lines, a block's lines.

Shared by :mod:`gateway.sources.zipnum` (clusters on disk, HTTP or S3) and
:mod:`gateway.sources.wacz_index` (the ZipNum indexes inside a WACZ). The
formats are pywb's (``pywb.warcserver.index.zipnum``): a summary line is
``urlkey timestamp<TAB>part<TAB>offset<TAB>length[<TAB>lineno]``, a block
one gzip member of sorted index lines.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Generator
from typing import Final

from gateway.errors import SourceBadAnswer
from gateway.sources.cdxj_scan import Handle, search_offset

__all__ = ["inflate_block", "summary_lines", "text_size"]

#: Largest summary read at a time while scanning it.
_SUMMARY_READ_BYTES: Final = 64 * 1024
#: Most text one block may inflate to (a block holds a few thousand lines).
_MAX_BLOCK_TEXT: Final = 64 * 1024 * 1024
#: A summary line longer than this is not a summary line.
_MAX_SUMMARY_LINE: Final = 64 * 1024


def inflate_block(member: bytes, *, source: str, part: str, offset: int) -> list[bytes]:
    """The lines of one block: a gzip member of sorted CDX(J) lines at ``offset`` of ``part``.

    Raises :class:`SourceBadAnswer` (naming ``part`` and ``offset``) for bytes
    that are not a gzip member or inflate past 64 MiB.
    """
    try:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        text = inflater.decompress(member, _MAX_BLOCK_TEXT)
    except zlib.error as exc:
        raise SourceBadAnswer(
            source,
            f"ZipNum shard {part}: block at offset {offset} is not a gzip "
            f"member ({exc}); the summary and the shard do not match",
        ) from exc
    if inflater.unconsumed_tail:
        raise SourceBadAnswer(
            source,
            f"ZipNum shard {part}: block at offset {offset} inflates past "
            f"{_MAX_BLOCK_TEXT} bytes; expected a block of a few thousand lines",
        )
    return text.splitlines()


def text_size(lines: list[bytes]) -> int:
    """The bytes of text ``lines`` came from, line ends included (what the cache counts)."""
    return sum(map(len, lines)) + len(lines)


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
