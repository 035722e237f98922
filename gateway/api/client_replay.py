"""Replay in the browser: archived pages rendered by wabac.js from the raw mementos.

pywb 2.9's client-side replay (``client_side_replay: true``) on the gateway's
own routes (docs/replay.md). wabac.js (npm ``@webrecorder/wabac``,
AGPL-3.0-or-later) is a separate, optional component: ``scripts/install-wabac``
installs it, the ``replay:`` section says where and whether it is used
(:class:`~gateway.replay_settings.ReplaySettings`), and this module serves
the installed files unmodified.

``GET /{coll}/{timestamp}/{url}`` (pywb's replay URL)
    Replay on: the replay page (``templates/replay.html``), a banner naming
    the capture closest to ``timestamp`` (its time, and links to the URL's
    calendar, TimeMap, the capture's WARC record and raw memento) above a
    frame. The page's script registers wabac.js's service worker
    (``/_wabac/sw.js``, scope ``/``) and gives it the collection as pywb's
    ``loadWabac.js`` does: a ``live`` source (wabac's ``LiveProxy``) whose
    ``archivePrefix`` is ``/{coll}/`` and ``archiveMod`` ``id_``. The frame
    then loads ``/{coll}/{timestamp}mp_/{url}``, which the service worker
    answers: it fetches the record from the raw memento route
    ``/{coll}/{timestamp}id_/{url}`` and rewrites links, CSS, images and
    scripts to ``/{coll}/{timestamp}mp_/...``, so everything the page loads
    or links to stays in the archive, near that time. The banner follows the
    frame (wabac's ``load`` messages carry the URL and the time of the
    memento shown) and keeps the address bar at that page's replay URL.
    No capture of ``url``: the 404 page; an unknown collection: 404; a bad
    ``url`` or ``timestamp``: 400 (JSON for clients that do not ask for HTML).
    Replay off: 302 to the raw memento.
``GET /{coll}/{timestamp}mp_/{url}``
    The frame's URL when it reaches the gateway (no service worker in control:
    a link copied out of the frame, a first visit): 302 to the replay page
    (replay off: to the raw memento).
``GET /_wabac/sw.js``, ``GET /_wabac/LICENSE.md``
    The installed service worker, with ``Service-Worker-Allowed: /`` (it is
    served below ``/_wabac/`` and controls the whole origin's replay URLs)
    and ``Cache-Control: no-cache`` (a new install is picked up on the next
    visit), and its licence. 404 when replay is off.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any, Final

from aiohttp import web

from gateway.api.common import collection_for
from gateway.api.host import public_base
from gateway.api.keys import CONFIG
from gateway.api.memento import uri_r_from_path
from gateway.api.pages import error_page, render_page, wants_html
from gateway.cdx.query import TIMESTAMP_DIGITS, CaptureQuery, closest_timestamp
from gateway.errors import BadRequest, GatewayError, NotFound
from gateway.index.collection import Collection
from gateway.replay_settings import ReplaySettings

__all__ = [
    "OPENAPI_PATHS",
    "SERVICE_WORKER_URL",
    "replay_frame_handler",
    "replay_page_handler",
    "wabac_file_handler",
]

#: Where the service worker is served; its scope is the whole origin (``/``).
SERVICE_WORKER_URL: Final = "/_wabac/sw.js"
#: Files of the install the gateway serves, and their media types.
_SERVED: Final = {
    "sw.js": "application/javascript; charset=utf-8",
    "LICENSE.md": "text/markdown; charset=utf-8",
}
_OFF: Final = (
    "in-browser replay is off: install wabac.js with scripts/install-wabac and see the "
    "replay: section of the config (docs/replay.md)"
)


def _when(ts: str) -> str:
    """``2014-01-26 20:06:24`` for a timestamp (padded to 14 digits).

    >>> _when("20140126200624")
    '2014-01-26 20:06:24'
    """
    t = ts.ljust(14, "0")
    return f"{t[:4]}-{t[4:6]}-{t[6:8]} {t[8:10]}:{t[10:12]}:{t[12:14]}"


def _replay_path(request: web.Request) -> tuple[str, str, str]:
    """``(collection, timestamp, URI-R)`` of a replay path: the collection as the
    raw path spells it (fit for a ``Location``), the ``timestamp``, and the
    rest of the raw path, query included, normalised as the Memento routes
    do it; :class:`BadRequest` names the bad one."""
    timestamp = request.match_info["timestamp"]
    if not TIMESTAMP_DIGITS.fullmatch(timestamp):  # the route's \d takes any script's digits
        raise BadRequest("timestamp", f"{timestamp[:20]!r} is not 1 to 14 ASCII digits")
    _, coll, _, rest = request.raw_path.split("/", 3)
    if not rest.split("?", 1)[0]:
        raise BadRequest("url", "missing; put the original URL after the timestamp")
    return coll, timestamp, uri_r_from_path(rest)


async def _closest(collection: Collection, url: str, timestamp: str) -> str:
    """The timestamp of the capture of ``url`` closest to ``timestamp`` (fuzzy
    matching as in the Index API); :class:`NotFound` when there is none."""
    try:
        query = CaptureQuery.for_url(
            url, closest=closest_timestamp(timestamp), limit=1, check=False
        )
    except ValueError as exc:
        raise BadRequest("url", str(exc)) from exc
    _step, answer = await collection.lookup(query)
    try:
        async for record in answer:
            return record.timestamp
    finally:
        await answer.aclose()
    raise NotFound(f"no capture of {url} in this collection", answer.errors)


#: Where wabac.js's source is published (AGPL-3.0 §13: offer the source of what is served).
_SOURCE: Final = "https://github.com/webrecorder/wabac.js"


def _installed_package(settings: ReplaySettings) -> tuple[str, str]:
    """``(version, source URL)`` of the install, from its package.json: the
    source at that version's tag; ``("?", the repository)`` when unreadable."""
    try:
        with open(os.path.join(settings.wabac_dir, "package.json"), encoding="utf-8") as file:
            version = json.load(file).get("version")
    except (OSError, ValueError, AttributeError):
        version = None
    if not isinstance(version, str) or not re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", version):
        return "?", _SOURCE
    return version, f"{_SOURCE}/tree/v{version}"


