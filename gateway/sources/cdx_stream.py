"""Incremental parsers for CDX server answers, fed bytes as they arrive.

:class:`CdxAnswerParser` turns the body of a CDX server answer into
:class:`~gateway.cdx.cdxj.CdxRecord` objects while it streams in, holding at most
one line (or one JSON row) plus one network chunk in memory. It reads every
answer format that CDX servers send, recognized from the first bytes:

- **CDXJ** lines ``urlkey timestamp {json}`` (pywb's ``/cdx`` and
  warcserver's ``/index`` default);
- **NDJSON** lines ``{"urlkey": ..., "timestamp": ..., ...}`` (pywb
  ``output=json``);
- **space-separated text**: 11-, 10-, 9- and 7-field legacy CDX lines (IA CDX
  server default ``urlkey timestamp original mimetype statuscode digest
  length``, OpenWayback's 11 fields), an optional `` CDX ...`` header line;
- **IA JSON**: one JSON array of arrays whose first row names the fields
  (``[["urlkey","timestamp","original",...], [...], ...]``, IA CDX server
  ``output=json``), split row by row by a small hand-written scanner that
  tracks strings and nesting; an empty row ``[]`` ends the captures (IA puts
  the ``showResumeKey`` row after it).

IA field names are mapped to the CDXJ names (``original`` -> ``url``,
``mimetype`` -> ``mime``, ``statuscode`` -> ``status``; :data:`FIELD_ALIASES`).
Non-string JSON values become text as :meth:`CdxRecord.parse` makes them.

Errors are :class:`CdxAnswerError` (a :class:`ValueError`) naming the line
or row and what was expected; the source turns them into
:class:`~gateway.errors.SourceBadAnswer`. :class:`BodyDecoder` undoes a
``Content-Encoding`` (gzip, deflate) in bounded steps.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from typing import Final, Literal

from gateway.cdx.cdxj import FIELD_ALIASES, CdxFormatError, CdxRecord, canonical_urlkey

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "BodyDecoder",
    "CdxAnswerError",
    "CdxAnswerParser",
]

#: Longest line or JSON row accepted (bytes); longer ones are a bad answer.
DEFAULT_MAX_LINE_BYTES: Final = 1024 * 1024
#: Largest piece a decoder produces from one input step (decompression bombs).
_DECODE_STEP_BYTES: Final = 256 * 1024

_HEADER_LINES: Final = (b" CDX", b"CDX ")
#: Bytes the IA JSON scanner stops at outside strings, and inside them.
_STRUCTURE = re.compile(rb'[\[\]{}"]')
_IN_STRING = re.compile(rb'["\\]')
_WHITESPACE: Final = b" \t\r\n"

Format = Literal["unknown", "lines", "ia-json"]


class CdxAnswerError(ValueError):
    """The answer is not in a CDX answer format; the message says where and why."""


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else json.dumps(value)


def _excerpt(data: bytes) -> str:
    return repr(data[:200].decode("utf-8", "replace"))


class CdxAnswerParser:
    """Feed the bytes of one answer with :meth:`feed`, then call :meth:`finish`.

    Both return the records completed so far, in answer order. Raises
    :class:`CdxAnswerError` on a malformed line or row, on a line or row
    longer than ``max_line_bytes``, and (in :meth:`finish`) on a truncated IA
    JSON array.

    >>> parser = CdxAnswerParser()
    >>> [r.timestamp for r in parser.feed(b'[["urlkey","timestamp","original"],\\n["org,ia')]
    []
    >>> [(r.urlkey, r.url) for r in parser.feed(b'na)/","20140126200624","http://iana.org/"]]')]
    [('org,iana)/', 'http://iana.org/')]
    >>> parser.finish()
    []
    """

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self.format: Format = "unknown"
        self._buf = bytearray()
        self._line_no = 0
        # IA JSON scanner state
        self._pos = 0
        self._depth = 0
        self._in_string = False
        self._row_start = -1
        self._rows = 0
        self._header: list[str] | None = None
        self._closed = False
        self._ended = False

    def feed(self, data: bytes) -> list[CdxRecord]:
        """Parse ``data`` (the next bytes of the answer); returns the records it completed."""
        self._buf += data
        if self.format == "unknown":
            start = len(self._buf) - len(self._buf.lstrip(_WHITESPACE))
            if start == len(self._buf):
                self._buf.clear()
                return []
            if self._buf[start : start + 1] == b"[":
                self.format = "ia-json"
                del self._buf[:start]
            else:
                self.format = "lines"
        if self.format == "lines":
            return list(self._lines(final=False))
        return list(self._rows_scan())

    def finish(self) -> list[CdxRecord]:
        """The records of the last (unterminated) line; checks an IA JSON array is complete."""
        if self.format == "lines":
            return list(self._lines(final=True))
        if self.format == "ia-json" and not self._closed:
            raise CdxAnswerError(
                f"IA JSON answer ends inside its array after {self._rows} rows "
                "(truncated answer?); expected a closing ']'"
            )
        return []

    # ----------------------------------------------------------------- lines
    def _lines(self, *, final: bool) -> Iterator[CdxRecord]:
        buf = self._buf
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            line = bytes(buf[start:end])
            start = end + 1
            record = self._line(line)
            if record is not None:
                yield record
        del buf[:start]
        if len(buf) > self.max_line_bytes:
            raise CdxAnswerError(
                f"line {self._line_no + 1} is longer than {self.max_line_bytes} bytes; "
                f"expected CDX lines: {_excerpt(bytes(buf))}"
            )
        if final and buf:
            line = bytes(buf)
            buf.clear()
            record = self._line(line)
            if record is not None:
                yield record

    def _line(self, line: bytes) -> CdxRecord | None:
        self._line_no += 1
        line = line.rstrip(b"\r")
        if not line.strip() or line.startswith(_HEADER_LINES):
            return None
        try:
            record = self._ndjson(line) if line.startswith(b"{") else CdxRecord.parse(line)
        except (CdxFormatError, ValueError) as exc:
            raise CdxAnswerError(f"line {self._line_no}: {exc}") from exc
        if not record.timestamp.isdigit():
            raise CdxAnswerError(
                f"line {self._line_no}: timestamp {record.timestamp[:40]!r} is not digits; "
                f"expected a CDX line: {_excerpt(line)}"
            )
        return record

    def _ndjson(self, line: bytes) -> CdxRecord:
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise CdxAnswerError(f"bad JSON ({exc}): {_excerpt(line)}") from exc
        if not isinstance(obj, dict):
            raise CdxAnswerError(f"JSON line is not an object: {_excerpt(line)}")
        return _record({str(k): _text(v) for k, v in obj.items()}, _excerpt(line))

    # --------------------------------------------------------------- IA JSON
    def _rows_scan(self) -> Iterator[CdxRecord]:
        buf = self._buf
        if self._closed:
            buf.clear()  # whatever follows the array is not read
            return
        pos = self._pos
        size = len(buf)
        while pos < size and not self._closed:
            if self._in_string:
                match = _IN_STRING.search(buf, pos)
                if match is None:
                    pos = size
                    break
                at = match.start()
                if buf[at] == 0x5C:  # backslash: skip the escaped byte
                    if at + 1 >= size:
                        pos = at
                        break
                    pos = at + 2
                    continue
                self._in_string = False
                pos = at + 1
                continue
            match = _STRUCTURE.search(buf, pos)
            if match is None:
                pos = size
                break
            at = match.start()
            char = buf[at]
            pos = at + 1
            if char == 0x22:  # "
                self._in_string = True
            elif char in (0x5B, 0x7B):  # [ {
                self._depth += 1
                if self._depth == 2:
                    self._row_start = at
            else:  # ] }
                self._depth -= 1
                if self._depth == 1:
                    record = self._row(bytes(buf[self._row_start : pos]))
                    self._row_start = -1
                    if record is not None:
                        yield record
                elif self._depth == 0:
                    self._closed = True
                elif self._depth < 0:
                    raise CdxAnswerError(f"unbalanced ']' in IA JSON after {self._rows} rows")
        keep = self._row_start if self._row_start >= 0 else pos
        del buf[:keep]
        self._pos = pos - keep
        if self._row_start >= 0:
            self._row_start = 0
        if len(buf) > self.max_line_bytes:
            raise CdxAnswerError(
                f"IA JSON row {self._rows + 1} is longer than {self.max_line_bytes} bytes: "
                f"{_excerpt(bytes(buf))}"
            )

    def _row(self, text: bytes) -> CdxRecord | None:
        self._rows += 1
        if self._ended:
            return None
        try:
            row = json.loads(text)
        except ValueError as exc:
            raise CdxAnswerError(f"IA JSON row {self._rows}: {exc}: {_excerpt(text)}") from exc
        if not isinstance(row, list):
            raise CdxAnswerError(f"IA JSON row {self._rows} is not an array: {_excerpt(text)}")
        if self._header is None:
            if not row or not all(isinstance(name, str) for name in row):
                raise CdxAnswerError(
                    f"IA JSON answer does not start with a header row of field names: "
                    f"{_excerpt(text)}"
                )
            self._header = [FIELD_ALIASES.get(str(name), str(name)) for name in row]
            return None
        if not row:
            self._ended = True  # showResumeKey: the resume key row follows
            return None
        if len(row) != len(self._header):
            raise CdxAnswerError(
                f"IA JSON row {self._rows} has {len(row)} values for "
                f"{len(self._header)} fields: {_excerpt(text)}"
            )
        return _record(
            {name: _text(value) for name, value in zip(self._header, row, strict=True)},
            _excerpt(text),
        )


def _record(fields: dict[str, str], where: str) -> CdxRecord:
    """A record from named fields (``urlkey`` computed from ``url`` when missing)."""
    timestamp = fields.pop("timestamp", "")
    urlkey = fields.pop("urlkey", "")
    if not timestamp.isdigit():
        raise CdxAnswerError(f"missing or bad timestamp {timestamp!r}: {where}")
    if not urlkey:
        url = fields.get("url", "")
        try:
            urlkey = canonical_urlkey(url)
        except ValueError as exc:
            raise CdxAnswerError(f"no urlkey and no usable url: {where}") from exc
    return CdxRecord(urlkey, timestamp, fields)


class BodyDecoder:
    """Undo a response's ``Content-Encoding`` (``gzip``, ``x-gzip``, ``deflate``) in steps.

    :meth:`decode` yields pieces of at most 256 KiB, so a small compressed
    chunk cannot expand into a large buffer at once. Raises
    :class:`CdxAnswerError` on an unknown encoding or corrupt data.

    >>> import gzip
    >>> decoder = BodyDecoder("gzip")
    >>> b"".join(decoder.decode(gzip.compress(b"abc"))) + b"".join(decoder.flush())
    b'abc'
    """

    def __init__(self, content_encoding: str) -> None:
        encoding = content_encoding.strip().lower()
        self._zlib: zlib._Decompress | None
        if encoding in ("", "identity"):
            self._zlib = None
        elif encoding in ("gzip", "x-gzip", "deflate"):
            self._zlib = zlib.decompressobj(47)  # gzip or zlib header, detected
        else:
            raise CdxAnswerError(
                f"Content-Encoding {content_encoding!r} is not supported; "
                "expected gzip, deflate or none"
            )

    def decode(self, data: bytes) -> Iterator[bytes]:
        if self._zlib is None:
            if data:
                yield data
            return
        try:
            piece = self._zlib.decompress(data, _DECODE_STEP_BYTES)
            while piece:
                yield piece
                piece = self._zlib.decompress(self._zlib.unconsumed_tail, _DECODE_STEP_BYTES)
        except zlib.error as exc:
            raise CdxAnswerError(f"corrupt compressed answer: {exc}") from exc

    def flush(self) -> Iterator[bytes]:
        if self._zlib is not None:
            yield from self.decode(b"")
            try:
                rest = self._zlib.flush()
            except zlib.error as exc:
                raise CdxAnswerError(f"corrupt compressed answer: {exc}") from exc
            if rest:
                yield rest
