"""The OpenAPI 3.1 description of every route, served at ``GET /openapi.json``.

Written as data, next to the routes it describes: a test
(``tests/api/test_openapi.py``) checks it against the OpenAPI 3.1 schema
(openapi-spec-validator) and against the app's router, both ways (every
registered method and path is described; every described one is
registered), and that error answers match the ``Error`` schema. Tools that
generate requests from it (schemathesis) can drive the gateway.

OpenAPI path parameters cannot hold ``/``; ``{url}`` at the end of a Memento
path is the rest of the path, slashes and query string included (RFC 7089
URI-R), as the descriptions say. Every ``GET`` also answers ``HEAD`` (aiohttp
registers both); the ``head`` operations are the ``GET`` ones without a body.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any, Final

from aiohttp import web

from gateway.api.client_replay import OPENAPI_PATHS as REPLAY_PATHS
from gateway.api.openapi_auth import SECURITY_SCHEMES, add_bearer

__all__ = ["openapi_document", "openapi_handler"]

_JSON: Final = "application/json"
_ERROR: Final = {"$ref": "#/components/schemas/Error"}
_ERROR_JSON: Final = {_JSON: {"schema": _ERROR}}


def _param(name: str, where: str, description: str, **schema: Any) -> dict[str, Any]:
    param: dict[str, Any] = {
        "name": name,
        "in": where,
        "description": description,
        "schema": schema or {"type": "string"},
    }
    if where == "path":
        param["required"] = True
    return param


def _repeated(name: str, description: str) -> dict[str, Any]:
    """A query parameter that may be given several times (``filter=a&filter=b``)."""
    param = _param(name, "query", description, type="array", items={"type": "string"})
    return param | {"style": "form", "explode": True}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/parameters/{name}"}


def _errors(*statuses: int) -> dict[str, Any]:
    reasons = {
        302: "redirect to the exact URI-M (see Location)",
        400: "bad input: the message names the parameter (`param`)",
        404: "unknown collection, or no captures (`errors`: the failures met)",
        405: "the path does not take this method (see Allow)",
        503: "every source failed (`errors`: source -> reason); not an empty answer",
    }
    answers: dict[str, Any] = {}
    for status in statuses:
        answer: dict[str, Any] = {"description": reasons[status]}
        if status >= 400:
            answer["content"] = _ERROR_JSON
        answers[str(status)] = answer
    return answers


def _op(
    summary: str,
    description: str,
    parameters: list[dict[str, Any]],
    ok: dict[str, Any],
    errors: tuple[int, ...] = (400, 404, 503),
    *,
    tag: str,
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "tags": [tag],
        "summary": summary,
        "description": description,
        "parameters": parameters,
        "responses": {"200": ok, **_errors(*errors)},
    }
    if body is not None:
        operation["requestBody"] = body
    return operation


def _text(description: str, *types: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": description,
        "content": {t: {"schema": {"type": "string"}} for t in types},
    }
    if headers:
        answer["headers"] = headers
    return answer


_INDEX_HEADERS: Final = {
    "ResErrors": {
        "description": "JSON {source: reason} of the sources that failed (partial answer)",
        "schema": {"type": "string"},
    },
    "Warcserver-Source-Outcomes": {
        "description": 'JSON {member: "ok: N captures" | reason}, every queried member',
        "schema": {"type": "string"},
    },
    "Warcserver-Step": {
        "description": "the sequence step that answered",
        "schema": {"type": "string"},
    },
}
_RECORD_HEADERS: Final = {
    "Warcserver-Cdx": {"description": "the capture's CDXJ line", "schema": {"type": "string"}},
    "Warcserver-Source-Coll": {"description": "its source", "schema": {"type": "string"}},
    "WARC-Target-URI": {"description": "the record's target URI", "schema": {"type": "string"}},
    "Memento-Datetime": {"description": "RFC 7089 §2.1.1", "schema": {"type": "string"}},
    "Link": {"description": 'the original: <uri>; rel="original"', "schema": {"type": "string"}},
}
_WRAPPED_REQUEST: Final = {
    "required": True,
    "description": "a whole HTTP/1.x request: request line, headers, body",
    "content": {"application/octet-stream": {"schema": {"type": "string"}}},
}

_PARAMETERS: Final[dict[str, dict[str, Any]]] = {
    "coll": _param("coll", "path", "a collection of collections.yaml"),
    "url": _param(
        "url",
        "query",
        "the URL looked up; `*.host` means matchType=domain, `prefix*` matchType=prefix",
    ),
    "matchType": _param(
        "matchType",
        "query",
        "which URLs: exact (default), prefix, host or domain",
        type="string",
        enum=["exact", "prefix", "host", "domain"],
    ),
    "closest": _param(
        "closest",
        "query",
        "1 to 14 digits or `now`: order by distance to this time",
        type="string",
        pattern=r"^(\d{1,14}|now)$",
    ),
    "from": _param("from", "query", "1 to 14 digits, padded down", pattern=r"^\d{1,14}$"),
    "to": _param("to", "query", "1 to 14 digits, padded up", pattern=r"^\d{1,14}$"),
    "limit": _param("limit", "query", "at most this many lines (default 100000)", type="integer"),
    "sort": _param(
        "sort",
        "query",
        "closest (needs closest=) or reverse",
        type="string",
        enum=["closest", "reverse"],
    ),
    "filter": _repeated(
        "filter", "repeatable, ANDed: `[!][=|~]field:value` (= exact, ~ regex, else contains)"
    ),
    "fl": _param("fl", "query", "comma-separated fields to output"),
    "output": _param(
        "output",
        "query",
        "cdxj (default), json (NDJSON), text, link (application/link-format)",
        type="string",
        enum=["cdxj", "json", "text", "link"],
    ),
    "sources": _param("sources", "query", "`a,b`: only these group members; `!a`: all but a"),
    "allowFuzzy": _param("allowFuzzy", "query", "0, false, f, off or empty: no fuzzy matching"),
    "uri_r": _param(
        "url",
        "path",
        "the original URL (URI-R): the rest of the path, slashes and query included",
    ),
    "timestamp": _param(
        "timestamp",
        "path",
        "1 to 14 digits; not exactly a capture's: 302 to the closest",
        pattern=r"^\d{1,14}$",
    ),
    "Accept-Datetime": _param(
        "Accept-Datetime", "header", "an HTTP date (RFC 7089 §2.1.1); default: the latest"
    ),
}
_IA_PARAMETERS: Final[list[dict[str, Any]]] = [
    _param("url", "query", "`a.org/*` means matchType=prefix, `*.a.org` matchType=domain"),
    _ref("matchType"),
    _ref("from"),
    _ref("to"),
    _repeated("filter", "repeatable: `[!][~]field:regex` (the whole value; ~ contains)"),
    _repeated("collapse", "repeatable: `field` or `field:N`"),
    _param("fl", "query", "output fields (IA or pywb names)"),
    _param("output", "query", "json, else text"),
    _param("limit", "query", "N: the first N lines; -N: the last N", type="integer"),
    _param("offset", "query", "skip this many lines first", type="integer"),
    _param("fastLatest", "query", "true: the latest |limit| lines"),
    _param("showResumeKey", "query", "true: end a cut answer with its resume key"),
    _param("resumeKey", "query", "resume after this key"),
    _param("page", "query", "0-based page of pageSize captures", type="integer"),
    _param("pageSize", "query", "captures per page (default 3000)", type="integer"),
    _param("showNumPages", "query", "true: the number of pages alone"),
    _param("gzip", "query", "accepted and ignored"),
]
_LOOKUP: Final = [
    _ref(name)
    for name in (
        "url",
        "matchType",
        "closest",
        "from",
        "to",
        "limit",
        "sort",
        "filter",
        "fl",
        "output",
        "sources",
        "allowFuzzy",
    )
]
_COLL: Final = [_ref("coll")]
_INDEX_TYPES: Final = ("text/x-cdxj", "text/x-ndjson", "text/plain", "application/link-format")


def _index_get() -> dict[str, Any]:
    return _op(
        "Index API (pywb warcserver)",
        "The captures of a URL as index lines, sorted by (urlkey, timestamp), or by "
        "distance to `closest`; streamed. An empty body when nothing matched.",
        _COLL + _LOOKUP,
        _text("the lines (CDXJ by default)", *_INDEX_TYPES, headers=_INDEX_HEADERS),
        tag="Index API",
    )


def _resource_get() -> dict[str, Any]:
    return _op(
        "Resource API (pywb warcserver)",
        "The first capture that loads, as one WARC record (revisits resolved).",
        _COLL + _LOOKUP,
        _text("the WARC record", "application/warc-record", headers=_RECORD_HEADERS),
        tag="Resource API",
    )


def _postreq(summary: str, answers_as: str, tag: str) -> dict[str, Any]:
    ok = (
        _text("the WARC record", "application/warc-record", headers=_RECORD_HEADERS)
        if tag == "Resource API"
        else _text("the lines", *_INDEX_TYPES, headers=_INDEX_HEADERS)
    )
    return _op(
        summary,
        f"The wrapped request's method and body choose the lookup key (cdxj-indexer's); "
        f"answers as {answers_as}. Without `url=`, the wrapped request's URL.",
        _COLL + _LOOKUP,
        ok,
        tag=tag,
        body=_WRAPPED_REQUEST,
    )


def _direct_post(answers_as: str, tag: str) -> dict[str, Any]:
    operation = _postreq(
        f"Direct POST: the POST itself is looked up ({answers_as})", answers_as, tag
    )
    operation["requestBody"] = {
        "description": "the body of the request looked up (its key includes it)",
        "content": {"*/*": {"schema": {"type": "string"}}},
    }
    return operation


_JSON_OBJECT: Final = {_JSON: {"schema": {"type": "object"}}}


def _status_op(
    summary: str, description: str, ok: dict[str, Any], more: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An operation of the Status tag: no parameters, ``ok`` (and ``more`` answers)."""
    operation = _op(summary, description, [], ok, (), tag="Status")
    operation["responses"].update(more or {})
    return operation


