"""WarcLoader (gateway.loaders.warc) over the sample archive and generated WARCs.

Byte identity with pywb 2.10's ``/resource`` is checked against a real pywb
warcserver (collection ``pywb``) started by the ``pywb_warcserver`` fixture.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import re
import shutil
import socket
import zlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer
from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import DecompressingBufferedReader
from warcio.limitreader import LimitReader
from warcio.recordloader import ArcWarcRecordLoader
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from gateway.cdx.cdxj import CdxRecord
from gateway.clients import SharedClients
from gateway.errors import (
    ArchiveFileNotFound,
    LoadError,
    RecordFormatError,
    RecordFramingError,
    RevisitUnresolved,
    SelfRedirect,
    UnsafeFilename,
)
from gateway.loaders.base import FindOriginal, ResourceLoader
from gateway.loaders.resolvers import PrefixResolverConfig
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig, is_self_redirect
from gateway.loaders.warc_headers import arc_url
from gateway.loaders.warc_reader import open_record
from tests.loaders.conftest import (
    capture,
    context,
    index_files,
    load_all,
    make_finder,
    open_fds,
    peak_rss_growth,
    write_records,
)

_RECORD_ID = re.compile(rb"WARC-Record-ID: <urn:uuid:[0-9a-f-]+>")


def make_loader(clients: SharedClients, *prefixes: str, **options: int) -> WarcLoader:
    config = WarcLoaderConfig.from_shorthands(prefixes)
    if options:
        config = WarcLoaderConfig(resolvers=config.resolvers, **options)
    return WarcLoader(config, clients=clients)


@pytest.fixture
def loader(clients: SharedClients, warcs_dir: Path) -> WarcLoader:
    return make_loader(clients, str(warcs_dir))


def parse_one(data: bytes) -> tuple[str, bytes, StatusAndHeaders]:
    """Parse served bytes with warcio: exactly one record, whose block is complete."""
    records = []
    for record in ArchiveIterator(io.BytesIO(data), no_record_parse=True):
        block = record.raw_stream.read()
        records.append((record.rec_type, block, record.rec_headers))
    assert len(records) == 1
    rec_type, block, headers = records[0]
    assert int(headers.get_header("Content-Length")) == len(data) - data.index(b"\r\n\r\n") - 4
    return rec_type, block, headers


def http_body(data: bytes) -> bytes:
    """What follows the HTTP header block of a served response record."""
    return data.split(b"\r\n\r\n", 2)[2]


def find(index: list[CdxRecord], url: str, timestamp: str) -> CdxRecord:
    for record in index:
        if record.url == url and record.timestamp == timestamp:
            return record.copy()
    raise LookupError(f"{url} {timestamp}")


# ---------------------------------------------------------------- formats
async def test_gzip_warc_record(
    loader: WarcLoader, sample_index: list[CdxRecord], finder: FindOriginal
) -> None:
    record = capture(sample_index, "iana.warc.gz", 334)
    loaded, data = await load_all(loader, record, finder)
    assert loaded.content_length == len(data)
    assert loaded.target_uri == "http://www.iana.org/"
    assert loaded.warc_date == "2014-01-26T20:06:24Z"
    assert loaded.warc_headers.startswith(b"WARC/1.0\r\nWARC-Type: response\r\n")
    assert loaded.http_headers.startswith(b"HTTP/1.1 200 OK\r\n")
    assert loaded.http_headers.endswith(b"\r\n\r\n")
    assert not data.endswith(b"</html>\n\r\n\r\n")
    rec_type, _, headers = parse_one(data)
    assert rec_type == "response"
    assert headers.get_header("WARC-Payload-Digest") == "sha1:OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB"


async def test_plain_and_gzip_warc_serve_the_same_bytes(
    loader: WarcLoader, sample_index: list[CdxRecord], finder: FindOriginal
) -> None:
    plain = capture(sample_index, "example.warc", 460)
    gzipped = capture(sample_index, "example.warc.gz", 333)
    _, plain_data = await load_all(loader, plain, finder)
    _, gzip_data = await load_all(loader, gzipped, finder)
    assert plain_data == gzip_data
    assert parse_one(plain_data)[0] == "response"


@pytest.mark.parametrize(("filename", "offset"), [("example.arc", 151), ("example.arc.gz", 171)])
async def test_arc_records_are_served_as_warc_responses(
    loader: WarcLoader,
    sample_index: list[CdxRecord],
    finder: FindOriginal,
    filename: str,
    offset: int,
) -> None:
    record = capture(sample_index, filename, offset)
    loaded, data = await load_all(loader, record, finder)
    lines = loaded.warc_headers.decode().split("\r\n")
    # The layout pywb 2.10 serves (warcio arc2warc), record id aside.
    assert [line.split(":")[0] for line in lines] == [
        "WARC/1.0",
        "WARC-Type",
        "WARC-Record-ID",
        "WARC-Target-URI",
        "WARC-IP-Address",
        "WARC-Date",
        "Content-Type",
        "Content-Length",
        "",
        "",
    ]
    assert "WARC-Date: 2014-02-16T05:02:21Z" in lines
    assert "Content-Type: application/http;msgtype=response" in lines
    assert "Content-Length: 1591" in lines
    assert loaded.content_length == len(data)
    rec_type, block, _ = parse_one(data)
    assert rec_type == "response"
    assert block.startswith(b"HTTP/1.1 200 OK\r\n")
    assert block.endswith(b"</html>\n")
    # Stable identity: the same record id on every load (pywb: a new one each time).
    _, again = await load_all(loader, record, finder)
    assert again == data


async def test_arc_and_arc_gz_differ_only_in_record_id(
    loader: WarcLoader, sample_index: list[CdxRecord], finder: FindOriginal
) -> None:
    _, plain = await load_all(loader, capture(sample_index, "example.arc", 151), finder)
    _, gzipped = await load_all(loader, capture(sample_index, "example.arc.gz", 171), finder)
    assert plain != gzipped
    assert _RECORD_ID.sub(b"", plain) == _RECORD_ID.sub(b"", gzipped)


def _bad_arc_capture(offset: int) -> CdxRecord:
    return CdxRecord(
        "com,example)/",
        "20140401000000",
        {"url": "http://example.com/", "filename": "bad.arc", "offset": str(offset)},
    )


async def test_a_bad_arc_record_with_a_length_loads_as_warcio_reads_it(
    loader: WarcLoader, finder: FindOriginal
) -> None:
    loaded, data = await load_all(loader, _bad_arc_capture(202), finder)  # one blank byte
    assert loaded.content_length == len(data)
    _, _, headers = parse_one(data)
    assert headers.get_header("Content-Length").isdigit()
    assert loaded.target_uri == "http://example.com/"
    assert loaded.warc_date == "2014-01-02T00:00:00Z"
    assert loaded.http_headers == b""


@pytest.mark.parametrize(
    ("offset", "length"),
    [(0, "'-1'"), (134, "'-1'"), (262, "'abc'")],  # the filedesc header, two records
)
async def test_a_record_whose_length_is_no_number_is_never_served(
    loader: WarcLoader, finder: FindOriginal, offset: int, length: str
) -> None:
    """warcio reads a length of -1 or abc as an empty block; served, that was a
    WARC record saying ``Content-Length: -1``. Now a framing error (502)."""
    with pytest.raises(RecordFramingError) as caught:
        await load_all(loader, _bad_arc_capture(offset), finder)
    assert caught.value.status == 502
    assert f"'bad.arc' offset {offset}" in caught.value.message
    assert f"length {length} is not a number of bytes" in caught.value.message


# --------------------------------------------------------------- revisits
async def test_same_url_revisit_serves_the_original_payload(
    loader: WarcLoader, sample_index: list[CdxRecord], finder: FindOriginal
) -> None:
    revisit = capture(sample_index, "dupes.warc.gz", 11875)
    original = capture(sample_index, "dupes.warc.gz", 334)
    loaded, data = await load_all(loader, revisit, finder)
    _, original_data = await load_all(loader, original, finder)
    rec_type, _, headers = parse_one(data)
    assert rec_type == "response"
    assert headers.get_header("WARC-Target-URI") == "http://example.com"
    assert headers.get_header("WARC-Date") == "2014-01-27T17:12:51Z"
    assert headers.get_header("WARC-Refers-To-Target-URI") == "http://example.com"
    assert headers.get_header("WARC-Refers-To-Date") == "2014-01-27T17:12:00Z"
    assert b"Date: Mon, 27 Jan 2014 17:12:51 GMT" in loaded.http_headers  # the revisit's
    assert http_body(data) == http_body(original_data)
    assert loaded.content_length == len(data)
    assert loaded.warc_date == "2014-01-27T17:12:51Z"


async def test_url_agnostic_revisit(
    loader: WarcLoader, sample_index: list[CdxRecord], finder: FindOriginal
) -> None:
    revisit = capture(sample_index, "example-url-agnostic-revisit.warc.gz", 355)
    original = capture(sample_index, "example-url-agnostic-orig.warc.gz", 353)
    loaded, data = await load_all(loader, revisit, finder)
    _, original_data = await load_all(loader, original, finder)
    _, _, headers = parse_one(data)
    assert headers.get_header("WARC-Target-URI") == "http://test@example.com/"
    assert headers.get_header("WARC-Refers-To-Target-URI") == "http://example.iana.org/"
    assert headers.get_header("WARC-Refers-To-Date") == "2013-07-02T19:54:02Z"
    assert loaded.target_uri == "http://test@example.com/"
    assert http_body(data) == http_body(original_data)


async def test_revisit_with_longer_http_headers_adjusts_content_length(
    loader: WarcLoader, crafted_dir: Path, crafted_index: list[CdxRecord], finder: FindOriginal
) -> None:
    loader = make_loader(loader.clients, str(crafted_dir))
    revisit = find(crafted_index, "http://crafted.test/page", "20200201000000")
    loaded, data = await load_all(loader, revisit, finder)
    _, block, headers = parse_one(data)
    assert b"X-Long: " + b"x" * 50 in loaded.http_headers
    assert block.endswith(b"\r\n\r\nhello world")
    assert headers.get_header("WARC-Type") == "response"


async def test_revisit_without_http_headers_uses_the_originals(
    loader: WarcLoader, crafted_dir: Path, crafted_index: list[CdxRecord], finder: FindOriginal
) -> None:
    loader = make_loader(loader.clients, str(crafted_dir))
    revisit = find(crafted_index, "http://crafted.test/page", "20200501000000")
    loaded, data = await load_all(loader, revisit, finder)
    parse_one(data)
    assert loaded.http_headers.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n")
    assert data.endswith(b"\r\n\r\nhello world")
    assert loaded.warc_date == "2020-05-01T00:00:00Z"


async def test_wget_revisit_without_refers_to_target_uri_resolves_by_digest(
    loader: WarcLoader, crafted_dir: Path, crafted_index: list[CdxRecord], finder: FindOriginal
) -> None:
    loader = make_loader(loader.clients, str(crafted_dir))
    revisit = find(crafted_index, "http://crafted.test/page", "20200601000000")
    _, data = await load_all(loader, revisit, finder)
    _, _, headers = parse_one(data)
    assert data.endswith(b"hello world")
    assert headers.get_header("WARC-Refers-To-Target-URI") == "http://crafted.test/page"
    assert headers.get_header("WARC-Refers-To-Date") == "2020-01-01T00:00:00Z"


async def test_3xx_revisit_is_served_as_is_with_empty_content_length(
    loader: WarcLoader, crafted_dir: Path, crafted_index: list[CdxRecord]
) -> None:
    loader = make_loader(loader.clients, str(crafted_dir))
    revisit = find(crafted_index, "http://crafted.test/redir", "20200301000000")
    nothing = make_finder([])  # the original exists nowhere and is never looked up
    loaded, data = await load_all(loader, revisit, nothing)
    rec_type, _, headers = parse_one(data)
    assert rec_type == "revisit"
    assert b"\r\nContent-Length: 0\r\n" in loaded.http_headers
    assert headers.get_header("WARC-Refers-To-Target-URI") == "http://crafted.test/redir"


async def test_empty_digest_revisit_needs_no_original(
    loader: WarcLoader, crafted_dir: Path, crafted_index: list[CdxRecord]
) -> None:
    loader = make_loader(loader.clients, str(crafted_dir))
    revisit = find(crafted_index, "http://crafted.test/empty", "20200401000000")
    assert revisit.digest.startswith("sha1:")  # pywb misses this case; we do not
    loaded, data = await load_all(loader, revisit, make_finder([]))
    assert parse_one(data)[0] == "revisit"
    assert loaded.content_length == len(data)


async def test_revisit_without_original_raises_revisit_unresolved(
    loader: WarcLoader, sample_index: list[CdxRecord]
) -> None:
    revisit = capture(sample_index, "dupes.warc.gz", 11875)
    fds = open_fds()
    with pytest.raises(RevisitUnresolved, match=r"original for revisit http://example\.com"):
        await load_all(loader, revisit, make_finder([]))
    # A candidate whose file is missing is reported too.
    missing = capture(sample_index, "dupes.warc.gz", 334)
    missing.fields["filename"] = "gone.warc.gz"
    with pytest.raises(RevisitUnresolved, match=r"gone\.warc\.gz"):
        await load_all(loader, revisit, make_finder([missing]))
    assert open_fds() == fds


async def test_revisit_candidates_that_are_revisits_are_skipped(
    loader: WarcLoader, sample_index: list[CdxRecord]
) -> None:
    revisit = capture(sample_index, "dupes.warc.gz", 11875)
    other_revisit = capture(sample_index, "example.warc.gz", 1864)
    other_revisit.fields["mime"] = "text/html"  # a lying index
    original = capture(sample_index, "dupes.warc.gz", 334)
    _, data = await load_all(loader, revisit, make_finder([other_revisit, original]))
    assert parse_one(data)[1].endswith(b"</html>\n")


async def test_request_record_keeps_its_http_headers(
    loader: WarcLoader, crafted_dir: Path, crafted_index: list[CdxRecord], finder: FindOriginal
) -> None:
    loader = make_loader(loader.clients, str(crafted_dir))
    request = next(r for r in crafted_index if not r.mime and r.url == "http://crafted.test/page")
    loaded, data = await load_all(loader, request, finder)
    rec_type, block, _ = parse_one(data)
    assert rec_type == "request"
    assert block == b"GET /page HTTP/1.1\r\nHost: crafted.test\r\nUser-Agent: x\r\n\r\n"
    assert loaded.content_length == len(data)


async def test_resource_record(
    loader: WarcLoader, crafted_dir: Path, crafted_index: list[CdxRecord], finder: FindOriginal
) -> None:
    loader = make_loader(loader.clients, str(crafted_dir))
    resource = find(crafted_index, "http://crafted.test/res.txt", "20200701000000")
    loaded, data = await load_all(loader, resource, finder)
    assert loaded.http_headers == b""
    assert parse_one(data)[:2] == ("resource", b"resource body")


# ---------------------------------------------------------- self-redirect
async def test_self_redirect_is_refused(
    loader: WarcLoader, sample_index: list[CdxRecord], finder: FindOriginal
) -> None:
    redirect = capture(sample_index, "dupes.warc.gz", 1858)  # iana.org -> www.iana.org/
    with pytest.raises(SelfRedirect, match="redirects to itself"):
        await load_all(loader, redirect, finder, request_url="http://iana.org")
    # Its urlkey is org,iana)/: the Location canonicalizes to it whatever was asked.
    with pytest.raises(SelfRedirect):
        await load_all(loader, redirect, finder, request_url="http://iana.org/elsewhere")


async def test_redirect_elsewhere_is_served(
    loader: WarcLoader, sample_index: list[CdxRecord], finder: FindOriginal
) -> None:
    redirect = capture(sample_index, "example.warc", 4771)  # 302 to example.com
    loaded, data = await load_all(loader, redirect, finder)
    assert loaded.http_headers.startswith(b"HTTP/1.1 302")
    parse_one(data)


@pytest.mark.parametrize(
    ("request_url", "status", "location", "expected"),
    [
        ("http://iana.org", "302", "http://www.iana.org/", True),  # same urlkey
        ("http://example.com/a/", "301", "HTTPS://EXAMPLE.COM/a", True),
        ("example.com/a", "302", "/a/", True),  # relative, joined with the host
        ("http://example.com/a", "302", "http://example.com/b", False),
        ("http://example.com/a", "304", "http://example.com/a", False),
        ("http://example.com/a", "200", "http://example.com/a", False),
        ("http://example.com/a", "302", None, False),
    ],
)
def test_is_self_redirect(
    request_url: str, status: str, location: str | None, expected: bool
) -> None:
    record = CdxRecord.parse(
        'org,iana)/ 20140127171238 {"url": "http://iana.org"}'
        if "iana" in request_url
        else 'com,example)/a 20140127171238 {"url": "http://example.com/a"}'
    )
    assert is_self_redirect(request_url, record, status, location) is expected


# ----------------------------------------------------- safety and failures
@pytest.mark.parametrize(
    "filename",
    [
        "../warcs/iana.warc.gz",
        "a/../../etc/passwd",
        "/etc/passwd",
        "file:///etc/passwd",
        "file:iana.warc.gz",
        "http://evil.example/x.warc.gz",
        "s3://bucket/x.warc.gz",
        "a\\..\\b.warc.gz",
        "iana.warc.gz\x00.txt",
        "%2e%2e/warcs/iana.warc.gz",
        "..%2fwarcs/iana.warc.gz",
    ],
)
async def test_unsafe_filenames_are_refused(
    loader: WarcLoader, sample_index: list[CdxRecord], finder: FindOriginal, filename: str
) -> None:
    record = capture(sample_index, "iana.warc.gz", 334)
    record.fields["filename"] = filename
    with pytest.raises(UnsafeFilename):
        await load_all(loader, record, finder)


async def test_subdirectories_are_fine(
    clients: SharedClients, warcs_dir: Path, tmp_path: Path, sample_index: list[CdxRecord]
) -> None:
    (tmp_path / "2014" / "01").mkdir(parents=True)
    shutil.copy(warcs_dir / "iana.warc.gz", tmp_path / "2014" / "01" / "iana.warc.gz")
    record = capture(sample_index, "iana.warc.gz", 334)
    record.fields["filename"] = "2014/01/iana.warc.gz"
    loaded, _ = await load_all(make_loader(clients, str(tmp_path)), record, make_finder([]))
    assert loaded.target_uri == "http://www.iana.org/"


async def test_symlinks_leaving_the_prefix_need_follow_symlinks(
    clients: SharedClients, warcs_dir: Path, tmp_path: Path, sample_index: list[CdxRecord]
) -> None:
    prefix = tmp_path / "prefix"
    (prefix / "inside").mkdir(parents=True)
    (prefix / "out.warc.gz").symlink_to(warcs_dir / "iana.warc.gz")
    (prefix / "outdir").symlink_to(warcs_dir)
    shutil.copy(warcs_dir / "iana.warc.gz", prefix / "inside" / "real.warc.gz")
    (prefix / "in.warc.gz").symlink_to(prefix / "inside" / "real.warc.gz")
    record = capture(sample_index, "iana.warc.gz", 334)
    strict = make_loader(clients, str(prefix))
    for name in ("out.warc.gz", "outdir/iana.warc.gz"):
        record.fields["filename"] = name
        with pytest.raises(UnsafeFilename, match="follow_symlinks"):
            await load_all(strict, record, make_finder([]))
    record.fields["filename"] = "in.warc.gz"  # a link that stays inside is fine
    await load_all(strict, record, make_finder([]))
    lenient = WarcLoader(
        WarcLoaderConfig(
            resolvers=(PrefixResolverConfig(prefix=str(prefix), follow_symlinks=True),)
        ),
        clients=clients,
    )
    for name in ("out.warc.gz", "outdir/iana.warc.gz"):
        record.fields["filename"] = name
        loaded, _ = await load_all(lenient, record, make_finder([]))
        assert loaded.target_uri == "http://www.iana.org/"


async def test_missing_file_lists_every_location(
    clients: SharedClients, warcs_dir: Path, tmp_path: Path, sample_index: list[CdxRecord]
) -> None:
    loader = make_loader(clients, str(tmp_path), str(warcs_dir))
    record = capture(sample_index, "iana.warc.gz", 334)
    record.fields["filename"] = "non-existent.warc"
    with pytest.raises(ArchiveFileNotFound) as caught:
        await load_all(loader, record, make_finder([]))
    assert f"{tmp_path}/non-existent.warc" in caught.value.message
    assert f"{warcs_dir}/non-existent.warc" in caught.value.message


async def test_first_location_missing_second_serves(
    clients: SharedClients, warcs_dir: Path, tmp_path: Path, sample_index: list[CdxRecord]
) -> None:
    loader = make_loader(clients, str(tmp_path), str(warcs_dir))
    loaded, _ = await load_all(loader, capture(sample_index, "iana.warc.gz", 334), make_finder([]))
    assert loaded.target_uri == "http://www.iana.org/"


@pytest.mark.parametrize(
    ("filename", "offset", "length"),
    [
        ("iana.warc.gz", 335, 2258),  # inside a gzip member: junk warcio calls ARC
        ("example.warc", 100, 500),  # inside a plain record's headers
        ("example.warc", 1000, 500),  # inside a payload
        ("iana.warc.gz", 10_000_000, 100),  # past the end of the file
    ],
)
async def test_garbage_at_offset_is_a_record_format_error(
    loader: WarcLoader, filename: str, offset: int, length: int
) -> None:
    record = CdxRecord(
        "com,example)/",
        "20140101000000",
        {"url": "http://example.com/", "filename": filename, "offset": str(offset)}
        | {"length": str(length)},
    )
    fds = open_fds()
    with pytest.raises(RecordFormatError, match="expected a WARC or ARC record"):
        await load_all(loader, record, make_finder([]))
    assert open_fds() == fds


async def test_truncated_record_aborts_the_body(
    clients: SharedClients, warcs_dir: Path, tmp_path: Path, sample_index: list[CdxRecord]
) -> None:
    data = (warcs_dir / "iana.warc.gz").read_bytes()
    (tmp_path / "cut.warc.gz").write_bytes(data[: 334 + 1500])
    (tmp_path / "cut.warc").write_bytes(gzip.decompress(data[334 : 334 + 2258])[:3000])
    loader = make_loader(clients, str(tmp_path))
    sample = capture(sample_index, "iana.warc.gz", 334)
    fields = {**sample.fields, "filename": "cut.warc.gz", "offset": "334"}
    record = CdxRecord(sample.urlkey, sample.timestamp, fields)
    loaded = await loader.load(record, context(make_finder([]), record.url))
    assert loaded.content_length is not None
    with pytest.raises(RecordFormatError, match="truncated"):
        async for _ in loaded.body:
            pass
    await loaded.aclose()
    # Uncompressed, the indexed length shows the block is short before anything is sent.
    fields = {**sample.fields, "filename": "cut.warc", "offset": "0"}
    record = CdxRecord(sample.urlkey, sample.timestamp, fields)
    with pytest.raises(RecordFormatError, match="torn record"):
        await loader.load(record, context(make_finder([]), record.url))


async def test_capture_without_filename_is_not_accepted(loader: WarcLoader) -> None:
    for fields in ({"filename": "-", "offset": "0"}, {"offset": "0"}, {"filename": "a.warc"}):
        assert not loader.accepts(CdxRecord("a)/", "20140101000000", dict(fields)))
    assert loader.accepts(CdxRecord("a)/", "20140101000000", {"filename": "a", "offset": "0"}))
    assert isinstance(loader, ResourceLoader)


async def test_close_without_reading_releases_the_file(
    clients: SharedClients, warcs_dir: Path, sample_index: list[CdxRecord], finder: FindOriginal
) -> None:
    record = capture(sample_index, "iana.warc.gz", 620049)  # 34 KB compressed
    for options in ({"chunk_bytes": 1024}, {"inline_read_max_bytes": 0, "chunk_bytes": 1024}):
        loader = make_loader(clients, str(warcs_dir), **options)
        fds = open_fds()
        loaded = await loader.load(record, context(finder, record.url))
        assert open_fds() == fds + 1
        await anext(loaded.body)
        await loaded.aclose()
        await loaded.aclose()  # idempotent
        assert open_fds() == fds


async def test_cancelled_while_a_worker_reads(
    clients: SharedClients, tmp_path: Path, finder: FindOriginal
) -> None:
    _, record = write_big_warc(tmp_path, 20 * 1024 * 1024, gzipped=False)
    loader = make_loader(clients, str(tmp_path), inline_read_max_bytes=0)
    fds = open_fds()
    loaded = await loader.load(record, context(finder, record.url))

    reading = asyncio.Event()

    async def drain() -> None:
        async for _ in loaded.body:
            reading.set()  # the next chunk is read by a worker while this task waits
            await asyncio.sleep(0)

    task = asyncio.create_task(drain())
    await reading.wait()  # not a sleep: a fast disk could serve 20 MB before it ends
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await loaded.aclose()
    for _ in range(1000):  # the worker closes the file when its read finishes
        if open_fds() == fds:  # (up to 10 s: a loaded machine may be slow to schedule it)
            break
        await asyncio.sleep(0.01)
    assert open_fds() == fds


# ------------------------------------------------------------ every record
@pytest.mark.parametrize("options", [{}, {"inline_read_max_bytes": 0, "chunk_bytes": 1024}])
async def test_every_sample_capture_loads_as_one_valid_record(
    clients: SharedClients,
    warcs_dir: Path,
    sample_index: list[CdxRecord],
    finder: FindOriginal,
    options: dict[str, int],
) -> None:
    """Every capture loads (or fails with a LoadError) into one record warcio accepts."""
    loader = make_loader(clients, str(warcs_dir), **options)
    failures: dict[str, str] = {}
    served = 0
    for record in sample_index:
        try:
            loaded, data = await load_all(loader, record.copy(), finder)
        except LoadError as exc:
            failures[f"{record.filename}:{record.offset}"] = type(exc).__name__
            continue
        served += 1
        assert loaded.content_length == len(data)
        parse_one(data)
    assert served > 200
    assert set(failures.values()) <= {"SelfRedirect", "ArchiveFileNotFound", "RevisitUnresolved"}
    assert failures.get("non-existent.warc:0") == "ArchiveFileNotFound"


def _no_session() -> aiohttp.ClientSession:
    raise AssertionError("local paths never need the HTTP session")


def _warcio_reference(path: Path, offset: int, length: int) -> object:
    """pywb's BlockArcWarcRecordLoader parse: headers and the rest of the block."""
    with path.open("rb") as raw:
        raw.seek(offset)
        stream = DecompressingBufferedReader(LimitReader(raw, length), decomp_type="gzip")
        try:
            record = ArcWarcRecordLoader().parse_record_stream(stream)
        except Exception:  # warcio raises assorted errors on garbage: all are "no record"
            return "error"
        rest = record.raw_stream.read()
    if not record.rec_headers.protocol and not record.rec_headers.headers:
        return "error"  # a blank line: warcio's empty "record", refused on purpose
    uri = arc_url(record.rec_headers)
    if not re.match(r"\s*WARC/", _first_line(path, offset)) and not re.fullmatch(
        r"[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20\x7f]*", uri
    ):
        return "error"  # junk warcio reads as an ARC header line, refused on purpose
    declared = record.rec_headers.get_header("Content-Length")
    if declared is None or not (declared.isascii() and declared.isdigit()):
        return "error"  # a length that is no number (-1, abc): never served as a record
    return (
        [h for h in record.rec_headers.headers if h[0] != "WARC-Record-ID"],
        _headers_tuple(record.http_headers),
        rest,
    )


