"""The Resource API: ``GET|HEAD /{coll}/resource``, one WARC record per lookup.

Captures are tried in the query's order (closest first when ``closest`` is
given), each with the loaders of the step that found it; the first record
that loads streams out as ``application/warc-record`` with pywb warcserver's
headers:

- ``Warcserver-Cdx``: the capture's CDXJ line,
- ``Warcserver-Source-Coll``: its ``source``,
- ``Warcserver-Type: warc``,
- ``WARC-Target-URI``, ``Link: <uri>; rel="original"``,
- ``Memento-Datetime`` (RFC 7089 §2.1.1) from the record's WARC-Date,
- ``Content-Length`` whenever the record's size is known,
- ``ResErrors``: JSON ``{name: reason}`` of sources and captures that failed
  before the one served (documented in the README).

Content encoding: ``compress=gzip`` answers with ``Content-Encoding: gzip``
(RFC 9110 section 8.4.1.3), as pywb's response loader does. A record served
exactly as stored (not a resolved revisit, not converted from ARC, its
header blocks unchanged) and stored as its own gzip member (WARC 1.1 Annex
D) goes out as that member, untouched: no inflation, no deflation; it
decodes to the record followed by its ``CRLF CRLF`` trailer, as in the
file. Any other record is gzip-compressed (ISA-L) as it goes out.
``Accept-Encoding`` alone changes nothing, as in pywb: pywb's own replay
front end asks the Resource API with requests' default ``Accept-Encoding:
gzip, deflate`` and parses the undecoded body as a WARC record.

When nothing loads the answer is 404 with every failure in the JSON body
(503 when every source failed); when a wildcard in ``url=`` made the lookup a
prefix (``url=http://a/*``) or domain (``url=*.a.org``) one, as pywb reads it,
the 404 says so, and that ``matchType=exact`` looks up the URL itself. An
exact lookup with no captures at all is retried as the collection's fuzzy
lookup (:mod:`gateway.index.fuzzy`): the record served is then another URL's,
and its ``Warcserver-Cdx`` line says ``"is_fuzzy": "1"``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from typing import Final
from urllib.parse import quote

from aiohttp import web
from isal import isal_zlib

from gateway.api.auth import client_headers
from gateway.api.common import (
    ERRORS_HEADER,
    STEP_HEADER,
    capture_query,
    client_left,
    collection_for,
    errors_header_value,
    query_params,
)
from gateway.api.cors import add_cors_headers
from gateway.api.index import send_index
from gateway.api.postreq import end_to_end_headers, method_lookup_url, parse_wrapped_request
from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.memento import iso_to_timestamp, link_value, timestamp_to_http_date
from gateway.cdx.query import CaptureQuery, key_range, parse_query
from gateway.errors import BadRequest, GatewayError, NotFound
from gateway.index.collection import Step, find_record
from gateway.loaders.base import LoadedRecord, WrappedRequest

__all__ = [
    "POST_ROUTES",
    "compress_gzip",
    "post_index_handler",
    "post_resource_handler",
    "postreq_index_handler",
    "postreq_resource_handler",
    "resource_handler",
    "send_record",
]

logger = logging.getLogger(__name__)

#: Longest ``Warcserver-Cdx`` value: aiohttp and most clients refuse header
#: lines past 8190 bytes, which a POST capture's ``requestBody`` can exceed.
_MAX_CDX_HEADER_CHARS = 4096


def _cdx_header(capture: CdxRecord) -> str:
    """The capture's CDXJ line for ``Warcserver-Cdx``; a POST capture's
    ``requestBody`` is left out when the line would be too long for a header."""
    line = capture.to_cdxj().rstrip("\n")
    if len(line) > _MAX_CDX_HEADER_CHARS and "requestBody" in capture.fields:
        names = [name for name in capture.fields if name != "requestBody"]
        line = capture.to_cdxj(names).rstrip("\n")
    return line


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _header_safe(value: str) -> str:
    """``value`` with control characters percent-encoded: a header line may not
    hold them (a URL with ``%1F`` decoded, an archived URL)."""
    if _CONTROL.search(value) is None:
        return value
    return _CONTROL.sub(lambda m: f"%{ord(m.group()):02X}", value)


def record_headers(step: Step, loaded: LoadedRecord, errors: dict[str, str]) -> dict[str, str]:
    """pywb warcserver's Resource API headers for ``loaded`` (see module docstring)."""
    capture = loaded.capture
    headers = {
        "Content-Type": "application/warc-record",
        "Warcserver-Type": "warc",
        "Warcserver-Cdx": _header_safe(_cdx_header(capture)),
        "Warcserver-Source-Coll": quote(capture.source, safe=":/"),
        "WARC-Target-URI": _header_safe(loaded.target_uri),
        "Link": _header_safe(link_value(loaded.target_uri, "original")),
    }
    try:
        headers["Memento-Datetime"] = timestamp_to_http_date(iso_to_timestamp(loaded.warc_date))
    except ValueError:
        headers["Memento-Datetime"] = timestamp_to_http_date(capture.timestamp)
    if loaded.content_length is not None:
        headers["Content-Length"] = str(loaded.content_length)
    if errors:
        headers[ERRORS_HEADER] = errors_header_value(errors)
    headers[STEP_HEADER] = step.name
    return headers


