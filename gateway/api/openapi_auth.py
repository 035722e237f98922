"""The bearer tokens of :mod:`gateway.api.auth` in the OpenAPI document.

``components.securitySchemes.bearer`` is HTTP ``bearer`` (RFC 6750). The
operations that an ``auth:`` section can guard (``docs/access-tokens.md``)
carry it as an **optional** requirement, ``[{}, {"bearer": [scope]}]``: the
empty requirement first, since without an ``auth:`` section (the default)
no route asks for a token, and with one, only the collections that record
and the operator routes named in ``require.admin`` do. The scope is a role
name (OpenAPI 3.1 §4.8.30: for a scheme other than OAuth2 and OpenID
Connect the list names the roles required): ``record`` for the routes under
``/{coll}``, ``admin`` for :data:`~gateway.access.tokens.OPERATOR_ROUTES`.

Those operations also describe the answers of a refusal: 401 (no token,
another scheme, a token not accepted), 403 (a token without the scope) and
400 (a malformed ``Authorization``), each a JSON ``Error`` with
``WWW-Authenticate``.
"""

from __future__ import annotations

from typing import Any, Final

from gateway.access.tokens import OPERATOR_ROUTES

__all__ = ["SECURITY_SCHEMES", "add_bearer"]

#: ``components.securitySchemes``.
SECURITY_SCHEMES: Final = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "A token of the `auth:` section (`Authorization: Bearer TOKEN`, "
        "RFC 6750 §2.1; never in the query string). Off by default: only the routes of "
        "collections that record (scope `record`) and the operator routes named in "
        "`auth.require.admin` (scope `admin`) ask for one, when an `auth:` section "
        "says so.",
    }
}

_ERROR_JSON: Final = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
_CHALLENGE: Final = {
    "WWW-Authenticate": {
        "description": 'RFC 6750 §3: `Bearer realm="...", scope="..."` and, but for a '
        'missing token, `error="invalid_token"`, `"insufficient_scope"` or '
        '`"invalid_request"`',
        "schema": {"type": "string"},
    }
}
_REFUSALS: Final = {
    "400": "a malformed Authorization header (two of them, `Bearer` without a valid token)",
    "401": "the route requires a token: none was given, another scheme was, or the token "
    "is not accepted",
    "403": "the token is accepted but does not carry the route's scope",
}


def _scope_of(path: str) -> str | None:
    """The scope an ``auth:`` section can make ``path`` require, or None (always open)."""
    if path in OPERATOR_ROUTES:
        return "admin"
    if "{coll}" in path:  # as gateway.server.app guards the routes
        return "record"
    return None


def add_bearer(paths: dict[str, dict[str, Any]]) -> None:
    """Give every operation of ``paths`` that can require a token the optional
    bearer requirement and the refusals' answers (in place; a 400 the operation
    already describes keeps its description)."""
    for path, operations in paths.items():
        scope = _scope_of(path)
        if scope is None:
            continue
        for operation in operations.values():
            operation["security"] = [{}, {"bearer": [scope]}]
            responses = operation["responses"]
            for status, description in _REFUSALS.items():
                if status not in responses:
                    responses[status] = {
                        "description": description,
                        "headers": _CHALLENGE,
                        "content": _ERROR_JSON,
                    }