def _first_line(path: Path, offset: int) -> str:
    data = path.read_bytes()[offset : offset + 1_000_000]
    if data.startswith(b"\x1f\x8b"):
        data = zlib.decompressobj(31).decompress(data, 4096)
    return data.split(b"\n", 1)[0].decode("latin-1")


def _headers_tuple(headers: StatusAndHeaders | None) -> object:
    return None if headers is None else (headers.protocol, headers.statusline, headers.headers)


async def _our_parse(path: Path, offset: int, length: int, chunk_bytes: int) -> object:
    try:
        opened = await open_record(
            str(path),
            offset,
            length,
            session=_no_session,
            chunk_bytes=chunk_bytes,
            inline_read_max_bytes=1 << 30,
        )
    except RecordFormatError as exc:
        # an uncompressed block longer than the indexed length is torn at once
        return "truncated" if "torn record" in exc.message else "error"
    record = opened.record
    try:
        rest = b"".join([chunk async for chunk in opened.body])
    except RecordFormatError:
        return "truncated"
    return (
        [h for h in record.rec_headers.headers if h[0] != "WARC-Record-ID"],
        _headers_tuple(record.http_headers),
        rest,
    )


def _without_length(parsed: object) -> object:
    if not isinstance(parsed, tuple):
        return parsed
    headers, http, rest = parsed
    return ([h for h in headers if h[0] != "Content-Length"], http, rest)


