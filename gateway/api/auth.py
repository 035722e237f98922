"""Bearer tokens at the door: a route that requires a scope checks the token first.

:func:`require_scope` wraps a handler so that nothing runs (no lookup, no
live fetch, no write into the store, no forwarding to the recording worker)
until the request's ``Authorization: Bearer TOKEN`` is one of the tokens of
the ``auth:`` section (:class:`~gateway.access.tokens.AuthSettings`) and
carries the route's scope. The answers follow RFC 6750 §3:

- no ``Authorization`` header, or another scheme (``Basic``): **401** with
  ``WWW-Authenticate: Bearer realm="gateway", scope="record"``, no error code
  (§3.1: the client did not try);
- a token that is not accepted: **401**, ``error="invalid_token"``;
- an accepted token without the route's scope: **403**,
  ``error="insufficient_scope"``;
- a malformed header (``Bearer`` without a token, characters outside the
  ``b64token`` syntax, two ``Authorization`` headers): **400**,
  ``error="invalid_request"``.

Each is a JSON ``{"message": ...}`` that never repeats the token. Tokens in
the query string (RFC 6750 §2.3, ``access_token=``) are not read: URLs end up
in logs. A request let through is marked (:data:`CREDENTIAL_USED`) so that
:func:`client_headers` leaves the token out of what is sent to the live web
and recorded. The header itself crosses the hop to the recording worker
under ``--workers N`` unchanged (it is end-to-end, RFC 9110 §11.6.2), and the
recording worker checks it again: every process checks every request it
serves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from aiohttp import hdrs, web

from gateway.access.tokens import AuthSettings, Scope, is_b64token

__all__ = ["CREDENTIAL_USED", "client_headers", "require_scope"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Request key set when the request's ``Authorization`` was the gateway's own credential.
CREDENTIAL_USED: Final = web.RequestKey("credential_used", bool)

#: Why a route requires its scope, in the 401/403 message.
_WHY: Final[dict[Scope, str]] = {
    "record": "this collection records what it serves into the store",
    "admin": "this is an operator route",
}


def require_scope(
    handler: Handler,
    settings: AuthSettings,
    scope: Scope,
    *,
    collections: frozenset[str] | None = None,
) -> Handler:
    """``handler`` answering 400/401/403 (module docstring) unless the request
    carries a token with ``scope``.

    ``collections``: check only requests whose ``{coll}`` is one of these (a
    ``/{coll}/...`` route serves collections that record and others); None:
    every request of the route.
    """

    async def guarded(request: web.Request) -> web.StreamResponse:
        if collections is not None and request.match_info.get("coll") not in collections:
            return await handler(request)
        refused = _refusal(request, settings, scope)
        if refused is not None:
            return refused
        request[CREDENTIAL_USED] = True
        return await handler(request)

    return guarded


def client_headers(request: web.Request) -> Iterable[tuple[str, str]]:
    """The request's headers, without ``Authorization`` when it was the gateway's
    token (:data:`CREDENTIAL_USED`): a direct POST sends the client's headers
    to the live web and records them, never the gateway's token."""
    if not request.get(CREDENTIAL_USED):
        return request.headers.items()
    return [(k, v) for k, v in request.headers.items() if k.lower() != "authorization"]


def _refusal(request: web.Request, settings: AuthSettings, scope: Scope) -> web.Response | None:
    """The 400/401/403 answer for ``request``, or None when its token has ``scope``."""
    values = request.headers.getall(hdrs.AUTHORIZATION, [])
    why = f"{_WHY[scope]}: it requires a bearer token with the scope '{scope}'"
    if not values:
        return _answer(settings, scope, 401, f"{why} (Authorization: Bearer TOKEN)", None)
    if len(values) > 1:
        return _answer(
            settings, scope, 400, "more than one Authorization header", "invalid_request"
        )
    auth_scheme, _, token = values[0].strip().partition(" ")
    if auth_scheme.lower() != "bearer":
        return _answer(settings, scope, 401, f"{why}; the Authorization scheme is not Bearer", None)
    token = token.strip(" ")
    if not is_b64token(token):
        return _answer(
            settings,
            scope,
            400,
            "the Authorization header is not 'Bearer TOKEN' (RFC 6750 §2.1)",
            "invalid_request",
        )
    entry = settings.match(token)
    if entry is None:
        return _answer(settings, scope, 401, f"{why}; this token is not accepted", "invalid_token")
    if scope not in entry.scopes:
        return _answer(
            settings, scope, 403, f"{why}; this token does not have it", "insufficient_scope"
        )
    return None


def _answer(
    settings: AuthSettings, scope: Scope, status: int, message: str, error: str | None
) -> web.Response:
    """A JSON ``{"message": ...}`` with ``WWW-Authenticate`` (RFC 6750 §3)."""
    challenge = f'Bearer realm="{settings.realm}", scope="{scope}"'
    if error is not None:
        challenge += f', error="{error}"'
    return web.json_response(
        {"message": message}, status=status, headers={hdrs.WWW_AUTHENTICATE: challenge}
    )
