"""Raw mementos of archived headers the sample archive lacks.

A small WARC written here with warcio holds a payload stored with its chunked
framing, cookies, HSTS, archived CORS headers and a relative redirect.
"""

from __future__ import annotations

import gzip
from io import BytesIO
from pathlib import Path

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from gateway.index.indexer import write_cdxj_index
from tests.conftest import MakeClient


@pytest.fixture
def crafted_yaml(tmp_path: Path) -> str:
    """A WARC with headers the sample lacks: a real chunked payload, cookies, HSTS, a redirect."""
    warc = tmp_path / "warcs" / "crafted.warc.gz"
    warc.parent.mkdir()
    chunked = [
        ("Content-Type", "text/plain"),
        ("Transfer-Encoding", "chunked"),
        ("Set-Cookie", "session=1"),
        ("Set-Cookie", "other=2"),
        ("Strict-Transport-Security", "max-age=31536000"),
        ("Access-Control-Allow-Origin", "http://crafted.example"),
        ("Vary", "Accept-Encoding"),
        ("X-Custom", "kept"),
    ]
    records = [
        (
            "http://crafted.example/chunked",
            "200 OK",
            chunked,
            b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        ),
        ("http://crafted.example/old", "301 Moved Permanently", [("Location", "/new")], b""),
        ("http://crafted.example/new", "200 OK", [("Content-Type", "text/plain")], b"new page"),
    ]
    with warc.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        for url, status, headers, payload in records:
            writer.write_record(
                writer.create_warc_record(
                    url,
                    "response",
                    payload=BytesIO(payload),
                    length=len(payload),  # no temporary file for the digest
                    http_headers=StatusAndHeaders(status, headers, protocol="HTTP/1.1"),
                    warc_headers_dict={"WARC-Date": "2020-01-02T03:04:05Z"},
                )
            )
    index = tmp_path / "crafted.cdxj"
    with index.open("w", encoding="utf-8") as out:
        write_cdxj_index([warc], out)
    with gzip.open(warc) as check:
        assert check.read(4) == b"WARC"
    return f"collections:\n  crafted:\n    index: {index}\n    resource: {warc.parent}/\n"


async def test_raw_memento_headers_framing_and_chunked_payload(
    make_client: MakeClient, crafted_yaml: str
) -> None:
    client = await make_client(crafted_yaml)
    resp = await client.get("/crafted/20200102030405id_/http://crafted.example/chunked")
    assert resp.status == 200
    assert await resp.read() == b"hello world"
    assert "Transfer-Encoding" not in resp.headers or resp.headers["Transfer-Encoding"] == "chunked"
    assert resp.headers["X-Archive-Orig-Transfer-Encoding"] == "chunked"
    assert "Set-Cookie" not in resp.headers
    assert resp.headers.getall("X-Archive-Orig-Set-Cookie") == ["session=1", "other=2"]
    assert "Strict-Transport-Security" not in resp.headers
    assert resp.headers["X-Archive-Orig-Strict-Transport-Security"] == "max-age=31536000"
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert resp.headers["X-Archive-Orig-Access-Control-Allow-Origin"] == "http://crafted.example"
    assert "Vary" not in resp.headers
    assert resp.headers["X-Custom"] == "kept"
    assert resp.headers["Content-Type"] == "text/plain"


async def test_raw_memento_of_a_redirect_stays_in_the_archive(
    make_client: MakeClient, crafted_yaml: str
) -> None:
    client = await make_client(crafted_yaml)
    resp = await client.get(
        "/crafted/20200102030405id_/http://crafted.example/old", allow_redirects=False
    )
    assert resp.status == 301
    assert resp.headers["Location"] == str(
        client.make_url("/crafted/20200102030405id_/http://crafted.example/new")
    )
    assert resp.headers["X-Archive-Orig-Location"] == "/new"
    assert resp.headers["Memento-Datetime"] == "Thu, 02 Jan 2020 03:04:05 GMT"
    followed = await client.get("/crafted/20200102030405id_/http://crafted.example/old")
    assert followed.status == 200
    assert await followed.read() == b"new page"