async def test_header_parsing_matches_warcio(warcs_dir: Path) -> None:
    """At every record (gzip member) and every line start, we parse what warcio parses."""
    checked = 0
    for path in sorted(warcs_dir.iterdir()):  # noqa: ASYNC240 - small local test files
        data = path.read_bytes()
        if data.startswith(b"\x1f\x8b"):
            offsets = [m.start() for m in re.finditer(b"\x1f\x8b\x08", data)]
        else:
            offsets = [0, *[m.end() for m in re.finditer(b"\n", data)][:300]]
        for offset in offsets[:60]:
            for length in (len(data) - offset, 300):
                expected = _warcio_reference(path, offset, length)
                for chunk_bytes in (1024, 65536):
                    ours = await _our_parse(path, offset, length, chunk_bytes)
                    if ours == "truncated":  # warcio serves a short block silently
                        assert expected != "error"
                        continue
                    if path.suffix == ".arc" and isinstance(ours, tuple):
                        # an ARC block cut by the indexed length gets a Content-Length
                        # that fits it (warc_reader._fit_to_length); warcio keeps the
                        # declared one
                        ours, expected = _without_length(ours), _without_length(expected)
                    assert ours == expected, (path.name, offset, length, chunk_bytes)
                    checked += 1
    assert checked > 1000


