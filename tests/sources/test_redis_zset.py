"""Redis sorted-set index source (gateway.sources.redis_zset) on a real redis-server.

The IndexSource contract itself is checked in test_contract.py; this module
covers what is particular to Redis: configuration, key templates, paging,
error translation, the API end to end and the ``warc-index+redis://``
resolver behind the Resource API.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import MATCH_TYPES, CaptureQuery
from gateway.clients import SharedClients
from gateway.config import parse_config
from gateway.errors import ConfigError, SourceBadAnswer, SourceUnavailable
from gateway.sources import SOURCE_TYPES
from gateway.sources.base import IndexSource
from gateway.sources.redis_zset import RedisIndexSource, RedisSourceConfig
from tests.conftest import MakeClient, free_port
from tests.sources.conftest import collect, linear_scan
from tests.sources.redis_support import (
    command_calls,
    delete_prefix,
    unique_prefix,
    zadd_lines,
)


@pytest.fixture
async def prefix(rclient: redis.asyncio.Redis) -> AsyncIterator[str]:
    """A fresh key prefix; its keys are deleted after the test."""
    name = unique_prefix("zset")
    yield name
    await delete_prefix(rclient, name)


def source(url: str, clients: SharedClients, **settings: object) -> IndexSource:
    config = RedisSourceConfig(url=url, **settings)  # type: ignore[arg-type]
    return RedisIndexSource.from_config(config, name="r", clients=clients)


def iana_lines(sample_dir: Path) -> list[bytes]:
    return (sample_dir / "cdxj" / "iana.cdxj").read_bytes().splitlines()


def domain(host: str) -> CaptureQuery:
    return CaptureQuery.for_url(host, match_type="domain")


# --------------------------------------------------------------------- config
def test_shorthand_and_mapping_forms() -> None:
    config = RedisSourceConfig.from_shorthand("redis://127.0.0.1:6379/0/pywb:cdxj")
    assert (config.url, config.key) == ("redis://127.0.0.1:6379/0", "pywb:cdxj")
    assert RedisSourceConfig(url="redis://h:1/3", key="a/b") == RedisSourceConfig(
        url="redis://h:1/3/a/b"
    )
    assert RedisSourceConfig(url="redis://h", key="k").url == "redis://h/0"
    assert "redis" in SOURCE_TYPES
    parsed = parse_config(
        "collections:\n"
        "  a: redis://127.0.0.1:6379/2/coll:*:cdxj\n"
        "  b: {index: {type: redis, url: 'redis://:pw@10.0.0.5:6380/1', key: k, page_size: 50}}\n"
    )
    a = parsed.collections["a"].steps[0].members[0][1]
    assert (a.type, a.config.key, a.config.url) == (
        "redis",
        "coll:*:cdxj",
        "redis://127.0.0.1:6379/2",
    )
    b = parsed.collections["b"].steps[0].members[0][1].config
    assert (b.url, b.key, b.page_size) == ("redis://:pw@10.0.0.5:6380/1", "k", 50)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("redis://127.0.0.1:6379/0", "no sorted-set key"),
        ("redis://127.0.0.1:6379", "no sorted-set key"),
        ("redis://127.0.0.1:6379/pywb:cdxj", "is not a number"),
        ("redis://127.0.0.1:port/0/k", "bad host or port"),
        ("redis:///0/k", "has no host"),
    ],
)
def test_bad_shorthands_name_the_expected_form(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        RedisSourceConfig.from_shorthand(text)
    with pytest.raises(ConfigError, match=f"collections.x: .*{problem}"):
        parse_config(f"collections:\n  x: {text}\n")


def test_bad_settings() -> None:
    with pytest.raises(ValueError, match="give the key once"):
        RedisSourceConfig(url="redis://h/0/a", key="b")
    with pytest.raises(ValueError, match="page_size"):
        RedisSourceConfig(url="redis://h/0/a", page_size=0)
    with pytest.raises(ConfigError, match=r"collections\.x\.index\.page_size: expected an integer"):
        parse_config(
            "collections:\n  x: {index: {type: redis, url: 'redis://h/0/a', page_size: x}}\n"
        )


def test_describe_masks_the_password(clients: SharedClients) -> None:
    text = source("redis://user:secret@cache:6380/1/k", clients).describe()
    assert text == "redis user:***@cache:6380/1 sorted set 'k'"
    template = source("redis://cache/0/c:*", clients, key_cache_s=2.5).describe()
    assert template == "redis cache/0 sorted sets matching 'c:*' (key list cached 2.5 s)"


# ------------------------------------------------------------------- lookups
async def test_lookups_equal_a_linear_scan(
    sample_dir: Path,
    redis_server: str,
    rclient: redis.asyncio.Redis,
    prefix: str,
    clients: SharedClients,
) -> None:
    path = sample_dir / "cdxj" / "iana.cdxj"
    await zadd_lines(rclient, prefix, iana_lines(sample_dir))
    src = source(f"{redis_server}/0/{prefix}", clients)
    urls = sorted({CdxRecord.parse(line).url for line in iana_lines(sample_dir)})
    for url in urls:
        for match_type in MATCH_TYPES:
            query = CaptureQuery.for_url(url, match_type=match_type)
            assert await collect(src, query) == linear_scan(path, query), (url, match_type)


async def test_a_missing_key_is_an_empty_index(
    redis_server: str, prefix: str, clients: SharedClients
) -> None:
    assert await collect(source(f"{redis_server}/0/{prefix}:none", clients), domain("org")) == []


async def test_pages_stream_a_long_range(
    sample_dir: Path,
    redis_server: str,
    rclient: redis.asyncio.Redis,
    prefix: str,
    clients: SharedClients,
) -> None:
    lines = []
    for copy in range(12):  # 171 captures x 12 years = 2052 lines, all in one domain
        for line in iana_lines(sample_dir):
            urlkey, timestamp, block = line.split(b" ", 2)
            lines.append(b" ".join((urlkey, b"%d" % (2000 + copy) + timestamp[4:], block)))
    assert await zadd_lines(rclient, prefix, lines) == len(lines) == 2052
    src = source(f"{redis_server}/0/{prefix}", clients)

    before = await command_calls(rclient, "zrangebylex")
    records = await collect(src, domain("iana.org"))
    calls = await command_calls(rclient, "zrangebylex") - before
    assert [r.to_cdxj().rstrip("\n").encode() for r in records] == sorted(lines)
    assert calls == math.ceil(len(lines) / 1000)  # pages of 1000

    before = await command_calls(rclient, "zrangebylex")
    stream = src.lookup(domain("iana.org"))
    assert (await anext(aiter(stream))).timestamp.startswith("2000")
    await stream.aclose()  # type: ignore[attr-defined]
    assert await command_calls(rclient, "zrangebylex") - before == 1  # nothing read ahead

    small = source(f"{redis_server}/0/{prefix}", clients, page_size=7)
    query = CaptureQuery.for_url("http://www.iana.org/_css/2013.1/screen.css")
    before = await command_calls(rclient, "zrangebylex")
    paged = await collect(small, query)
    assert len(paged) == 12 * len(linear_scan(sample_dir / "cdxj" / "iana.cdxj", query)) > 7
    assert paged == sorted(paged, key=CdxRecord.sort_key)
    assert await command_calls(rclient, "zrangebylex") - before == len(paged) // 7 + 1


async def test_a_key_template_merges_keys_in_key_name_order(
    sample_dir: Path,
    redis_server: str,
    rclient: redis.asyncio.Redis,
    prefix: str,
    clients: SharedClients,
) -> None:
    lines = iana_lines(sample_dir)
    # Interleaved shards, plus one line present in two shards (a tie).
    shards = {"c": lines[2::3], "b": lines[0::3], "a": [*lines[1::3], lines[2]]}
    for name, shard in shards.items():
        await zadd_lines(rclient, f"{prefix}:{name}", shard)
    await zadd_lines(rclient, f"{prefix}x:other", lines)  # matches "prefix*", not "prefix:*"
    src = source(f"{redis_server}/0/{prefix}:*", clients, page_size=10)
    records = await collect(src, domain("iana.org"))
    assert len(records) == len(lines) + 1
    assert [r.sort_key() for r in records] == sorted(r.sort_key() for r in records)
    twice = CdxRecord.parse(lines[2])
    tie = [r.fields["source"] for r in records if r.fields["offset"] == twice.fields["offset"]]
    assert tie == [f"{prefix}:a", f"{prefix}:c"]
    assert {r.fields["source"] for r in records} == {f"{prefix}:{n}" for n in "abc"}
    by_key = {n: sum(r.fields["source"] == f"{prefix}:{n}" for r in records) for n in "abc"}
    assert by_key == {n: len(shard) for n, shard in shards.items()}


async def test_template_glob_characters_other_than_star_are_literal(
    sample_dir: Path,
    redis_server: str,
    rclient: redis.asyncio.Redis,
    prefix: str,
    clients: SharedClients,
) -> None:
    await zadd_lines(rclient, f"{prefix}:[a]:1", iana_lines(sample_dir)[:5])
    await zadd_lines(rclient, f"{prefix}:a:1", iana_lines(sample_dir)[5:])
    records = await collect(source(f"{redis_server}/0/{prefix}:[a]:*", clients), domain("org"))
    assert len(records) == 5
    assert {r.fields["source"] for r in records} == {f"{prefix}:[a]:1"}


async def test_the_key_list_is_cached_for_key_cache_s(
    sample_dir: Path,
    redis_server: str,
    rclient: redis.asyncio.Redis,
    prefix: str,
    clients: SharedClients,
) -> None:
    lines = iana_lines(sample_dir)
    await zadd_lines(rclient, f"{prefix}:1", lines[:10])
    cached = source(f"{redis_server}/0/{prefix}:*", clients, key_cache_s=600)
    uncached = source(f"{redis_server}/0/{prefix}:*", clients, key_cache_s=0)
    assert len(await collect(cached, domain("org"))) == 10
    assert len(await collect(uncached, domain("org"))) == 10
    await zadd_lines(rclient, f"{prefix}:2", lines[10:15])
    assert len(await collect(cached, domain("org"))) == 10  # listing reused
    assert len(await collect(uncached, domain("org"))) == 15
    scans = await command_calls(rclient, "scan")
    await collect(cached, domain("org"))
    assert await command_calls(rclient, "scan") == scans


async def test_a_template_matching_nothing_is_empty(
    redis_server: str, prefix: str, clients: SharedClients
) -> None:
    assert await collect(source(f"{redis_server}/0/{prefix}:*", clients), domain("org")) == []


# -------------------------------------------------------------------- errors
async def test_connection_refused_is_source_unavailable(clients: SharedClients) -> None:
    for key in ("k", "k:*"):
        src = source(f"redis://127.0.0.1:{free_port()}/0/{key}", clients)
        with pytest.raises(SourceUnavailable, match="connection refused") as caught:
            await collect(src, domain("org"))
        assert caught.value.source == "r"
        assert caught.value.reason.startswith("redis 127.0.0.1:")


@pytest.mark.parametrize("kind", ["string", "hash", "list"])
async def test_a_key_of_another_type_is_a_bad_answer(
    rclient: redis.asyncio.Redis, redis_server: str, prefix: str, clients: SharedClients, kind: str
) -> None:
    key = f"{prefix}:{kind}"
    if kind == "string":
        await rclient.set(key, "x")
    elif kind == "hash":
        await rclient.hset(key, "a.warc.gz", "/x")
    else:
        await rclient.rpush(key, "x")
    with pytest.raises(SourceBadAnswer, match="not a sorted set"):
        await collect(source(f"{redis_server}/0/{key}", clients), domain("org"))
    await zadd_lines(rclient, f"{prefix}:ok", [b'org,x)/ 20140101000000 {"url": "http://x.org/"}'])
    with pytest.raises(SourceBadAnswer, match=f"key '{key}': not a sorted set.*key template"):
        await collect(source(f"{redis_server}/0/{prefix}:*", clients), domain("org"))


async def test_an_unparseable_member_is_a_bad_answer(
    rclient: redis.asyncio.Redis, redis_server: str, prefix: str, clients: SharedClients
) -> None:
    await zadd_lines(rclient, prefix, [b"org,iana)/ 20140101000000 {not json", b"com,a)/ 2014 {}"])
    src = source(f"{redis_server}/0/{prefix}", clients)
    assert len(await collect(src, domain("com"))) == 1
    with pytest.raises(SourceBadAnswer, match=f"key '{prefix}': bad CDXJ JSON block"):
        await collect(src, domain("org"))


async def test_members_with_different_scores_are_a_bad_answer(
    rclient: redis.asyncio.Redis, redis_server: str, prefix: str, clients: SharedClients
) -> None:
    await rclient.zadd(prefix, {b"org,a)/ 20140101000000 {}": 1, b"org,b)/ 20140101000000 {}": 0})
    with pytest.raises(SourceBadAnswer, match="score 0"):
        await collect(source(f"{redis_server}/0/{prefix}", clients), domain("org"))


async def test_lookups_after_aclose_are_refused(redis_server: str, clients: SharedClients) -> None:
    src = source(f"{redis_server}/0/k", clients)
    await src.aclose()
    await src.aclose()
    with pytest.raises(SourceUnavailable, match="closed"):
        await collect(src, domain("org"))


# ----------------------------------------------------------------------- API
def _without_source(body: str) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in body.splitlines()]
    for row in rows:
        row.pop("source", None)
        row.pop("source-coll", None)
    return rows


async def test_index_and_resource_api_over_redis(
    sample_dir: Path,
    redis_server: str,
    rclient: redis.asyncio.Redis,
    prefix: str,
    make_client: MakeClient,
) -> None:
    for name in ("iana.cdxj", "example.cdxj"):
        await zadd_lines(rclient, prefix, (sample_dir / "cdxj" / name).read_bytes().splitlines())
    client = await make_client(
        f"""
