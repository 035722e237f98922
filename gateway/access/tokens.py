"""Bearer tokens (RFC 6750) and their scopes: the ``auth:`` section of collections.yaml.

Two scopes, each a kind of route that does more than read the archive:

- ``record``: every route of a collection that records (a ``record: true``
  step or member): its lookups fetch from the live web or a remote archive
  and write what they serve into the store;
- ``admin``: the operator routes named in ``require.admin``, from
  :data:`OPERATOR_ROUTES` (``/_jobs``, ``/_status``, ``/metrics``).

Every other route stays open, ``/_health`` and ``/_ready`` always. The
section, as the docs write it (``docs/access-tokens.md``)::

    auth:
      realm: archive gateway              # in WWW-Authenticate; default "gateway"
      tokens:
        - sha256: 5e884898da28047151d0e56f8dc62927...   # the token's SHA-256, hex
          scopes: [record]
        - env: GATEWAY_ADMIN_TOKEN        # the token itself, read at start-up
          scopes: [admin, record]
      require:
        record: true                      # default true
        admin: [/_jobs, /metrics]         # default [/_jobs]

Without an ``auth:`` section nothing is required (:attr:`AuthSettings.enabled`
is false). The gateway keeps only SHA-256 digests, a token from the
environment included, and compares the digest of a presented token with
each of them by :func:`hmac.compare_digest`, every one of them whatever
matched (:meth:`AuthSettings.match`): the time taken says nothing about which
bytes or which token were close. Problems are :class:`ConfigError` naming
the YAML path (``auth.tokens[1].env: ...``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from gateway.errors import ConfigError
from gateway.yaml_load import mapping, reject_unknown

__all__ = [
    "MIN_TOKEN_CHARS",
    "OPERATOR_ROUTES",
    "SCOPES",
    "AuthSettings",
    "Scope",
    "TokenEntry",
    "check_token",
    "describe",
    "is_b64token",
    "new_token",
    "parse_auth",
    "token_sha256",
]

Scope = Literal["record", "admin"]
#: The scopes a token may carry, in the order the docs list them.
SCOPES: Final[tuple[Scope, ...]] = ("record", "admin")
#: The routes ``require.admin`` may name: what an operator reads, not the archive.
OPERATOR_ROUTES: Final = ("/_jobs", "/_status", "/metrics")
#: ``require.admin`` when the section does not say.
DEFAULT_ADMIN_ROUTES: Final = frozenset({"/_jobs"})
#: Shortest token accepted: 16 characters of a random token are at least 96 bits.
MIN_TOKEN_CHARS: Final = 16

#: RFC 6750 §2.1 ``b64token``: the characters a bearer token may have.
_B64TOKEN: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_HEX_SHA256: Final = re.compile(r"[0-9a-fA-F]{64}")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: A realm is written in a quoted-string (RFC 9110 §5.6.4): no quote, backslash or control.
_REALM: Final = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]{1,100}")


def is_b64token(text: str) -> bool:
    """True when ``text`` has the syntax of a bearer token (RFC 6750 §2.1 ``b64token``).

    >>> is_b64token("mF_9.B5f-4.1JqM"), is_b64token("two words"), is_b64token("")
    (True, False, False)
    """
    return _B64TOKEN.fullmatch(text) is not None


def check_token(token: str) -> str | None:
    """Why ``token`` cannot be a bearer token, or None when it can.

    A token is a ``b64token`` (RFC 6750 §2.1: letters, digits, ``-._~+/``,
    then ``=`` padding) of at least :data:`MIN_TOKEN_CHARS` characters.

    >>> check_token("a" * 16) is None
    True
    >>> check_token("short")
    'a token of 5 character(s): expected at least 16'
    >>> check_token("has space in it, 16+")[:40]
    'not a bearer token (RFC 6750 b64token): '
    """
    if not is_b64token(token):
        return (
            "not a bearer token (RFC 6750 b64token): expected letters, digits and "
            "'-._~+/', then '=' padding"
        )
    if len(token) < MIN_TOKEN_CHARS:
        return f"a token of {len(token)} character(s): expected at least {MIN_TOKEN_CHARS}"
    return None


def token_sha256(token: str) -> str:
    """The lower-case hex SHA-256 of ``token`` (its UTF-8 bytes): what ``sha256:`` holds.

    >>> token_sha256("correct horse battery staple")[:16]
    'c4bbcb1fbec99d65'
    """
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A new random token: 32 bytes from :mod:`secrets`, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenEntry:
    """One accepted token: its SHA-256 ``digest`` (32 bytes) and its ``scopes``.

    ``path`` is where it was configured (``auth.tokens[0]``), for messages.
    """

    digest: bytes
    scopes: frozenset[Scope]
    path: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthSettings:
    """The ``auth:`` section: accepted tokens and what requires which scope.

    ``require_record``: every route of a recording collection requires the
    scope ``record``. ``require_admin``: the operator routes (from
    :data:`OPERATOR_ROUTES`) that require the scope ``admin``. ``realm``
    goes in ``WWW-Authenticate`` (RFC 6750 §3).
    """

    tokens: tuple[TokenEntry, ...] = ()
    require_record: bool = False
    require_admin: frozenset[str] = frozenset()
    realm: str = "gateway"

    @property
    def enabled(self) -> bool:
        """True when some route requires a token."""
        return self.require_record or bool(self.require_admin)

    def match(self, token: str) -> TokenEntry | None:
        """The entry whose digest is the SHA-256 of ``token``, or None.

        The digest is compared with every entry's by :func:`hmac.compare_digest`,
        all of them, without stopping at a match: neither the bytes that
        matched nor the entry that did can be read from the time it takes.
        """
        digest = hashlib.sha256(token.encode()).digest()
        found: TokenEntry | None = None
        for entry in self.tokens:
            if hmac.compare_digest(entry.digest, digest):
                found = entry
        return found


def parse_auth(value: object, path: str) -> AuthSettings:
    """The ``auth:`` mapping at ``path`` as :class:`AuthSettings` (module docstring).

    Raises :class:`ConfigError` at the YAML path of the first problem: an
    unknown key, a ``sha256`` that is not 64 hex digits, an ``env`` variable
    that is not set or holds no valid token (:func:`check_token`), a token
    given twice, an unknown scope or operator route, or a required scope no
    token carries.
    """
    data = mapping(value, path)
    reject_unknown(data, {"realm", "tokens", "require"}, path)
    realm = data.get("realm", "gateway")
    if not isinstance(realm, str) or not _REALM.fullmatch(realm):
        raise ConfigError(
            f"{path}.realm",
            f"expected 1 to 100 printable ASCII characters without '\"' or '\\', got {realm!r}",
        )
    tokens = _tokens(data.get("tokens"), f"{path}.tokens")
    require = mapping(data.get("require") or {}, f"{path}.require")
    reject_unknown(require, {"record", "admin"}, f"{path}.require")
    record = require.get("record", True)
    if not isinstance(record, bool):
        raise ConfigError(f"{path}.require.record", f"expected true or false, got {record!r}")
    admin = _operator_routes(require.get("admin"), f"{path}.require.admin")
    held = {scope for entry in tokens for scope in entry.scopes}
    for scope, wanted in (("record", record), ("admin", bool(admin))):
        if wanted and scope not in held:
            raise ConfigError(
                f"{path}.require.{scope}",
                f"requires the scope '{scope}' and no token in {path}.tokens has it: add "
                f"'{scope}' to a token's scopes, or set require.{scope}: "
                + ("false" if scope == "record" else "[]"),
            )
    return AuthSettings(tokens=tokens, require_record=record, require_admin=admin, realm=realm)


def _tokens(value: object, path: str) -> tuple[TokenEntry, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(
            path,
            "expected a non-empty list of tokens, each {sha256: HEX, scopes: [...]} "
            "or {env: VARIABLE, scopes: [...]}",
        )
    entries: list[TokenEntry] = []
    for i, item in enumerate(value):
        entry = _token(item, f"{path}[{i}]")
        for earlier in entries:
            if hmac.compare_digest(earlier.digest, entry.digest):
                raise ConfigError(entry.path, f"the same token as {earlier.path}")
        entries.append(entry)
    return tuple(entries)


def _token(value: object, path: str) -> TokenEntry:
    data = mapping(value, path)
    reject_unknown(data, {"sha256", "env", "scopes"}, path)
    if ("sha256" in data) == ("env" in data):
        raise ConfigError(path, "expected exactly one of sha256 (the token's hex SHA-256) or env")
    if "sha256" in data:
        digest = _sha256(data["sha256"], f"{path}.sha256")
    else:
        digest = hashlib.sha256(_env_token(data["env"], f"{path}.env").encode()).digest()
    return TokenEntry(
        digest=digest, scopes=_scopes(data.get("scopes"), f"{path}.scopes"), path=path
    )


def _sha256(value: object, path: str) -> bytes:
    if not isinstance(value, str) or not _HEX_SHA256.fullmatch(value):
        shown = "a value" if isinstance(value, str) else repr(value)  # never echo a secret
        raise ConfigError(
            path,
            f"expected the 64 hex digits of the token's SHA-256, got {shown}: "
            "`gateway token hash` prints it (never put the token itself here)",
        )
    return bytes.fromhex(value)


def _env_token(value: object, path: str) -> str:
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise ConfigError(path, f"expected the name of an environment variable, got {value!r}")
    token = os.environ.get(value, "")
    if not token:
        raise ConfigError(
            path, f"the environment variable {value} is not set or empty: set it to the token"
        )
    problem = check_token(token)
    if problem is not None:
        raise ConfigError(path, f"the environment variable {value} holds {problem}")
    return token


def _scopes(value: object, path: str) -> frozenset[Scope]:
    if value is None:
        raise ConfigError(path, f"expected a non-empty list of scopes ({', '.join(SCOPES)})")
    items = value if isinstance(value, list) else [value]
    scopes: set[Scope] = set()
    for i, item in enumerate(items):
        scope = next((s for s in SCOPES if s == item), None)
        if scope is None:
            where = path if not isinstance(value, list) else f"{path}[{i}]"
            raise ConfigError(where, f"{item!r} is not a scope; expected {' or '.join(SCOPES)}")
        scopes.add(scope)
    if not scopes:
        raise ConfigError(path, f"expected a non-empty list of scopes ({', '.join(SCOPES)})")
    return frozenset(scopes)


def _operator_routes(value: object, path: str) -> frozenset[str]:
    if value is None:
        return DEFAULT_ADMIN_ROUTES
    if not isinstance(value, list):
        raise ConfigError(path, f"expected a list of routes from {', '.join(OPERATOR_ROUTES)}")
    for i, item in enumerate(value):
        if item not in OPERATOR_ROUTES:
            raise ConfigError(
                f"{path}[{i}]",
                f"{item!r} is not an operator route; expected one of {', '.join(OPERATOR_ROUTES)}",
            )
    return frozenset(value)


def describe(settings: AuthSettings) -> Mapping[str, str]:
    """What requires a token, route kind -> scope, for ``check-config`` (no secrets)."""
    routes: dict[str, str] = {}
    if settings.require_record:
        routes["every route of a collection that records"] = "record"
    for route in OPERATOR_ROUTES:
        if route in settings.require_admin:
            routes[route] = "admin"
    return routes
