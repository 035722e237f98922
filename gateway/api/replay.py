"""A WARC record served as the HTTP response it archived (a raw memento).

Used by the raw memento route (``/{coll}/{timestamp}id_/{url}``,
:mod:`gateway.api.memento`): :func:`archived_response` parses the record's
HTTP status line and headers (warcio), :func:`replay_headers` decides what
happens to each archived header, and :func:`unframe` undoes a chunked
framing that was archived together with the payload.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from io import BytesIO
from typing import Final
from urllib.parse import urljoin

from warcio.statusandheaders import StatusAndHeadersParser

from gateway.errors import RecordFormatError
from gateway.loaders.base import LoadedRecord

__all__ = ["ARCHIVED_PREFIX", "archived_response", "replay_headers", "unframe"]

#: Prefix of archived headers that are kept but must not act as themselves (pywb's).
ARCHIVED_PREFIX: Final = "X-Archive-Orig-"
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CHUNK_SIZE_LINE = re.compile(rb"[0-9A-Fa-f]+[ \t]*(?:;[^\r\n]*)?\r\n")
#: Archived headers that described the original connection and its framing
#: (RFC 9110 §7.6.1, and Content-Length, recomputed for the payload as served).
_HOP_BY_HOP: Final = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding"}
    | {"upgrade", "content-length"}
)
#: Archived headers that would act on the gateway's own origin (cookies, HSTS,
#: pins, alternative services, site data, CORS), or clash with the headers the
#: gateway sets on a memento (Link, Memento-Datetime, Vary, Date, Server).
_ORIGIN_BOUND: Final = frozenset(
    {"set-cookie", "set-cookie2", "strict-transport-security", "public-key-pins"}
    | {"public-key-pins-report-only", "alt-svc", "clear-site-data", "expect-ct", "nel"}
    | {"report-to", "reporting-endpoints", "link", "memento-datetime", "vary", "date"}
    | {"server", "content-location"}
)

_HTTP_PARSER = StatusAndHeadersParser(["HTTP/1.0", "HTTP/1.1", "HTTP/2", "HTTP/2.0"], verify=False)
_WARC_PARSER = StatusAndHeadersParser(
    ["WARC/1.0", "WARC/1.1", "WARC/0.17", "WARC/0.18"], verify=False
)


def replay_headers(
    headers: Sequence[tuple[str, str]], *, memento_base: str, target_uri: str
) -> list[tuple[str, str]]:
    """The archived response headers as a raw memento serves them, in order.

    - hop-by-hop and framing headers (``Transfer-Encoding``, ``Connection``,
      ``Content-Length``, ...) and headers that would act on the gateway's
      own origin or clash with its Memento headers (``Set-Cookie``,
      ``Strict-Transport-Security``, ``Alt-Svc``, ``Clear-Site-Data``,
      ``Access-Control-*``, ``Link``, ``Memento-Datetime``, ``Vary``,
      ``Date``, ``Server``, ``Content-Location``, ...) are kept under an
      ``X-Archive-Orig-`` prefix, as pywb prefixes them;
    - ``Location`` is resolved against ``target_uri`` and pointed at the
      memento of its target at the same time (``{memento_base}{url}``, i.e.
      ``.../{timestamp}id_/{url}``), so a client that follows the redirect
      stays in the archive instead of reaching the live web (pywb's
      ``memento+`` loader strips such a prefix off again, its
      ``unrewrite_header``); the archived value is kept as
      ``X-Archive-Orig-Location``;
    - every other header is kept as captured (``Content-Type``,
      ``Content-Encoding``, ``Cache-Control``, ...). Names that are not HTTP
      tokens are dropped; line breaks in values become spaces.
    """
    out: list[tuple[str, str]] = []
    for name, raw_value in headers:
        if not _HEADER_NAME.fullmatch(name):
            continue
        value = raw_value.replace("\r", " ").replace("\n", " ")
        lower = name.lower()
        if lower in _HOP_BY_HOP or lower in _ORIGIN_BOUND or lower.startswith("access-control-"):
            out.append((ARCHIVED_PREFIX + name, value))
        elif lower == "location":
            out.append(("Location", memento_base + urljoin(target_uri, value.strip())))
            out.append((ARCHIVED_PREFIX + name, value))
        else:
            out.append((name, value))
    return out


def archived_response(loaded: LoadedRecord) -> tuple[int, str, list[tuple[str, str]]]:
    """Status code, reason and headers of the archived HTTP response.

    A record without an HTTP header block (``resource`` records) is a 200
    with the WARC ``Content-Type``. Raises :class:`RecordFormatError` when
    the block does not start with an HTTP status line.
    """
    if not loaded.http_headers.strip():
        warc = _WARC_PARSER.parse(BytesIO(loaded.warc_headers))
        content_type = warc.get_header("Content-Type")
        return 200, "OK", [("Content-Type", content_type)] if content_type else []
    parsed = _HTTP_PARSER.parse(BytesIO(loaded.http_headers))
    code_text, _, reason = parsed.statusline.strip().partition(" ")
    if not (code_text.isdigit() and 200 <= int(code_text) <= 599):
        raise RecordFormatError(
            f"capture {loaded.capture.timestamp} of {loaded.target_uri}: archived status "
            f"line {parsed.statusline[:60]!r} is not an HTTP response status"
        )
    return int(code_text), reason.strip(), list(parsed.headers)


async def unframe(body: AsyncIterator[bytes]) -> tuple[AsyncIterator[bytes], bool]:
    """The payload of a response archived with ``Transfer-Encoding: chunked``.

    Many crawlers store the payload de-chunked but keep the header, so the
    first bytes are peeked (warcio's heuristic): when they are a chunk-size
    line (``1a3f[;ext]\\r\\n``) the framing is decoded (RFC 9112 §7.1, trailers
    dropped) and the answer is ``(decoded stream, True)``; otherwise
    ``(the same bytes, False)``, whose length is then the stored length.
    The decoded stream raises :class:`RecordFormatError` on a truncated or
    malformed chunk.
    """
    stream = aiter(body)
    buf = bytearray()
    while b"\r\n" not in buf and len(buf) < 1024:
        chunk = await anext(stream, None)
        if chunk is None:
            break
        buf.extend(chunk)
    if _CHUNK_SIZE_LINE.match(buf):
        return _decode_chunks(buf, stream), True
    return _prepend(bytes(buf), stream), False


async def _prepend(head: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if head:
        yield head
    async for chunk in rest:
        yield chunk


async def _decode_chunks(buf: bytearray, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    async def fill() -> None:
        chunk = await anext(stream, None)
        if chunk is None:
            raise RecordFormatError("chunked payload ends inside a chunk")
        buf.extend(chunk)

    while True:
        while (end := buf.find(b"\r\n")) < 0:
            await fill()
        size_text = bytes(buf[:end]).split(b";", 1)[0].strip()
        del buf[: end + 2]
        try:
            size = int(size_text, 16)
        except ValueError:
            raise RecordFormatError(f"bad chunk size line {size_text[:20]!r}") from None
        if size == 0:
            return
        while size > 0:
            if not buf:
                await fill()
            take = min(size, len(buf))
            yield bytes(buf[:take])
            del buf[:take]
            size -= take
        while len(buf) < 2:
            try:
                await fill()
            except RecordFormatError:
                return  # tolerate a missing CRLF after the last chunk
        if buf[:2] == b"\r\n":
            del buf[:2]
