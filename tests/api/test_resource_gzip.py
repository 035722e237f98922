"""``compress=gzip`` on the Resource API: the stored gzip member, untouched, when it can be.

pywb's response loader answers ``compress=gzip`` with ``Content-Encoding:
gzip``; the gateway sends a record served exactly as stored as its gzip
member from the WARC file, byte for byte, and compresses anything else.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import zlib
from pathlib import Path

import aiohttp
import pytest
import requests
from aiohttp import web
from warcio.recordloader import ArcWarcRecordLoader

from gateway.config import parse_config
from gateway.index.indexer import write_cdxj_index
from gateway.server.app import create_app
from tests.conftest import MakeClient

FONT = {"url": "http://www.iana.org/_css/2013.1/fonts/OpenSans-Bold.ttf"}  # 117 KB member
PAGE = {"url": "http://www.iana.org/", "closest": "20140126200624"}  # 2 KB member
REVISIT = {"url": "http://www.iana.org/", "closest": "20140127171238"}  # served from its original


@pytest.fixture
def gzip_yaml(sample_yaml: str, sample_dir: Path) -> str:
    """The sample collections, plus an ARC file and an uncompressed WARC file."""
    s = sample_dir
    return (
        sample_yaml
        + f"  arc:\n    index: {s}/cdx/example-arc-test.cdx\n    resource: {s}/warcs/\n"
        + f"  plain:\n    index: {s}/cdx/example-extra.cdx\n    resource: {s}/warcs/\n"
    )


def _stored_member(sample_dir: Path, cdx_header: str) -> bytes:
    """The bytes ``filename`` holds at the capture's ``offset`` for ``length``."""
    fields = json.loads(cdx_header.split(" ", 2)[2])
    with (sample_dir / "warcs" / fields["filename"]).open("rb") as fh:
        fh.seek(int(fields["offset"]))
        member: bytes = fh.read(int(fields["length"]))
    return member


@pytest.mark.parametrize("params", [FONT, PAGE], ids=["225 KB record", "6 KB record"])
async def test_a_record_served_as_stored_goes_out_as_its_stored_member(
    make_client: MakeClient, gzip_yaml: str, sample_dir: Path, params: dict[str, str]
) -> None:
    client = await make_client(gzip_yaml)
    plain = await client.get("/iana/resource", params=params)
    identity = await plain.read()
    assert plain.status == 200
    assert "Content-Encoding" not in plain.headers

    resp = await client.get(
        "/iana/resource", params={**params, "compress": "gzip"}, auto_decompress=False
    )
    raw = await resp.read()
    assert resp.status == 200
    assert resp.headers["Content-Encoding"] == "gzip"
    assert resp.headers["Content-Type"] == "application/warc-record"
    assert raw == _stored_member(sample_dir, resp.headers["Warcserver-Cdx"])
    assert resp.headers["Content-Length"] == str(len(raw))
    # It decodes to the record with its WARC trailer, as in the file.
    assert gzip.decompress(raw) == identity + b"\r\n\r\n"
    for name in ("Warcserver-Cdx", "WARC-Target-URI", "Memento-Datetime", "Link"):
        assert resp.headers[name] == plain.headers[name]


async def test_head_with_compress_gives_the_member_length(
    make_client: MakeClient, gzip_yaml: str, sample_dir: Path
) -> None:
    client = await make_client(gzip_yaml)
    resp = await client.head("/iana/resource", params={**FONT, "compress": "gzip"})
    assert resp.status == 200
    assert resp.headers["Content-Encoding"] == "gzip"
    member = _stored_member(sample_dir, resp.headers["Warcserver-Cdx"])
    assert resp.headers["Content-Length"] == str(len(member))
    assert await resp.read() == b""


@pytest.mark.parametrize(
    ("coll", "params"),
    [
        ("pywb", REVISIT),
        ("arc", {"url": "http://arc.test.example.com/"}),
        ("plain", {"url": "http://example.com?example=2", "closest": "20140103030321"}),
    ],
    ids=["resolved revisit", "ARC converted to WARC", "uncompressed WARC"],
)
async def test_other_records_are_compressed_as_they_go_out(
    make_client: MakeClient, gzip_yaml: str, sample_dir: Path, coll: str, params: dict[str, str]
) -> None:
    client = await make_client(gzip_yaml)
    plain = await client.get(f"/{coll}/resource", params=params)
    identity = await plain.read()
    assert plain.status == 200, identity
    resp = await client.get(
        f"/{coll}/resource", params={**params, "compress": "gzip"}, auto_decompress=False
    )
    raw = await resp.read()
    assert resp.status == 200
    assert resp.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(raw) == identity  # the served record, no trailer added
    if "Content-Length" in resp.headers:
        assert resp.headers["Content-Length"] == str(len(raw))


