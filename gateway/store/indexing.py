"""Index entries of the store: :class:`IndexRow`, and rows read back from WARC bytes.

One row per indexable record, with the fields cdxj-indexer writes (``url mime
status digest length offset filename``, plus ``requestBody``/``method`` for
POST and PUT, as with ``--post-append``) and what the store needs to write
revisits (record type, WARC-Record-ID, WARC-Date). Indexable records are
cdxj-indexer's defaults: ``response``, ``revisit``, ``resource`` and
``metadata`` (not ``application/warc-fields`` ones), with a WARC-Date
(:func:`is_indexed`).

:func:`index_range` rebuilds rows from a file with warcio; the writer builds
the same rows directly while writing, and recovery, ``store add`` and
``store repair`` use :func:`index_range`, so both paths must agree (a test
holds them to it).
"""

from __future__ import annotations

import hashlib
import json
import re
from base64 import b32encode
from collections.abc import Iterator
from dataclasses import dataclass, field
from io import BytesIO
from typing import IO, Any, Final

from cdxj_indexer.postquery import append_method_query
from warcio.archiveiterator import ArchiveIterator
from warcio.timeutils import iso_date_to_timestamp

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.store.framing import file_format

__all__ = [
    "FULL_RECORD_TYPES",
    "IndexRow",
    "RangeReader",
    "index_range",
    "is_indexed",
    "mime_of",
    "record_id_of",
    "timestamp_of",
]

#: Record types that carry their own payload: the only possible revisit originals.
FULL_RECORD_TYPES: Final = ("response", "resource")
INDEXED_TYPES: Final = ("response", "revisit", "resource", "metadata")
_MIME_SPLIT = re.compile(r"[;\s]")
_CHUNK: Final = 1 << 16
_MAX_REQUEST_BODY: Final = 1 << 20


@dataclass(slots=True, kw_only=True)
class IndexRow:
    """One index entry: a record at ``[offset, offset + length)`` of a WARC file.

    ``timestamp`` is the 14-digit form of ``warc_date``; ``digest`` is the
    WARC-Payload-Digest (``sha1:BASE32``; for a revisit, the original's);
    ``status`` is "" for records without an HTTP status; ``extra`` holds
    further CDXJ fields (``requestBody``, ``method``).
    """

    urlkey: str
    timestamp: str
    rec_type: str
    url: str
    mime: str
    status: str
    digest: str
    offset: int
    length: int
    warc_date: str
    record_id: str
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.offset + self.length

    def to_cdx(self, filename: str) -> CdxRecord:
        """The CDXJ record, fields in cdxj-indexer's order; ``filename`` as given."""
        fields = {"url": self.url, "mime": self.mime}
        if self.status:
            fields["status"] = self.status
        fields.update(
            digest=self.digest,
            length=str(self.length),
            offset=str(self.offset),
            filename=filename,
        )
        fields.update(self.extra)
        return CdxRecord(self.urlkey, self.timestamp, fields)


def mime_of(rec_type: str, http_content_type: str | None, warc_content_type: str | None) -> str:
    """The CDX ``mime`` as cdxj-indexer computes it.

    >>> mime_of("response", "text/html; charset=utf-8", "application/http")
    'text/html'
    >>> mime_of("revisit", "text/html", None)
    'warc/revisit'
    """
    if rec_type == "revisit":
        return "warc/revisit"
    value = http_content_type if rec_type in ("response", "request") else warc_content_type
    return _MIME_SPLIT.split(value, 1)[0].strip() if value else ""


class RangeReader:
    """A file limited to ``[start, end)`` that reports absolute offsets (for warcio)."""

    def __init__(self, fh: IO[bytes], start: int, end: int) -> None:
        fh.seek(start)
        self._fh = fh
        self._pos = start
        self._end = end

    def tell(self) -> int:
        return self._pos

    def read(self, size: int = -1) -> bytes:
        left = self._end - self._pos
        if size < 0 or size > left:
            size = left
        data = self._fh.read(size) if size else b""
        self._pos += len(data)
        return data


@dataclass(slots=True)
class _Pending:
    row: IndexRow | None
    rec_type: str
    url: str
    record_id: str
    concurrent_to: str
    method: str = ""
    content_type: str | None = None
    body: bytes = b""


def _read_record(record: Any, rec_type: str, need_digest: bool) -> tuple[str, bytes]:
    """Consume the record's raw payload; return (sha1 digest if needed, request body)."""
    hasher = hashlib.sha1() if need_digest else None
    body = bytearray()
    stream = record.raw_stream
    while chunk := stream.read(_CHUNK):
        if hasher is not None:
            hasher.update(chunk)
        if rec_type == "request" and len(body) < _MAX_REQUEST_BODY:
            body += chunk
    digest = "sha1:" + b32encode(hasher.digest()).decode("ascii") if hasher else ""
    return digest, bytes(body)


