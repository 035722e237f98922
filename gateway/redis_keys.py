"""Redis locations shared by the Redis index source and the Redis WARC resolver.

- :func:`split_redis_url` parses ``redis://[user:password@]host[:port]/db[/key]``
  (pywb ``RedisIndexSource.parse_redis_url``) into the server URL that
  :meth:`~gateway.clients.SharedClients.redis` pools by (``redis://host:port/db``)
  and the key.
- :class:`KeyTemplate` lists the keys a template containing ``*`` matches
  (``SCAN ... MATCH``, as pywb's ``scan_keys``), sorted by name and cached for
  a few seconds so a burst of lookups costs one scan.
- :func:`describe_failure` turns a redis-py exception into the reason text
  the gateway's errors carry (``connection refused``, ``timed out``, ...).

Nothing here holds a connection: the pools belong to
:class:`~gateway.clients.SharedClients`.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from redis.exceptions import (
    AuthenticationError,
    ConnectionError,
    RedisError,
    ResponseError,
    TimeoutError,
)

if TYPE_CHECKING:
    import redis.asyncio

__all__ = [
    "REDIS_SCHEMES",
    "KeyTemplate",
    "describe_failure",
    "glob_escape",
    "is_wrong_type",
    "redact",
    "server_and_key",
    "split_redis_url",
]

#: URL schemes of a Redis server (``rediss://`` is Redis over TLS).
REDIS_SCHEMES: Final = ("redis://", "rediss://")
#: Keys asked for per ``SCAN`` round trip (a hint to the server).
SCAN_COUNT: Final = 1000
_FORM: Final = "redis://host:port/db/key, e.g. redis://127.0.0.1:6379/0/pywb:cdxj"


def split_redis_url(text: str) -> tuple[str, str]:
    """``(server_url, key)`` from ``redis://[user:password@]host[:port]/db[/key]``.

    ``server_url`` is normalized to ``scheme://netloc/db`` (``db`` defaults to
    0 when the path is empty); ``key`` is everything after ``/db/``, taken as
    written (it may contain ``/`` and ``*``), or ``""`` when absent.

    >>> split_redis_url("redis://127.0.0.1:6379/0/pywb:cdxj")
    ('redis://127.0.0.1:6379/0', 'pywb:cdxj')
    >>> split_redis_url("redis://localhost/2/coll/*/cdxj")
    ('redis://localhost/2', 'coll/*/cdxj')
    >>> split_redis_url("rediss://:secret@cache.example.org:6380")
    ('rediss://:secret@cache.example.org:6380/0', '')

    Raises :class:`ValueError` naming the expected form.
    """
    scheme = next((s for s in REDIS_SCHEMES if text.startswith(s)), None)
    if scheme is None:
        raise ValueError(f"{text!r} is not a Redis URL; expected {_FORM}")
    netloc, _, path = text[len(scheme) :].partition("/")
    try:
        parts = urlsplit(f"{scheme}{netloc}")
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise ValueError(f"{text!r}: bad host or port ({exc}); expected {_FORM}") from exc
    if not parts.hostname:
        raise ValueError(f"{text!r} has no host; expected {_FORM}")
    db, _, key = path.partition("/")
    if not db:
        db = "0"
    if not db.isascii() or not db.isdigit():
        raise ValueError(f"{text!r}: database {db!r} is not a number; expected {_FORM}")
    return f"{scheme}{netloc}/{int(db)}", key


def server_and_key(url: str, key: str, *, what: str, form: str) -> tuple[str, str]:
    """The server URL and the key of a config's ``url`` and ``key`` entries.

    The key is given once: at the end of ``url`` (``.../db/key``) or as
    ``key`` (the same in both is accepted). ``what`` names the key's data type
    and ``form`` the expected spelling, for the messages. Raises
    :class:`ValueError` naming the problem.

    >>> server_and_key("redis://127.0.0.1:6379/0", "pywb:cdxj", what="sorted-set", form="...")
    ('redis://127.0.0.1:6379/0', 'pywb:cdxj')
    """
    server, url_key = split_redis_url(url)
    if url_key and key and url_key != key:
        raise ValueError(f"url {url!r} names key {url_key!r} but key is {key!r}; give the key once")
    key = key or url_key
    if not key:
        raise ValueError(f"no {what} key in {url!r}; expected {form} or a key: entry")
    return server, key


def redact(server_url: str) -> str:
    """``server_url`` without its scheme and with any password masked.

    >>> redact("redis://:secret@cache:6380/1")
    ':***@cache:6380/1'
    >>> redact("redis://127.0.0.1:6379/0")
    '127.0.0.1:6379/0'
    """
    rest = server_url.split("://", 1)[-1]
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return rest
    user, colon, _ = userinfo.partition(":")
    return f"{user}{':***' if colon else ''}@{host}"


def glob_escape(template: str) -> str:
    r"""A ``SCAN MATCH`` pattern where only ``*`` is special.

    ``?``, ``[``, ``]`` and ``\`` in a key name are matched literally.

    >>> glob_escape("pywb:*:cdx[j]?")
    'pywb:*:cdx\\[j\\]\\?'
    """
    out = []
    for char in template:
        out.append("\\" + char if char in "?[]\\" else char)
    return "".join(out)


def is_wrong_type(exc: RedisError) -> bool:
    """True for ``WRONGTYPE`` replies (the key holds another data type)."""
    return isinstance(exc, ResponseError) and str(exc).startswith("WRONGTYPE")


def describe_failure(exc: RedisError) -> str:
    """A short reason for a redis-py exception, for error messages.

    ``connection refused (...)``, ``connection failed (...)``, ``timed out
    (...)``, ``authentication failed (...)`` or ``server error: ...``.
    """
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, AuthenticationError):
        return f"authentication failed ({detail}); check the password in the URL"
    if isinstance(exc, TimeoutError):
        return f"timed out ({detail})"
    if isinstance(exc, ConnectionError):
        if _refused(exc) or detail.startswith("Error 111 "):
            return f"connection refused ({detail}); is redis-server running there?"
        return f"connection failed ({detail})"
    return f"server error: {detail}"


def _refused(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ConnectionRefusedError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class KeyTemplate:
    """The keys matching a template with ``*``, sorted by name, cached ``cache_s`` seconds.

    ``*`` matches any run of characters (``SCAN MATCH`` glob); other glob
    characters are literal (:func:`glob_escape`). The listing is refreshed by
    the first lookup after it expires; concurrent lookups wait for that one
    scan. Keys created meanwhile are therefore seen up to ``cache_s`` late
    (0 disables the cache).
    """

    def __init__(self, template: str, cache_s: float) -> None:
        self.template = template
        self.pattern = glob_escape(template)
        self.cache_s = cache_s
        self._keys: list[bytes] | None = None
        self._listed_at = float("-inf")
        self._lock: asyncio.Lock | None = None

    async def keys(self, client: redis.asyncio.Redis) -> list[bytes]:
        """Matching key names, sorted bytewise; raises :class:`RedisError` from the scan."""
        if self._fresh():
            assert self._keys is not None
            return self._keys
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._fresh():
                assert self._keys is not None
                return self._keys
            found: set[bytes] = set()
            async for name in client.scan_iter(match=self.pattern, count=SCAN_COUNT):
                found.add(name if isinstance(name, bytes) else str(name).encode())
            keys = sorted(found)
            self._keys, self._listed_at = keys, time.monotonic()
            return keys

    def _fresh(self) -> bool:
        return self._keys is not None and time.monotonic() - self._listed_at < self.cache_s
