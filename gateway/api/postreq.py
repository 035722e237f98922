"""Post-request lookups: a whole HTTP request as the body, and its lookup key.

The post-request routes (pywb warcserver's ``/{coll}/resource/postreq``,
``/{coll}/index/postreq``; the schema draft's ``/{coll}/resource-post``) take
an HTTP/1.x request message (RFC 9112 §2-§6) as the body of a POST::

    POST /post?foo=bar HTTP/1.1\\r\\n
    Host: httpbin.org\\r\\n
    Content-Type: application/x-www-form-urlencoded\\r\\n
    Content-Length: 6\\r\\n
    \\r\\n
    data=^

:func:`parse_wrapped_request` parses it strictly: a malformed request line,
a malformed header line (no colon, a space before the colon, obsolete line
folding, control characters), a Content-Length that is not one non-negative
integer or does not equal the bytes after the header block, a body without a
Content-Length, a malformed chunked body, a transfer coding other than
``chunked`` alone and Transfer-Encoding beside Content-Length (RFC 9112 §6.3)
are :class:`~gateway.errors.BadRequest` (HTTP 400, parameter ``body``)
saying what is wrong. Bare LF line ends are accepted (RFC 9112 §2.2).

Method, header names, values and order and the body are kept as sent,
hop-by-hop headers included, for a live or remote fetch
(:class:`~gateway.loaders.base.WrappedRequest`); a chunked body is decoded
(trailer fields dropped) and its ``Transfer-Encoding`` header kept, for the
live loader chunks it again on the wire.

:func:`method_lookup_url` gives the URL whose urlkey a request is looked up
under, the canonical form of pywb and cdxj-indexer (cdxj-indexer's own
``append_method_query``, so captures it indexed with ``--post-append`` are
found): GET and HEAD look up the URL itself; any other method appends
``__wb_method=<method>``, and POST and PUT also their body: form fields
decoded, multipart fields, JSON flattened, else ``__wb_post_data=<base64>``,
cut to 4096 characters.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cdxj_indexer.postquery import append_method_query

from gateway.errors import BadRequest
from gateway.loaders.base import WrappedRequest
from gateway.loaders.warc_build import HOP_BY_HOP

logger = logging.getLogger(__name__)

__all__ = [
    "HOP_BY_HOP",
    "ParsedRequest",
    "end_to_end_headers",
    "method_lookup_url",
    "parse_wrapped_request",
]

_PARAM: Final = "body"
_TOKEN: Final = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_REQUEST_LINE: Final = re.compile(rf"({_TOKEN}) ([!-~]+) (HTTP/\d\.\d)")
_HEADER_NAME: Final = re.compile(_TOKEN)
_BAD_VALUE_CHARS: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_MAX_EXCERPT: Final = 80


def _excerpt(line: bytes) -> str:
    """``line`` as a quoted Python bytes literal without the ``b``, cut to a readable size."""
    text = repr(line[:_MAX_EXCERPT])[1:]
    return text + ("..." if len(line) > _MAX_EXCERPT else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedRequest:
    """A wrapped HTTP request: request line parts, headers in order, the body."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        lowered = name.lower()
        for key, value in self.headers:
            if key.lower() == lowered:
                return value
        return None

    def target_url(self) -> str | None:
        """The absolute URL the request line names: the absolute-form target, or
        ``http://`` + Host + the origin-form target; None when neither is there."""
        if self.target.startswith(("http://", "https://")):
            return self.target
        host = self.header("Host")
        if host and self.target.startswith("/"):
            return f"http://{host}{self.target}"
        return None

    def wrapped(self) -> WrappedRequest:
        """What a live or remote fetch sends upstream: method, headers, body unaltered."""
        return WrappedRequest(method=self.method, headers=self.headers, body=self.body)


def _lines(data: bytes) -> Iterable[tuple[bytes, int]]:
    """Lines without their CRLF or LF, each with the offset just past its end."""
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return
        line = data[start:end]
        yield (line[:-1] if line.endswith(b"\r") else line), end + 1
        start = end + 1


