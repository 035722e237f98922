"""The ``warc-index+redis://`` resolver (gateway.loaders.redis_resolver) on a real redis-server.

The Resource API end to end through it is tested in
tests/sources/test_redis_zset.py.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio

from gateway.clients import SharedClients
from gateway.config import parse_config
from gateway.errors import ArchiveFileNotFound, PlaceUnreachable
from gateway.loaders.redis_resolver import RedisResolver, RedisResolverConfig
from gateway.loaders.resolvers import (
    REDIS_SHORTHAND_PREFIXES,
    RESOLVER_TYPES,
    Resolver,
    build_resolver,
    resolver_config_from_shorthand,
    resolver_kind_for_shorthand,
)
from tests.conftest import free_port
from tests.sources.redis_support import delete_prefix, unique_prefix


@pytest.fixture
async def prefix(rclient: redis.asyncio.Redis) -> AsyncIterator[str]:
    name = unique_prefix("paths")
    yield name
    await delete_prefix(rclient, name)


def resolver(text: str, clients: SharedClients) -> Resolver:
    return build_resolver(resolver_config_from_shorthand(text), clients=clients)


def test_shorthands_select_the_redis_resolver() -> None:
    for text in (
        "warc-index+redis://127.0.0.1:6379/0/pywb:warcs",
        "warc-index+rediss://cache:6380/1/pywb:warcs",
        "redis://127.0.0.1:6379/0/pywb:warcs",
    ):
        assert resolver_kind_for_shorthand(text) == "redis_index", text
    assert RESOLVER_TYPES["redis_index"] is RedisResolver
    # resolver_kind_for_shorthand knows them without importing redis-py.
    assert RedisResolver.shorthand_prefixes == REDIS_SHORTHAND_PREFIXES
    config = resolver_config_from_shorthand("warc-index+redis://127.0.0.1:6379/3/a:*")
    assert config == RedisResolverConfig(url="redis://127.0.0.1:6379/3", key="a:*")
    assert resolver_kind_for_shorthand("warc-index+file:///x/paths.txt") == "path_index"


def test_config_forms_and_errors() -> None:
    parsed = parse_config(
        "collections:\n"
        "  a: {index: ./x/, resource: 'warc-index+redis://h:1/0/k'}\n"
        "  b: {index: ./x/, resource: [{type: redis_index, url: 'redis://h:1/2', key: 'c:*'}]}\n"
    )
    a = parsed.collections["a"].steps[0].resolvers[0]
    assert (a.type, a.config.url, a.config.key) == ("redis_index", "redis://h:1/0", "k")
    b = parsed.collections["b"].steps[0].resolvers[0]
    assert (b.type, b.config.url, b.config.key) == ("redis_index", "redis://h:1/2", "c:*")
    with pytest.raises(ValueError, match="no hash key"):
        RedisResolverConfig.from_shorthand("warc-index+redis://h:1/0")
    with pytest.raises(ValueError, match="is not a number"):
        RedisResolverConfig.from_shorthand("warc-index+redis://h:1/warcs")


async def test_locate_reads_the_hash(
    rclient: redis.asyncio.Redis,
    redis_server: str,
    prefix: str,
    clients: SharedClients,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    await rclient.hset(
        prefix,
        mapping={
            "a.warc.gz": "/srv/warcs/a.warc.gz",
            "b.warc.gz": "https://archive.example.org/w/b.warc.gz",
            "c.warc.gz": "file:///srv/my%20warcs/c.warc.gz",
            "d.warc.gz": "relative/d.warc.gz",
            "sub/é.warc.gz": "/srv/é.warc.gz",
        },
    )
    found = resolver(f"warc-index+{redis_server}/0/{prefix}", clients)
    assert await found.locate("a.warc.gz") == ["/srv/warcs/a.warc.gz"]
    assert await found.locate("b.warc.gz") == ["https://archive.example.org/w/b.warc.gz"]
    assert await found.locate("c.warc.gz") == ["/srv/my warcs/c.warc.gz"]
    assert await found.locate("d.warc.gz") == [os.path.join(tmp_path, "relative/d.warc.gz")]
    assert await found.locate("sub/é.warc.gz") == ["/srv/é.warc.gz"]
    assert await found.locate("missing.warc.gz") == []
    assert found.describe() == f"redis {redis_server[8:]}/0 hash '{prefix}'"


async def test_a_template_asks_every_matching_hash_in_key_order(
    rclient: redis.asyncio.Redis, redis_server: str, prefix: str, clients: SharedClients
) -> None:
    await rclient.hset(f"{prefix}:2", mapping={"a.warc.gz": "/second/a.warc.gz"})
    await rclient.hset(f"{prefix}:1", mapping={"a.warc.gz": "/first/a.warc.gz", "b": "/b"})
    await rclient.hset(f"{prefix}x", mapping={"a.warc.gz": "/not/matched"})
    found = resolver(f"warc-index+{redis_server}/0/{prefix}:*", clients)
    assert await found.locate("a.warc.gz") == ["/first/a.warc.gz", "/second/a.warc.gz"]
    assert await found.locate("b") == ["/b"]
    assert await found.locate("c") == []
    empty = resolver(f"warc-index+{redis_server}/0/{prefix}:none:*", clients)
    assert await empty.locate("a.warc.gz") == []


async def test_failures_are_archive_file_not_found_or_the_index_down(
    rclient: redis.asyncio.Redis, redis_server: str, prefix: str, clients: SharedClients
) -> None:
    # Redis down is the path index unreachable (a 503 upstream), not "no such file".
    down = resolver(f"warc-index+redis://127.0.0.1:{free_port()}/0/k", clients)
    with pytest.raises(PlaceUnreachable, match="connection refused"):
        await down.locate("a.warc.gz")
    await rclient.zadd(f"{prefix}:z", {"a.warc.gz": 0})
    with pytest.raises(ArchiveFileNotFound, match=f"key '{prefix}:z' is not a hash"):
        await resolver(f"warc-index+{redis_server}/0/{prefix}:z", clients).locate("a.warc.gz")
    await rclient.hset(f"{prefix}:h", mapping={"a.warc.gz": "/a"})
    with pytest.raises(ArchiveFileNotFound, match=f"key '{prefix}:z' is not a hash"):
        await resolver(f"warc-index+{redis_server}/0/{prefix}:*", clients).locate("a.warc.gz")