# -------------------------------------------------------------- HTTP range
def warcs_app(warcs_dir: Path) -> web.Application:
    """Serves the sample archive with Range support, plus misbehaving routes."""

    async def ignores_range(request: web.Request) -> web.Response:
        return web.Response(body=(warcs_dir / request.match_info["name"]).read_bytes())

    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=503, text="maintenance")

    app = web.Application()
    app.router.add_static("/warcs/", warcs_dir)
    app.router.add_get("/norange/{name}", ignores_range)
    app.router.add_get("/broken/{name}", broken)
    return app


@pytest.fixture
async def warcs_server(aiohttp_server: AiohttpServer, warcs_dir: Path) -> str:
    server = await aiohttp_server(warcs_app(warcs_dir), host="127.0.0.1")
    return str(server.make_url("/"))


async def test_http_range_prefix_serves_the_same_bytes(
    clients: SharedClients,
    warcs_server: str,
    loader: WarcLoader,
    sample_index: list[CdxRecord],
    finder: FindOriginal,
) -> None:
    remote = make_loader(clients, warcs_server + "warcs/")
    remote_small_chunks = make_loader(
        clients, warcs_server + "warcs/", chunk_bytes=1024, inline_read_max_bytes=0
    )
    for filename, offset in (
        ("iana.warc.gz", 334),
        ("iana.warc.gz", 620049),
        ("example.warc", 460),
        ("example.arc.gz", 171),
        ("dupes.warc.gz", 11875),  # a revisit: the original also comes over HTTP
        ("example-url-agnostic-revisit.warc.gz", 355),
    ):
        record = capture(sample_index, filename, offset)
        _, local = await load_all(loader, record, finder)
        for http_loader in (remote, remote_small_chunks):
            loaded, data = await load_all(http_loader, record, finder)
            assert _RECORD_ID.sub(b"", data) == _RECORD_ID.sub(b"", local), filename
            assert loaded.content_length == len(data)


