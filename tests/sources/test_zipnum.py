"""ZipNum clusters (gateway.sources.zipnum): config forms, search, locations, failures.

The source contract suite covers the captures of every query over the sample
lines; pywb 2.10's answers for the sample cluster are compared in
tests/api/test_differential.py.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.config import parse_config
from gateway.errors import ConfigError, SourceBadAnswer, SourceUnavailable
from gateway.server.app import build_collections
from gateway.sources.base import IndexSource
from gateway.sources.zipnum import ZipNumSource, ZipNumSourceConfig
from gateway.sources.zipnum_blocks import Block
from gateway.sources.zipnum_remote import BlockCache
from tests.conftest import free_port
from tests.sources.conftest import collect
from tests.sources.zipnum_support import write_zipnum

AiohttpServer = Callable[..., Awaitable[TestServer]]


def source(summary: Path, clients: SharedClients | None = None, **settings: object) -> IndexSource:
    config = ZipNumSourceConfig(path=str(summary), **settings)  # type: ignore[arg-type]
    return ZipNumSource.from_config(config, name="zip", clients=clients or SharedClients())


def line(url: str, timestamp: str = "20200101000000") -> bytes:
    fields = {"url": url, "mime": "text/html", "status": "200"}
    return f"{canonical_urlkey(url)} {timestamp} {json.dumps(fields)}".encode()


# ------------------------------------------------------------------ config
def test_shorthand_and_mapping_forms(tmp_path: Path) -> None:
    summary = write_zipnum([line("http://example.com/")], tmp_path)
    config = parse_config(
        f"""
collections:
  prefixed: zipnum+{summary}
  url: zipnum+file://{summary}
  by_suffix: {summary}
  summary_suffix: {tmp_path}/cluster.summary
  mapping:
    index: {{type: zipnum, path: {summary}, loc: {tmp_path}/cluster.loc, max_blocks: 2}}
