"""Where a WARC filename lives, according to a Redis hash (pywb ``RedisResolver``).

The hash maps a CDX ``filename`` to its full location: an absolute path, a
``file://`` URL or an ``http(s)://`` URL (``HSET pywb:warcs iana.warc.gz
/srv/warcs/iana.warc.gz``). A key containing ``*`` is a template: every hash
whose name matches (``SCAN MATCH``, cached ``key_cache_s`` seconds, as for
the Redis index source) is asked, in key-name order, in one pipelined round
trip, and every location found is a candidate, best first.

Configuration (``resource:`` entries)::

    resource: warc-index+redis://127.0.0.1:6379/0/pywb:warcs
    resource: redis://127.0.0.1:6379/0/pywb:warcs          # as pywb accepts it
    resource: {type: redis_index, url: redis://127.0.0.1:6379/0, key: "coll:*:warcs"}

Locations are trusted like a path index's: the administrator writes the hash,
and the filename is only a field name in it, so no prefix check applies. A
relative path is taken relative to the working directory (pywb semantics).

Deliberate differences from pywb: with a template, the locations from every
matching hash are returned (pywb stops at the first hash, in SCAN order);
a Redis failure is reported as this resolver's load error instead of a
server error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Self
from urllib.parse import unquote

from redis.exceptions import RedisError

from gateway.clients import SharedClients
from gateway.errors import ArchiveFileNotFound, PlaceUnreachable
from gateway.redis_keys import (
    REDIS_SCHEMES,
    KeyTemplate,
    describe_failure,
    is_wrong_type,
    redact,
    server_and_key,
)

if TYPE_CHECKING:
    from gateway.loaders.resolvers import ResolverConfig

__all__ = ["RedisResolver", "RedisResolverConfig"]

_MARK: Final = "warc-index+"
_HTTP_SCHEMES: Final = ("http://", "https://")


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisResolverConfig:
    """``redis_index``: a Redis hash (or a template of them) from filename to location.

    ``url`` is the server, ``redis://[user:password@]host[:port]/db``, or
    ``.../db/key`` when ``key`` is not given; after construction it is the
    normalized server URL and ``key`` the hash key or template (``*``).
    ``key_cache_s`` is how long a template's key list is reused (seconds).
    Raises :class:`ValueError` naming the problem.
    """

    url: str
    key: str = ""
    key_cache_s: float = 5.0

    def __post_init__(self) -> None:
        server, key = server_and_key(
            self.url, self.key, what="hash", form="warc-index+redis://host:port/db/key"
        )
        if self.key_cache_s < 0:
            raise ValueError(f"key_cache_s {self.key_cache_s}: expected 0 or more seconds")
        object.__setattr__(self, "url", server)
        object.__setattr__(self, "key", key)

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """Parse ``[warc-index+]redis://host:port/db/key``.

        >>> RedisResolverConfig.from_shorthand("warc-index+redis://127.0.0.1:6379/0/pywb:warcs")
        RedisResolverConfig(url='redis://127.0.0.1:6379/0', key='pywb:warcs', key_cache_s=5.0)

        Raises :class:`ValueError` when it is not a Redis URL with a db and key.
        """
        body = text[len(_MARK) :] if text.startswith(_MARK) else text
        return cls(url=body)


class RedisResolver:
    """Looks ``filename`` up with ``HGET key filename`` (see the module docstring).

    :meth:`locate` returns the locations found (absolute paths or
    ``http(s)://`` URLs), in key-name order; ``[]`` when no hash holds the
    filename. Raises :class:`ArchiveFileNotFound` when Redis cannot be
    reached, refuses the command or a key is not a hash.
    """

    config_type: ClassVar[type[ResolverConfig]] = RedisResolverConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = (
        *(_MARK + scheme for scheme in REDIS_SCHEMES),
        *REDIS_SCHEMES,
    )

    def __init__(self, config: RedisResolverConfig, *, clients: SharedClients) -> None:
        self.config = config
        self._clients = clients
        self._where = f"redis {redact(config.url)}"
        self._template = KeyTemplate(config.key, config.key_cache_s) if "*" in config.key else None

    @classmethod
    def from_config(cls, config: ResolverConfig, *, clients: SharedClients) -> RedisResolver:
        """The resolver for ``config`` (a :class:`RedisResolverConfig`); connects lazily."""
        if not isinstance(config, RedisResolverConfig):
            raise TypeError(f"expected RedisResolverConfig, got {type(config).__name__}")
        return cls(config, clients=clients)

    async def locate(self, filename: str) -> list[str]:
        """Candidate locations of ``filename``, best first (see class doc)."""
        client = self._clients.redis(self.config.url)
        field = filename.encode("utf-8", "surrogateescape")
        try:
            if self._template is None:
                keys = [self.config.key.encode()]
                replies: list[object] = [await client.hget(keys[0], field)]
            else:
                keys = await self._template.keys(client)
                if not keys:
                    return []
                async with client.pipeline(transaction=False) as pipe:
                    for key in keys:
                        pipe.hget(key, field)
                    replies = await pipe.execute(raise_on_error=False)
        except RedisError as exc:
            raise self._failure(exc, filename) from exc
        locations: list[str] = []
        for key, reply in zip(keys, replies, strict=True):
            if isinstance(reply, RedisError):
                raise self._failure(reply, filename, key)
            if isinstance(reply, bytes) and reply:
                locations.append(_location(reply.decode("utf-8", "surrogateescape")))
        return locations

    def describe(self) -> str:
        """``redis 127.0.0.1:6379/0 hash 'pywb:warcs'`` (password masked)."""
        kind = "hashes matching" if self._template is not None else "hash"
        return f"{self._where} {kind} {self.config.key!r}"

    def __repr__(self) -> str:
        return f"RedisResolver({self.describe()!r})"

    def _failure(
        self, exc: RedisError, filename: str, key: bytes | None = None
    ) -> ArchiveFileNotFound | PlaceUnreachable:
        """A key of the wrong type: the index does not know the file (404); any other
        failure: the path index could not be reached (:class:`PlaceUnreachable`)."""
        if is_wrong_type(exc):
            name = key.decode("utf-8", "replace") if key is not None else self.config.key
            reason = f"key {name!r} is not a hash ({exc}); expected HSET key filename location"
            return ArchiveFileNotFound(
                f"{self.describe()}: cannot look up WARC file {filename!r}: {reason}",
                {self.describe(): reason},
            )
        reason = describe_failure(exc)
        return PlaceUnreachable(
            f"{self.describe()}: cannot look up WARC file {filename!r}: {reason}",
            {self.describe(): reason},
        )


def _location(value: str) -> str:
    """An absolute path or URL from a hash value (``file://`` decoded, relative made absolute).

    >>> _location("https://example.org/w/a.warc.gz")
    'https://example.org/w/a.warc.gz'
    >>> _location("file:///srv/warcs/a%20b.warc.gz")
    '/srv/warcs/a b.warc.gz'
    """
    value = value.strip()
    if value.startswith(_HTTP_SCHEMES):
        return value
    if value.startswith(("file:///", "file://localhost/")):
        return unquote(value.removeprefix("file://").removeprefix("localhost"))
    if "://" in value:
        return value  # the WARC loader reports the unsupported scheme
    return os.path.abspath(value)