def _request_line(line: bytes) -> tuple[str, str, str]:
    match = _REQUEST_LINE.fullmatch(line.decode("latin-1"))
    if match is None:
        raise BadRequest(
            _PARAM,
            f"bad request line {_excerpt(line)}; expected 'METHOD target HTTP/1.1' "
            "separated by single spaces",
        )
    return match.group(1), match.group(2), match.group(3)


def _header_line(line: bytes, number: int) -> tuple[str, str]:
    where = f"bad header line {number} {_excerpt(line)}"
    if line[:1] in (b" ", b"\t"):
        raise BadRequest(
            _PARAM, f"{where}: obsolete line folding (RFC 9112 §5.2); put the value on one line"
        )
    name_bytes, colon, value_bytes = line.partition(b":")
    name = name_bytes.decode("latin-1")
    if not colon:
        raise BadRequest(_PARAM, f"{where}: no colon; expected 'Name: value'")
    if not _HEADER_NAME.fullmatch(name):
        raise BadRequest(
            _PARAM,
            f"{where}: {name!r} is not a header name (a token, no space before the colon)",
        )
    value = value_bytes.decode("latin-1").strip(" \t")
    if _BAD_VALUE_CHARS.search(value):
        raise BadRequest(_PARAM, f"{where}: control character in the value")
    return name, value


def parse_wrapped_request(data: bytes) -> ParsedRequest:
    """Parse an HTTP/1.x request message; raises :class:`BadRequest` (param ``body``).

    >>> r = parse_wrapped_request(b"POST /p HTTP/1.1\\r\\nHost: a.org\\r\\n"
    ...                           b"Content-Length: 3\\r\\n\\r\\nx=1")
    >>> (r.method, r.target_url(), r.headers[1], r.body)
    ('POST', 'http://a.org/p', ('Content-Length', '3'), b'x=1')
    """
    if not data.strip():
        raise BadRequest(_PARAM, "empty; expected a whole HTTP request (request line, headers)")
    request_line: tuple[str, str, str] | None = None
    headers: list[tuple[str, str]] = []
    body_start: int | None = None
    for line, next_start in _lines(data):
        if request_line is None:
            if not line:
                continue  # RFC 9112 §2.2: empty lines before the request line
            request_line = _request_line(line)
            continue
        if not line:
            body_start = next_start
            break
        headers.append(_header_line(line, len(headers) + 1))
    if request_line is None:
        raise BadRequest(_PARAM, "no request line; expected 'METHOD target HTTP/1.1' and CRLF")
    if body_start is None:
        raise BadRequest(_PARAM, "the header block does not end with an empty line (CRLF CRLF)")
    method, target, version = request_line
    body = _framed_body(headers, data[body_start:])
    return ParsedRequest(
        method=method, target=target, version=version, headers=tuple(headers), body=body
    )


def _framed_body(headers: list[tuple[str, str]], rest: bytes) -> bytes:
    """The body of the message (RFC 9112 §6): ``Transfer-Encoding: chunked``
    decoded, else exactly ``Content-Length`` bytes, else nothing."""
    codings = [value for name, value in headers if name.lower() == "transfer-encoding"]
    lengths = {value for name, value in headers if name.lower() == "content-length"}
    if codings:
        if lengths:
            raise BadRequest(
                _PARAM,
                "both Transfer-Encoding and Content-Length (RFC 9112 §6.3: a request "
                "smuggling vector); send one of them",
            )
        coding = ",".join(codings).replace(" ", "").lower()
        if coding != "chunked":
            raise BadRequest(
                _PARAM,
                f"Transfer-Encoding {', '.join(codings)!r} is not supported; send the body "
                "with a Content-Length or as 'chunked' alone",
            )
        return _dechunk(rest)
    if not lengths:
        if rest:
            raise BadRequest(
                _PARAM,
                f"{len(rest)} bytes follow the header block but there is no Content-Length "
                "header; add one or remove the body",
            )
        return b""
    if len(lengths) > 1:
        raise BadRequest(_PARAM, f"conflicting Content-Length headers {sorted(lengths)}; send one")
    text = lengths.pop()
    if not text.isdigit():
        raise BadRequest(_PARAM, f"Content-Length {text!r} is not a non-negative integer")
    if int(text) != len(rest):
        raise BadRequest(
            _PARAM,
            f"Content-Length mismatch: the header says {int(text)} bytes but {len(rest)} "
            "bytes follow the header block",
        )
    return rest