async def test_a_cdx_length_past_the_member_is_not_trusted(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    """A member is sent as stored only when the CDX length ends it exactly
    (its gzip trailer gives the record's size); otherwise it is compressed."""
    line = next(
        text
        for text in (sample_dir / "cdxj" / "iana.cdxj").read_text().splitlines()
        if text.startswith("org,iana)/ 20140126200624 ")
    )
    key, timestamp, block = line.split(" ", 2)
    fields = json.loads(block)
    fields["length"] = str(int(fields["length"]) + 100)  # into the next record
    (tmp_path / "wrong.cdxj").write_text(f"{key} {timestamp} {json.dumps(fields)}\n")
    client = await make_client(
        f"collections:\n  w:\n    index: {tmp_path}/wrong.cdxj\n    resource: {sample_dir}/warcs/\n"
    )
    plain = await client.get("/w/resource", params={"url": "http://www.iana.org/"})
    identity = await plain.read()
    resp = await client.get(
        "/w/resource",
        params={"url": "http://www.iana.org/", "compress": "gzip"},
        auto_decompress=False,
    )
    raw = await resp.read()
    assert resp.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(raw) == identity


async def test_a_member_longer_than_one_read_streams_as_stored(
    make_client: MakeClient, tmp_path: Path
) -> None:
    """A 1.5 MB record (past the first 256 KiB read, and read by worker threads)
    streams as its stored member; its gzip trailer is read from the file first."""
    warcs = tmp_path / "warcs"
    warcs.mkdir()
    payload = os.urandom(1_500_000)  # does not compress: the member is ~1.5 MB
    block = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
        b"Content-Length: %d\r\n\r\n" % len(payload)
    ) + payload
    record = (
        (
            b"WARC/1.0\r\nWARC-Type: response\r\n"
            b"WARC-Record-ID: <urn:uuid:3f3a6c2e-0c7e-4f0e-9a53-6f3b1e1d2c4b>\r\n"
            b"WARC-Target-URI: http://example.com/big.bin\r\n"
            b"WARC-Date: 2024-01-02T03:04:05Z\r\n"
            b"Content-Type: application/http; msgtype=response\r\n"
            b"Content-Length: %d\r\n\r\n" % len(block)
        )
        + block
        + b"\r\n\r\n"
    )
    (warcs / "big.warc.gz").write_bytes(gzip.compress(record))
    with (tmp_path / "big.cdxj").open("w") as out:
        write_cdxj_index([warcs / "big.warc.gz"], out)
    client = await make_client(
        f"collections:\n  big:\n    index: {tmp_path}/big.cdxj\n    resource: {warcs}/\n"
    )
    params = {"url": "http://example.com/big.bin"}
    identity = await (await client.get("/big/resource", params=params)).read()
    resp = await client.get(
        "/big/resource", params={**params, "compress": "gzip"}, auto_decompress=False
    )
    raw = await resp.read()
    assert resp.headers["Content-Encoding"] == "gzip"
    assert raw == (warcs / "big.warc.gz").read_bytes()  # the file is that one member
    assert zlib.decompress(raw, 16 + zlib.MAX_WBITS) == identity + b"\r\n\r\n"


async def test_compress_other_than_gzip_is_a_400(make_client: MakeClient, gzip_yaml: str) -> None:
    client = await make_client(gzip_yaml)
    resp = await client.get("/iana/resource", params={**PAGE, "compress": "br"})
    assert resp.status == 400
    body = await resp.json()
    assert body["param"] == "compress"
    assert "'br'" in body["message"]
    assert "gzip" in body["message"]


async def test_accept_encoding_alone_changes_nothing_as_pywb_replay_reads_the_raw_body(
    gzip_yaml: str, unused_tcp_port: int
) -> None:
    """pywb's replay front end posts to the Resource API with requests
    (``stream=True``, so ``Accept-Encoding: gzip, deflate``) and parses
    ``r.raw``, the undecoded body, as a WARC record: it must stay identity."""
    runner = web.AppRunner(create_app(parse_config(gzip_yaml)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", unused_tcp_port)
    await site.start()
    try:
        url = f"http://127.0.0.1:{unused_tcp_port}/iana/resource"

        def fetch_like_pywb() -> tuple[str | None, str, str | None]:
            with requests.get(url, params=FONT, stream=True, timeout=10) as r:
                assert "gzip" in r.request.headers["Accept-Encoding"]
                record = ArcWarcRecordLoader().parse_record_stream(r.raw)
                return (
                    r.headers.get("Content-Encoding"),
                    record.rec_type,
                    record.rec_headers.get_header("WARC-Target-URI"),
                )

        encoding, rec_type, target = await asyncio.to_thread(fetch_like_pywb)
        assert encoding is None
        assert (rec_type, target) == ("response", FONT["url"])
    finally:
        await runner.cleanup()


@pytest.mark.peer
async def test_decodes_to_what_pywb_compress_gzip_decodes_to(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str
) -> None:
    """pywb compresses the record it would serve; the gateway's member decodes to
    the same record plus the WARC trailer the file holds after it."""
    client = await make_client(sample_yaml)
    async with aiohttp.ClientSession() as session:
        for params in (FONT, PAGE):
            query = {**params, "compress": "gzip"}
            async with session.get(
                f"{pywb_warcserver}/iana/resource", params=query, auto_decompress=False
            ) as ref:
                assert ref.headers["Content-Encoding"] == "gzip"
                theirs = gzip.decompress(await ref.read())
            resp = await client.get("/iana/resource", params=query, auto_decompress=False)
            ours = gzip.decompress(await resp.read())
            assert ours == theirs + b"\r\n\r\n", params
