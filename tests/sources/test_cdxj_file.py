"""Local CDXJ/CDX files and directories (gateway.sources.cdxj_file) over the sample archive."""

from __future__ import annotations

import asyncio
import gc
import gzip
import logging
import os
import random
import shutil
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.cdx.query import MATCH_TYPES, CaptureQuery, MatchType, parse_query
from gateway.clients import SharedClients
from gateway.errors import SourceBadAnswer, SourceUnavailable
from gateway.sources.base import IndexSource, SourceFactory
from gateway.sources.cdxj_file import CdxjDirectorySource, CdxjFileSource, FileSourceConfig
from tests.sources.conftest import BIG_HOSTS, collect, linear_scan, read_lines, signature


def build(path: Path | str, name: str = "idx", stat_interval_s: float = 0.0) -> IndexSource:
    """A file or directory source that checks for changes on every lookup (unless told)."""
    config = FileSourceConfig(path=str(path), stat_interval_s=stat_interval_s)
    return CdxjFileSource.from_config(config, name=name, clients=SharedClients())


def key_range_query(key: str, end_key: str) -> CaptureQuery:
    return CaptureQuery(url="-", key=key, end_key=end_key)


def iana_urls(sample_dir: Path) -> list[str]:
    return sorted({CdxRecord.parse(line).url for line in read_lines(sample_dir / "cdxj/iana.cdxj")})


def open_fds() -> int:
    gc.collect()  # so that no earlier garbage closes a descriptor while we count
    return len(os.listdir("/proc/self/fd"))


# ------------------------------------------------------------------- config


def test_shorthand_takes_paths_and_absolute_file_urls() -> None:
    assert FileSourceConfig.from_shorthand("/srv/idx/iana.cdxj").path == "/srv/idx/iana.cdxj"
    # A relative path is made absolute at load (gateway.paths), its trailing "/" kept.
    assert FileSourceConfig.from_shorthand("indexes/").path == os.path.join(os.getcwd(), "indexes/")
    assert FileSourceConfig.from_shorthand("file:///srv/idx/").path == "/srv/idx/"
    assert FileSourceConfig.from_shorthand("file://localhost/srv/a.cdxj").path == "/srv/a.cdxj"
    assert FileSourceConfig.from_shorthand("file:///srv/my%20idx.cdxj").path == "/srv/my idx.cdxj"


@pytest.mark.parametrize("text", ["file://relative/iana.cdxj", "file://", "http://x/a.cdxj", ""])
def test_shorthand_rejects_what_is_not_a_local_path(text: str) -> None:
    with pytest.raises(ValueError, match="path"):
        FileSourceConfig.from_shorthand(text)


def test_types_satisfy_the_source_protocols(sample_dir: Path) -> None:
    factory: type[SourceFactory] = CdxjFileSource
    assert factory.config_type is FileSourceConfig
    assert factory.shorthand_prefixes == ("file://",)
    assert isinstance(build(sample_dir / "cdxj/iana.cdxj"), IndexSource)
    assert isinstance(build(sample_dir / "cdxj"), IndexSource)


def test_from_config_picks_file_or_directory(sample_dir: Path) -> None:
    file_source = build(sample_dir / "cdxj/iana.cdxj", name="iana")
    assert isinstance(file_source, CdxjFileSource)
    assert file_source.name == "iana"
    assert isinstance(build(sample_dir / "cdxj"), CdxjDirectorySource)
    assert isinstance(build(f"{sample_dir}/cdxj/"), CdxjDirectorySource)


def test_from_config_rejects_a_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        build(tmp_path / "nope.cdxj")
    assert not (tmp_path / "nope.cdxj").exists()


async def test_from_config_creates_a_missing_directory_ending_in_slash(tmp_path: Path) -> None:
    source = build(f"{tmp_path}/new/indexes/")
    assert isinstance(source, CdxjDirectorySource)
    assert (tmp_path / "new" / "indexes").is_dir()
    assert await collect(source, parse_query({"url": ["iana.org"]})) == []
    assert source.describe() == f"directory {tmp_path}/new/indexes (0 index files)"


