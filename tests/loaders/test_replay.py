"""ReplayLoader against a real aiohttp server playing a remote archive's ``id_`` endpoint.

Every record served is also checked for WARC validity: ``warcio check``
(digests) and, because warcio check does not look at them, the framing
(``Content-Length`` of the block, several records read back in a row) and the
absence of ``Transfer-Encoding`` in the HTTP header block.
"""

from __future__ import annotations

import doctest
import gzip
import hashlib
import io
import json
import subprocess
import sys
from base64 import b32encode
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from warcio.archiveiterator import ArchiveIterator

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.clients import SharedClients
from gateway.errors import LoadError, RecordTooLarge, SelfRedirect
from gateway.loaders import replay, warc_build
from gateway.loaders.base import LoadContext, LoadedRecord, ResourceLoader, WrappedRequest
from gateway.loaders.replay import (
    ReplayLoader,
    TooManyArchiveRedirects,
    UpstreamStatusError,
    UpstreamUnreachable,
)
from tests.conftest import free_port
from tests.loaders.replay_archive import BIG, GZIPPED, HITS, PAYLOAD, replay_archive_app

AiohttpServer = Callable[..., Awaitable[TestServer]]
NAME = "remote"
TIMESTAMP = "20140101000000"


@pytest.fixture
async def archive(aiohttp_server: AiohttpServer) -> TestServer:
    return await aiohttp_server(replay_archive_app())


@pytest.fixture
def loader(clients: SharedClients) -> ReplayLoader:
    return ReplayLoader(name=NAME, clients=clients)


def capture(
    archive: TestServer, url: str, timestamp: str = TIMESTAMP, spec: str | None = None
) -> CdxRecord:
    load_url = str(archive.make_url("/web/")) + f"{spec or timestamp + 'id_'}/{url}"
    fields = {"url": url, "load_url": load_url, "source": NAME, "source-coll": NAME}
    return CdxRecord(canonical_urlkey(url), timestamp, fields)


async def no_originals(url: str, timestamp: str, digest: str) -> AsyncIterator[CdxRecord]:
    return
    yield  # pragma: no cover


def context(url: str, request: WrappedRequest | None = None) -> LoadContext:
    return LoadContext(
        request_url=url, find_original=no_originals, request=request or WrappedRequest()
    )


async def load(
    loader: ResourceLoader, record: CdxRecord, request: WrappedRequest | None = None
) -> tuple[LoadedRecord, bytes]:
    loaded = await loader.load(record, context(record.url, request))
    try:
        body = b"".join([chunk async for chunk in loaded.body])
    finally:
        await loaded.aclose()
    data = loaded.warc_headers + loaded.http_headers + body
    assert loaded.content_length == len(data)
    return loaded, data


def sha1(data: bytes) -> str:
    return "sha1:" + b32encode(hashlib.sha1(data).digest()).decode()


def parse(data: bytes) -> tuple[Any, bytes]:
    """One served record as warcio reads it: the record and its raw payload."""
    record = next(iter(ArchiveIterator(io.BytesIO(data + b"\r\n\r\n"))))
    return record, record.raw_stream.read()