def _service_paths() -> dict[str, dict[str, Any]]:
    """The collections' list and the probes: ``/``, ``/_status``, ``/_health``, ``/_ready``."""
    return {
        "/": {
            "get": _status_op(
                "The collections (JSON; an HTML page for browsers)",
                "JSON `{collections: {name: {sequence, steps: [...]}}}`; a client asking "
                "for text/html gets the page of collections, their health and search forms.",
                {"description": "the collections", "content": {**_JSON_OBJECT, "text/html": {}}},
            )
        },
        "/_status": {
            "get": _status_op(
                "Circuit breakers",
                "Each group member's breaker: state, failures, seconds left, last failure.",
                {"description": "`{breakers: {coll: {step: {member: state}}}}`"}
                | {"content": _JSON_OBJECT},
            )
        },
        "/_health": {
            "get": _status_op(
                "Liveness",
                "`{ok: true}` while the process answers.",
                {"description": "alive", "content": _JSON_OBJECT},
            )
        },
        "/_ready": {
            "get": _status_op(
                "Readiness",
                "`{ready: true}`, or 503 `{ready: false, reasons: {name: why}}` while "
                "starting, stopping, held by a subsystem, or while a collection has every "
                "source down.",
                {"description": "ready", "content": _JSON_OBJECT},
                {"503": {"description": "not ready", "content": _JSON_OBJECT}},
            )
        },
    }


