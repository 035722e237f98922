"""Strict record framing of WARC and ARC files: is every record whole?

warcio reads leniently (a gzip member cut short yields a short record without
an error), so recovery, ``store add`` and ``store check`` use this scanner to
find where the whole records of a file end. A record is *whole* when:

- gzip files (one record per gzip member, WARC 1.1 Annex D.2; the same for
  ARC): the member is complete, its CRC-32 and length trailer match (zlib
  checks them), and it holds exactly one record;
- WARC records (WARC 1.1 §4; versions 0.17, 0.18, 1.0 and 1.1): the first
  line is ``WARC/<version>``, the header block ends in ``CRLF CRLF``,
  ``Content-Length`` is a number, the block has that many bytes and is
  followed by ``CRLF CRLF``;
- ARC records (the Internet Archive's ARC file format, versions 1 and 2):
  a header line of space-separated fields ending in ``LF`` whose last field
  is the record's length in bytes, that many bytes, then an ``LF`` (which the
  last record of an uncompressed file may leave out). A file is ARC when its
  first record is the ``filedesc://`` record.

Digests are not checked here (see :mod:`gateway.store.verify`); within a gzip
member the CRC already proves the bytes are those that were written.
:func:`next_frame` finds the next whole record after damage (``store repair``
salvages what follows a damaged record).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Final

__all__ = ["WARC_VERSIONS", "Frame", "FramingError", "file_format", "next_frame", "scan_frames"]

_CHUNK: Final = 1 << 16
_MAX_HEADER_BYTES: Final = 1 << 20
_MAX_ARC_LINE: Final = 1 << 16
_GZIP_MAGIC: Final = b"\x1f\x8b"
_ARC_FILEDESC: Final = b"filedesc://"
#: The first lines of the WARC versions read (warcio reads the same ones).
WARC_VERSIONS: Final = ("WARC/1.1", "WARC/1.0", "WARC/0.18", "WARC/0.17")


@dataclass(frozen=True, slots=True)
class Frame:
    """One whole record: bytes ``[offset, end)`` of the file (gzip member or record, line
    ends after it included)."""

    offset: int
    end: int
    warc_type: str
    record_id: str
    #: Bytes the last record of an ARC file lacks (its header says more).
    short_by: int = 0

    @property
    def length(self) -> int:
        return self.end - self.offset


class FramingError(Exception):
    """The bytes at ``offset`` are not a whole WARC record; ``at_eof`` when cut short."""

    def __init__(self, offset: int, reason: str, *, at_eof: bool) -> None:
        super().__init__(f"offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason
        self.at_eof = at_eof


class _Parser:
    """Consumes the bytes of one record: a header, ``remaining`` block bytes, line ends.

    After the block come line ends (``trailer`` counts them) and then
    anything else (``extra`` counts it): the next record, or, inside a gzip
    member, an error. WARC 1.1 §4 asks for ``CRLF CRLF``; writers also leave
    one ``CRLF`` or ``LF``, or none at a gzip member's end, and warcio reads
    all of those, so the parser does too.
    """

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.header_done = False
        self.remaining = 0
        self.trailer = 0
        self.extra = 0
        self.warc_type = ""
        self.record_id = ""

    @property
    def block_done(self) -> bool:
        return self.header_done and self.remaining == 0

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self.extra:
            if not self.header_done:
                view = self._feed_header(view)
            elif self.remaining:
                take = min(self.remaining, len(view))
                self.remaining -= take
                view = view[take:]
            elif view[0] in b"\r\n":
                self.trailer += 1
                view = view[1:]
            else:
                self.extra += len(view)

    def _feed_header(self, view: memoryview) -> memoryview:
        raise NotImplementedError


class _WarcParser(_Parser):
    """A WARC record (any of :data:`WARC_VERSIONS`): header block up to ``CRLF CRLF``."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.header = bytearray()

    def _feed_header(self, view: memoryview) -> memoryview:
        start = max(len(self.header) - 3, 0)
        self.header += view
        end = self.header.find(b"\r\n\r\n", start)
        if end < 0:
            if len(self.header) > _MAX_HEADER_BYTES:
                raise FramingError(self.offset, "WARC header block too long", at_eof=False)
            return memoryview(b"")
        rest = bytes(self.header[end + 4 :])
        del self.header[end + 4 :]
        self._parse_header()
        return memoryview(rest)

    def _parse_header(self) -> None:
        self.header_done = True
        lines = bytes(self.header).decode("utf-8", "replace").split("\r\n")
        if lines[0] not in WARC_VERSIONS:
            raise FramingError(
                self.offset, f"not a WARC record (first line {lines[0][:40]!r})", at_eof=False
            )
        length: int | None = None
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                continue
            key = name.strip().lower()
            if key == "content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    length = None
            elif key == "warc-type":
                self.warc_type = value.strip()
            elif key == "warc-record-id":
                self.record_id = value.strip()
        if length is None or length < 0:
            raise FramingError(self.offset, "missing or invalid Content-Length", at_eof=False)
        self.remaining = length


