"""CORS for every route: browsers may read the Index, Resource and Memento APIs.

Two pieces (Fetch standard, "CORS protocol"), installed by the route wrapper
of :mod:`gateway.server.app` rather than by an aiohttp middleware and signal (which
cost about a tenth of a one-line lookup's CPU):

- :func:`add_cors_headers` puts ``Access-Control-Allow-Origin: *`` and
  ``Access-Control-Expose-Headers`` (:data:`EXPOSE_HEADERS`) on a response
  before its headers go out, unless it has them already: the wrapper does
  it for every answer a handler returns unsent (redirects and JSON errors
  included), and a handler that streams calls it before ``prepare``. A
  handler on the hot path starts from :func:`headers_with_cors`, a copy of
  headers made once with both (setting two headers of a ``CIMultiDict`` one
  by one costs about 3k instructions; copying them with the others, ~0.5k);
- :func:`preflight` answers a preflight: an ``OPTIONS`` request to a path that
  exists (a route answers other methods there) gets ``204 No Content`` with
  ``Allow``, ``Access-Control-Allow-Methods``, ``Access-Control-Allow-Headers``
  (the requested ones, e.g. ``Accept-Datetime``) and
  ``Access-Control-Max-Age``. ``OPTIONS`` on an unknown path is a 404.

No credentials in the CORS sense are involved (no cookies, no HTTP
authentication a browser adds by itself): a bearer token
(:mod:`gateway.api.auth`) is an ``Authorization`` header the script sets,
allowed by the preflight like any requested header. So the wildcard origin
is safe and ``Access-Control-Allow-Credentials`` is never sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from aiohttp import web
from multidict import CIMultiDict, istr

__all__ = ["EXPOSE_HEADERS", "MAX_AGE_S", "add_cors_headers", "headers_with_cors", "preflight"]

#: Response headers a browser script may read (beyond the CORS-safelisted ones):
#: the Memento headers (RFC 7089) and the gateway's index/resource headers.
EXPOSE_HEADERS: Final = (
    "Link",
    "Location",
    "Memento-Datetime",
    "Content-Location",
    "X-Memento-Count",
    "ResErrors",
    "Warcserver-Cdx",
    "Warcserver-Source-Coll",
    "Warcserver-Type",
    "Warcserver-Step",
    "WARC-Target-URI",
    "WWW-Authenticate",
)
_EXPOSE_VALUE: Final = ", ".join(EXPOSE_HEADERS)
_ALLOW_ORIGIN: Final = istr("Access-Control-Allow-Origin")
_EXPOSE: Final = istr("Access-Control-Expose-Headers")
#: How long a browser may cache a preflight answer (seconds).
MAX_AGE_S: Final = 86400
#: Request headers allowed when a preflight does not name any.
_DEFAULT_ALLOW_HEADERS: Final = "Accept-Datetime, Content-Type, Range"


def add_cors_headers(response: web.StreamResponse) -> web.StreamResponse:
    """Set the CORS headers every answer carries, unless set already; call before
    ``prepare``. Returns ``response``."""
    headers = response.headers
    if _ALLOW_ORIGIN not in headers:
        headers[_ALLOW_ORIGIN] = "*"
        headers[_EXPOSE] = _EXPOSE_VALUE
    return response


def headers_with_cors(template: dict[str, str]) -> CIMultiDict[str]:
    """``template`` and the CORS headers, as headers to copy for each answer (``.copy()``)."""
    headers = CIMultiDict(template)
    headers[_ALLOW_ORIGIN] = "*"
    headers[_EXPOSE] = _EXPOSE_VALUE
    return headers


def preflight(request: web.Request, allowed: Iterable[str]) -> web.Response:
    """The ``204`` answer to a preflight of a path whose routes answer ``allowed`` methods."""
    methods = sorted({*allowed, "OPTIONS"})
    requested = request.headers.get("Access-Control-Request-Headers", "").strip()
    return web.Response(
        status=204,
        headers={
            "Allow": ", ".join(methods),
            "Access-Control-Allow-Methods": ", ".join(methods),
            "Access-Control-Allow-Headers": requested or _DEFAULT_ALLOW_HEADERS,
            "Access-Control-Max-Age": str(MAX_AGE_S),
        },
    )