def _pair(first: _Pending, second: _Pending) -> None:
    """Give a POST/PUT response the urlkey cdxj-indexer's post-append gives it."""
    if first.url != second.url or second.concurrent_to != first.record_id:
        return
    kinds = {first.rec_type, second.rec_type}
    if "request" not in kinds or not kinds & {"response", "revisit"}:
        return
    req, resp = (first, second) if first.rec_type == "request" else (second, first)
    method = req.method.upper()
    if resp.row is None or method not in ("POST", "PUT"):
        return
    query, append = append_method_query(
        method, req.content_type, len(req.body), BytesIO(req.body), req.url
    )
    resp.row.urlkey = canonical_urlkey(req.url + append)
    resp.row.extra = {"requestBody": query or "", "method": method}


def timestamp_of(warc_date: str) -> str | None:
    """The 14-digit timestamp of a WARC-Date, None when there is none or it does not parse.

    >>> timestamp_of("2014-01-27T17:12:38Z"), timestamp_of("")
    ('20140127171238', None)
    """
    if not warc_date:
        return None
    try:
        return str(iso_date_to_timestamp(warc_date))
    except (ValueError, TypeError):
        return None


def is_indexed(rec_type: str, content_type: str | None, warc_date: str) -> bool:
    """Whether a record gets an index entry: cdxj-indexer's record types (not
    ``application/warc-fields`` resources and metadata), with a WARC-Date (a
    capture without a time has no place in a CDX index)."""
    if rec_type not in INDEXED_TYPES:
        return False
    if rec_type in ("resource", "metadata") and content_type == "application/warc-fields":
        return False
    return timestamp_of(warc_date) is not None


def record_id_of(record: Any, *, arc: bool) -> str:
    """The record's WARC-Record-ID; "" for an ARC file's (warcio invents one at each read)."""
    if arc:
        return ""
    return str(record.rec_headers.get_header("WARC-Record-ID") or "")


def _urlkey(url: str) -> str:
    try:
        return canonical_urlkey(url)
    except ValueError:
        return url


def index_range(fh: IO[bytes], start: int, end: int) -> Iterator[IndexRow]:
    """Yield index rows for the records in ``[start, end)`` of ``fh``, in file order.

    ``[start, end)`` must hold whole records (see
    :func:`~gateway.store.framing.scan_frames`). Rows are yielded one record
    late so that a request following its response can still set the urlkey
    of a POST capture. Raises warcio's ``ArchiveLoadFailed`` on unreadable data.
    """
    arc = file_format(fh)[1]
    reader = RangeReader(fh, start, end)
    iterator = ArchiveIterator(reader, arc2warc=True, ensure_http_headers=False)
    previous: _Pending | None = None
    for record in iterator:
        headers = record.rec_headers
        rec_type = str(record.rec_type)
        url = headers.get_header("WARC-Target-URI") or ""
        record_id = record_id_of(record, arc=arc)
        warc_content_type = headers.get_header("Content-Type")
        warc_date = headers.get_header("WARC-Date") or ""
        indexed = is_indexed(rec_type, warc_content_type, warc_date)
        header_digest = headers.get_header("WARC-Payload-Digest") or ""
        digest, body = _read_record(record, rec_type, indexed and not header_digest)
        http = record.http_headers
        pending = _Pending(
            row=None,
            rec_type=rec_type,
            url=url,
            record_id=record_id,
            concurrent_to=headers.get_header("WARC-Concurrent-To") or "",
        )
        if rec_type == "request" and http is not None:
            pending.method = str(http.protocol)
            pending.content_type = http.get_header("Content-Type")
            pending.body = body
        if indexed:
            status = ""
            if rec_type in ("response", "revisit") and http is not None and http.statusline:
                status = str(http.get_statuscode())
            pending.row = IndexRow(
                urlkey=_urlkey(url),
                timestamp=timestamp_of(warc_date) or "",
                rec_type=rec_type,
                url=url,
                mime=mime_of(
                    rec_type, http.get_header("Content-Type") if http else None, warc_content_type
                ),
                status=status,
                digest=header_digest or digest,
                offset=iterator.get_record_offset(),
                length=iterator.get_record_length(),
                warc_date=warc_date,
                record_id=record_id,
            )
        if previous is not None:
            _pair(previous, pending)
            if previous.row is not None:
                yield previous.row
        previous = pending
    if previous is not None and previous.row is not None:
        yield previous.row


def extra_to_json(extra: dict[str, str]) -> str:
    """The ``extra`` column value: "" or a JSON object."""
    return json.dumps(extra) if extra else ""


def extra_from_json(text: str) -> dict[str, str]:
    if not text:
        return {}
    value = json.loads(text)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
