"""Helpers shared by the API handlers: collection lookup, parameters, error headers."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Final

from aiohttp import web

from gateway.api.keys import COLLECTIONS
from gateway.cdx.query import CaptureQuery, parse_query
from gateway.errors import NotFound
from gateway.index.collection import Collection

__all__ = [
    "ERRORS_HEADER",
    "capture_query",
    "client_left",
    "collection_for",
    "errors_header_value",
    "query_params",
]

logger = logging.getLogger(__name__)

#: Response header carrying per-source and per-capture failures on a partial
#: success, as a JSON object ``{name: reason}`` (pywb warcserver's name).
ERRORS_HEADER: Final = "ResErrors"
#: Every queried member's outcome on the Index API, as JSON
#: ``{member: "ok: N captures" | reason}`` in config order.
OUTCOMES_HEADER: Final = "Warcserver-Source-Outcomes"
#: Header naming the sequence step that answered.
STEP_HEADER: Final = "Warcserver-Step"
_MAX_HEADER_CHARS: Final = 8000


def collection_for(request: web.Request) -> Collection:
    """The collection named in the path; :class:`NotFound` (404) when unknown."""
    name = request.match_info["coll"]
    collections = request.app[COLLECTIONS]
    try:
        return collections[name]
    except KeyError:
        known = ", ".join(sorted(collections)) or "(none configured)"
        raise NotFound(f"unknown collection {name!r}; configured collections: {known}") from None


def query_params(request: web.Request) -> dict[str, list[str]]:
    """Query string as ``{name: [values...]}`` in order (repeatable ``filter``)."""
    params: dict[str, list[str]] = {}
    for key, value in request.query.items():
        params.setdefault(key, []).append(value)
    return params


#: Parsed queries by raw query string (see :func:`capture_query`).
_PARSED: dict[str, CaptureQuery] = {}
_PARSED_MAX: Final = 4096


def capture_query(request: web.Request) -> CaptureQuery:
    """The request's Index/Resource API parameters as a :class:`CaptureQuery`.

    Parsing is a pure function of the query string (``closest=now`` aside),
    and a :class:`CaptureQuery` is immutable, so the result is memoized by the
    raw query string (the oldest of :data:`_PARSED_MAX` entries goes first):
    replay clients ask for the same lookups again and again (queries with a
    regex filter are not kept, see :mod:`gateway.cdx.client_regex`). Raises
    :class:`~gateway.errors.BadRequest` (400) as :func:`parse_query` does;
    failures are not memoized.
    """
    raw = request.rel_url.raw_query_string
    query = _PARSED.get(raw)
    if query is not None:
        return query
    params = query_params(request)
    query = parse_query(params)
    # Not kept: "now", and client regexes (each holds RE2 memory; they are
    # compiled once per pattern anyway, gateway.cdx.client_regex).
    if params.get("closest") != ["now"] and not any(
        getattr(f, "regex", None) for f in query.filters
    ):
        if len(_PARSED) >= _PARSED_MAX:
            del _PARSED[next(iter(_PARSED))]
        _PARSED[raw] = query
    return query


def client_left(request: web.Request) -> None:
    """Note at DEBUG level that the client closed the connection mid-answer.

    A streaming handler catches the ``ConnectionError`` of its writes (a
    reset while writing, or "Connection lost" while waiting for the socket
    buffer to drain), calls this and returns its prepared response: aiohttp then ends the
    exchange quietly instead of logging a traceback at ERROR for a client
    that merely went away.
    """
    target = request.path_qs
    if len(target) > 300:
        target = target[:300] + "..."
    logger.debug("client left during %s %s", request.method, target)


#: Header values by their ``(name, reason)`` pairs (see :func:`errors_header_value`).
_HEADER_VALUES: dict[tuple[tuple[str, str], ...], str] = {}
_HEADER_VALUES_MAX: Final = 1024


def errors_header_value(errors: Mapping[str, str]) -> str:
    """JSON for :data:`ERRORS_HEADER`, ASCII-only, cut to a sane header size.

    The same few values (``{"web": "ok"}`` on every answer of a one-member
    collection, the same outage reported on every request) come back again
    and again, so values are remembered by content (at most
    :data:`_HEADER_VALUES_MAX`; the memo starts over when full).

    >>> errors_header_value({"web": "ok", "ia": "timeout after 5 s"})
    '{"web": "ok", "ia": "timeout after 5 s"}'
    """
    pairs = tuple(errors.items())
    value = _HEADER_VALUES.get(pairs)
    if value is not None:
        return value
    value = json.dumps(dict(pairs))
    if len(value) > _MAX_HEADER_CHARS:
        value = json.dumps({"truncated": f"{len(errors)} errors; see the logs"})
    if len(_HEADER_VALUES) >= _HEADER_VALUES_MAX:
        _HEADER_VALUES.clear()
    _HEADER_VALUES[pairs] = value
    return value
