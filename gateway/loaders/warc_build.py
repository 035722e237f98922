"""Build valid WARC/1.1 records from HTTP exchanges fetched upstream.

Shared by the loaders that make a record instead of reading one from a WARC
file: :mod:`gateway.loaders.replay` (a capture replayed by a remote Memento or
CDX archive) and :mod:`gateway.loaders.live` (the live web). The record they
serve is ``warc_headers + http_headers + payload`` (the Resource API adds no
trailing ``CRLF CRLF``, as pywb's warcserver), and it is valid WARC 1.1:

- WARC 1.1 §5 mandatory fields ``WARC-Type``, ``WARC-Record-ID``,
  ``WARC-Date``, ``Content-Length`` always present; ``Content-Length`` is the
  exact byte count of ``http_headers + payload`` (§5.4);
- ``WARC-Block-Digest`` (§5.8) over ``http_headers + payload`` and
  ``WARC-Payload-Digest`` (§5.9) over the payload, as ``sha1:BASE32``
  (what warcio and pywb write and ``warcio check`` verifies);
- the HTTP header block never claims a ``Transfer-Encoding`` the payload does
  not have: aiohttp removes the chunked framing while reading, so
  :func:`rename_transfer_encoding` renames every ``Transfer-Encoding`` header
  to ``X-Archive-Orig-Transfer-Encoding`` (kept, not dropped, so the fact
  that the server chunked its answer survives; the WARC ``Content-Length``
  frames the block). pywb 2.10 instead serves remote records without a WARC
  ``Content-Length`` and with ``Transfer-Encoding: chunked`` over the
  de-chunked body.

Digests must be known before the WARC header block goes out, so the payload is
first read completely into a :class:`SpooledPayload`: up to
``spool_memory_bytes`` in memory, the rest in an anonymous temporary file
(:class:`tempfile.SpooledTemporaryFile`), never more than ``max_bytes`` in
all (:class:`RecordTooLarge` beyond). Memory per record is thus bounded by
``spool_memory_bytes`` plus one chunk plus the header blocks. Writes and reads
of the temporary file are single bounded chunks (at most
:data:`CHUNK_BYTES`) to the page cache, done inline on the event loop.

Typical use (a loader)::

    http_block = http_response_block(200, "OK", headers)
    spool = SpooledPayload(http_headers=http_block, max_bytes=..., what=url)
    try:
        async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
            spool.write(chunk)
        warc_block = response_record_headers(
            target_uri=url, warc_date=warc_date_from_timestamp(ts),
            http_headers=http_block, spool=spool,
            record_id=stable_record_id(source_uri, spool.payload_digest),
            extra=[("WARC-Source-URI", source_uri)],
        )
    except BaseException:
        spool.close()
        raise
    return spooled_record(capture, warc_block, http_block, spool, url, date)
"""

from __future__ import annotations

import hashlib
import tempfile
import uuid
from base64 import b32encode
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Final

from warcio.timeutils import timestamp_to_iso_date

from gateway.cdx.cdxj import CdxRecord
from gateway.errors import RecordTooLarge
from gateway.loaders.base import LoadedRecord

__all__ = [
    "CHUNK_BYTES",
    "HOP_BY_HOP",
    "WARC_VERSION",
    "RecordTooLarge",
    "SpooledPayload",
    "http_request_block",
    "http_response_block",
    "new_record_id",
    "rename_transfer_encoding",
    "response_record_headers",
    "sha1_label",
    "spooled_record",
    "stable_record_id",
    "warc_date_from_timestamp",
    "warc_header_block",
]

WARC_VERSION: Final = "WARC/1.1"
#: Bytes read from upstream and from the spool per step.
CHUNK_BYTES: Final = 64 * 1024
#: Default bytes of payload held in memory before the spool moves to a file.
DEFAULT_SPOOL_MEMORY_BYTES: Final = 1024 * 1024
#: Connection-level headers of one HTTP hop (RFC 9110 §7.6.1), lower case.
#: ``transfer-encoding`` is listed but handled by :func:`rename_transfer_encoding`.
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_RENAMED_TE: Final = "X-Archive-Orig-Transfer-Encoding"


def sha1_label(hasher: hashlib._Hash) -> str:
    """``sha1:BASE32`` of a finished SHA-1 hasher, as WARC writers label digests.

    >>> import hashlib
    >>> sha1_label(hashlib.sha1(b""))
    'sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ'
    """
    return "sha1:" + b32encode(hasher.digest()).decode("ascii")