def _report_paths() -> dict[str, dict[str, Any]]:
    """The reports: ``/_jobs``, ``/metrics`` and ``/openapi.json``."""
    return {
        "/_jobs": {
            "get": _status_op(
                "Background jobs",
                "Per object type (import, scrub, plugins' types): `states` (count per "
                "state), `due`, `oldest_due`, `running` (active leases by process), "
                "`last_errors`, `attention`; and this process's `orchestrator` (`enabled`, "
                "`active`, actors `running`, `queues`). As `gateway jobs --json`.",
                {"description": "the report", "content": _JSON_OBJECT},
                {
                    "503": {"description": "the store's database cannot be read"}
                    | {"content": _JSON_OBJECT}
                },
            )
        },
        "/metrics": {
            "get": _status_op(
                "Prometheus metrics",
                "Every metric family in the Prometheus text format 0.0.4.",
                _text("the families", "text/plain"),
            )
        },
        "/openapi.json": {
            "get": _status_op(
                "This document",
                "The OpenAPI 3.1 description of every route.",
                {"description": "OpenAPI 3.1", "content": _JSON_OBJECT},
            )
        },
    }


def _collection_paths() -> dict[str, dict[str, Any]]:
    """A collection's page, its modes (pywb warcserver's bare routes) and its sources."""
    modes = _op(
        "A collection route's modes (pywb warcserver)",
        '`{modes: ["list_sources", "index", "resource"]}`, as pywb answers a collection '
        "route without a mode.",
        list(_COLL),
        {"description": "the modes", "content": _JSON_OBJECT},
        (404,),
        tag="Collections",
    )
    return {
        "/{coll}/": {
            "get": _op(
                "A collection's page (HTML)",
                "The search form; with `url`, the URL's captures as a calendar (`year`, "
                "`day` select); `url` ending in `*` lists the URLs under a prefix.",
                [
                    *_COLL,
                    _param("url", "query", "the URL (optional)"),
                    _param("year", "query", "4 digits", pattern=r"^\d{4}$"),
                    _param("day", "query", "YYYYMMDD", pattern=r"^\d{8}$"),
                ],
                {"description": "the page", "content": {"text/html": {}}},
                (400, 404, 503),
                tag="Pages",
            )
        },
        "/{coll}": {"get": modes},
        "/{coll}/postreq": {"post": modes},
        "/{coll}/list_sources": {
            "get": _op(
                "A collection's index sources (pywb warcserver)",
                "`{sources: {member: kind}}`: every index member of every step, in config "
                "order, with pywb's names for their kinds (`file`, `file_dir`, `zipnum`, "
                "`redis`, `redis-multikey`, `cdx`, `memento`, `live`; `store`, `wacz`).",
                list(_COLL),
                {"description": "the sources", "content": _JSON_OBJECT},
                (404,),
                tag="Collections",
            )
        },
    }