async def test_http_prefix_failures(
    clients: SharedClients, warcs_server: str, warcs_dir: Path, sample_index: list[CdxRecord]
) -> None:
    record = capture(sample_index, "iana.warc.gz", 334)
    missing = record.copy()
    missing.fields["filename"] = "nope.warc.gz"
    with pytest.raises(ArchiveFileNotFound, match="HTTP 404"):
        await load_all(make_loader(clients, warcs_server + "warcs/"), missing, make_finder([]))
    with pytest.raises(LoadError, match="ignored the Range header"):
        await load_all(make_loader(clients, warcs_server + "norange/"), record, make_finder([]))
    with pytest.raises(LoadError, match="HTTP 503"):
        await load_all(make_loader(clients, warcs_server + "broken/"), record, make_finder([]))
    # A failing location falls through to the next one.
    loader = make_loader(clients, warcs_server + "broken/", str(warcs_dir))
    loaded, _ = await load_all(loader, record, make_finder([]))
    assert loaded.target_uri == "http://www.iana.org/"
    # Nobody listening.
    port = _free_port()
    with pytest.raises(LoadError, match="request failed"):
        await load_all(make_loader(clients, f"http://127.0.0.1:{port}/"), record, make_finder([]))


async def test_http_close_early_releases_the_connection(
    clients: SharedClients, warcs_server: str, sample_index: list[CdxRecord], finder: FindOriginal
) -> None:
    loader = make_loader(clients, warcs_server + "warcs/", chunk_bytes=1024)
    record = capture(sample_index, "iana.warc.gz", 620049)
    for _ in range(40):  # more than the per-host connection limit
        loaded = await loader.load(record, context(finder, record.url))
        await anext(loaded.body)
        await loaded.aclose()
    loaded, data = await load_all(loader, record, finder)
    assert loaded.content_length == len(data)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -------------------------------------------------------------- streaming