collections:
  r:
    index: {redis_server}/0/{prefix}
    resource: {sample_dir}/warcs/
  f:
    index_group:
      iana: {sample_dir}/cdxj/iana.cdxj
      example: {sample_dir}/cdxj/example.cdxj
    resource: {sample_dir}/warcs/
"""
    )
    for params in ("url=iana.org", "url=*.iana.org", "url=http://www.iana.org/_css/*", "url=*.com"):
        redis_answer = await client.get(f"/r/index?{params}&output=json")
        file_answer = await client.get(f"/f/index?{params}&output=json")
        assert redis_answer.status == file_answer.status == 200
        redis_rows = _without_source(await redis_answer.text())
        assert redis_rows == _without_source(await file_answer.text())
        assert redis_rows, params
    first = json.loads(
        (await (await client.get("/r/index?url=iana.org&output=json")).text()).split("\n")[0]
    )
    assert (first["source"], first["source-coll"]) == ("r", "r")

    redis_resource = await client.get("/r/resource?url=iana.org")
    file_resource = await client.get("/f/resource?url=iana.org")
    assert redis_resource.status == file_resource.status == 200
    assert redis_resource.headers["WARC-Target-URI"] == "http://www.iana.org/"
    assert await redis_resource.read() == await file_resource.read()


async def test_index_api_reports_redis_down_as_503(make_client: MakeClient) -> None:
    client = await make_client(f"collections:\n  r: redis://127.0.0.1:{free_port()}/0/k\n")
    answer = await client.get("/r/index?url=iana.org")
    assert answer.status == 503
    body = await answer.json()
    assert "connection refused" in body["errors"]["r"]


async def test_resource_api_with_a_redis_path_index(
    sample_dir: Path,
    redis_server: str,
    rclient: redis.asyncio.Redis,
    prefix: str,
    make_client: MakeClient,
) -> None:
    warcs = sample_dir / "warcs"
    await rclient.hset(f"{prefix}:paths", mapping={"iana.warc.gz": str(warcs / "iana.warc.gz")})
    await rclient.hset(f"{prefix}:t:1", mapping={"other.warc.gz": "/nowhere/other.warc.gz"})
    await rclient.hset(
        f"{prefix}:t:2", mapping={"example.warc.gz": f"file://{warcs}/example.warc.gz"}
    )
    client = await make_client(
        f"""