async def replay_page_handler(request: web.Request) -> web.Response:
    """``GET /{coll}/{timestamp}/{url}``: the replay page (module docstring)."""
    coll, timestamp, url = _replay_path(request)
    settings = request.app[CONFIG].replay
    if not settings.enabled:
        location = f"{public_base(request)}/{coll}/{timestamp}id_/{url}"
        return web.Response(status=302, headers={"Location": location})
    try:
        captured = await _closest(collection_for(request), url, timestamp)
    except GatewayError as exc:
        if not wants_html(request):
            raise
        return error_page(request, exc, "Not in the archive")
    coll = request.match_info["coll"]  # a configured name: [A-Za-z0-9][A-Za-z0-9_.-]*
    version, source = await asyncio.to_thread(_installed_package, settings)
    setup = {
        "coll": coll,
        "url": url,
        "timestamp": captured,
        "prefix": f"/{coll}/",
        "serviceWorker": f"{SERVICE_WORKER_URL}?replayPrefix=",
        "scope": "/",
    }
    return render_page(
        "replay.html",
        coll=coll,
        url=url,
        captured=captured,
        when=_when(captured),
        wabac_version=version,
        wabac_source=source,
        setup=setup,
    )


async def replay_frame_handler(request: web.Request) -> web.Response:
    """``GET /{coll}/{timestamp}mp_/{url}`` reaching the gateway: 302 to the replay page."""
    coll, timestamp, url = _replay_path(request)
    mode = "" if request.app[CONFIG].replay.enabled else "id_"
    location = f"{public_base(request)}/{coll}/{timestamp}{mode}/{url}"
    return web.Response(status=302, headers={"Location": location})


