"""``GET /{coll}/export.wacz``: an Index API query's captures as a WACZ file, streamed.

The query takes the Index API's parameters, parsed and checked by the same
code (:func:`~gateway.index.export.parse_export_query`); the collection is
found as every route finds it (:func:`~gateway.api.common.collection_for`),
and the captures come from the Index API's lookup. What the file holds and
in which order: :mod:`gateway.index.export`.
"""

from __future__ import annotations

import logging
import re

from aiohttp import web

from gateway.access.policy import loadable
from gateway.api.common import (
    ERRORS_HEADER,
    client_left,
    collection_for,
    errors_header_value,
    query_params,
)
from gateway.api.cors import add_cors_headers
from gateway.errors import GatewayError
from gateway.index.export import WaczExport, parse_export_query

__all__ = ["WACZ_CONTENT_TYPE", "export_handler"]

logger = logging.getLogger(__name__)

#: A WACZ is a ZIP file; no media type of its own is registered (webrecorder/specs#41).
WACZ_CONTENT_TYPE = "application/zip"
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


async def export_handler(request: web.Request) -> web.StreamResponse:
    """``GET|HEAD /{coll}/export.wacz?url=...``: the WACZ of the query's captures.

    400 (JSON naming the parameter) on bad input, including the Index API
    parameters an export does not take (``output``, ``fl``, ``fields``,
    ``resolveRevisits``); 404 for an unknown collection or when no capture
    matches; 503 when every source failed. Otherwise 200 with the WACZ
    streamed (``Content-Disposition: attachment``); the lookup's failures of
    some sources are in ``ResErrors``, as on the Index API. HEAD answers the
    headers after the lookup, writing nothing. A client that leaves stops the
    export (its handler is cancelled, or its next write fails); a record
    that breaks off after part of it was sent closes the connection, so the
    client holds a short file rather than one that looks whole.
    """
    collection = collection_for(request)
    query = parse_export_query(query_params(request))
    export = await WaczExport.start(collection, query, admit=loadable)
    name = _UNSAFE_IN_NAME.sub("_", collection.name)
    headers = {
        "Content-Type": WACZ_CONTENT_TYPE,
        "Content-Disposition": f'attachment; filename="{name}-export.wacz"',
    }
    if export.errors:
        headers[ERRORS_HEADER] = errors_header_value(export.errors)
    if request.method == "HEAD":
        await export.aclose()
        return web.Response(headers=headers)
    response = web.StreamResponse(headers=headers)
    try:
        await add_cors_headers(response).prepare(request)
        await export.write(response.write)
        await response.write_eof()
    except ConnectionError:
        client_left(request)
    except GatewayError as exc:  # a record broke off after part of it was sent
        logger.error(
            "%s %s: export failed after the answer started, closing the connection: %s",
            request.method,
            request.path_qs,
            exc,
        )
        if request.transport is not None:
            request.transport.close()
    finally:
        await export.aclose()
    return response
