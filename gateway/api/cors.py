"""CORS for every route: browsers may read the Index, Resource and Memento APIs.

:func:`setup_cors` installs two pieces on an application (Fetch standard,
"CORS protocol"):

- an ``on_response_prepare`` hook that adds ``Access-Control-Allow-Origin: *``
  and ``Access-Control-Expose-Headers`` (:data:`EXPOSE_HEADERS`) to every
  response just before its headers go out: streamed answers, redirects,
  and the JSON errors of the error middleware alike. (A middleware that
  edits the response after the handler returns would be too late for a
  streamed answer, whose headers are already sent.)
- a middleware answering preflights: an ``OPTIONS`` request to a path that
  exists (a route answers other methods there) gets ``204 No Content`` with
  ``Allow``, ``Access-Control-Allow-Methods``, ``Access-Control-Allow-Headers``
  (the requested ones, e.g. ``Accept-Datetime``) and
  ``Access-Control-Max-Age``. ``OPTIONS`` on an unknown path is a 404.

No credentials are involved (the gateway has no cookies or authentication),
so the wildcard origin is safe and ``Access-Control-Allow-Credentials`` is
never sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

__all__ = ["EXPOSE_HEADERS", "MAX_AGE_S", "cors_preflight_middleware", "setup_cors"]

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
)
_EXPOSE_VALUE: Final = ", ".join(EXPOSE_HEADERS)
#: How long a browser may cache a preflight answer (seconds).
MAX_AGE_S: Final = 86400
#: Request headers allowed when a preflight does not name any.
_DEFAULT_ALLOW_HEADERS: Final = "Accept-Datetime, Content-Type, Range"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare`` hook: CORS headers on every response."""
    response.headers["Access-Control-Allow-Origin"] = "*"
    response.headers["Access-Control-Expose-Headers"] = _EXPOSE_VALUE


@web.middleware
async def cors_preflight_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer ``OPTIONS`` on existing paths with ``204`` and the preflight headers."""
    if request.method != "OPTIONS":
        return await handler(request)
    problem = request.match_info.http_exception
    if not isinstance(problem, web.HTTPMethodNotAllowed):
        return await handler(request)  # unknown path (404), or a route that handles OPTIONS
    methods = sorted({*problem.allowed_methods, "OPTIONS"})
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


def setup_cors(app: web.Application) -> None:
    """Install the CORS hook and the preflight middleware on ``app`` (before it starts).

    The middleware is appended, so it runs inside middlewares already
    installed (the error middleware still renders its 404s and 405s).
    """
    app.on_response_prepare.append(_add_cors_headers)
    app.middlewares.append(cors_preflight_middleware)