def _lookup_paths() -> dict[str, dict[str, Any]]:
    """The lookups: index, IA cdx, resource, and the post-request routes of both APIs."""
    postreq_resource = _postreq(
        "Post-request API: a wrapped request, its record", "GET /{coll}/resource", "Resource API"
    )
    postreq_index = _postreq(
        "Post-request API: a wrapped request, its index lines", "GET /{coll}/index", "Index API"
    )
    return {
        "/{coll}/index": {"get": _index_get(), "post": _direct_post("the Index API", "Index API")},
        "/{coll}/cdx": {
            "get": _op(
                "IA CDX server API",
                "The Internet Archive's wayback CDX server dialect over the same engine: "
                "filter, collapse, resume keys, pages on every index.",
                _COLL + _IA_PARAMETERS,
                _text("the lines, or a JSON array", "text/plain", _JSON, headers=_INDEX_HEADERS),
                tag="IA CDX API",
            )
        },
        "/{coll}/resource": {
            "get": _resource_get(),
            "post": _direct_post("the Resource API", "Resource API"),
        },
        "/{coll}/export.wacz": {
            "get": _op(
                "WACZ export",
                "An Index API query's captures with their WARC records (revisits with their "
                "originals) as a WACZ 1.1.1 file, streamed. `fl`, `output` and "
                "`resolveRevisits` are refused (400). See docs/wacz-export.md.",
                [p for p in _COLL + _LOOKUP if p["$ref"].rsplit("/")[-1] not in ("fl", "output")],
                _text("the WACZ (a ZIP file)", "application/zip", headers=_INDEX_HEADERS),
                tag="Index API",
            )
        },
        "/{coll}/resource/postreq": {"post": postreq_resource},
        "/{coll}/postreq/resource": {"post": postreq_resource},
        "/{coll}/resource-post": {"post": postreq_resource},
        "/{coll}/index/postreq": {"post": postreq_index},
        "/{coll}/postreq/index": {"post": postreq_index},
    }


