"""What a recording step hands the store (:class:`CaptureInput`) and gets back.

A capture is one HTTP exchange: the request sent upstream and the response
received, whose *payload* is the entity body after transfer decoding (what
``aiohttp`` yields with ``auto_decompress=False``: still content-encoded, no
chunk framing). The store writes it as a WARC/1.1 ``response`` (or
``revisit``) record followed by a ``request`` record (WARC 1.1 §6.4, §6.5),
each in its own gzip member.
"""

from __future__ import annotations

import hashlib
from base64 import b32encode
from dataclasses import dataclass, field
from datetime import UTC, datetime
from io import BytesIO
from typing import IO, Final, Literal
from urllib.parse import urlsplit

from cdxj_indexer.postquery import append_method_query
from warcio.statusandheaders import StatusAndHeadersParser

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.store.settings import DedupPolicy

__all__ = [
    "CaptureAck",
    "CaptureInput",
    "Headers",
    "HttpRequest",
    "HttpResponse",
    "Outcome",
    "capture_urlkey",
    "format_warc_date",
    "sha1_digest",
]

Headers = tuple[tuple[str, str], ...]

#: ``full``: a response record was written. ``revisit``: a revisit record
#: referring to an earlier full record (WARC 1.1 §6.7.2). ``skipped``: nothing
#: was written, the URL's latest capture has the same payload.
Outcome = Literal["full", "revisit", "skipped"]

_READ_CHUNK: Final = 1 << 16


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpRequest:
    """The request sent upstream. ``target`` defaults to the URL's path and query.

    A request without a ``Host`` header gets one from the URL when written.
    """

    method: str = "GET"
    target: str | None = None
    headers: Headers = ()
    body: bytes = b""
    version: str = "HTTP/1.1"


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpResponse:
    """The response status line and headers, in received order and case."""

    status: int
    reason: str = ""
    headers: Headers = ()
    version: str = "HTTP/1.1"

    @classmethod
    def from_header_block(cls, block: bytes) -> HttpResponse:
        """Parse an HTTP response header block (``HTTP/1.1 200 OK\\r\\n...\\r\\n\\r\\n``).

        >>> HttpResponse.from_header_block(b"HTTP/1.1 404 Not Found\\r\\nA: b\\r\\n\\r\\n")
        HttpResponse(status=404, reason='Not Found', headers=(('A', 'b'),), version='HTTP/1.1')

        Raises :class:`ValueError` when the status line has no numeric code.
        """
        parsed = StatusAndHeadersParser([], verify=False).parse(BytesIO(block))
        code, _, reason = str(parsed.statusline).partition(" ")
        if not code.isdigit():
            raise ValueError(f"not an HTTP status line: {parsed.statusline!r}")
        return cls(
            status=int(code),
            reason=reason,
            headers=tuple((str(k), str(v)) for k, v in parsed.headers),
            version=str(parsed.protocol) or "HTTP/1.1",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureInput:
    """One capture to store.

    - ``url``: the WARC-Target-URI.
    - ``payload``: the response body as bytes, or a readable, seekable binary
      file (e.g. a ``SpooledTemporaryFile`` for large bodies). The store takes
      ownership of a file from the moment it is submitted: it reads it from
      offset 0 and closes it when done, also on failure.
    - ``warc_date``: the capture time (UTC; naive values are taken as UTC);
      None means now. A remote archive's capture keeps its own date.
    - ``dedup``: this collection's policy; None uses the store's default.
    - ``ip_address``: written as ``WARC-IP-Address`` when given.
    """

    url: str
    response: HttpResponse
    payload: bytes | IO[bytes]
    request: HttpRequest = field(default_factory=HttpRequest)
    warc_date: datetime | None = None
    dedup: DedupPolicy | None = None
    ip_address: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureAck:
    """The store's answer once a capture is durable (per the fsync policy) and indexed.

    ``capture`` is the index entry of the response or revisit record written
    (for ``skipped``: the existing capture that stands for it); its
    ``filename`` is relative to ``<root>/warcs/`` and may still end in
    ``.open`` (the name changes when the file is closed; lookups always give
    the current name). ``original`` is the full record a revisit refers to, or
    the capture a skipped one matched.
    """

    outcome: Outcome
    capture: CdxRecord
    record_id: str
    payload_digest: str
    original: CdxRecord | None = None


def format_warc_date(when: datetime) -> str:
    """WARC-Date with microseconds (WARC 1.1 §5.4 allows fractional seconds).

    >>> format_warc_date(datetime(2025, 3, 1, 12, 0, 5, 42))
    '2025-03-01T12:00:05.000042Z'
    """
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def request_target(url: str) -> str:
    """The origin-form request target of ``url`` (``/path?query``).

    >>> request_target("http://example.com"), request_target("http://e.com/a?b=1#f")
    ('/', '/a?b=1')
    """
    parts = urlsplit(url)
    target = parts.path or "/"
    return f"{target}?{parts.query}" if parts.query else target


def sha1_digest(payload: bytes | IO[bytes], prefix: bytes = b"") -> tuple[str, str, int]:
    """``(payload digest, block digest, payload length)`` in one pass.

    Digests are ``sha1:BASE32`` as WARC writers emit them; the block digest
    covers ``prefix`` (the HTTP header block) then the payload (WARC 1.1
    §5.8, §5.9). A file is read from offset 0 and left at its end.
    """
    payload_hash = hashlib.sha1()
    block_hash = hashlib.sha1(prefix)
    if isinstance(payload, bytes):
        payload_hash.update(payload)
        block_hash.update(payload)
        length = len(payload)
    else:
        payload.seek(0)
        length = 0
        while chunk := payload.read(_READ_CHUNK):
            payload_hash.update(chunk)
            block_hash.update(chunk)
            length += len(chunk)
    return _b32(payload_hash.digest()), _b32(block_hash.digest()), length


def _b32(raw: bytes) -> str:
    return "sha1:" + b32encode(raw).decode("ascii")


def capture_urlkey(url: str, request: HttpRequest) -> tuple[str, dict[str, str]]:
    """The urlkey of a capture and the CDXJ fields a POST/PUT adds.

    POST and PUT captures get ``__wb_method=post&<form fields>`` appended to
    the URL before canonicalization, exactly as cdxj-indexer's
    ``--post-append`` does, so pywb-style post-request lookups find them;
    the extra fields are ``method`` and ``requestBody``.

    >>> capture_urlkey("http://example.com/a", HttpRequest())
    ('com,example)/a', {})
    >>> capture_urlkey("http://example.com/a", HttpRequest(method="POST",
    ...     headers=(("Content-Type", "application/x-www-form-urlencoded"),), body=b"x=1"))
    ('com,example)/a?__wb_method=post&x=1', {'requestBody': 'x=1', 'method': 'POST'})
    """
    method = request.method.upper()
    if method not in ("POST", "PUT"):
        return canonical_urlkey(url), {}
    content_type = next(
        (value for name, value in request.headers if name.lower() == "content-type"), None
    )
    query, append = append_method_query(
        method, content_type, len(request.body), BytesIO(request.body), url
    )
    return canonical_urlkey(url + append), {"requestBody": query or "", "method": method}