async def wabac_file_handler(request: web.Request) -> web.FileResponse:
    """``GET /_wabac/{sw.js|LICENSE.md}``: a file of the wabac.js install (module docstring)."""
    settings = request.app[CONFIG].replay
    if not settings.enabled:
        raise NotFound(_OFF)
    name = request.match_info["name"]
    headers = {"Content-Type": _SERVED[name], "Cache-Control": "no-cache"}
    if name == "sw.js":
        headers["Service-Worker-Allowed"] = "/"
    return web.FileResponse(os.path.join(settings.wabac_dir, name), headers=headers)


_PATH_PARAMS: Final[dict[str, dict[str, Any]]] = {
    "coll": {"$ref": "#/components/parameters/coll"},
    "url": {"$ref": "#/components/parameters/uri_r"},
    "timestamp": {
        "name": "timestamp",
        "in": "path",
        "required": True,
        "description": "1 to 14 digits: the capture closest to this time is replayed",
        "schema": {"type": "string", "pattern": r"^\d{1,14}$"},
    },
    "name": {
        "name": "name",
        "in": "path",
        "required": True,
        "description": "sw.js or LICENSE.md",
        "schema": {"type": "string", "enum": sorted(_SERVED)},
    },
}
_ANSWERS: Final = {
    "302": "to the replay page, or the raw memento when replay is off (see Location)",
    "400": "a bad `timestamp` or `url` (`param` names it)",
    "404": "unknown collection, no capture of `url`, or replay off (`/_wabac/`)",
    "503": "every source failed (`errors`: source -> reason)",
}


def _op(summary: str, description: str, ok: dict[str, Any], *errors: str) -> dict[str, Any]:
    """An OpenAPI operation of the Pages tag; its path parameters are read off the path."""
    responses: dict[str, Any] = {"200": ok}
    for status in errors:
        answer: dict[str, Any] = {"description": _ANSWERS[status]}
        if status != "302":
            error = {"$ref": "#/components/schemas/Error"}
            answer["content"] = {"application/json": {"schema": error}}
        responses[status] = answer
    return {
        "tags": ["Pages"],
        "summary": summary,
        "description": description,
        "parameters": [],
        "responses": responses,
    }


def _paths() -> dict[str, dict[str, Any]]:
    replay = "/{coll}/{timestamp}/{url}"
    frame = "/{coll}/{timestamp}mp_/{url}"
    files = "/_wabac/{name}"
    paths = {
        replay: _op(
            "Replay page (wabac.js)",
            "The capture closest to `timestamp`, replayed in the browser by wabac.js from "
            "the raw mementos, under a banner (docs/replay.md). Replay off: 302 to the raw "
            "memento.",
            {"description": "the replay page", "content": {"text/html": {}}},
            *("302", "400", "404", "503"),
        ),
        frame: _op(
            "Replay frame URL reaching the gateway",
            "Answered in the browser by wabac.js's service worker; when it reaches the "
            "gateway, a 302 to the replay page (replay off: to the raw memento).",
            {"description": "never: a redirect"},
            *("302", "400"),
        ),
        files: _op(
            "wabac.js's service worker and licence",
            "`sw.js` (with Service-Worker-Allowed: /) or `LICENSE.md` of the wabac.js "
            "install (AGPL-3.0-or-later); 404 when replay is off.",
            {"description": "the file", "content": {t.split(";")[0]: {} for t in _SERVED.values()}},
            "404",
        ),
    }
    for path, operation in paths.items():
        names = [name for name in _PATH_PARAMS if "{" + name + "}" in path]
        operation["parameters"] = [_PATH_PARAMS[name] for name in names]
    return {path: {"get": operation} for path, operation in paths.items()}


#: This module's routes for ``/openapi.json`` (:mod:`gateway.api.openapi`).
OPENAPI_PATHS: Final = _paths()