class _Pattern(io.RawIOBase):
    """``size`` bytes of a repeating pattern, produced on the fly (seekable to 0)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pos = 0
        self.block = bytes(range(256)) * 256

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.size - self.pos, len(self.block))
        start = self.pos % 256
        buffer[:count] = (self.block[start:] + self.block[:start])[:count]
        self.pos += count
        return count


def write_big_warc(folder: Path, size: int, *, gzipped: bool) -> tuple[Path, CdxRecord]:
    """A WARC with one response of ``size`` payload bytes, written by warcio."""
    name = f"big-{size}.warc" + (".gz" if gzipped else "")
    path = folder / name
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=gzipped)
        http = StatusAndHeaders(
            "200 OK",
            [("Content-Type", "application/octet-stream"), ("Content-Length", str(size))],
            protocol="HTTP/1.1",
        )
        payload = io.BufferedReader(_Pattern(size), 1 << 20)
        record = writer.create_warc_record(
            "http://big.test/blob",
            "response",
            payload=payload,
            length=size,
            http_headers=http,
            warc_headers_dict={"WARC-Date": "2020-01-01T00:00:00Z"},
        )
        write_records(writer, record)
    capture = CdxRecord(
        "test,big)/blob",
        "20200101000000",
        {
            "url": "http://big.test/blob",
            "mime": "application/octet-stream",
            "status": "200",
            "offset": "0",
            "length": str(path.stat().st_size),
            "filename": name,
        },
    )
    return path, capture


@pytest.fixture(scope="module")
def big_warcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("big")
    write_big_warc(folder, 200 * 1024 * 1024, gzipped=False)
    write_big_warc(folder, 200 * 1024 * 1024, gzipped=True)
    yield folder
    shutil.rmtree(folder)


def test_peak_rss_growth_sees_a_large_allocation() -> None:
    with peak_rss_growth() as growth:
        blob = bytearray(80 * 1024 * 1024)
        blob[::4096] = b"x" * len(blob[::4096])  # touch every page
        assert growth() > 60 * 1024 * 1024
        del blob


@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.parametrize("inline", [True, False])
async def test_large_record_streams_in_bounded_memory(
    clients: SharedClients, big_warcs: Path, finder: FindOriginal, gzipped: bool, inline: bool
) -> None:
    size = 200 * 1024 * 1024
    name = f"big-{size}.warc" + (".gz" if gzipped else "")
    length = (big_warcs / name).stat().st_size
    record = CdxRecord(
        "test,big)/blob",
        "20200101000000",
        {"url": "http://big.test/blob", "status": "200", "offset": "0"}
        | {"length": str(length), "filename": name},
    )
    options = {"inline_read_max_bytes": (1 << 40) if inline else 0}
    loader = make_loader(clients, str(big_warcs), **options)
    loaded = await loader.load(record, context(finder, record.url))
    total = len(loaded.warc_headers) + len(loaded.http_headers)
    largest = 0
    with peak_rss_growth() as growth:
        async for chunk in loaded.body:
            total += len(chunk)
            largest = max(largest, len(chunk))
        await loaded.aclose()
        assert growth() < 50 * 1024 * 1024
    assert total == loaded.content_length
    assert largest <= 256 * 1024
    assert loaded.content_length > size


# ------------------------------------------------------------ pywb (peer)
@pytest.fixture(scope="module")
def pywb_base(pywb_warcserver: str) -> str:
    """pywb 2.10 warcserver over the sample (tests/conftest.py starts it)."""
    return pywb_warcserver


def _pywb_captures(sample_dir: Path) -> Iterator[CdxRecord]:
    for record in index_files(sorted((sample_dir / "cdxj").glob("*.cdxj"))):
        if "__wb_method=" not in record.urlkey:  # POST captures need the request body
            yield record


@pytest.mark.peer
async def test_byte_identical_with_pywb(
    pywb_base: str,
    clients: SharedClients,
    loader: WarcLoader,
    sample_dir: Path,
    finder: FindOriginal,
) -> None:
    """Every capture of pywb's ``pywb`` collection: our bytes are pywb's bytes."""
    compared = refused = 0
    for record in _pywb_captures(sample_dir):
        query = urlencode(
            {
                "url": record.url,
                "closest": record.timestamp,
                "filter": [f"=offset:{record.offset}", f"=filename:{record.filename}"],
            },
            doseq=True,
        )
        url = f"{pywb_base}/pywb/resource?{query}"
        # Connection: close avoids pywb's ~44 ms stall per keep-alive response.
        async with clients.session.get(url, headers={"Connection": "close"}) as response:
            pywb_status = response.status
            pywb_bytes = await response.read()
        try:
            loaded, ours = await load_all(loader, record.copy(), finder)
        except SelfRedirect:
            assert pywb_status == 400, record
            refused += 1
            continue
        assert pywb_status == 200, (record, pywb_bytes[:200])
        assert ours == pywb_bytes, record
        assert loaded.content_length == len(pywb_bytes)
        parse_one(ours)
        compared += 1
    assert compared > 150
    assert refused >= 2


async def test_inflate_is_bounded_per_chunk(tmp_path: Path, finder: FindOriginal) -> None:
    """A small gzip member that inflates hugely never yields more than 256 KiB at once."""
    path = tmp_path / "bomb.warc.gz"
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        size = 64 * 1024 * 1024
        record = writer.create_warc_record(
            "http://bomb.test/",
            "resource",
            payload=io.BytesIO(bytes(size)),
            length=size,
            warc_headers_dict={"WARC-Date": "2020-01-01T00:00:00Z"},
        )
        write_records(writer, record)
    assert path.stat().st_size < 200_000
    opened = await open_record(
        str(path),
        0,
        path.stat().st_size,
        session=_no_session,
        chunk_bytes=64 * 1024,
        inline_read_max_bytes=1 << 30,
    )
    largest = 0
    total = 0
    async for chunk in opened.body:
        largest = max(largest, len(chunk))
        total += len(chunk)
    assert total == size
    assert largest <= 256 * 1024
