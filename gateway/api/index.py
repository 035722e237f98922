"""The Index API: ``GET /{coll}/index`` in pywb warcserver's dialect.

Output formats and content types are pywb's (``handlers.py``):

=========  ========================  ==========================================
output     Content-Type              one line per capture
=========  ========================  ==========================================
cdxj       text/x-cdxj               ``urlkey timestamp {json}``
json       text/x-ndjson             ``{"urlkey": ..., "timestamp": ..., ...}``
text       text/plain                space-separated values, ``-`` for missing
link       application/link-format   ``<url>; rel="memento"; datetime=...``
=========  ========================  ==========================================

Answers under 64 KiB go out in one piece, longer ones stream as they are
produced. An empty answer is a 200 with an empty
body; when every source failed the answer is a 503 (see
:meth:`gateway.index.collection.Collection.lookup`); failures of some sources on a
partial success are listed in the ``ResErrors`` header.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from aiohttp import web
from multidict import istr

from gateway.api.common import (
    ERRORS_HEADER,
    OUTCOMES_HEADER,
    STEP_HEADER,
    capture_query,
    client_left,
    collection_for,
    errors_header_value,
    query_params,
)
from gateway.api.cors import add_cors_headers, headers_with_cors
from gateway.cdx import cdxops
from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.ia_query import parse_ia_query
from gateway.cdx.memento import link_value, timestamp_to_http_date
from gateway.cdx.query import CaptureQuery, Output
from gateway.index.collection import Collection
from gateway.index.ia_cdx import CONTENT_TYPES as IA_CONTENT_TYPES
from gateway.index.ia_cdx import count_pages, ia_lookup, serialize_ia

__all__ = ["CONTENT_TYPES", "ia_cdx_handler", "index_handler", "line_renderer", "send_index"]

CONTENT_TYPES: Final[dict[Output, str]] = {
    "cdxj": "text/x-cdxj",
    "json": "text/x-ndjson",
    "text": "text/plain",
    "link": "application/link-format",
}
#: Each output's headers with the CORS headers, copied for each answer.
_HEADERS: Final = {
    output: headers_with_cors({"Content-Type": content_type})
    for output, content_type in CONTENT_TYPES.items()
}
_OUTCOMES: Final = istr(OUTCOMES_HEADER)
_FLUSH_BYTES: Final = 64 * 1024
#: An answer of at most this many records already in memory is rendered in one piece.
_AT_ONCE_RECORDS: Final = 1000


def _memento_line(record: CdxRecord) -> str:
    """pywb ``make_timemap_memento_link`` without the separator."""
    extra = {"collection": record.fields["source-coll"]} if "source-coll" in record.fields else {}
    return link_value(
        record.url, "memento", datetime=timestamp_to_http_date(record.timestamp), **extra
    )


def line_renderer(query: CaptureQuery) -> tuple[Callable[[CdxRecord], str], str, str]:
    """``(render, separator, terminator)`` of ``query.output`` (pywb ``handlers.py``).

    ``render`` gives one record's text; lines are joined by ``separator`` and
    a non-empty answer ends with ``terminator``: ``link`` separates memento
    links with ``,\\n`` and ends the last with ``\\n`` (pywb's
    ``MementoUtils.make_timemap``); the other outputs end every line with
    ``\\n`` themselves.
    """
    fields = query.fields
    output = query.output
    if output == "cdxj" and fields is None:  # the usual answer, first
        return CdxRecord.to_cdxj, "", ""
    if output == "link":
        return _memento_line, ",\n", "\n"
    if output == "json":
        return (lambda record: record.to_json(fields)), "", ""
    if output == "text":
        return (lambda record: record.to_text(fields)), "", ""
    return (lambda record: record.to_cdxj(fields)), "", ""


async def send_index(
    request: web.Request, collection: Collection, query: CaptureQuery
) -> web.StreamResponse:
    """The Index API answer for ``query``: 200 with the captures (see module docstring).

    An answer shorter than 64 KiB, or of at most 1000 records all in memory
    already, goes out as one response with a ``Content-Length`` (one write
    to the socket); a longer one streams in pieces of about 64 KiB. Raises
    what :meth:`Collection.lookup` raises
    (:class:`~gateway.errors.AllSourcesFailed`: 503) before anything is sent.
    """
    step, answer = await collection.lookup(query)
    headers = _HEADERS[query.output].copy()
    if answer.errors:
        headers[ERRORS_HEADER] = errors_header_value(answer.errors)
    if answer.outcomes:
        headers[_OUTCOMES] = errors_header_value(answer.outcomes)
    if step is not None and collection.is_sequence:
        headers[STEP_HEADER] = step.name
    render, separator, terminator = line_renderer(query)
    records = answer.in_memory()
    if records is not None and len(records) <= _AT_ONCE_RECORDS:
        # Every record in memory already: render the answer at once.
        body = separator.join(map(render, records)) + terminator if records else ""
        return web.Response(body=body.encode("utf-8"), headers=headers)
    pieces: list[str] = []
    size = 0
    response: web.StreamResponse | None = None
    try:
        async for record in answer if records is None else cdxops.RecordList(records):
            text = render(record)
            pieces.append(text)
            size += len(text)
            if size < _FLUSH_BYTES:
                continue
            chunk = separator.join(pieces)
            if response is None:
                response = web.StreamResponse(headers=headers)
                await add_cors_headers(response).prepare(request)
            else:
                chunk = separator + chunk
            await response.write(chunk.encode("utf-8"))
            pieces, size = [], 0
        tail = separator.join(pieces)
        if response is None:
            body = tail + terminator if pieces else ""
            return web.Response(body=body.encode("utf-8"), headers=headers)
        if pieces:
            tail = separator + tail
        await response.write_eof((tail + terminator).encode("utf-8"))
    except ConnectionError:
        client_left(request)
    finally:
        await answer.aclose()
    assert response is not None
    return response


async def index_handler(request: web.Request) -> web.StreamResponse:
    """``GET /{coll}/index?url=...``: captures as CDXJ/NDJSON/text/link-format.

    400 (JSON naming the parameter) on bad input; 404 for an unknown
    collection; 503 when every source failed; otherwise 200 (:func:`send_index`).
    """
    return await send_index(request, collection_for(request), capture_query(request))


async def ia_cdx_handler(request: web.Request) -> web.StreamResponse:
    """``GET /{coll}/cdx?url=...``: the IA wayback CDX server's dialect.

    The dialect itself is :mod:`gateway.index.ia_cdx`.

    Text lines of ``urlkey timestamp original mimetype statuscode digest
    length`` (text/plain) or, with ``output=json``, an array of string arrays
    after a header row (application/json); ``showNumPages=true`` answers the
    page count alone. 400 (JSON naming the parameter) on bad input; 404 for an
    unknown collection; 503 when every source failed; otherwise 200, streamed.
    """
    collection = collection_for(request)
    query = parse_ia_query(query_params(request))
    headers = {"Content-Type": IA_CONTENT_TYPES[query.output]}
    pages = 0
    if query.show_num_pages:
        pages, answer = await count_pages(collection, query)
        headers["Content-Type"] = IA_CONTENT_TYPES["text"]
    else:
        answer = await ia_lookup(collection, query)
    response = web.StreamResponse(headers=headers)
    if answer.errors:
        response.headers[ERRORS_HEADER] = errors_header_value(answer.errors)
    if answer.step is not None and collection.is_sequence:
        response.headers[STEP_HEADER] = answer.step.name
    await add_cors_headers(response).prepare(request)
    if query.show_num_pages:
        await response.write_eof(f"{pages}\n".encode())
        return response
    buffer: list[str] = []
    size = 0
    try:
        async for piece in serialize_ia(answer, query):
            buffer.append(piece)
            size += len(piece)
            if size >= _FLUSH_BYTES:
                await response.write("".join(buffer).encode("utf-8"))
                buffer, size = [], 0
        await response.write_eof("".join(buffer).encode("utf-8"))
    except ConnectionError:
        client_left(request)
    return response