def _dechunk(data: bytes) -> bytes:
    """Decode a chunked body (RFC 9112 §7.1); trailer fields are read and dropped."""
    chunks: list[bytes] = []
    pos = 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            raise BadRequest(_PARAM, "chunked body ends before its last chunk ('0' CRLF CRLF)")
        size_line = data[pos:end].rstrip(b"\r")
        size_text = size_line.split(b";", 1)[0].strip()
        if not size_text or not all(c in b"0123456789abcdefABCDEF" for c in size_text):
            raise BadRequest(
                _PARAM, f"bad chunk size line {_excerpt(size_line)}; expected hex digits"
            )
        size = int(size_text, 16)
        pos = end + 1
        if size == 0:
            break
        chunk = data[pos : pos + size]
        if len(chunk) < size:
            raise BadRequest(
                _PARAM, f"chunk of {size} bytes is cut short: {len(chunk)} bytes follow"
            )
        tail = pos + size
        if data.startswith(b"\r\n", tail):
            pos = tail + 2
        elif data.startswith(b"\n", tail):
            pos = tail + 1
        else:
            raise BadRequest(_PARAM, f"chunk of {size} bytes is not followed by CRLF")
        chunks.append(chunk)
    for line, next_start in _lines(data[pos:]):
        if not line:
            if data[pos + next_start :]:
                raise BadRequest(_PARAM, "bytes follow the end of the chunked body")
            return b"".join(chunks)
    raise BadRequest(_PARAM, "chunked body does not end with an empty line after its last chunk")


def end_to_end_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``headers`` without Host and hop-by-hop headers, in order (a direct POST's own
    request to the gateway: those belong to the client's connection)."""
    return tuple(
        (name, value)
        for name, value in headers
        if name.lower() not in HOP_BY_HOP and name.lower() != "host"
    )


def method_lookup_url(
    url: str,
    method: str,
    content_type: str | None,
    content_length: str | None,
    body: bytes,
) -> str:
    """The URL a ``method`` request for ``url`` is looked up under (pywb, cdxj-indexer).

    ``content_type`` and ``content_length`` are the request's header values
    (None when absent), as cdxj-indexer reads them from a request record.

    >>> method_lookup_url("http://httpbin.org/post", "POST",
    ...                   "application/x-www-form-urlencoded", "16", b"foo=bar&test=abc")
    'http://httpbin.org/post?__wb_method=POST&foo=bar&test=abc'
    >>> method_lookup_url("http://a.org/x?y=1", "DELETE", None, None, b"")
    'http://a.org/x?y=1&__wb_method=DELETE'
    >>> method_lookup_url("http://a.org/", "HEAD", None, None, b"")
    'http://a.org/'

    Raises :class:`BadRequest` (``body``) for a body of its declared type
    that cannot be read (a malformed multipart body).
    """
    if method.upper() in ("GET", "HEAD"):
        return url
    # cdxj-indexer writes what it cannot parse to stderr (a whole JSON body,
    # an AMF traceback): client input must not reach the log at length.
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stderr(quiet), contextlib.redirect_stdout(quiet):
            _query, append = append_method_query(
                method, content_type, content_length, io.BytesIO(body), url
            )
    except ValueError as exc:  # multipart.MultipartError among them
        reason = str(exc)[:200]
        raise BadRequest(
            "body", f"cannot read the {(content_type or '')[:80]!r} body: {reason}"
        ) from None
    if quiet.tell():
        logger.debug(
            "unparseable %s body of %d bytes: looked up under its method key as pywb does",
            (content_type or "")[:80],
            len(body),
        )
    return url + str(append)