def warc_date_from_timestamp(timestamp: str) -> str:
    """A 14-digit timestamp as a WARC-Date (WARC 1.1 §5.4, W3C-ISO8601, UTC).

    >>> warc_date_from_timestamp("20140126200624")
    '2014-01-26T20:06:24Z'
    """
    return str(timestamp_to_iso_date(timestamp))


def new_record_id() -> str:
    """A fresh ``<urn:uuid:...>`` WARC-Record-ID (WARC 1.1 §5.2)."""
    return f"<urn:uuid:{uuid.uuid4()}>"


def stable_record_id(*parts: str) -> str:
    """A WARC-Record-ID that is the same for the same ``parts`` (UUID 5).

    Loading the same remote capture twice gives the same record id.

    >>> stable_record_id("a", "b") == stable_record_id("a", "b")
    True
    """
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, ' '.join(parts))}>"


def _header_bytes(name: str, value: str) -> bytes:
    """``Name: value\\r\\n``; CR and LF in values become spaces (no header injection).

    Text is written as ISO-8859-1, which gives back the original bytes of
    headers decoded as ISO-8859-1; characters outside it are written as UTF-8.
    """
    line = f"{name}: {value.replace(chr(13), ' ').replace(chr(10), ' ')}\r\n"
    try:
        return line.encode("latin-1")
    except UnicodeEncodeError:
        return line.encode("utf-8", "surrogateescape")


def http_response_block(
    status: int, reason: str, headers: Iterable[tuple[str, str]], protocol: str = "HTTP/1.1"
) -> bytes:
    """The HTTP response header block: status line, headers in order, blank line.

    >>> http_response_block(200, "OK", [("Content-Type", "text/html")])
    b'HTTP/1.1 200 OK\\r\\nContent-Type: text/html\\r\\n\\r\\n'
    """
    parts = [f"{protocol} {status} {reason}".rstrip().encode("latin-1", "replace") + b"\r\n"]
    parts.extend(_header_bytes(name, value) for name, value in headers)
    parts.append(b"\r\n")
    return b"".join(parts)


def http_request_block(
    method: str, target: str, headers: Iterable[tuple[str, str]], protocol: str = "HTTP/1.1"
) -> bytes:
    """The HTTP request header block (``request`` records): request line, headers, blank line.

    >>> http_request_block("GET", "/a?b", [("Host", "example.com")])
    b'GET /a?b HTTP/1.1\\r\\nHost: example.com\\r\\n\\r\\n'
    """
    parts = [f"{method} {target} {protocol}".encode("latin-1", "replace") + b"\r\n"]
    parts.extend(_header_bytes(name, value) for name, value in headers)
    parts.append(b"\r\n")
    return b"".join(parts)


