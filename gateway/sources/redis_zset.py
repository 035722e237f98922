"""A Redis sorted set of CDXJ lines as an index source (pywb ``RedisIndexSource``).

The index is one sorted set whose members are whole CDXJ (or legacy CDX)
lines, every one added with score 0 (``ZADD key 0 "<urlkey> <timestamp>
{json}"``), so Redis orders them bytewise, exactly as a sorted CDXJ file is
ordered. A lookup reads ``ZRANGEBYLEX key [<query.key> (<query.end_key>`` in
pages of ``page_size`` members (``LIMIT 0 page_size``); each following page
starts after the last member read (``(<last line>``), so a page costs
O(log N) whatever its position and a range of any length streams in bounded
memory.

Configuration (``collections.yaml``)::

    index: redis://127.0.0.1:6379/0/pywb:cdxj        # shorthand: server/db/key
    index: {type: redis, url: redis://127.0.0.1:6379/0, key: pywb:cdxj}
    index: {type: redis, url: redis://10.0.0.5/0, key: "crawl:*:cdxj",
            page_size: 1000, key_cache_s: 5}

A key containing ``*`` is a **template**: every key matching it
(``SCAN MATCH``, other glob characters literal) is read and the results are
merged by (urlkey, timestamp), ties broken by key name (bytewise), each
record's ``source`` field set to its key, so the aggregator names it
``member:key`` (pywb ``RedisMultiKeyIndexSource``). The key list is cached
for ``key_cache_s`` seconds (default 5): a new key is seen at most that late.

Connections come from :meth:`gateway.clients.SharedClients.redis`, one pool
per server URL per app, shared with the ``warc-index+redis://`` resolver.

Deliberate differences from pywb: the whole text after ``/db/`` is the key
(pywb keeps only the segment up to the next ``/``); ranges are paged instead
of read in one reply; first pages of all template keys are fetched in one
pipelined round trip; lines out of order (members added with different
scores) are reported as :class:`~gateway.errors.SourceBadAnswer` instead of
served in an unspecified order.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Self

from redis.exceptions import RedisError

from gateway.cdx.cdxj import CdxFormatError, CdxRecord
from gateway.cdx.cdxops import merge_sorted
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.errors import SourceBadAnswer, SourceError, SourceUnavailable
from gateway.loaders.base import ResourceLoader
from gateway.redis_keys import (
    REDIS_SCHEMES,
    KeyTemplate,
    describe_failure,
    is_wrong_type,
    redact,
    server_and_key,
)
from gateway.sources.base import IndexSource, SourceConfig

if TYPE_CHECKING:
    import redis.asyncio

__all__ = ["DEFAULT_PAGE_SIZE", "RedisIndexSource", "RedisSourceConfig"]

#: Members read per ZRANGEBYLEX round trip.
DEFAULT_PAGE_SIZE: Final = 1000
#: Seconds a template's key list is reused before it is scanned again.
DEFAULT_KEY_CACHE_S: Final = 5.0
_HEADERS: Final = (b" CDX", b"CDX ")


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisSourceConfig:
    """A Redis sorted set (or a template of them) holding CDXJ lines.

    ``url`` is the server, ``redis://[user:password@]host[:port]/db``
    (``rediss://`` for TLS); it may also carry the key (``.../db/key``) when
    ``key`` is not given. After construction ``url`` is the normalized server
    URL (``redis://host:port/db``) and ``key`` the key or template (``*``).
    ``page_size`` is the number of members per round trip (>= 1);
    ``key_cache_s`` how long a template's key list is reused (>= 0 seconds).
    Raises :class:`ValueError` naming the problem.
    """

    url: str
    key: str = ""
    page_size: int = DEFAULT_PAGE_SIZE
    key_cache_s: float = DEFAULT_KEY_CACHE_S

    def __post_init__(self) -> None:
        server, key = server_and_key(
            self.url, self.key, what="sorted-set", form="redis://host:port/db/key"
        )
        if self.page_size < 1:
            raise ValueError(f"page_size {self.page_size}: expected at least 1")
        if self.key_cache_s < 0:
            raise ValueError(f"key_cache_s {self.key_cache_s}: expected 0 or more seconds")
        object.__setattr__(self, "url", server)
        object.__setattr__(self, "key", key)

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """Parse ``redis://host:port/db/key`` (pywb's Redis index URL).

        >>> RedisSourceConfig.from_shorthand("redis://127.0.0.1:6379/0/pywb:*:cdxj")
        RedisSourceConfig(url='redis://127.0.0.1:6379/0', key='pywb:*:cdxj', \
page_size=1000, key_cache_s=5.0)

        Raises :class:`ValueError` when the db or key is missing.
        """
        return cls(url=text)


class RedisIndexSource:
    """Index source over a Redis sorted set of CDXJ lines (see the module docstring).

    :meth:`lookup` yields a :class:`CdxRecord` for every member ``m`` with
    ``query.key <= m < query.end_key`` (bytewise), sorted by (urlkey,
    timestamp); for a template, merged over every matching key with ties in
    key-name order and ``source`` set to the key. Only the key range is used;
    the aggregator applies the other query parameters. A missing key is an
    empty index (Redis drops empty sorted sets).

    Raises :class:`SourceUnavailable` when the server cannot be reached or
    refuses a command, :class:`SourceBadAnswer` when a key is not a sorted
    set, a member does not parse as a CDX line, or members come back out of
    order.
    """

    config_type: ClassVar[type[SourceConfig]] = RedisSourceConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = REDIS_SCHEMES

    def __init__(self, config: RedisSourceConfig, *, name: str, clients: SharedClients) -> None:
        self.name = name
        self.config = config
        self._clients = clients
        self._where = f"redis {redact(config.url)}"
        self._template = KeyTemplate(config.key, config.key_cache_s) if "*" in config.key else None
        self._closed = False

    @classmethod
    def from_config(cls, config: SourceConfig, *, name: str, clients: SharedClients) -> IndexSource:
        """The source for ``config`` (a :class:`RedisSourceConfig`); connects lazily."""
        if not isinstance(config, RedisSourceConfig):
            raise TypeError(f"expected RedisSourceConfig, got {type(config).__name__}")
        return cls(config, name=name, clients=clients)

    async def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Yield members in ``[query.key, query.end_key)`` as records (see class doc)."""
        low, high = query.key.encode(), query.end_key.encode()
        if low >= high:
            return
        if self._closed:
            raise SourceUnavailable(self.name, f"{self._where}: the source was closed")
        client = self._clients.redis(self.config.url)
        if self._template is None:
            keys = [self.config.key.encode()]
        else:
            try:
                keys = await self._template.keys(client)
            except RedisError as exc:
                raise self._error(exc, f"key template {self.config.key!r}") from exc
            if not keys:
                return
        first_pages = await self._first_pages(client, keys, b"[" + low, b"(" + high)
        label = self._template is not None
        streams = [
            self._records(client, key, page, b"(" + high, label)
            for key, page in zip(keys, first_pages, strict=True)
        ]
        merged = merge_sorted(streams)
        try:
            async for record in merged:
                yield record
        finally:
            await merged.aclose()

    def resource_loaders(self) -> Sequence[ResourceLoader]:
        """None: captures name WARC files read by the step's ``resource:`` loaders."""
        return ()

    def describe(self) -> str:
        """``redis 127.0.0.1:6379/0 sorted set 'pywb:cdxj'`` (password masked)."""
        if self._template is None:
            return f"{self._where} sorted set {self.config.key!r}"
        return (
            f"{self._where} sorted sets matching {self.config.key!r} "
            f"(key list cached {self.config.key_cache_s:g} s)"
        )

    async def aclose(self) -> None:
        """Stop answering lookups; the pool itself belongs to SharedClients."""
        self._closed = True

    def __repr__(self) -> str:
        return f"RedisIndexSource({self.describe()!r}, name={self.name!r})"

    # ----------------------------------------------------------------- reads
    async def _first_pages(
        self, client: redis.asyncio.Redis, keys: Sequence[bytes], low: bytes, high: bytes
    ) -> list[list[bytes]]:
        """The first page of every key; one pipelined round trip for several keys."""
        if len(keys) == 1:
            return [await self._page(client, keys[0], low, high)]
        size = self.config.page_size
        try:
            async with client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.zrangebylex(key, low, high, start=0, num=size)
                replies = await pipe.execute(raise_on_error=False)
        except RedisError as exc:
            raise self._error(exc, f"{len(keys)} keys matching {self.config.key!r}") from exc
        pages: list[list[bytes]] = []
        for key, reply in zip(keys, replies, strict=True):
            if isinstance(reply, RedisError):
                raise self._error(reply, _key_label(key))
            pages.append(_as_bytes(reply))
        return pages

    async def _page(
        self, client: redis.asyncio.Redis, key: bytes, low: bytes, high: bytes
    ) -> list[bytes]:
        try:
            reply = await client.zrangebylex(key, low, high, start=0, num=self.config.page_size)
        except RedisError as exc:
            raise self._error(exc, _key_label(key)) from exc
        return _as_bytes(reply)

    async def _records(
        self,
        client: redis.asyncio.Redis,
        key: bytes,
        page: list[bytes],
        high: bytes,
        label: bool,
    ) -> AsyncGenerator[CdxRecord, None]:
        """Records of one key from its first ``page`` on, fetching later pages lazily."""
        source = key.decode("utf-8", "replace") if label else None
        previous = b""
        while True:
            for member in page:
                if member < previous:
                    raise SourceBadAnswer(
                        self.name,
                        f"{self._where} {_key_label(key)}: members are not in lexicographic "
                        f"order ({member[:120]!r} after {previous[:120]!r}); the sorted set "
                        "holds different scores: add every CDXJ line with score 0",
                    )
                previous = member
                line = member.rstrip()
                if not line or line.startswith(_HEADERS):
                    continue
                try:
                    record = CdxRecord.parse(line)
                except CdxFormatError as exc:
                    raise SourceBadAnswer(
                        self.name, f"{self._where} {_key_label(key)}: {exc}"
                    ) from exc
                if source is not None:
                    record.set_source(source)
                yield record
            if len(page) < self.config.page_size:
                return
            page = await self._page(client, key, b"(" + page[-1], high)

    def _error(self, exc: RedisError, what: str) -> SourceError:
        if is_wrong_type(exc):
            return SourceBadAnswer(
                self.name,
                f"{self._where} {what}: not a sorted set ({exc}); expected a sorted set of "
                "CDXJ lines (ZADD key 0 line)"
                + (", or a key template matching only those" if self._template else ""),
            )
        return SourceUnavailable(self.name, f"{self._where} {what}: {describe_failure(exc)}")


def _as_bytes(reply: Sequence[bytes | str]) -> list[bytes]:
    """Members as bytes (the shared pools do not decode replies)."""
    return [m if isinstance(m, bytes) else m.encode() for m in reply]


def _key_label(key: bytes) -> str:
    return f"key {key.decode('utf-8', 'replace')!r}"
