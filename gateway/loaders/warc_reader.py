"""One WARC or ARC record at (location, offset, length): headers parsed, block streamed.

:func:`open_record` reads the record's first bytes
(:mod:`gateway.loaders.warc_sources`), gunzips them when they start with the
gzip magic (:mod:`gateway.loaders.warc_inflate`), and parses the WARC (or
ARC) header block and the HTTP header block with warcio, exactly as pywb's
``BlockArcWarcRecordLoader`` does (see :mod:`gateway.loaders.warc_headers`).
No thread and no whole record is needed for that: the rest of the block
streams from :class:`~gateway.loaders.warc_stream.RecordBody` (on the event
loop for records of at most ``inline_read_max_bytes``, in worker threads
beyond), and a record's gzip member can go out as stored
(:class:`~gateway.loaders.warc_member.StoredMember`).

A record whose framing cannot be read is never served as a record: a WARC
``Content-Length`` (or an ARC header line's length) that is not ASCII digits
(``-1``, ``abc``, which warcio reads as an empty block), or a WARC record
without one, raises :class:`~gateway.errors.RecordFramingError`; the lookup
moves on to the next capture.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from warcio.limitreader import LimitReader

from gateway.errors import RecordFormatError, RecordFramingError
from gateway.loaders.warc_headers import (
    ARC_URI,
    PARSE_ERRORS,
    RECORD_LOADER,
    WARC_START,
    HeaderWindow,
    NeedMore,
    arc_url,
)
from gateway.loaders.warc_inflate import GZIP_MAGIC, INFLATE_OUT_BYTES, Decoder
from gateway.loaders.warc_member import StoredMember, stored_member
from gateway.loaders.warc_sources import Location, RawSource, open_source
from gateway.loaders.warc_stream import RecordBody

if TYPE_CHECKING:  # aiohttp is imported by the time a session exists
    import aiohttp

__all__ = ["OpenedRecord", "open_record"]

#: First piece inflated for the header blocks of a record read by workers.
_HEADER_PROBE_BYTES: Final = 16 * 1024
#: Compressed bytes fed to the inflater for that first piece (more follow when needed).
_HEADER_PROBE_INPUT_BYTES: Final = 4 * 1024
#: Header blocks larger than this (decompressed) are not a record we can serve.
_MAX_HEADER_BYTES: Final = 4 * 1024 * 1024
#: A record's length as WARC 1.1 §5.3 writes it (``1*DIGIT``), and ARC's too.
_LENGTH: Final = re.compile(r"[0-9]{1,18}")


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
    (see :class:`~gateway.loaders.warc_member.StoredMember`); else None.
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


def _format_error(location: str, offset: int, problem: str) -> RecordFormatError:
    if len(problem) > 200:
        problem = problem[:200] + "..."
    return RecordFormatError(
        f"{location} at offset {offset}: {problem}; expected a WARC or ARC record there "
        "(check the CDX offset and length, and that the file is the one indexed)",
        {location: problem},
    )


def _check_framing(record: Any, is_arc: bool, location: str, offset: int) -> None:
    """Raise :class:`RecordFramingError` unless the record declares its length in
    digits (warcio reads ``-1`` or ``abc`` as an empty block and goes on)."""
    declared = record.rec_headers.get_header("Content-Length")
    if declared is None and is_arc:
        return  # an ARC header line always has a length field: arc2warc made it
    if declared is None:
        problem = "the WARC record has no Content-Length"
    elif _LENGTH.fullmatch(declared):
        return
    else:
        kind = "ARC header line's length" if is_arc else "Content-Length"
        problem = f"the {kind} {declared[:40]!r} is not a number of bytes"
    raise RecordFramingError(
        f"{location} at offset {offset}: {problem}, so where the record ends cannot be "
        "read; a record that cannot be framed is not served",
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
    :class:`~gateway.loaders.warc_sources.RangeLocation`; ``session``
    returns the shared ``aiohttp`` session (only called for URLs). With
    ``gzip_member``, a record stored as its own gzip member is inflated only
    as far as its header blocks, and the result's ``member`` offers the
    member as stored (see :class:`~gateway.loaders.warc_member.StoredMember`;
    the body still streams inflated when iterated instead). Raises
    :class:`~gateway.errors.ArchiveFileNotFound` when the location does not
    hold the file, :class:`RecordFormatError` when the bytes are not a
    record (:class:`RecordFramingError` when its length cannot be read), and
    :class:`~gateway.errors.LoadError` for any other I/O failure. The caller
    owns the result and must ``close`` it.
    """
    raw = await open_source(location, offset, length, session)
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
    raw: RawSource,
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
    gzipped = first[:2] == GZIP_MAGIC
    decoder = Decoder(gzipped, location)
    window = HeaderWindow()
    # A long record, or one whose member may be sent as stored, inflates only
    # a first piece here, for the header blocks; the rest is inflated (by
    # workers for a long record) as the body streams, if it is iterated.
    step = _HEADER_PROBE_BYTES if offload or gzip_member else INFLATE_OUT_BYTES
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
    _check_framing(record, is_arc, location, offset)
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
        member = stored_member(first, length, total, body, raw)
    stored_head = window.buf[: window.pos] if gzip_member else b""
    return OpenedRecord(location, record, is_arc, consumed, remaining, body, stored_head, member)