def rename_transfer_encoding(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Rename ``Transfer-Encoding`` to ``X-Archive-Orig-Transfer-Encoding``, order kept.

    Use on the headers of a body that was read through aiohttp (which removes
    the chunked framing), so the record does not claim a framing its payload
    lacks.

    >>> rename_transfer_encoding([("Transfer-Encoding", "chunked"), ("A", "b")])
    [('X-Archive-Orig-Transfer-Encoding', 'chunked'), ('A', 'b')]
    """
    return [
        (_RENAMED_TE if name.lower() == "transfer-encoding" else name, value)
        for name, value in headers
    ]


def warc_header_block(
    *,
    record_type: str,
    record_id: str,
    warc_date: str,
    content_type: str,
    content_length: int,
    target_uri: str | None = None,
    fields: Sequence[tuple[str, str]] = (),
) -> bytes:
    """A WARC/1.1 header block (WARC 1.1 §4), ending with its blank line.

    Field order: version, ``WARC-Type``, ``WARC-Record-ID``, ``WARC-Date``,
    ``WARC-Target-URI`` (when given), ``fields`` in order, ``Content-Type``,
    ``Content-Length``. ``content_length`` is the byte length of the block
    that follows (HTTP headers plus payload).

    >>> warc_header_block(record_type="resource", record_id="<urn:x>",
    ...     warc_date="2014-01-26T20:06:24Z", content_type="text/plain",
    ...     content_length=0).decode().splitlines()[:2]
    ['WARC/1.1', 'WARC-Type: resource']
    """
    lines = [
        (WARC_VERSION + "\r\n").encode("ascii"),
        _header_bytes("WARC-Type", record_type),
        _header_bytes("WARC-Record-ID", record_id),
        _header_bytes("WARC-Date", warc_date),
    ]
    if target_uri is not None:
        lines.append(_header_bytes("WARC-Target-URI", target_uri))
    lines.extend(_header_bytes(name, value) for name, value in fields)
    lines.append(_header_bytes("Content-Type", content_type))
    lines.append(_header_bytes("Content-Length", str(content_length)))
    lines.append(b"\r\n")
    return b"".join(lines)


class SpooledPayload:
    """A payload read completely before its record is served, with its digests.

    ``http_headers`` (the HTTP header block of the record) is fed to the block
    digest first; :meth:`write` then adds payload bytes to both digests and to
    a :class:`tempfile.SpooledTemporaryFile` that moves to disk past
    ``spool_memory_bytes``. A payload longer than ``max_bytes`` raises
    :class:`RecordTooLarge` naming ``what`` (e.g. the URL fetched).

    Call :meth:`close` when done (``spooled_record`` makes it the record's
    ``close``).
    """

    __slots__ = ("_block", "_closed", "_file", "_payload", "length", "max_bytes", "what")

    def __init__(
        self,
        *,
        http_headers: bytes,
        max_bytes: int,
        what: str,
        spool_memory_bytes: int = DEFAULT_SPOOL_MEMORY_BYTES,
    ) -> None:
        self.max_bytes = max_bytes
        self.what = what
        #: Payload bytes written so far.
        self.length = 0
        self._payload = hashlib.sha1()
        self._block = hashlib.sha1(http_headers)
        self._file = tempfile.SpooledTemporaryFile(max_size=spool_memory_bytes)  # noqa: SIM115
        self._closed = False

    def write(self, chunk: bytes) -> None:
        """Append payload bytes; raises :class:`RecordTooLarge` past ``max_bytes``."""
        if self.length + len(chunk) > self.max_bytes:
            raise RecordTooLarge(
                f"{self.what}: payload larger than max_record_bytes={self.max_bytes}; "
                "raise max_record_bytes in the source's config to load it"
            )
        self.length += len(chunk)
        self._payload.update(chunk)
        self._block.update(chunk)
        self._file.write(chunk)

    @property
    def payload_digest(self) -> str:
        """``sha1:BASE32`` of the payload written so far (WARC-Payload-Digest)."""
        return sha1_label(self._payload)

    @property
    def block_digest(self) -> str:
        """``sha1:BASE32`` of HTTP headers plus payload (WARC-Block-Digest)."""
        return sha1_label(self._block)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield the payload from its first byte, in chunks of at most CHUNK_BYTES."""
        self._file.seek(0)
        while True:
            chunk = self._file.read(CHUNK_BYTES)
            if not chunk:
                return
            yield chunk

    async def close(self) -> None:
        """Release the memory buffer or temporary file (idempotent)."""
        if not self._closed:
            self._closed = True
            self._file.close()


def response_record_headers(
    *,
    target_uri: str,
    warc_date: str,
    http_headers: bytes,
    spool: SpooledPayload,
    record_id: str,
    record_type: str = "response",
    content_type: str = "application/http; msgtype=response",
    extra: Sequence[tuple[str, str]] = (),
) -> bytes:
    """The WARC header block of a record whose block is ``http_headers + spool``.

    Adds ``WARC-Payload-Digest``, ``WARC-Block-Digest`` (both ``sha1:``) and
    ``extra`` fields (e.g. ``WARC-Source-URI``, ``WARC-Concurrent-To``) and
    the exact ``Content-Length``. For a ``request`` record pass
    ``record_type="request"`` and ``content_type="application/http;
    msgtype=request"``.
    """
    fields = [
        ("WARC-Payload-Digest", spool.payload_digest),
        ("WARC-Block-Digest", spool.block_digest),
        *extra,
    ]
    return warc_header_block(
        record_type=record_type,
        record_id=record_id,
        warc_date=warc_date,
        content_type=content_type,
        content_length=len(http_headers) + spool.length,
        target_uri=target_uri,
        fields=fields,
    )


def spooled_record(
    capture: CdxRecord,
    warc_headers: bytes,
    http_headers: bytes,
    spool: SpooledPayload,
    *,
    target_uri: str,
    warc_date: str,
) -> LoadedRecord:
    """A :class:`LoadedRecord` streaming ``spool``; its ``close`` closes the spool."""
    return LoadedRecord(
        capture=capture,
        warc_headers=warc_headers,
        http_headers=http_headers,
        body=spool.chunks(),
        content_length=len(warc_headers) + len(http_headers) + spool.length,
        target_uri=target_uri,
        warc_date=warc_date,
        close=spool.close,
    )