#: ISA-L level for records compressed for ``compress=gzip`` (its fastest; pywb uses zlib's 9).
_GZIP_LEVEL: Final = 1


def compress_gzip(request: web.Request) -> bool:
    """True for ``compress=gzip`` (pywb's parameter): the answer is gzip-encoded.

    Raises :class:`BadRequest` for any other non-empty value (pywb ignores
    them). ``Accept-Encoding`` alone never changes the answer (see the
    module docstring).
    """
    compress = request.query.get("compress")
    if not compress:
        return False
    if compress.lower() != "gzip":
        raise BadRequest("compress", f"{compress!r} is not supported; expected gzip")
    return True


def _gzip_compressor() -> isal_zlib.Compress:
    return isal_zlib.compressobj(_GZIP_LEVEL, isal_zlib.DEFLATED, 16 + isal_zlib.MAX_WBITS)


async def _gzip_stream(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``pieces`` as one gzip member (RFC 1952), compressed as they come."""
    compressor = _gzip_compressor()
    async for piece in pieces:
        out = compressor.compress(piece)
        if out:
            yield out
    yield compressor.flush()


async def send_record(
    request: web.Request,
    step: Step,
    loaded: LoadedRecord,
    errors: dict[str, str],
    gzip: bool = False,
) -> web.StreamResponse:
    """Send ``loaded`` as the response (headers only for HEAD); always closes it.

    With ``gzip`` the answer is ``Content-Encoding: gzip``: a record
    offering its stored gzip member (:attr:`LoadedRecord.stored_gzip`) is
    answered with that member, untouched; any other record is
    gzip-compressed as it goes out.

    A record whose body is in memory already (:meth:`LoadedRecord.body_in_memory`:
    a record read and inflated at once) under 64 KiB is answered with one
    ``web.Response``, so headers and record leave in one socket write; a
    larger one goes out in two writes after the headers, without copying it.
    Otherwise the record streams: pieces are joined while they stay under
    64 KiB (the header blocks travel with a small first chunk), and the last
    piece goes with the end of the response. A body that fails part way
    (:class:`~gateway.errors.RecordFormatError` on a truncated record) is
    logged and the connection closed, so the client sees a short body rather
    than a complete one; a client that leaves is logged at DEBUG. HEAD sends
    the GET answer's headers, ``Content-Length`` included when known.
    """
    try:
        headers = record_headers(step, loaded, errors)
        head = loaded.warc_headers + loaded.http_headers
        member = loaded.stored_gzip if gzip else None
        body: AsyncIterator[bytes] = loaded.body
        whole: bytes | memoryview | None = None
        if member is not None:
            headers["Content-Encoding"] = "gzip"
            headers["Content-Length"] = str(member.length)
            head, whole = b"", member.whole
            if whole is None:
                body = aiter(member)
        else:
            whole = loaded.body_in_memory()
            if gzip:
                headers["Content-Encoding"] = "gzip"
                if whole is None:
                    headers.pop("Content-Length", None)
                    head, body = b"", _gzip_stream(_prepend(head, body))
                else:
                    compressor = _gzip_compressor()
                    whole = compressor.compress(head) + compressor.compress(whole)
                    whole += compressor.flush()
                    head = b""
                    headers["Content-Length"] = str(len(whole))
        if whole is not None and len(head) + len(whole) < 64 * 1024:
            if request.method == "HEAD":
                return web.Response(headers=headers)
            body_bytes = b"".join((head, whole)) if head else whole
            step.served.served(len(body_bytes))
            return web.Response(body=body_bytes, headers=headers)
        response = web.StreamResponse(headers=headers)
        try:
            return await _stream_record(request, step, response, body, head, whole)
        except ConnectionError:
            client_left(request)
            return response
    finally:
        await loaded.aclose()


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for piece in rest:
        yield piece


async def _stream_record(
    request: web.Request,
    step: Step,
    response: web.StreamResponse,
    body: AsyncIterator[bytes],
    head: bytes,
    whole: bytes | memoryview | None,
) -> web.StreamResponse:
    """The streamed part of :func:`send_record`."""
    await add_cors_headers(response).prepare(request)
    if request.method == "HEAD":
        await response.write_eof()
        return response
    if whole is not None:
        if head:
            await response.write(head)
        await response.write(whole)
        await response.write_eof()
        step.served.served(len(head) + len(whole))
        return response
    pending = head
    sent = 0
    try:
        async for chunk in body:
            if len(pending) + len(chunk) <= 64 * 1024:
                pending += chunk
            else:
                if pending:
                    await response.write(pending)
                    sent += len(pending)
                pending = chunk
    except GatewayError as exc:  # a load error, or a recording not stored (durable_ack)
        # The status line is out: no error answer is possible any more (the
        # route wrapper's would land inside this body). Close the
        # connection, so the client sees a short body, not a complete one.
        logger.error(
            "%s %s: record failed after the answer started, closing the connection: %s",
            request.method,
            request.path_qs,
            exc,
        )
        if request.transport is not None:
            request.transport.close()
        return response
    await response.write_eof(pending)
    step.served.served(sent + len(pending))
    return response


async def resource_handler(request: web.Request) -> web.StreamResponse:
    """``GET|HEAD /{coll}/resource?url=...``: the first capture that loads, as a WARC record."""
    collection = collection_for(request)
    gzip = compress_gzip(request)
    query = capture_query(request)
    try:
        step, loaded, errors = await find_record(collection, query, gzip_member=gzip)
    except NotFound as exc:
        _explain_wildcard(request, query, exc)
        raise
    return await send_record(request, step, loaded, errors, gzip)


def _explain_wildcard(request: web.Request, query: CaptureQuery, exc: NotFound) -> None:
    """Add to a 404's message what a wildcard in ``url=`` asked for, when it made the
    lookup a prefix or domain one (pywb's reading, kept): a client that wanted the
    URL itself, ``*`` and all, learns to say ``matchType=exact``."""
    url = request.query.get("url", "")
    if "matchType" in request.query:
        return
    if query.match_type == "prefix" and url.endswith("*"):
        asked = f"the trailing '*' of url= asked for the URLs that start with {query.url[:200]}"
    elif query.match_type == "domain" and url.startswith("*."):
        asked = f"the leading '*.' of url= asked for the URLs of {query.url[:200]} and below"
    else:
        return
    exc.message += f" ({asked}; matchType=exact looks up the URL itself, '*' included)"


# -- post-request API ---------------------------------------------------------------
#
# pywb warcserver's /{coll}/resource/postreq and /{coll}/index/postreq, the pywb
# manual's /{coll}/postreq/resource and /{coll}/postreq/index and the schema
# draft's /{coll}/resource-post take a whole HTTP request as the body
# (gateway.api.postreq); a direct POST to /{coll}/resource or /{coll}/index is its own
# wrapped request. Either way the request's method, headers and body choose the
# lookup key (method_lookup_url) and go upstream unaltered on a live or remote
# fetch (WrappedRequest).


def _method_keyed(query: CaptureQuery, request: WrappedRequest) -> CaptureQuery:
    """``query`` looked up under the method key of ``request`` (pywb ``alt_url``)."""

    def header(name: str) -> str | None:
        return next((v for k, v in request.headers if k.lower() == name.lower()), None)

    length = header("Content-Length")
    if length is None and request.body:
        length = str(len(request.body))
    alt_url = method_lookup_url(
        query.url, request.method, header("Content-Type"), length, request.body
    )
    if alt_url == query.url:
        return query
    try:
        key, end_key = key_range(alt_url, query.match_type)
    except ValueError as exc:
        raise BadRequest("url", str(exc)) from exc
    return query.evolve(key=key, end_key=end_key, extra={**query.extra, "alt_url": alt_url})


async def _wrapped_query(request: web.Request) -> tuple[CaptureQuery, WrappedRequest]:
    """The query and wrapped request of a post-request route; 400 on a bad body or url."""
    params = query_params(request)
    parsed = parse_wrapped_request(await request.read())
    url = next(iter(params.get("url", ())), "") or parsed.target_url()
    if not url:
        raise BadRequest(
            "url",
            "missing; give url= or a wrapped request with an absolute-form target or a Host header",
        )
    wrapped = parsed.wrapped()
    return _method_keyed(parse_query(params, url=url), wrapped), wrapped


async def _direct_query(request: web.Request) -> tuple[CaptureQuery, WrappedRequest]:
    """A direct POST: the client's own method, end-to-end headers (the gateway's
    token left out, :func:`~gateway.api.auth.client_headers`) and body."""
    query = parse_query(query_params(request))
    wrapped = WrappedRequest(
        method=request.method,
        headers=end_to_end_headers(client_headers(request)),
        body=await request.read(),
    )
    return _method_keyed(query, wrapped), wrapped


async def postreq_resource_handler(request: web.Request) -> web.StreamResponse:
    """``POST /{coll}/resource/postreq`` (also ``/postreq/resource``, ``/resource-post``).

    The body is a whole HTTP request (:func:`gateway.api.postreq.parse_wrapped_request`);
    ``url=`` (else the wrapped request's own URL) and the other Resource API
    parameters select the capture, looked up under the method key. 400 naming
    ``body`` for a malformed wrapped request; otherwise as ``GET /{coll}/resource``.
    """
    collection = collection_for(request)
    gzip = compress_gzip(request)
    query, wrapped = await _wrapped_query(request)
    step, loaded, errors = await find_record(collection, query, request=wrapped, gzip_member=gzip)
    return await send_record(request, step, loaded, errors, gzip)


async def postreq_index_handler(request: web.Request) -> web.StreamResponse:
    """``POST /{coll}/index/postreq`` (also ``/postreq/index``): the Index API answer
    for the wrapped request's lookup key."""
    collection = collection_for(request)
    query, _wrapped = await _wrapped_query(request)
    return await send_index(request, collection, query)


async def post_resource_handler(request: web.Request) -> web.StreamResponse:
    """``POST /{coll}/resource?url=...``: the POST itself is the request looked up."""
    collection = collection_for(request)
    gzip = compress_gzip(request)
    query, wrapped = await _direct_query(request)
    step, loaded, errors = await find_record(collection, query, request=wrapped, gzip_member=gzip)
    return await send_record(request, step, loaded, errors, gzip)


async def post_index_handler(request: web.Request) -> web.StreamResponse:
    """``POST /{coll}/index?url=...``: index lines for the POST's own lookup key."""
    collection = collection_for(request)
    query, _wrapped = await _direct_query(request)
    return await send_index(request, collection, query)


#: The post-request routes and the direct POST routes, as ``(method, path, handler)``.
POST_ROUTES: Final = (
    ("POST", "/{coll}/resource/postreq", postreq_resource_handler),
    ("POST", "/{coll}/postreq/resource", postreq_resource_handler),
    ("POST", "/{coll}/resource-post", postreq_resource_handler),
    ("POST", "/{coll}/index/postreq", postreq_index_handler),
    ("POST", "/{coll}/postreq/index", postreq_index_handler),
    ("POST", "/{coll}/resource", post_resource_handler),
    ("POST", "/{coll}/index", post_index_handler),
)