def assert_valid_warc(records: list[bytes], tmp_path: Path) -> None:
    """warcio check passes, and the framing holds when records follow each other."""
    path = tmp_path / "served.warc"
    path.write_bytes(b"".join(data + b"\r\n\r\n" for data in records))
    code = "import sys; from warcio.cli import main; main(sys.argv[1:])"
    done = subprocess.run(
        [sys.executable, "-c", code, "check", "-v", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("digest pass") == len(records), done.stdout
    with path.open("rb") as stream:
        read = list(ArchiveIterator(stream))  # misframed records would not parse in a row
    assert len(read) == len(records)
    for data in records:
        record, payload = parse(data)
        assert record.rec_headers.protocol == "WARC/1.1"
        for name in ("WARC-Type", "WARC-Record-ID", "WARC-Date", "Content-Length"):
            assert record.rec_headers.get_header(name), name
        head_end = data.index(b"\r\n\r\n") + 4
        assert int(record.rec_headers.get_header("Content-Length")) == len(data) - head_end
        assert record.http_headers.get_header("Transfer-Encoding") is None
        assert record.rec_headers.get_header("WARC-Payload-Digest") == sha1(payload)


# -------------------------------------------------------------------- records
async def test_a_memento_becomes_a_valid_response_record(
    archive: TestServer, loader: ReplayLoader, tmp_path: Path
) -> None:
    record = capture(archive, "http://archived.example/page")
    loaded, data = await load(loader, record)
    warc, payload = parse(data)
    assert payload == PAYLOAD
    assert warc.rec_headers.get_header("WARC-Type") == "response"
    assert warc.rec_headers.get_header("WARC-Target-URI") == "http://archived.example/page"
    assert warc.rec_headers.get_header("WARC-Date") == "2014-01-01T00:00:00Z"
    assert warc.rec_headers.get_header("WARC-Source-URI") == record.fields["load_url"]
    assert warc.rec_headers.get_header("WARC-Block-Digest") == sha1(loaded.http_headers + PAYLOAD)
    assert warc.http_headers.statusline == "200 OK"
    # Archived headers restored in order; the archive's own ones gone.
    assert warc.http_headers.headers == [
        ("Server", "Apache"),
        ("Content-Type", "application/octet-stream"),
        ("X-Archive-Orig-Transfer-Encoding", "chunked"),
        ("Date", "Wed, 01 Jan 2014 00:00:00 GMT"),
        ("Content-Length", "-1"),
    ]
    assert loaded.target_uri == "http://archived.example/page"
    assert loaded.warc_date == "2014-01-01T00:00:00Z"
    _, data_again = await load(loader, record)
    assert data_again == data  # the same capture gives the same record id
    assert_valid_warc([data], tmp_path)


async def test_the_archives_memento_datetime_dates_the_record(
    archive: TestServer, loader: ReplayLoader
) -> None:
    loaded, data = await load(loader, capture(archive, "http://late.example/"))
    assert loaded.warc_date == "2014-01-01T00:00:30Z"
    assert parse(data)[0].rec_headers.get_header("WARC-Date") == "2014-01-01T00:00:30Z"


async def test_headers_of_a_plain_replay_are_kept_but_hop_by_hop(
    archive: TestServer, loader: ReplayLoader, tmp_path: Path
) -> None:
    _, data = await load(loader, capture(archive, "http://plain.example/"))
    warc, payload = parse(data)
    assert payload == PAYLOAD
    names = [name for name, _ in warc.http_headers.headers]
    assert ("X-Custom", "kept") in warc.http_headers.headers
    assert "Keep-Alive" not in names
    assert "Transfer-Encoding" not in names  # the archive's own chunking
    assert_valid_warc([data], tmp_path)


async def test_a_gzip_payload_is_kept_as_archived(
    archive: TestServer, loader: ReplayLoader, tmp_path: Path
) -> None:
    _, data = await load(loader, capture(archive, "http://gzip.example/"))
    warc, payload = parse(data)
    assert payload == GZIPPED
    assert gzip.decompress(payload) == b"<html>compressed archived page</html>"
    assert warc.http_headers.get_header("Content-Encoding") == "gzip"
    assert_valid_warc([data], tmp_path)


async def test_large_payloads_spool_to_disk_with_correct_digests(
    archive: TestServer, clients: SharedClients, tmp_path: Path
) -> None:
    small_memory = ReplayLoader(name=NAME, clients=clients, spool_memory_bytes=64 * 1024)
    records = []
    for host in ("big.example", "bigchunked.example"):
        _, data = await load(small_memory, capture(archive, f"http://{host}/"))
        assert parse(data)[1] == BIG
        records.append(data)
    assert_valid_warc(records, tmp_path)


# ------------------------------------------------------------------ redirects
async def test_the_archives_redirect_to_the_exact_timestamp_is_followed(
    archive: TestServer, loader: ReplayLoader, tmp_path: Path
) -> None:
    record = capture(archive, "http://archived.example/page", spec="2014id_")
    _, data = await load(loader, record)
    warc, payload = parse(data)
    assert payload == PAYLOAD
    final = str(archive.make_url("/web/20140000000000id_/http://archived.example/page"))
    assert warc.rec_headers.get_header("WARC-Source-URI") == final
    assert archive.app[HITS]["archived.example"] == 2
    assert_valid_warc([data], tmp_path)


async def test_archive_redirect_loops_stop(archive: TestServer, loader: ReplayLoader) -> None:
    with pytest.raises(TooManyArchiveRedirects, match="more than 3 times"):
        await load(loader, capture(archive, "http://loop.example/"))
    assert archive.app[HITS]["loop.example"] == 4


async def test_an_archive_redirect_to_another_url_is_the_record(
    archive: TestServer, loader: ReplayLoader
) -> None:
    _, data = await load(loader, capture(archive, "http://moved.example/"))
    warc, _ = parse(data)
    assert warc.http_headers.get_statuscode() == "302"
    assert warc.http_headers.get_header("Location") == "http://other.example/"  # un-rewritten
    assert archive.app[HITS]["moved.example"] == 1


async def test_an_archived_redirect_is_the_record(
    archive: TestServer, loader: ReplayLoader, tmp_path: Path
) -> None:
    _, data = await load(loader, capture(archive, "http://redirect.example/a"))
    warc, payload = parse(data)
    assert warc.http_headers.get_statuscode() == "301"
    assert warc.http_headers.get_header("Location") == "http://redirect.example/b"
    assert payload == b"moved"
    assert archive.app[HITS]["redirect.example"] == 1
    assert_valid_warc([data], tmp_path)


async def test_an_archived_self_redirect_is_skipped(
    archive: TestServer, loader: ReplayLoader
) -> None:
    with pytest.raises(SelfRedirect):
        await load(loader, capture(archive, "http://self.example/"))


# ---------------------------------------------------------------------- errors
async def test_the_archives_error_page_is_a_load_error(
    archive: TestServer, loader: ReplayLoader
) -> None:
    with pytest.raises(UpstreamStatusError, match="HTTP 404 Not Found from the archive") as caught:
        await load(loader, capture(archive, "http://gone.example/"))
    assert caught.value.status_code == 404
    with pytest.raises(UpstreamStatusError, match="HTTP 503"):
        await load(loader, capture(archive, "http://busy.example/"))


async def test_an_archived_404_is_a_record(archive: TestServer, loader: ReplayLoader) -> None:
    _, data = await load(loader, capture(archive, "http://archived404.example/"))
    warc, payload = parse(data)
    assert warc.http_headers.get_statuscode() == "404"
    assert payload == b"archived not found"


async def test_connection_refused_is_a_load_error(clients: SharedClients) -> None:
    loader = ReplayLoader(name=NAME, clients=clients)
    url = "http://archived.example/page"
    fields = {
        "url": url,
        "load_url": f"http://127.0.0.1:{free_port()}/web/{TIMESTAMP}id_/{url}",
        "source-coll": NAME,
    }
    with pytest.raises(UpstreamUnreachable, match="cannot fetch from the archive"):
        await load(loader, CdxRecord(canonical_urlkey(url), TIMESTAMP, fields))


async def test_a_cut_off_answer_is_a_load_error(archive: TestServer, loader: ReplayLoader) -> None:
    with pytest.raises(UpstreamUnreachable, match="broke off"):
        await load(loader, capture(archive, "http://cut.example/"))


@pytest.mark.parametrize("host", ["big.example", "bigchunked.example"])
async def test_payloads_over_max_record_bytes_are_refused(
    host: str, archive: TestServer, clients: SharedClients
) -> None:
    loader = ReplayLoader(name=NAME, clients=clients, max_record_bytes=len(BIG) - 1)
    with pytest.raises(RecordTooLarge, match="max_record_bytes") as caught:
        await load(loader, capture(archive, f"http://{host}/"))
    assert isinstance(caught.value, LoadError)


async def test_a_capture_without_load_url_is_a_load_error(loader: ReplayLoader) -> None:
    record = CdxRecord("com,example)/", TIMESTAMP, {"url": "http://example.com/"})
    with pytest.raises(LoadError, match="no load_url"):
        await load(loader, record)


# --------------------------------------------------------------------- request
async def test_a_wrapped_request_goes_upstream(archive: TestServer, loader: ReplayLoader) -> None:
    request = WrappedRequest(
        method="POST",
        headers=(
            ("Host", "echo.example"),
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Content-Length", "7"),
            ("Connection", "keep-alive"),
            ("X-Test", "one"),
            ("X-Test", "two"),
        ),
        body=b"foo=bar",
    )
    _, data = await load(loader, capture(archive, "http://echo.example/"), request)
    echo = json.loads(parse(data)[1])
    assert echo["method"] == "POST"
    assert echo["body"] == "foo=bar"
    headers = echo["headers"]
    assert ["X-Test", "one"] in headers
    assert ["X-Test", "two"] in headers
    assert ["Content-Type", "application/x-www-form-urlencoded"] in headers
    assert ["Accept-Encoding", "identity"] in headers
    assert dict(headers)["Host"] == f"127.0.0.1:{archive.port}"


async def test_a_head_request_gives_an_empty_payload(
    archive: TestServer, loader: ReplayLoader, tmp_path: Path
) -> None:
    request = WrappedRequest(method="HEAD")
    _, data = await load(loader, capture(archive, "http://archived.example/page"), request)
    assert parse(data)[1] == b""
    assert_valid_warc([data], tmp_path)


# --------------------------------------------------------------------- doctests
@pytest.mark.parametrize("module", [replay, warc_build])
def test_the_module_doctests_pass(module: ModuleType) -> None:
    result = doctest.testmod(module)
    assert result.failed == 0
    assert result.attempted >= 2


# --------------------------------------------------------------------- accepts
def test_accepts_only_its_sources_captures_with_load_url(loader: ReplayLoader) -> None:
    assert isinstance(loader, ResourceLoader)
    fields = {"url": "http://a/", "load_url": "http://r/web/2014id_/http://a/"}
    assert not loader.accepts(CdxRecord("a)/", TIMESTAMP, dict(fields)))
    assert loader.accepts(CdxRecord("a)/", TIMESTAMP, {**fields, "source-coll": NAME}))
    assert not loader.accepts(CdxRecord("a)/", TIMESTAMP, {**fields, "source-coll": "other"}))
    assert not loader.accepts(CdxRecord("a)/", TIMESTAMP, {"url": "x", "source-coll": NAME}))
    assert "\n" not in loader.describe()


async def test_target_uri_follows_the_archives_content_location(
    aiohttp_server: AiohttpServer, loader: ReplayLoader
) -> None:
    """pywb answers ``id_/http://iana.org`` with the ``www.iana.org/`` memento of that
    second and names it in Content-Location: the record says what was served."""
    from aiohttp import web

    async def memento(request: web.Request) -> web.Response:
        return web.Response(
            body=b"the www page",
            headers={
                "Content-Location": f"/web/{TIMESTAMP}id_/http://www.iana.org/",
                "Memento-Datetime": "Wed, 01 Jan 2014 00:00:00 GMT",
                "Content-Type": "text/html",
            },
        )

    app = web.Application()
    app.router.add_get("/web/{tail:.*}", memento)
    server = await aiohttp_server(app)
    loaded, data = await load(loader, capture(server, "http://iana.org"))
    assert loaded.target_uri == "http://www.iana.org/"
    record, payload = parse(data)
    assert record.rec_headers.get_header("WARC-Target-URI") == "http://www.iana.org/"
    assert payload == b"the www page"
    # another urlkey in Content-Location is not taken for the served URL
    other = capture(server, "http://example.com/")
    loaded, _ = await load(loader, other)
    assert loaded.target_uri == "http://example.com/"