async def test_relative_paths_are_relative_to_the_current_directory(
    sample_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(sample_dir)
    source = build("cdxj/iana.cdxj")
    monkeypatch.chdir("/")
    assert source.describe().startswith(f"file {sample_dir}/cdxj/iana.cdxj (")
    assert len(await collect(source, parse_query({"url": ["iana.org"]}))) == 1


def test_describe(sample_dir: Path, tmp_path: Path) -> None:
    path = sample_dir / "cdxj/iana.cdxj"
    assert build(path).describe() == f"file {path} (CDXJ, 43.1 kB)"
    assert build(sample_dir / "cdx/iana.cdx").describe().endswith("(CDX, 30.4 kB)")
    gz = sample_dir / "cdxj/example.cdx.gz"
    assert build(gz).describe() == f"file {gz} (gzip CDXJ, linear scan, 194 B)"
    assert (
        build(sample_dir / "cdxj").describe() == f"directory {sample_dir}/cdxj (7 index files)"
    )  # not example.cdx.gz
    (tmp_path / "one.cdxj").write_bytes(b"")
    assert build(tmp_path).describe() == f"directory {tmp_path} (1 index file)"
    assert build(tmp_path / "one.cdxj").describe().endswith("(empty, 0 B)")


# ------------------------------------------------------- single plain file


@pytest.mark.parametrize("match_type", MATCH_TYPES)
async def test_binary_search_equals_linear_scan_on_iana(
    sample_dir: Path, match_type: MatchType
) -> None:
    path = sample_dir / "cdxj/iana.cdxj"
    source = build(path)
    found = 0
    for url in iana_urls(sample_dir):
        query = CaptureQuery.for_url(url, match_type=match_type)
        records = await collect(source, query)
        assert records == linear_scan(path, query), url
        found += len(records)
    assert found >= 171
    await source.aclose()


async def test_binary_search_equals_linear_scan_on_a_large_file(
    sample_dir: Path, big_cdxj: Path
) -> None:
    source = build(big_cdxj)
    rng = random.Random(20140126)
    urls = iana_urls(sample_dir)
    hosts = [f"iana{n:03d}.org" for n in rng.sample(range(BIG_HOSTS), 12)] + ["iana999.org"]
    for host in hosts:
        for url in rng.sample(urls, 8):
            for match_type in MATCH_TYPES:
                query = CaptureQuery.for_url(url.replace("iana.org", host), match_type=match_type)
                assert await collect(source, query) == linear_scan(big_cdxj, query), query
    await source.aclose()


async def test_remembered_probes_answer_as_fresh_reads(tmp_path: Path) -> None:
    # The binary search remembers the lines it probed (cut to 512 bytes). Keys
    # that share more than 512 bytes with a remembered line must not be
    # ordered by its cut copy: urlkeys here share a 600-byte path and differ
    # after it, and each lookup runs cold (new source) and warm (same source).
    stem = "a" * 600
    lines = sorted(
        f'com,example)/{stem}{n:05d} 2014010100000{n % 10} {{"url": "http://example.com/{n}"}}'
        for n in range(0, 2000, 3)
    )
    path = tmp_path / "long-keys.cdxj"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > 40 * 8192  # many blocks, long lines at every probe
    warm = build(path)
    rng = random.Random(7)
    urls = [f"http://example.com/{stem}{n:05d}" for n in rng.sample(range(2000), 60)]
    urls += ["http://example.com/", f"http://example.com/{stem}", f"http://example.com/{stem}99999"]
    for url in urls:
        for match_type in ("exact", "prefix"):
            query = CaptureQuery.for_url(url, match_type=match_type)
            cold = build(path)
            expected = linear_scan(path, query)
            assert await collect(cold, query) == expected, (url, match_type)
            assert await collect(warm, query) == expected, (url, match_type)
            await cold.aclose()
    await warm.aclose()


@pytest.mark.parametrize(
    ("key", "end_key"),
    [
        ("a", "b"),  # before the first line
        ("zzz", "zzz!"),  # after the last line
        ("org,iana)/", "org,iana)/"),  # empty range
        ("org,iana)/zz", "org,iana*"),  # between two lines to the end of the host
        ("!", "~"),  # everything
    ],
)
async def test_range_edges(sample_dir: Path, key: str, end_key: str) -> None:
    path = sample_dir / "cdxj/iana.cdxj"
    query = key_range_query(key, end_key)
    records = await collect(build(path), query)
    assert records == linear_scan(path, query)
    if key == "!":
        assert len(records) == 171


async def test_records_come_in_urlkey_timestamp_order(sample_dir: Path) -> None:
    records = await collect(build(sample_dir / "cdxj/iana.cdxj"), key_range_query("!", "~"))
    keys = [r.sort_key() for r in records]
    assert keys == sorted(keys)
    assert records[0].fields == {
        "url": "http://www.iana.org/",
        "mime": "text/html",
        "status": "200",
        "digest": "OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB",
        "length": "2258",
        "offset": "334",
        "filename": "iana.warc.gz",
    }


async def test_a_long_range_streams_without_reading_ahead(big_cdxj: Path) -> None:
    source = build(big_cdxj)
    lookup = source.lookup(key_range_query("!", "~"))
    first = await anext(lookup)
    assert first.urlkey == "org,iana000)/"
    await lookup.aclose()  # type: ignore[attr-defined]
    await source.aclose()


async def test_legacy_11_field_cdx_matches_the_cdxj(sample_dir: Path) -> None:
    cdx, cdxj = build(sample_dir / "cdx/iana.cdx"), build(sample_dir / "cdxj/iana.cdxj")
    for url in iana_urls(sample_dir)[::5]:
        query = CaptureQuery.for_url(url, match_type="prefix")
        records = await collect(cdx, query)
        assert signature(records) == signature(await collect(cdxj, query))
        assert records == linear_scan(sample_dir / "cdx/iana.cdx", query)
    everything = await collect(cdx, key_range_query(" ", "~"))  # the header sorts first
    assert len(everything) == 171
    assert everything[0].fields["robotflags"] == "-"


async def test_legacy_9_field_cdx(sample_dir: Path, tmp_path: Path) -> None:
    # 9 fields: urlkey timestamp url mime status digest redirect offset filename
    lines = [b" CDX N b a m s k r V g"]
    for line in read_lines(sample_dir / "cdx/example.cdx")[1:]:
        fields = line.split(b" ")
        lines.append(b" ".join(fields[:7] + fields[9:]))
    path = tmp_path / "example.cdx"
    path.write_bytes(b"\n".join(lines) + b"\n")
    records = await collect(build(path), parse_query({"url": ["example.com/?example=1"]}))
    assert [(r.timestamp, r.offset, r.filename, r.length) for r in records] == [
        ("20140103030321", 333, "example.warc.gz", None),
        ("20140103030341", 1864, "example.warc.gz", None),
    ]
    assert records[1].is_revisit


async def test_non_surt_keys_are_searched_as_they_are(sample_dir: Path) -> None:
    source = build(sample_dir / "non-surt-cdx/example-non-surt.cdx")
    records = await collect(source, key_range_query("example.com/", "example.com0"))
    assert [r.timestamp for r in records] == ["20140103030321", "20140103030341"]
    assert await collect(source, parse_query({"url": ["example.com/?example=1"]})) == []


async def test_crlf_lines_and_a_missing_final_newline(sample_dir: Path, tmp_path: Path) -> None:
    lines = read_lines(sample_dir / "cdxj/iana.cdxj")
    path = tmp_path / "crlf.cdxj"
    path.write_bytes(b"\r\n".join(lines))
    query = key_range_query("!", "~")
    assert await collect(build(path), query) == linear_scan(sample_dir / "cdxj/iana.cdxj", query)


async def test_unsorted_file_yields_only_lines_in_range_and_warns(
    sample_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # post-test.cdxj is not sorted: pywb's iter_range answers an exact lookup of
    # the first line with all three lines (FIELD-NOTES); the gateway keeps to the range.
    path = sample_dir / "cdxj/post-test.cdxj"
    first = CdxRecord.parse(read_lines(path)[0])
    query = key_range_query(first.urlkey, first.urlkey + "!")
    with caplog.at_level(logging.WARNING, logger="gateway.sources.cdxj_scan"):
        assert await collect(build(path), query) == [first]
    assert f"index file {path} is not sorted" in caplog.text
    assert "LC_ALL=C sort" in caplog.text
    host = await collect(build(path), parse_query({"url": ["httpbin.org"], "matchType": ["host"]}))
    assert [r.offset for r in host] == [0, 1196, 2395]  # file order


async def test_a_bad_line_is_a_bad_answer_naming_file_and_offset(
    sample_dir: Path, tmp_path: Path
) -> None:
    text = (sample_dir / "cdxj/iana.cdxj").read_bytes()
    target = b"org,iana)/about 20140126200706 {"
    start = text.index(target)
    path = tmp_path / "bad.cdxj"
    path.write_bytes(text[:start] + target + b'"url": truncated' + text[text.index(b"\n", start) :])
    source = build(path, name="local")
    with pytest.raises(SourceBadAnswer) as info:
        await collect(source, parse_query({"url": ["http://www.iana.org/about"]}))
    assert info.value.source == "local"
    assert info.value.reason.startswith(f"{path}, byte {start}: bad CDXJ JSON block")
    assert info.value.status == 503
    # Lines outside the range are not parsed.
    assert len(await collect(source, parse_query({"url": ["iana.org"]}))) == 1


async def test_an_unknown_line_layout_is_a_bad_answer(tmp_path: Path) -> None:
    path = tmp_path / "odd.cdx"
    path.write_bytes(b"com,example)/ 20140101000000 http://example.com/ text/html\n")
    with pytest.raises(SourceBadAnswer, match=r"odd\.cdx, byte 0: unknown 4-field CDX line"):
        await collect(build(path), parse_query({"url": ["example.com"]}))


async def test_a_missing_file_at_lookup_time_is_unavailable(
    sample_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "iana.cdxj"
    shutil.copy(sample_dir / "cdxj/iana.cdxj", path)
    source = build(path, name="local")
    query = parse_query({"url": ["iana.org"]})
    assert len(await collect(source, query)) == 1
    path.unlink()
    with pytest.raises(SourceUnavailable) as info:
        await collect(source, query)
    assert info.value.source == "local"
    assert (
        info.value.reason
        == f"index file {path} does not exist; restore it or fix the configured path"
    )


async def test_a_path_that_became_a_directory_is_unavailable(
    sample_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "iana.cdxj"
    shutil.copy(sample_dir / "cdxj/iana.cdxj", path)
    source = build(path)
    path.unlink()
    path.mkdir()
    with pytest.raises(SourceUnavailable, match="not a regular file"):
        await collect(source, parse_query({"url": ["iana.org"]}))


async def test_a_replaced_or_appended_file_is_reread(sample_dir: Path, tmp_path: Path) -> None:
    lines = read_lines(sample_dir / "cdxj/iana.cdxj")
    path = tmp_path / "live.cdxj"
    path.write_bytes(b"\n".join(lines[:10]) + b"\n")
    source = build(path)
    everything = key_range_query("!", "~")
    assert len(await collect(source, everything)) == 10
    # Atomic replacement (new inode), as an indexer writing a new version does.
    new = tmp_path / "live.cdxj.tmp"
    new.write_bytes(b"\n".join(lines[:20]) + b"\n")
    new.replace(path)
    assert len(await collect(source, everything)) == 20
    # In-place append (same inode, new size).
    with path.open("ab") as fh:
        fh.write(b"\n".join(lines[20:30]) + b"\n")
    assert len(await collect(source, everything)) == 30
    await source.aclose()


@pytest.mark.parametrize("kind", ["file", "directory"])
async def test_changes_are_seen_within_the_stat_interval(
    sample_dir: Path, tmp_path: Path, kind: str
) -> None:
    lines = read_lines(sample_dir / "cdxj/iana.cdxj")
    directory = tmp_path / "idx"
    directory.mkdir()
    path = directory / "live.cdxj"
    path.write_bytes(b"\n".join(lines[:10]) + b"\n")
    target = path if kind == "file" else directory
    everything = key_range_query("!", "~")
    slow = build(target, stat_interval_s=3600)
    quick = build(target, stat_interval_s=0.05)
    every = build(target, stat_interval_s=0)
    for source in (slow, quick, every):
        assert len(await collect(source, everything)) == 10
    new = tmp_path / "live.cdxj.tmp"
    new.write_bytes(b"\n".join(lines[:20]) + b"\n")
    new.replace(path)
    (directory / "more.cdxj").write_bytes(b"\n".join(lines[20:25]) + b"\n")
    changed = 20 if kind == "file" else 25
    # With 0 the very next lookup sees the change; within the interval the
    # version read last is served (no system call per lookup)...
    assert len(await collect(every, everything)) == changed
    assert len(await collect(slow, everything)) == 10
    # ... and the first lookup after the interval sees the new one.
    await asyncio.sleep(0.1)
    assert len(await collect(quick, everything)) == changed
    path.unlink()
    assert len(await collect(slow, everything)) == 10  # the old version, still open
    await asyncio.sleep(0.1)
    for source in (quick, every):
        if kind == "file":
            with pytest.raises(SourceUnavailable, match="does not exist"):
                await collect(source, everything)
        else:
            assert len(await collect(source, everything)) == 5
    for source in (slow, quick, every):
        await source.aclose()


def test_a_bad_stat_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="stat_interval_s -1: expected 0 to 3600 seconds"):
        FileSourceConfig(path="x.cdxj", stat_interval_s=-1)


async def test_a_lookup_keeps_reading_the_version_it_started_with(
    sample_dir: Path, big_cdxj: Path, tmp_path: Path
) -> None:
    path = tmp_path / "big.cdxj"
    shutil.copy(big_cdxj, path)
    source = build(path)
    everything = key_range_query("!", "~")
    expected = linear_scan(big_cdxj, everything)
    lookup = source.lookup(everything)
    records = [await anext(lookup)]
    shutil.copy(sample_dir / "cdxj/example.cdxj", tmp_path / "small.cdxj")
    (tmp_path / "small.cdxj").replace(path)  # the old file stays open until the lookup ends
    assert len(await collect(source, everything)) == 3
    records += [record async for record in lookup]
    assert records == expected
    await source.aclose()


async def test_concurrent_lookups_do_not_disturb_each_other(
    sample_dir: Path, big_cdxj: Path
) -> None:
    source = build(big_cdxj)
    urls = iana_urls(sample_dir)
    kinds: list[MatchType] = ["exact", "prefix", "host"] * 10
    queries = [
        CaptureQuery.for_url(url.replace("iana.org", f"iana{n:03d}.org"), match_type=match_type)
        for n, url, match_type in zip(range(0, BIG_HOSTS, 7), urls[::5], kinds, strict=False)
    ]

    async def slow_collect(query: CaptureQuery) -> list[CdxRecord]:
        records = []
        async for record in source.lookup(query):
            records.append(record)
            await asyncio.sleep(0)
        return records

    results = await asyncio.gather(*(slow_collect(q) for q in queries))
    assert results == [linear_scan(big_cdxj, q) for q in queries]
    assert sum(len(r) for r in results) > 100
    await source.aclose()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd")
async def test_file_descriptors_are_released(sample_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "iana.cdxj"
    shutil.copy(sample_dir / "cdxj/iana.cdxj", path)
    before = open_fds()
    source = build(path)
    everything = key_range_query("!", "~")
    assert len(await collect(source, everything)) == 171
    assert open_fds() == before + 1  # one descriptor, kept for the next lookup
    lookup = source.lookup(everything)
    await anext(lookup)
    os.utime(path, ns=(0, 0))  # a change: the next lookup opens a new descriptor
    assert len(await collect(source, everything)) == 171
    assert open_fds() == before + 2  # the abandoned lookup still holds the old one
    await lookup.aclose()  # type: ignore[attr-defined]
    assert open_fds() == before + 1
    await source.aclose()
    assert open_fds() == before
    with pytest.raises(SourceUnavailable, match="closed"):
        await collect(source, everything)


async def test_a_long_scan_lets_other_tasks_run(big_cdxj: Path) -> None:
    source = build(big_cdxj)
    ticks = 0
    scanning = True

    async def ticker() -> None:
        nonlocal ticks
        while scanning:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    count = 0
    async for _record in source.lookup(key_range_query("!", "~")):
        count += 1  # never awaits anything itself
    scanning = False
    await task
    assert count == 171 * BIG_HOSTS
    assert ticks > 20  # ~10 MB read, a checkpoint every 64 KiB
    await source.aclose()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd")
async def test_a_cancelled_lookup_releases_its_file(big_cdxj: Path, tmp_path: Path) -> None:
    path = tmp_path / "big.cdxj"
    shutil.copy(big_cdxj, path)
    before = open_fds()
    source = build(path)

    async def consume() -> int:
        return len(await collect(source, key_range_query("!", "~")))

    task = asyncio.create_task(consume())
    for _ in range(3):
        await asyncio.sleep(0)
    os.utime(path, ns=(0, 0))  # the next lookup reopens; the old descriptor goes with the lookup
    assert len(await collect(source, parse_query({"url": ["iana000.org"]}))) == 1
    assert open_fds() == before + 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert open_fds() == before + 1
    await source.aclose()
    assert open_fds() == before


# -------------------------------------------------------------------- gzip


async def test_gzip_sample(sample_dir: Path) -> None:
    source = build(sample_dir / "cdxj/example.cdx.gz")
    records = await collect(source, parse_query({"url": ["http://www.example.com/"]}))
    assert [(r.timestamp, r.filename, r.offset) for r in records] == [
        ("20201007212236", "example-collection.warc", 845)
    ]
    assert await collect(source, parse_query({"url": ["iana.org"]})) == []


@pytest.mark.parametrize("name", ["iana.cdxj.gz", "iana.cdxj"])  # detected by magic, not name
async def test_gzip_multi_member_equals_the_plain_file(
    sample_dir: Path, tmp_path: Path, name: str
) -> None:
    plain = sample_dir / "cdxj/iana.cdxj"
    data = plain.read_bytes()
    middle = data.index(b"\n", len(data) // 2) + 1
    path = tmp_path / name
    path.write_bytes(gzip.compress(data[:middle]) + gzip.compress(data[middle:]) + b"\0" * 8)
    source = build(path)
    for url in iana_urls(sample_dir)[::3]:
        for match_type in ("exact", "prefix"):
            query = CaptureQuery.for_url(url, match_type=match_type)
            assert await collect(source, query) == linear_scan(plain, query), url
    assert len(await collect(source, key_range_query("!", "~"))) == 171


async def test_truncated_gzip_is_a_bad_answer(sample_dir: Path, tmp_path: Path) -> None:
    data = gzip.compress((sample_dir / "cdxj/iana.cdxj").read_bytes())
    path = tmp_path / "cut.cdxj.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceBadAnswer, match="truncated gzip data"):
        await collect(build(path), key_range_query("!", "~"))
    # A lookup that ends before the cut still answers.
    assert len(await collect(build(path), parse_query({"url": ["iana.org"]}))) == 1


async def test_corrupt_gzip_is_a_bad_answer(sample_dir: Path, tmp_path: Path) -> None:
    data = bytearray(gzip.compress((sample_dir / "cdxj/iana.cdxj").read_bytes()))
    data[100:110] = b"\xff" * 10
    path = tmp_path / "corrupt.cdxj.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(SourceBadAnswer, match=r"corrupt gzip data .*gzip -t"):
        await collect(build(path), key_range_query("!", "~"))


# --------------------------------------------------------------- directories


def make_index_dir(sample_dir: Path, target: Path, *names: str) -> Path:
    target.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(sample_dir / name, target / Path(name).name)
    return target


async def test_directory_merges_files_in_order_with_a_source_field(
    sample_dir: Path, tmp_path: Path
) -> None:
    names = ["cdxj/iana.cdxj", "cdxj/dupes.cdxj", "cdx/iana.cdx", "cdxj/example.cdxj"]
    directory = make_index_dir(sample_dir, tmp_path / "idx", *names, "cdxj/example.cdx.gz")
    source = build(directory)  # example.cdx.gz is not a directory member (pywb suffixes)
    file_order = sorted(Path(name).name for name in names)
    for query in [
        parse_query({"url": ["iana.org"]}),
        parse_query({"url": ["example.com"], "matchType": ["domain"]}),
        parse_query({"url": ["iana.org/_css/"], "matchType": ["prefix"]}),
        key_range_query("!", "~"),
    ]:
        expected = []
        for file_name in file_order:
            for record in linear_scan(directory / file_name, query):
                record.fields["source"] = file_name
                expected.append(record)
        expected.sort(key=CdxRecord.sort_key)  # stable: ties stay in file name order
        assert await collect(source, query) == expected
    records = await collect(source, parse_query({"url": ["iana.org"]}))
    # pywb's /pywb/index?url=iana.org order (FIELD-NOTES), plus the legacy copy.
    assert [(r.timestamp, r.source) for r in records] == [
        ("20140126200624", "iana.cdx"),
        ("20140126200624", "iana.cdxj"),
        ("20140127171238", "dupes.cdxj"),
        ("20140127171238", "dupes.cdxj"),
    ]
    await source.aclose()


async def test_directory_ignores_other_hidden_and_nested_files(
    sample_dir: Path, tmp_path: Path
) -> None:
    directory = make_index_dir(sample_dir, tmp_path / "idx", "cdxj/example.cdxj")
    shutil.copy(sample_dir / "cdxj/example.cdxj", directory / ".hidden.cdxj")
    shutil.copy(sample_dir / "cdxj/example.cdxj", directory / "example.cdxj.bak")
    shutil.copy(sample_dir / "cdxj/example.cdxj", directory / "notes.txt")
    (directory / "sub.cdxj").mkdir()
    shutil.copy(sample_dir / "cdxj/example.cdxj", directory / "sub.cdxj" / "nested.cdxj")
    source = build(directory)
    records = await collect(source, parse_query({"url": ["example.com"], "matchType": ["host"]}))
    assert {r.source for r in records} == {"example.cdxj"}
    assert len(records) == 2
    assert source.describe().endswith("(1 index file)")


async def test_directory_sees_added_and_removed_files(sample_dir: Path, tmp_path: Path) -> None:
    directory = make_index_dir(sample_dir, tmp_path / "idx", "cdxj/example.cdxj")
    source = build(directory)
    query = parse_query({"url": ["iana.org"]})
    assert await collect(source, query) == []
    shutil.copy(sample_dir / "cdxj/iana.cdxj", directory / "iana.cdxj")
    assert [r.source for r in await collect(source, query)] == ["iana.cdxj"]
    (directory / "iana.cdxj").unlink()
    assert await collect(source, query) == []
    await source.aclose()


async def test_directory_listing_is_reread_only_when_the_directory_changes(
    sample_dir: Path, tmp_path: Path
) -> None:
    directory = make_index_dir(sample_dir, tmp_path / "idx", "cdxj/example.cdxj")
    an_hour_ago_ns = time.time_ns() - 3600 * 10**9
    os.utime(directory, ns=(an_hour_ago_ns, an_hour_ago_ns))
    source = build(directory)
    query = parse_query({"url": ["iana.org"], "matchType": ["host"]})
    assert len(await collect(source, query)) == 1  # from example.cdxj
    # A new file whose arrival is hidden by restoring the directory mtime is not
    # seen: the listing is cached while the directory is unchanged.
    shutil.copy(sample_dir / "cdxj/iana.cdxj", directory / "iana.cdxj")
    os.utime(directory, ns=(an_hour_ago_ns, an_hour_ago_ns))
    assert len(await collect(source, query)) == 1
    # Any real change of the directory is.
    (directory / "other.txt").write_bytes(b"")
    assert len(await collect(source, query)) == 172
    # A listed file changed in place is re-read without a directory change.
    before = os.stat(directory).st_mtime_ns
    with (directory / "iana.cdxj").open("ab") as fh:
        fh.write(b'org,iana)/zzz 20200101000000 {"url": "http://iana.org/zzz"}\n')
    assert os.stat(directory).st_mtime_ns == before
    assert len(await collect(source, query)) == 173
    await source.aclose()


async def test_directory_errors(sample_dir: Path, tmp_path: Path) -> None:
    directory = make_index_dir(sample_dir, tmp_path / "idx", "cdxj/example.cdxj")
    (directory / "bad.cdxj").write_bytes(b"com,example)/ 20140101000000 {oops\n")
    source = build(directory, name="dir")
    query = parse_query({"url": ["example.com"], "matchType": ["host"]})
    with pytest.raises(SourceBadAnswer, match=r"bad\.cdxj, byte 0: bad CDXJ JSON block"):
        await collect(source, query)
    (directory / "bad.cdxj").unlink()
    assert len(await collect(source, query)) == 2
    shutil.rmtree(directory)
    with pytest.raises(SourceUnavailable) as info:
        await collect(source, query)
    assert info.value.source == "dir"
    assert info.value.reason.startswith(f"cannot list index directory {directory}")
    assert source.describe().startswith(f"directory {directory} (unreadable: ")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd")
async def test_directory_releases_file_descriptors(sample_dir: Path, tmp_path: Path) -> None:
    names = ["cdxj/iana.cdxj", "cdxj/dupes.cdxj", "cdxj/example.cdxj"]
    directory = make_index_dir(sample_dir, tmp_path / "idx", *names)
    before = open_fds()
    source = build(directory)
    everything = key_range_query("!", "~")
    lookup = source.lookup(everything)
    await anext(lookup)
    assert open_fds() == before + 3
    (directory / "dupes.cdxj").unlink()  # dropped from the listing, open until the lookup ends
    assert {r.source for r in await collect(source, everything)} == {"iana.cdxj", "example.cdxj"}
    assert open_fds() == before + 3
    await lookup.aclose()  # type: ignore[attr-defined]
    assert open_fds() == before + 2
    await source.aclose()
    assert open_fds() == before
    with pytest.raises(SourceUnavailable, match="closed"):
        await collect(source, everything)


async def test_directory_of_the_sample_answers_like_pywb(sample_dir: Path) -> None:
    # pywb 2.10 warcserver, /pywb/index?url=iana.org over cdxj/ (FIELD-NOTES).
    records = await collect(build(sample_dir / "cdxj"), parse_query({"url": ["iana.org"]}))
    assert [(r.urlkey, r.timestamp, r.filename, r.offset, r.source) for r in records] == [
        ("org,iana)/", "20140126200624", "iana.warc.gz", 334, "iana.cdxj"),
        ("org,iana)/", "20140127171238", "dupes.warc.gz", 1858, "dupes.cdxj"),
        ("org,iana)/", "20140127171238", "dupes.warc.gz", 2678, "dupes.cdxj"),
    ]
    assert canonical_urlkey("http://iana.org") == records[0].urlkey


# ------------------------------------------------------------ pywb as a peer


async def pywb_index(base: str, coll: str, url: str, match_type: str) -> list[CdxRecord]:
    params = {"url": url, "matchType": match_type}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{base}/{coll}/index", params=params) as response,
    ):
        body = await response.text()
        assert response.status in (200, 404), body
    return [CdxRecord.parse(line) for line in body.splitlines()] if response.status == 200 else []


def comparable(record: CdxRecord) -> tuple[str, str, dict[str, str]]:
    """Key, timestamp and fields; pywb's ``source`` (``coll:file`` or ``coll``) as the file name."""
    fields = {k: v for k, v in record.fields.items() if k not in ("source", "source-coll")}
    source = record.fields.get("source", "")
    if source.endswith((".cdx", ".cdxj", ".gz")):
        fields["file"] = source.rpartition(":")[2]
    return (record.urlkey, record.timestamp, fields)


@pytest.mark.peer
@pytest.mark.parametrize("match_type", MATCH_TYPES)
async def test_file_answers_as_pywb_warcserver(
    sample_dir: Path, pywb_warcserver: str, match_type: MatchType
) -> None:
    source = build(sample_dir / "cdxj/iana.cdxj")
    for url in iana_urls(sample_dir)[::4]:
        ours = await collect(source, CaptureQuery.for_url(url, match_type=match_type))
        theirs = await pywb_index(pywb_warcserver, "iana", url, match_type)
        assert list(map(comparable, ours)) == list(map(comparable, theirs)), url


@pytest.mark.peer
@pytest.mark.parametrize("match_type", MATCH_TYPES)
async def test_directory_answers_as_pywb_warcserver(
    sample_dir: Path, pywb_warcserver: str, match_type: MatchType
) -> None:
    # pywb breaks ties between files by the text of the line, the gateway by
    # file name: compare in (urlkey, timestamp) order, as multisets within a tie.
    source = build(sample_dir / "cdxj")
    for url in iana_urls(sample_dir)[::4]:
        query = CaptureQuery.for_url(url, match_type=match_type)
        ours = list(map(comparable, await collect(source, query)))
        theirs = list(map(comparable, await pywb_index(pywb_warcserver, "pywb", url, match_type)))
        assert [r[:2] for r in ours] == [r[:2] for r in theirs], url
        assert sorted(map(repr, ours)) == sorted(map(repr, theirs)), url


def _straddling(path: Path, long_line: int) -> Path:
    """Filler lines, one filler line of ``long_line`` bytes, the line of
    com,example)/target, more filler: the target starts wherever the long line
    ends, so it may straddle the end of the scan's first read."""

    def filler(n: int, pad: bytes = b"") -> bytes:
        return b'com,aaa)/%06d 20140101000000 {"url": "http://aaa.com/%06d%s"}\n' % (n, n, pad)

    out = bytearray()
    for n in range(200):
        out += filler(n)
    out += filler(200, b"x" * (long_line - len(filler(200))))
    out += b'com,example)/target 20140101000000 {"url": "http://example.com/target"}\n'
    for i in range(800):
        out += b'com,zzz)/%06d 20140101000000 {"url": "http://zzz.com/%06d"}\n' % (i, i)
    path.write_bytes(bytes(out))
    return path


async def test_a_line_found_across_a_read_boundary(tmp_path: Path) -> None:
    # A line longer than the search block moves the first candidate line to the
    # end of the scan's first read (16 KiB from the 8 KiB block the search
    # lands on): with long lines of 11,758-11,776 bytes the target line starts
    # in the last 19 bytes of that read. It is found whole wherever the read ends.
    query = parse_query({"url": ["http://example.com/target"]})
    for long_line in range(11_700, 11_850):
        path = _straddling(tmp_path / f"s{long_line}.cdxj", long_line)
        records = await collect(build(path), query)
        assert [r.url for r in records] == ["http://example.com/target"], long_line


def _rewrite_keeping_identity(path: Path, data: bytes) -> None:
    """Other bytes in ``path``, same size, inode and mtime: the same version to a reader."""
    before = path.stat()
    assert len(data) == before.st_size
    with path.open("r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


async def test_a_short_answer_is_remembered_for_its_version_of_the_file(tmp_path: Path) -> None:
    # Replay looks the same URLs up again and again: an answer of at most
    # RANGE_RECORDS records is kept with the file's version (Handle.remember).
    from gateway.sources.range_memo import RANGE_RECORDS

    def lines(url: str, count: int, year: str) -> list[str]:
        return [
            f'{canonical_urlkey(url)} {year}01010000{n:02d} {{"url": "{url}"}}'
            for n in range(count)
        ]

    few, many = "http://example.com/few", "http://example.com/many"
    text = "\n".join(sorted(lines(few, 3, "2020") + lines(many, RANGE_RECORDS + 1, "2020")))
    path = tmp_path / "idx.cdxj"
    path.write_text(text + "\n")
    source = build(path, stat_interval_s=0)
    first = await collect(source, CaptureQuery.for_url(few))
    assert [r.timestamp[:4] for r in first] == ["2020"] * 3
    assert len(await collect(source, CaptureQuery.for_url(many))) == RANGE_RECORDS + 1
    for record in first:  # what consumers do to their records does not reach the memo
        record.tag("member")
        record.fields["url"] = "changed"
    # The same version to a reader (size, inode, mtime), other captures in it:
    _rewrite_keeping_identity(path, text.replace(" 2020", " 2021").encode() + b"\n")
    again = await collect(source, CaptureQuery.for_url(few))
    assert [(r.timestamp[:4], r.url) for r in again] == [("2020", few)] * 3  # remembered
    assert "source" not in again[0].to_cdxj()
    longer = await collect(source, CaptureQuery.for_url(many))
    assert {r.timestamp[:4] for r in longer} == {"2021"}  # too long to be kept: read again
    # A new version (an append) is a new answer.
    with path.open("a") as fh:
        fh.write(lines("http://example.com/zz", 1, "2022")[0] + "\n")
    assert {r.timestamp[:4] for r in await collect(source, CaptureQuery.for_url(few))} == {"2021"}
    await source.aclose()


def test_the_range_memo_keeps_at_most_its_records_and_short_answers_only() -> None:
    from gateway.sources.range_memo import RANGE_RECORDS, RangeMemo

    image = ("com,example)/", "20200101000000", '{"url": "http://example.com/"}')
    memo = RangeMemo(max_records=10)
    memo.remember("v1", b"a", b"b", [image] * (RANGE_RECORDS + 1))
    assert memo.get("v1", b"a", b"b") is None  # too long an answer
    for n in range(6):  # 2 records each (an answer of 1, plus 1)
        memo.remember("v1", b"k%d" % n, b"z", [image])
    assert memo.held == 10
    assert memo.get("v1", b"k0", b"z") is None  # the first remembered went first
    assert memo.get("v1", b"k5", b"z") == ((image,), ())
    assert memo.get("v2", b"k5", b"z") is None  # another version of the file
    memo.remember("v1", b"empty", b"z", [])
    assert memo.get("v1", b"empty", b"z") == ((), ())
    memo.remember("v1", b"empty", b"z", [], ("loc v2",))  # read again: the newer answer
    assert memo.get("v1", b"empty", b"z") == ((), ("loc v2",))
    assert memo.held <= 10


async def test_a_directory_member_remembered_keeps_its_file_name(
    sample_dir: Path, tmp_path: Path
) -> None:
    directory = make_index_dir(sample_dir, tmp_path / "idx", "cdxj/iana.cdxj")
    source = build(directory, stat_interval_s=0)
    query = CaptureQuery.for_url("http://www.iana.org/")
    first = [r.to_cdxj() for r in await collect(source, query)]
    assert first
    assert all('"source": "iana.cdxj"' in line for line in first)
    assert [r.to_cdxj() for r in await collect(source, query)] == first
    await source.aclose()
