"""Strict WARC record framing: is every record in a file whole?

warcio reads leniently (a gzip member cut short yields a short record without
an error), so recovery and ``store check`` use this scanner to find where the
whole records of a file end. A record is *whole* when:

- gzip files (one record per gzip member, WARC 1.1 Annex D.2): the member is
  complete, its CRC-32 and length trailer match (zlib checks them), and it
  holds exactly one WARC record;
- uncompressed files: the header block ends in ``CRLF CRLF``;
- both: the first line is ``WARC/1.0`` or ``WARC/1.1``, ``Content-Length`` is
  a number, the block has that many bytes and is followed by ``CRLF CRLF``
  (WARC 1.1 §4).

Digests are not checked here (see :mod:`gateway.store.verify`); within a gzip
member the CRC already proves the bytes are those that were written.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Final

__all__ = ["Frame", "FramingError", "scan_frames"]

_CHUNK: Final = 1 << 16
_MAX_HEADER_BYTES: Final = 1 << 20
_GZIP_MAGIC: Final = b"\x1f\x8b"
_TRAILER: Final = b"\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Frame:
    """One whole record: bytes ``[offset, end)`` of the file (gzip member or record)."""

    offset: int
    end: int
    warc_type: str
    record_id: str

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


class _RecordParser:
    """Consumes the bytes of one record; knows when it is complete."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.header = bytearray()
        self.header_done = False
        self.remaining = 0  # block bytes, then trailer bytes still expected
        self.trailer = bytearray()
        self.warc_type = ""
        self.record_id = ""
        self.extra = 0  # bytes after the trailer (must stay 0 in a gzip member)

    @property
    def complete(self) -> bool:
        return self.header_done and self.remaining == 0 and len(self.trailer) == len(_TRAILER)

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if not self.header_done:
                self.header += view
                end = self.header.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.header) > _MAX_HEADER_BYTES:
                        raise FramingError(self.offset, "WARC header block too long", at_eof=False)
                    return
                rest = bytes(self.header[end + 4 :])
                del self.header[end + 4 :]
                self._parse_header()
                view = memoryview(rest)
            elif self.remaining:
                take = min(self.remaining, len(view))
                self.remaining -= take
                view = view[take:]
            elif len(self.trailer) < len(_TRAILER):
                take = len(_TRAILER) - len(self.trailer)
                self.trailer += view[:take]
                view = view[take:]
                if not _TRAILER.startswith(bytes(self.trailer)):
                    raise FramingError(
                        self.offset,
                        "block not followed by CRLF CRLF (wrong Content-Length?)",
                        at_eof=False,
                    )
            else:
                self.extra += len(view)
                return

    def _parse_header(self) -> None:
        self.header_done = True
        lines = bytes(self.header).decode("utf-8", "replace").split("\r\n")
        if lines[0] not in ("WARC/1.0", "WARC/1.1"):
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


def _scan_gzip_member(fh: BinaryIO, offset: int, limit: int) -> Frame:
    fh.seek(offset)
    head = fh.read(2)
    if len(head) < 2:
        raise FramingError(offset, "gzip member cut short", at_eof=True)
    if head != _GZIP_MAGIC:
        raise FramingError(offset, "not a gzip member (file is gzip elsewhere)", at_eof=False)
    fh.seek(offset)
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    parser = _RecordParser(offset)
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
    if not parser.complete:
        raise FramingError(offset, "gzip member ends inside the WARC record", at_eof=False)
    if parser.extra:
        raise FramingError(
            offset, "gzip member holds more than one record (use warcio recompress)", at_eof=False
        )
    return Frame(offset, end, parser.warc_type, parser.record_id)


def _scan_plain_record(fh: BinaryIO, offset: int, limit: int) -> Frame:
    fh.seek(offset)
    parser = _RecordParser(offset)
    pos = offset
    while not parser.complete:
        chunk = fh.read(min(_CHUNK, limit - pos))
        if not chunk:
            raise FramingError(offset, "record cut short", at_eof=True)
        pos += len(chunk)
        parser.feed(chunk)
    return Frame(offset, pos - parser.extra, parser.warc_type, parser.record_id)


def scan_frames(fh: BinaryIO, start: int = 0, end: int | None = None) -> Iterator[Frame]:
    """Yield the whole records of ``fh`` from ``start`` to ``end`` (default: EOF).

    ``start`` must be the offset of a record. Raises :class:`FramingError` at
    the first record that is not whole; ``FramingError.at_eof`` tells a record
    cut short by the end of the file (a torn tail) from damage. Blank lines
    between uncompressed records are skipped.
    """
    fh.seek(0, 2)
    limit = fh.tell() if end is None else end
    offset = start
    gzipped: bool | None = None
    while offset < limit:
        fh.seek(offset)
        head = fh.read(2)
        if gzipped is None:
            gzipped = head == _GZIP_MAGIC
        if gzipped:
            frame = _scan_gzip_member(fh, offset, limit)
        else:
            if head[:1] in (b"\r", b"\n"):  # blank lines between records
                offset += 2 if head == b"\r\n" else 1
                continue
            frame = _scan_plain_record(fh, offset, limit)
        yield frame
        offset = frame.end
