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

Lines stream as they are produced. An empty answer is a 200 with an empty
body; when every source failed the answer is a 503 (see
:meth:`gateway.aggregate.Collection.lookup`); failures of some sources on a
partial success are listed in the ``ResErrors`` header.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Final

from aiohttp import web

from gateway.api.common import (
    ERRORS_HEADER,
    OUTCOMES_HEADER,
    STEP_HEADER,
    collection_for,
    errors_header_value,
    query_params,
)
from gateway.cdxj import CdxRecord
from gateway.ia_cdx import CONTENT_TYPES as IA_CONTENT_TYPES
from gateway.ia_cdx import count_pages, ia_lookup, serialize_ia
from gateway.ia_query import parse_ia_query
from gateway.memento import link_value, timestamp_to_http_date
from gateway.query import CaptureQuery, Output, parse_query

__all__ = ["CONTENT_TYPES", "ia_cdx_handler", "index_handler", "serialize"]

CONTENT_TYPES: Final[dict[Output, str]] = {
    "cdxj": "text/x-cdxj",
    "json": "text/x-ndjson",
    "text": "text/plain",
    "link": "application/link-format",
}
_FLUSH_BYTES: Final = 64 * 1024


def _memento_line(record: CdxRecord) -> str:
    """pywb ``make_timemap_memento_link`` without the separator."""
    extra = {"collection": record.fields["source-coll"]} if "source-coll" in record.fields else {}
    return link_value(
        record.url, "memento", datetime=timestamp_to_http_date(record.timestamp), **extra
    )


async def serialize(records: AsyncIterator[CdxRecord], query: CaptureQuery) -> AsyncIterator[str]:
    """Yield the text lines (newline included) of ``records`` in ``query.output`` form.

    ``link`` separates memento links with ``,\\n`` and ends the last with ``\\n``,
    as pywb's ``MementoUtils.make_timemap``.
    """
    fields = query.fields
    if query.output == "link":
        previous: CdxRecord | None = None
        async for record in records:
            if previous is not None:
                yield _memento_line(previous) + ",\n"
            previous = record
        if previous is not None:
            yield _memento_line(previous) + "\n"
        return
    render: Callable[[CdxRecord], str]
    if query.output == "json":
        render = lambda record: record.to_json(fields)  # noqa: E731
    elif query.output == "text":
        render = lambda record: record.to_text(fields)  # noqa: E731
    else:
        render = lambda record: record.to_cdxj(fields)  # noqa: E731
    async for record in records:
        yield render(record)


async def index_handler(request: web.Request) -> web.StreamResponse:
    """``GET /{coll}/index?url=...``: captures as CDXJ/NDJSON/text/link-format.

    400 (JSON naming the parameter) on bad input; 404 for an unknown
    collection; 503 when every source failed; otherwise 200, streamed.
    """
    collection = collection_for(request)
    query = parse_query(query_params(request))
    step, answer = await collection.lookup(query)
    response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPES[query.output]})
    if answer.errors:
        response.headers[ERRORS_HEADER] = errors_header_value(answer.errors)
    if answer.outcomes:
        response.headers[OUTCOMES_HEADER] = errors_header_value(answer.outcomes)
    if step is not None and collection.is_sequence:
        response.headers[STEP_HEADER] = step.name
    await response.prepare(request)
    buffer: list[str] = []
    size = 0
    try:
        async for line in serialize(aiter(answer), query):
            buffer.append(line)
            size += len(line)
            if size >= _FLUSH_BYTES:
                await response.write("".join(buffer).encode("utf-8"))
                buffer, size = [], 0
        if buffer:
            await response.write("".join(buffer).encode("utf-8"))
    finally:
        await answer.aclose()
    await response.write_eof()
    return response


async def ia_cdx_handler(request: web.Request) -> web.StreamResponse:
    """``GET /{coll}/cdx?url=...``: the IA wayback CDX server's dialect (:mod:`gateway.ia_cdx`).

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
    await response.prepare(request)
    if query.show_num_pages:
        await response.write(f"{pages}\n".encode())
        await response.write_eof()
        return response
    buffer: list[str] = []
    size = 0
    async for piece in serialize_ia(answer, query):
        buffer.append(piece)
        size += len(piece)
        if size >= _FLUSH_BYTES:
            await response.write("".join(buffer).encode("utf-8"))
            buffer, size = [], 0
    if buffer:
        await response.write("".join(buffer).encode("utf-8"))
    await response.write_eof()
    return response