class _ArcParser(_Parser):
    """An ARC record: one header line whose last field is the length of what follows."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.line = bytearray()

    def _feed_header(self, view: memoryview) -> memoryview:
        end = bytes(view[:_MAX_ARC_LINE]).find(b"\n")
        if end < 0:
            self.line += view
            if len(self.line) > _MAX_ARC_LINE:
                raise FramingError(self.offset, "ARC header line too long", at_eof=False)
            return memoryview(b"")
        self.line += view[: end + 1]
        self._parse_header()
        return view[end + 1 :]

    def _parse_header(self) -> None:
        self.header_done = True
        line = bytes(self.line).rstrip(b"\r\n")
        fields = line.rsplit(b" ", 4)
        length = fields[-1]
        if len(fields) < 5 or not length.isdigit() or not line[:1].strip():
            shown = line[:60].decode("utf-8", "replace")
            raise FramingError(
                self.offset,
                f"not an ARC record header (expected 'URL IP-address date type length', "
                f"found {shown!r})",
                at_eof=False,
            )
        self.remaining = int(length)
        self.warc_type = "warcinfo" if line.startswith(_ARC_FILEDESC) else "response"


def _parser(offset: int, arc: bool) -> _Parser:
    return _ArcParser(offset) if arc else _WarcParser(offset)


def _scan_gzip_member(fh: IO[bytes], offset: int, limit: int, arc: bool) -> Frame:
    fh.seek(offset)
    head = fh.read(2)
    if len(head) < 2:
        raise FramingError(offset, "gzip member cut short", at_eof=True)
    if head != _GZIP_MAGIC:
        raise FramingError(offset, "not a gzip member (file is gzip elsewhere)", at_eof=False)
    fh.seek(offset)
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    parser = _parser(offset, arc)
    pos = offset
    while not inflater.eof:
        chunk = fh.read(min(_CHUNK, limit - pos))
        if not chunk:
            raise FramingError(offset, "gzip member cut short (torn write?)", at_eof=True)
        pos += len(chunk)
        data = chunk
        while data and not inflater.eof:
            try:
                out = inflater.decompress(data, _CHUNK)
            except zlib.error as exc:
                raise FramingError(offset, f"corrupt gzip data: {exc}", at_eof=False) from exc
            parser.feed(out)
            data = inflater.unconsumed_tail
    end = pos - len(inflater.unused_data)
    if not parser.block_done:
        raise FramingError(offset, "gzip member ends inside the record", at_eof=False)
    if parser.extra:
        raise FramingError(
            offset, "gzip member holds more than one record (use warcio recompress)", at_eof=False
        )
    return Frame(offset, end, parser.warc_type, parser.record_id)


def _scan_plain_record(fh: IO[bytes], offset: int, limit: int, arc: bool) -> Frame:
    """One record of an uncompressed file: block, then at least one line end (or the end).

    The last record of an ARC file may hold fewer bytes than its header says
    (warcio's test file ``example-space-in-url.arc`` does): it ends the file
    and is kept, with ``Frame.short_by`` saying how many bytes are missing.
    """
    fh.seek(offset)
    parser = _parser(offset, arc)
    pos = offset
    while not parser.extra:
        chunk = fh.read(min(_CHUNK, limit - pos))
        if not chunk:
            break
        pos += len(chunk)
        parser.feed(chunk)
    end = pos - parser.extra
    if not parser.header_done:
        ending = "an LF" if arc else "CRLF CRLF"
        raise FramingError(
            offset, f"record cut short in its header (no {ending} before the end)", at_eof=True
        )
    if parser.remaining:
        if arc and parser.remaining < end - offset:
            return Frame(offset, end, parser.warc_type, parser.record_id, parser.remaining)
        raise FramingError(offset, "record cut short", at_eof=True)
    if parser.extra and not parser.trailer:
        raise FramingError(
            offset, "record block not followed by CRLF or LF (wrong Content-Length?)", at_eof=False
        )
    return Frame(offset, end, parser.warc_type, parser.record_id)


def _is_arc(fh: IO[bytes], offset: int, gzipped: bool) -> bool:
    """True when the record at ``offset`` is an ARC file's ``filedesc://`` record."""
    fh.seek(offset)
    if not gzipped:
        return fh.read(len(_ARC_FILEDESC)) == _ARC_FILEDESC
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    try:
        head = inflater.decompress(fh.read(1024), len(_ARC_FILEDESC))
    except zlib.error:
        return False
    return head == _ARC_FILEDESC


def _scan_one(fh: IO[bytes], offset: int, limit: int, gzipped: bool, arc: bool) -> Frame:
    if gzipped:
        return _scan_gzip_member(fh, offset, limit, arc)
    return _scan_plain_record(fh, offset, limit, arc)


def scan_frames(fh: IO[bytes], start: int = 0, end: int | None = None) -> Iterator[Frame]:
    """Yield the whole records of ``fh`` from ``start`` to ``end`` (default: EOF).

    ``start`` must be the offset of a record. Raises :class:`FramingError` at
    the first record that is not whole; ``FramingError.at_eof`` tells a record
    cut short by the end of the file (a torn tail) from damage. Blank lines
    after an uncompressed record belong to its frame.
    """
    fh.seek(0, 2)
    limit = fh.tell() if end is None else end
    gzipped, arc = file_format(fh)
    offset = start
    while offset < limit:
        frame = _scan_one(fh, offset, limit, gzipped, arc)
        yield frame
        offset = frame.end


def file_format(fh: IO[bytes]) -> tuple[bool, bool]:
    """``(gzipped, arc)`` of a file, from its first record; moves the file position."""
    fh.seek(0)
    gzipped = fh.read(2) == _GZIP_MAGIC
    return gzipped, _is_arc(fh, 0, gzipped)


def next_frame(fh: IO[bytes], after: int, end: int | None = None) -> Frame | None:
    """The first whole record starting past ``after`` (damage before it), else None.

    Tries every place a record could start (a gzip header, ``WARC/`` after a
    line end, an ARC header line) and keeps the first that frames as a whole
    record: finding it costs a scan of the bytes in between.
    """
    fh.seek(0, 2)
    limit = fh.tell() if end is None else end
    gzipped, arc = file_format(fh)
    if gzipped:
        marker = _GZIP_MAGIC + b"\x08"
        skip = 0
    elif arc:
        marker, skip = b"\n", 1
    else:
        marker, skip = b"\nWARC/", 1
    pos = after + 1
    window = b""
    window_start = pos
    while pos < limit:
        if pos - window_start + len(marker) > len(window):
            fh.seek(pos)
            window = fh.read(_CHUNK + len(marker))
            window_start = pos
            if len(window) < len(marker):
                return None
        found = window.find(marker, pos - window_start)
        if found < 0 or found + len(marker) > len(window):
            pos = window_start + max(len(window) - len(marker) + 1, 1)
            continue
        candidate = window_start + found + skip
        if candidate > after and candidate < limit:
            try:
                return _scan_one(fh, candidate, limit, gzipped, arc)
            except FramingError:
                pass
        pos = window_start + found + 1
    return None