collections:
  h:
    index: {sample_dir}/cdxj/
    resource: warc-index+{redis_server}/0/{prefix}:paths
  t:
    index: {sample_dir}/cdxj/
    resource: {{type: redis_index, url: '{redis_server}/0', key: '{prefix}:t:*'}}
  p:
    index: {sample_dir}/cdxj/
    resource: {warcs}/
  down:
    index: {sample_dir}/cdxj/
    resource: warc-index+redis://127.0.0.1:{free_port()}/0/paths
"""
    )
    hashed = await client.get("/h/resource?url=http://www.iana.org/&closest=20140126200624")
    plain = await client.get("/p/resource?url=http://www.iana.org/&closest=20140126200624")
    assert hashed.status == plain.status == 200
    assert await hashed.read() == await plain.read()

    templated = await client.get(
        "/t/resource?url=http://example.com?example=1&closest=20140103030321"
    )
    assert templated.status == 200
    assert '"filename": "example.warc.gz"' in templated.headers["Warcserver-Cdx"]
    assert templated.headers["WARC-Target-URI"] == "http://example.com?example=1"

    missing = await client.get("/h/resource?url=http://example.com?example=1")
    assert missing.status == 503  # a capture whose WARC no resolver knows: pywb says 503 too
    reasons = (await missing.json())["errors"].values()
    assert reasons
    assert all("'example.warc.gz': no configured resolver knows it" in r for r in reasons)

    down = await client.get("/down/resource?url=iana.org")
    assert down.status == 503  # the path index is down: not "not archived" (issue 25 §5)
    assert down.headers["Retry-After"]
    assert "connection refused" in json.dumps(await down.json())