"""
    )
    specs = {name: coll.steps[0].members[0][1] for name, coll in config.collections.items()}
    assert {spec.type for spec in specs.values()} == {"zipnum"}
    assert specs["url"].config == ZipNumSourceConfig(path=str(summary))
    assert specs["mapping"].config == ZipNumSourceConfig(
        path=str(summary), loc=f"{tmp_path}/cluster.loc", max_blocks=2
    )


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("zipnum+http://example.org/cluster.idx", "must be a local file"),
        ("{type: zipnum, path: X, max_blocks: 0}", "max_blocks 0: expected at least 1"),
        ("{type: zipnum, path: X, stat_interval_s: -1}", "stat_interval_s -1.0: expected 0 to"),
        ("{type: zipnum, path: /nonexistent/cluster.idx}", "summary /nonexistent/cluster.idx"),
        ("{type: zipnum, path: X, loc: /nonexistent/x.loc}", "location file /nonexistent/x.loc"),
    ],
)
def test_config_errors_name_the_yaml_path(tmp_path: Path, entry: str, problem: str) -> None:
    summary = write_zipnum([line("http://example.com/")], tmp_path)
    text = f"collections:\n  web:\n    index: {entry.replace('X', str(summary))}\n"
    with pytest.raises(ConfigError) as caught:
        build_collections(parse_config(text), SharedClients())
    assert caught.value.path == "collections.web.index"
    assert problem in caught.value.problem


# ------------------------------------------------------------------ search
async def test_every_key_of_a_large_cluster_is_found(tmp_path: Path) -> None:
    # A summary of ~100 kB: the binary search lands inside it, and a key is often
    # in a block whose summary line crosses an 8 KiB boundary.
    urls = [f"http://example.com/page/{i:05d}" for i in range(6000)]
    lines = sorted(line(url, ts) for url in urls for ts in ("20200101000000", "20210101000000"))
    summary = write_zipnum(lines, tmp_path, lines_per_block=3, blocks_per_shard=500)
    assert summary.stat().st_size > 8 * 8192
    zipnum = source(summary)
    for url in urls[::3]:
        records = await collect(zipnum, CaptureQuery.for_url(url))
        assert [r.timestamp for r in records] == ["20200101000000", "20210101000000"], url
        assert {r.url for r in records} == {url}
    prefix = await collect(zipnum, CaptureQuery.for_url("example.com/page/01", match_type="prefix"))
    assert len(prefix) == 2000
    await zipnum.aclose()


async def test_a_replaced_cluster_is_read_anew(tmp_path: Path) -> None:
    summary = write_zipnum([line("http://example.com/", "20200101000000")], tmp_path)
    zipnum = source(summary, stat_interval_s=0)
    query = CaptureQuery.for_url("http://example.com/")
    assert [r.timestamp for r in await collect(zipnum, query)] == ["20200101000000"]
    write_zipnum(
        [line("http://example.com/", "20220101000000"), line("http://example.com/", "2023")],
        tmp_path,
    )
    assert [r.timestamp for r in await collect(zipnum, query)] == ["20220101000000", "2023"]
    await zipnum.aclose()


def forty_urls(folder: Path) -> ZipNumSource:
    """A cluster of ``http://example.com/000`` to ``039`` in blocks of 7 lines,
    10 blocks a shard, read with ``stat_interval_s: 0``."""
    lines = [line(f"http://example.com/{n:03d}") for n in range(40)]
    zipnum = source(write_zipnum(sorted(lines), folder, blocks_per_shard=10), stat_interval_s=0)
    assert isinstance(zipnum, ZipNumSource)
    return zipnum


async def test_a_block_read_before_is_not_read_again_while_its_shard_is_unchanged(
    tmp_path: Path,
) -> None:
    zipnum = forty_urls(tmp_path)
    query = CaptureQuery.for_url("http://example.com/017")
    assert [r.url for r in await collect(zipnum, query)] == ["http://example.com/017"]
    # The same bytes count, mtime and inode, other bytes: the kept lines answer.
    shard = tmp_path / "cluster-00.cdx.gz"
    before = shard.stat()
    with shard.open("r+b") as fh:
        fh.write(b"\0" * before.st_size)
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert [r.url for r in await collect(zipnum, query)] == ["http://example.com/017"]
    # Another block of the shard was never inflated: it is read, and is not gzip now.
    with pytest.raises(SourceBadAnswer, match="is not a gzip member"):
        await collect(zipnum, CaptureQuery.for_url("http://example.com/038"))
    await zipnum.aclose()


async def test_locations_are_tried_in_order(tmp_path: Path, clients: SharedClients) -> None:
    summary = write_zipnum([line("http://example.com/")], tmp_path)
    closed = f"http://127.0.0.1:{free_port()}/cluster-00.cdx.gz"
    (tmp_path / "cluster.loc").write_text(f"cluster-00\t{closed}\tmissing.gz\tcluster-00.cdx.gz\n")
    zipnum = source(summary, clients)
    assert len(await collect(zipnum, CaptureQuery.for_url("http://example.com/"))) == 1
    await zipnum.aclose()


# ------------------------------------------------------------------ failures
@pytest.mark.parametrize(
    ("loc", "error", "reason"),
    [
        ("other\tcluster-00.cdx.gz\n", SourceBadAnswer, "'cluster-00' is not in location file"),
        ("cluster-00\n", SourceBadAnswer, "'cluster-00' has no path in location file"),
        (
            f"cluster-00\tgone.gz\thttp://127.0.0.1:{free_port()}/c.gz\n",
            SourceUnavailable,
            "no location could be read (",
        ),
    ],
)
async def test_location_problems_name_the_part(
    tmp_path: Path, clients: SharedClients, loc: str, error: type[Exception], reason: str
) -> None:
    summary = write_zipnum([line("http://example.com/")], tmp_path)
    zipnum = source(summary, clients)
    (tmp_path / "cluster.loc").write_text(loc)
    with pytest.raises(error) as caught:
        await collect(zipnum, CaptureQuery.for_url("http://example.com/"))
    assert reason in str(caught.value)
    await zipnum.aclose()


async def test_a_bad_summary_line_or_block_is_a_bad_answer(tmp_path: Path) -> None:
    summary = write_zipnum([line("http://example.com/")], tmp_path)
    zipnum = source(summary, stat_interval_s=0)
    query = CaptureQuery.for_url("http://example.com/")
    good = summary.read_text()
    summary.write_text(good.replace("\t0\t", "\tzero\t"))
    with pytest.raises(SourceBadAnswer, match="is not 'urlkey timestamp<TAB>part"):
        await collect(zipnum, query)
    summary.write_text(good)
    shard = tmp_path / "cluster-00.cdx.gz"
    shard.write_bytes(b"\x00" * len(shard.read_bytes()))
    with pytest.raises(SourceBadAnswer, match="is not a gzip member"):
        await collect(zipnum, query)
    not_cdx = b"com,example)/ 2020 not-a-cdx-line\n"
    shard.write_bytes(gzip.compress(not_cdx, mtime=0).ljust(shard.stat().st_size, b"\0"))
    with pytest.raises(SourceBadAnswer, match="ZipNum shard cluster-00"):
        await collect(zipnum, query)
    await zipnum.aclose()


async def test_a_block_inflating_past_64_mib_is_refused(tmp_path: Path) -> None:
    summary = write_zipnum([line("http://example.com/")], tmp_path)
    bomb = gzip.compress(b"com,example)/ " + b"x" * (65 * 1024 * 1024), compresslevel=1)
    (tmp_path / "cluster-00.cdx.gz").write_bytes(bomb)
    summary.write_text(f"com,example)/ 20200101000000\tcluster-00\t0\t{len(bomb)}\t1\n")
    zipnum = source(summary)
    with pytest.raises(SourceBadAnswer, match="inflates past 67108864 bytes"):
        await collect(zipnum, CaptureQuery.for_url("http://example.com/"))
    await zipnum.aclose()


def test_describe_names_the_summary_and_location_file(tmp_path: Path) -> None:
    summary = write_zipnum([line(f"http://example.com/{i}") for i in range(20)], tmp_path)
    size = summary.stat().st_size
    assert source(summary).describe() == (
        f"zipnum {summary} ({size:,}-byte summary, locations from {tmp_path / 'cluster.loc'})"
    )
    summary.unlink()
    gone = ZipNumSource(ZipNumSourceConfig(path=str(summary)), name="zip")
    assert "unreadable: No such file" in gone.describe()


def test_the_record_type_parses_the_sample_shards(sample_dir: Path) -> None:
    # The sample cluster holds 11-field CDX lines (pywb's zipnum-sample.cdx.gz).
    with gzip.open(sample_dir / "zipcdx" / "zipnum-sample.cdx.gz", "rb") as fh:
        first = fh.readline().rstrip(b"\n")
    record = CdxRecord.parse(first)
    assert (record.urlkey, record.timestamp) == ("com,example)/", "20140127171200")


# ------------------------------------------------------------------ remote shards
def _shard_server(folder: Path, ranges: list[str], *, honour_range: bool = True) -> web.Application:
    """Serves ``folder``'s files, recording each request's Range header."""

    async def shard(request: web.Request) -> web.StreamResponse:
        ranges.append(request.headers.get("Range", ""))
        path = folder / request.match_info["name"]
        if not path.is_file():
            raise web.HTTPNotFound()
        if honour_range:
            return web.FileResponse(path)
        return web.Response(body=path.read_bytes())

    app = web.Application()
    app.router.add_get("/{name}", shard)
    return app


async def _remote_cluster(
    tmp_path: Path, aiohttp_server: AiohttpServer, ranges: list[str], **options: bool
) -> Path:
    lines = [line(f"http://example.com/{n:03d}") for n in range(60)]
    summary = write_zipnum(lines, tmp_path, lines_per_block=5, blocks_per_shard=6)
    server = await aiohttp_server(_shard_server(tmp_path, ranges, **options))
    loc = tmp_path / "cluster.loc"
    loc.write_text(
        "".join(
            f"{part}\t{server.make_url('/' + path)}\n"
            for part, path in (row.split("\t") for row in loc.read_text().splitlines())
        )
    )
    return summary


async def test_remote_blocks_are_read_in_one_range_request_and_cached(
    tmp_path: Path, aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    ranges: list[str] = []
    summary = await _remote_cluster(tmp_path, aiohttp_server, ranges)
    zipnum = source(summary, clients, max_blocks=10)
    assert isinstance(zipnum, ZipNumSource)
    query = CaptureQuery.for_url("http://example.com/0", match_type="prefix")  # 000-099: 12 blocks
    assert [r.url for r in await collect(zipnum, query)] == [
        f"http://example.com/{n:03d}" for n in range(60)
    ]
    # Two shards of 6 blocks: one request each, for every adjacent block of the shard.
    assert len(ranges) == 2
    assert all(r.startswith("bytes=0-") for r in ranges)
    assert zipnum.stats.cache_misses == 12
    assert zipnum.stats.requests == {"cluster-00": 1, "cluster-01": 1}
    # The same answer again comes from the LRU: no request.
    assert len(await collect(zipnum, query)) == 60
    assert len(ranges) == 2
    assert zipnum.stats.cache_hits == 12
    exact = CaptureQuery.for_url("http://example.com/042")
    assert [r.url for r in await collect(zipnum, exact)] == ["http://example.com/042"]
    await zipnum.aclose()


async def test_a_remote_shard_that_cannot_be_read_is_a_failure_never_empty(
    tmp_path: Path, aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    ranges: list[str] = []
    summary = await _remote_cluster(tmp_path, aiohttp_server, ranges, honour_range=False)
    zipnum = source(summary, clients)
    query = CaptureQuery.for_url("http://example.com/042")
    with pytest.raises(SourceUnavailable, match="HTTP 200 to a range request"):
        await collect(zipnum, query)
    await zipnum.aclose()
    (tmp_path / "again").mkdir()
    summary = await _remote_cluster(tmp_path / "again", aiohttp_server, ranges)
    for shard in (tmp_path / "again").glob("cluster-*.cdx.gz"):
        shard.unlink()
    zipnum = source(summary, clients)
    with pytest.raises(SourceUnavailable, match="HTTP 404 to a range request"):
        await collect(zipnum, query)
    await zipnum.aclose()


def _block(text: bytes) -> Block:
    return Block(gzip.compress(text, mtime=0), source="zip", part="p", offset=0)


def test_block_cache_keeps_at_most_its_bytes_and_follows_a_growing_block() -> None:
    a, b, c = (_block(letter * 60 + b"\n") for letter in (b"a", b"b", b"c"))
    for block in (a, b, c):
        while not block.done:
            block.more()
    assert (a.size, a.lines) == (61, [b"a" * 60])  # its text, line ends included
    cache = BlockCache(150)
    cache.put("s", 0, a)
    cache.put("s", 1, b)
    assert cache.get("s", 0) is a  # 0 is now the most recently used
    cache.put("s", 2, c)
    assert (cache.get("s", 1), cache.held_bytes) == (None, 122)
    assert b.cache is None  # dropped: it no longer reports its growth
    # A block being inflated holds its compressed rest and zlib's state until it is whole.
    text = b"".join(b"com,example)/%06d 2020 {}\n" % n for n in range(20_000))
    growing = _block(text)
    assert growing.size > 48 * 1024
    big = BlockCache(10 * 1024 * 1024)
    big.put("s", 0, growing)
    sizes = [big.held_bytes]
    while not growing.done:
        growing.more()
        sizes.append(big.held_bytes)
    assert big.held_bytes == growing.size == len(text)
    assert len(sizes) > 3  # inflated piece by piece, the cache told each time
    assert growing.lines == text.splitlines()
    small = BlockCache(len(text) // 2)  # grows past the bound: it goes, the cache stays within
    partial = _block(text)
    small.put("s", 0, partial)
    while not partial.done:
        partial.more()
    assert (small.get("s", 0), small.held_bytes, partial.cache) == (None, 0, None)


def test_a_block_is_inflated_only_as_far_as_a_lookup_needs() -> None:
    lines = [b"com,example)/%06d 2020 {}" % n for n in range(20_000)]  # ~560 KB of text
    text = b"\r\n".join(lines) + b"\r\n"
    block = _block(text)
    assert block.index_of(b"com,example)/000010") == 10
    assert not block.done
    assert len(block.lines) < 5_000  # one or two 64 KiB pieces of text, not all of it
    assert block.index_of(b"com,example)/015000") == 15_000  # a later lookup goes on
    assert block.index_of(b"com,example)/999999") == 20_000
    assert block.done
    assert block.lines == lines  # CRLF cut as the whole text's splitlines() cuts it
    long_line = b"a" * 200_000  # longer than a piece: kept whole across pieces
    whole = _block(b"0\n" + long_line + b"\nz\n")
    assert whole.index_of(b"b") == 2
    assert whole.lines == [b"0", long_line, b"z"]


def test_a_block_cut_short_is_a_bad_answer() -> None:
    member = gzip.compress(b"com,example)/ 2020 {}\n" * 10_000, mtime=0)
    cut = Block(member[: len(member) // 2], source="zip", part="p", offset=7)
    with pytest.raises(SourceBadAnswer, match="block at offset 7 ends before its gzip member"):
        cut.index_of(b"~")


async def test_a_short_answer_is_remembered_while_summary_locations_and_shard_are_unchanged(
    tmp_path: Path,
) -> None:
    zipnum = forty_urls(tmp_path)
    query = CaptureQuery.for_url("http://example.com/017")

    async def reads() -> int:
        assert [r.url for r in await collect(zipnum, query)] == ["http://example.com/017"]
        return sum(zipnum.stats.requests.values())

    assert await reads() == 1
    assert await reads() == 1  # remembered (the block cache would not read either)
    shard = tmp_path / "cluster-00.cdx.gz"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    assert await reads() == 2  # a new version of the shard: its block is read again
    assert await reads() == 2
    copy = tmp_path / "copy.cdx.gz"
    copy.write_bytes(shard.read_bytes())
    loc = tmp_path / "cluster.loc"
    loc.write_text(loc.read_text().replace("cluster-00.cdx.gz", "copy.cdx.gz"))
    assert await reads() == 3  # the location file changed: read where it now points
    await zipnum.aclose()


async def test_a_storage_location_without_the_store_is_a_failure_naming_it(
    tmp_path: Path, clients: SharedClients
) -> None:
    summary = write_zipnum([line("http://example.com/")], tmp_path)
    (tmp_path / "cluster.loc").write_text("cluster-00\tstorage:backup/zipnum/c/cluster-00.cdx.gz\n")
    zipnum = source(summary, clients)
    with pytest.raises(SourceUnavailable, match="no location could be read") as raised:
        await collect(zipnum, CaptureQuery.for_url("http://example.com/"))
    assert "storage:backup/zipnum/c/cluster-00.cdx.gz: no snapshot store is open" in str(
        raised.value
    )
    await zipnum.aclose()