def _memento_paths() -> dict[str, dict[str, Any]]:
    """Memento (RFC 7089): TimeGates, TimeMaps and raw mementos."""
    return {
        "/{coll}/timegate/{url}": {
            "get": _op(
                "Memento TimeGate (RFC 7089 pattern 2.1)",
                "302 to the memento closest to Accept-Datetime, with the navigation Link.",
                [*_COLL, _ref("uri_r"), _ref("Accept-Datetime")],
                {"description": "never: a TimeGate redirects"},
                (302, 400, 404, 503),
                tag="Memento",
            )
        },
        "/{coll}/timemap/{format}/{url}": {
            "get": _op(
                "Memento TimeMap (RFC 7089 §5)",
                "link, json or cdxj; paged past the page size: "
                "`/{coll}/timemap/{format}/{from}/{url}` holds the page from `{from}` on.",
                [
                    *_COLL,
                    _param(
                        "format",
                        "path",
                        "link, json or cdxj",
                        type="string",
                        enum=["link", "json", "cdxj"],
                    ),
                    _ref("uri_r"),
                ],
                _text("the TimeMap", "application/link-format", _JSON, "text/x-cdxj"),
                tag="Memento",
            )
        },
        "/{coll}/{timestamp}id_/{url}": {
            "get": _op(
                "Raw memento",
                "The archived HTTP response (status, headers, payload) with "
                "Memento-Datetime and the navigation Link; 302 to the exact URI-M when "
                "the timestamp is not a capture's.",
                [*_COLL, _ref("timestamp"), _ref("uri_r")],
                {"description": "the archived response, with its own status and type"},
                (302, 404, 503),
                tag="Memento",
            )
        },
        "/{coll}/{url}": {
            "get": _op(
                "TimeGate at the wayback path (pywb memento+ sources)",
                "As /{coll}/timegate/{url}, for `url` starting with http:// or https://.",
                [*_COLL, _ref("uri_r"), _ref("Accept-Datetime")],
                {"description": "never: a TimeGate redirects"},
                (302, 400, 404, 503),
                tag="Memento",
            )
        },
    }


def _paths() -> dict[str, dict[str, Any]]:
    """Every path item, in the order of the document, composed from the route families."""
    return {
        **_service_paths(),
        **_report_paths(),
        **_collection_paths(),
        **_lookup_paths(),
        **_memento_paths(),
        **REPLAY_PATHS,  # next to their routes: gateway.api.client_replay
    }


@functools.cache
def _document() -> dict[str, Any]:
    paths = _paths()
    add_bearer(paths)  # the optional token (gateway.api.openapi_auth)
    for operations in paths.values():
        if "get" in operations:
            head = copy.deepcopy(operations["get"])
            head["summary"] = f"{head['summary']}: headers only"
            for answer in head["responses"].values():
                answer.pop("content", None)
            operations["head"] = head
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "archive gateway",
            "version": "0.1.0",
            "summary": "pywb's Index and Resource APIs, the IA CDX API and Memento over "
            "many web archives at once",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "tags": [
            {"name": "Index API", "description": "pywb warcserver's CDX server API"},
            {"name": "Resource API", "description": "one WARC record per lookup"},
            {"name": "IA CDX API", "description": "the Internet Archive's CDX server dialect"},
            {"name": "Memento", "description": "RFC 7089: TimeGate, TimeMaps, mementos"},
            {"name": "Collections", "description": "pywb warcserver's collection routes"},
            {"name": "Pages", "description": "HTML for people"},
            {"name": "Status", "description": "health, readiness, metrics"},
        ],
        "paths": paths,
        "components": {
            "securitySchemes": SECURITY_SCHEMES,
            "parameters": _PARAMETERS,
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["message"],
                    "properties": {
                        "message": {
                            "type": "string",
                            "description": "what failed, on which input, what was expected",
                        },
                        "param": {
                            "type": "string",
                            "description": "the parameter or header at fault (400)",
                        },
                        "errors": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                            "description": "source or capture -> why it failed",
                        },
                    },
                }
            },
        },
    }


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document as a JSON-ready dict (a fresh copy each call)."""
    return copy.deepcopy(_document())


@functools.cache
def _document_json() -> bytes:
    return json.dumps(_document(), indent=1).encode("utf-8")


async def openapi_handler(request: web.Request) -> web.Response:
    """``GET /openapi.json``: :func:`openapi_document` as JSON."""
    return web.Response(body=_document_json(), content_type=_JSON)
