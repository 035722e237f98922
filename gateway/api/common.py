"""Helpers shared by the API handlers: collection lookup, parameters, error headers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from aiohttp import web

from gateway.aggregate import Collection
from gateway.errors import NotFound
from gateway.keys import COLLECTIONS

__all__ = ["ERRORS_HEADER", "collection_for", "errors_header_value", "query_params"]

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


def errors_header_value(errors: Mapping[str, str]) -> str:
    """JSON for :data:`ERRORS_HEADER`, ASCII-only, cut to a sane header size."""
    value = json.dumps(dict(errors), sort_keys=False)
    if len(value) > _MAX_HEADER_CHARS:
        value = json.dumps({"truncated": f"{len(errors)} errors; see the logs"})
    return value
