"""Every file of warcio's own test suite (``../shared/data/warcio-test``): whole or refused.

A file ``warcio check`` accepts is indexed by ``gateway index`` without a
problem, and each of its captures (but POST captures, looked up by their
method key in ``test_postreq``) is served through ``/resource`` as one WARC
record that ``warcio check`` accepts (its digests over the bytes served),
whose length is what is sent and whose payload reads as the archived one;
through ``id_`` the body is the archived payload byte for byte (de-chunked
when it was archived with its chunked framing).
A file ``warcio check`` refuses is reported by ``gateway index`` with a
message naming it, the run exits 1, and none of its bad records is indexed.
``bad.arc``, which ``warcio check`` accepts, holds records whose length is
``-1`` or ``abc``: ``gateway index`` reports each (exit 1) and leaves it out,
and served from an index that has them, they are skipped for the next
capture, or the answer is a 502 naming the file and offset, never a record
saying ``Content-Length: -1``. A revisit resolved to its original passes
``warcio check`` too.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import ChunkedDataReader

from gateway.cli import main
from tests.conftest import REPO_ROOT, SAMPLE_DIR, MakeClient

WARCIO_DIR: Final = REPO_ROOT.parent / "shared" / "data" / "warcio-test"
FILES: Final = sorted(p.name for p in WARCIO_DIR.iterdir()) if WARCIO_DIR.is_dir() else []
#: Files ``warcio check`` accepts with records whose length is no number:
#: name -> the offsets of those records (the ARC file header's included).
UNFRAMED: Final = {"bad.arc": {"0", "134", "262"}}

Client = TestClient[web.Request, web.Application]


def _warcio_check(path: Path) -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "warcio.cli", "check", str(path)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _check_record(data: bytes) -> bytes:
    """The payload of the one record in ``data`` as warcio reads it (content
    codings undone), its digests checked as ``warcio check`` checks them."""
    records = ArchiveIterator(io.BytesIO(data), check_digests=True)
    record = next(records)
    payload = record.content_stream().read()
    assert record.digest_checker.passed is not False, list(record.digest_checker.problems)
    assert next(records, None) is None
    return bytes(payload)


def _archived(path: Path, offset: int) -> tuple[bytes, bytes, object]:
    """The record's payload as warcio reads it, its raw payload and its HTTP headers."""
    with path.open("rb") as fh:
        fh.seek(offset)
        record = next(ArchiveIterator(fh))
        decoded = record.content_stream().read()
    with path.open("rb") as fh:
        fh.seek(offset)
        record = next(ArchiveIterator(fh, no_record_parse=False))
        raw = record.raw_stream.read()
        return bytes(decoded), bytes(raw), record.http_headers


def test_the_folder_is_there() -> None:
    assert len(FILES) >= 16, f"warcio's test files expected in {WARCIO_DIR}"


@pytest.mark.parametrize("name", FILES)
async def test_each_file_is_served_whole_or_refused(
    name: str, tmp_path: Path, make_client: MakeClient, capsys: pytest.CaptureFixture[str]
) -> None:
    path = WARCIO_DIR / name
    accepted = _warcio_check(path)
    index = tmp_path / "indexes" / f"{name}.cdxj"
    index.parent.mkdir()
    status = main(["index", str(path), "-o", str(index)])
    err = capsys.readouterr().err
    assert not list(index.parent.glob("*.tmp"))
    if not accepted:
        assert status == 1, err
        assert str(path) in err
        lines = index.read_text().splitlines() if index.exists() else []
        assert len(lines) < 3, lines  # only records that passed their checks
        return
    unframed = UNFRAMED.get(name, set())
    assert status == (1 if unframed else 0), err
    for offset in unframed:
        assert f"{path}: record at offset {offset} " in err
        assert "not a number of bytes" in err
    lines = index.read_text().splitlines()
    assert lines, f"{name}: no captures"
    assert unframed.isdisjoint(json.loads(line.split(" ", 2)[2])["offset"] for line in lines)
    client = await make_client(
        f"collections:\n  w:\n    index: {index.parent}/\n    resource: {WARCIO_DIR}/\n"
    )
    seen: set[tuple[str, str]] = set()
    for line in lines:
        _urlkey, timestamp, block = line.split(" ", 2)
        fields = json.loads(block)
        if "method" in fields:  # POST captures: looked up by their method key (test_postreq)
            continue
        params = {
            "url": fields["url"],
            "closest": timestamp,
            "filter": [f"=offset:{fields['offset']}", f"=filename:{fields['filename']}"],
            "allowFuzzy": "0",
        }
        resp = await client.get("/w/resource", params=params)
        body = await resp.read()
        assert resp.status == 200, (name, line, body[:300])
        assert int(resp.headers["Content-Length"]) == len(body)
        served = _check_record(body)
        decoded, archived, http = _archived(path, int(fields["offset"]))
        if fields.get("mime") != "warc/revisit":
            assert served == decoded, (name, line)
        key = (fields["url"], timestamp)
        if http is None or key in seen or not fields.get("status", "").isdigit():
            continue
        seen.add(key)
        resp = await client.get(f"/w/{timestamp}id_/{fields['url']}")
        raw = await resp.read()
        assert resp.status == int(fields["status"]), (name, line)
        chunked = "chunked" in (http.get_header("Transfer-Encoding") or "")  # type: ignore[attr-defined]
        if chunked and archived[:1].isalnum():
            with contextlib.suppress(ValueError):
                archived = ChunkedDataReader(io.BytesIO(archived), decomp_type=None).read()
        # (the test client undoes a Content-Encoding: then it is the decoded payload)
        assert raw in (archived, decoded) or fields.get("mime") == "warc/revisit", (name, line)


async def test_a_resolved_revisit_passes_warcio_check(
    make_client: MakeClient, sample_dir: Path
) -> None:
    client = await make_client(
        f"collections:\n  p:\n    index: {sample_dir}/cdxj/\n    resource: {sample_dir}/warcs/\n"
    )
    for url, timestamp in (
        ("http://example.com", "20140127171251"),  # dupes.warc.gz, original by digest
        ("http://www.iana.org/", "20140127171238"),  # iana.warc.gz
    ):
        resp = await client.get("/p/resource", params={"url": url, "closest": timestamp})
        body = await resp.read()
        assert resp.status == 200
        assert "warc/revisit" in resp.headers["Warcserver-Cdx"]
        assert b"WARC-Refers-To-Target-URI" in body
        assert b"WARC-Block-Digest" not in body.split(b"\r\n\r\n", 1)[0]
        assert _check_record(body)


#: ``bad.arc``'s captures as cdxj-indexer (and an older ``gateway index``) wrote them.
_BAD_ARC_LINES: Final = {
    "134": 'com,example)/ 20140401000000 {"url": "http://example.com/", "length": "67", '
    '"offset": "134", "filename": "bad.arc"}',
    "202": 'com,example)/ 20140102000000 {"url": "http://example.com/", "length": "59", '
    '"offset": "202", "filename": "bad.arc"}',
    "262": 'com,example)/ 20140401000000 {"url": "http://example.com/", "length": "68", '
    '"offset": "262", "filename": "bad.arc"}',
}


@pytest.mark.parametrize("folder", [WARCIO_DIR, SAMPLE_DIR / "warcs"], ids=["warcio", "pywb"])
async def test_a_record_that_cannot_be_framed_is_never_served(
    folder: Path, tmp_path: Path, make_client: MakeClient
) -> None:
    """The real ``bad.arc``, indexed with its records of length ``-1`` and ``abc``."""
    assert (folder / "bad.arc").is_file()

    async def client_of(*offsets: str) -> Client:
        index = tmp_path / f"bad-{'-'.join(offsets)}.cdxj"
        index.write_text("".join(sorted(_BAD_ARC_LINES[o] + "\n" for o in offsets)))
        return await make_client(
            f"collections:\n  w:\n    index: {index}\n    resource: {folder}/\n"
        )

    # The two closest captures cannot be framed: the next one is served.
    client = await client_of("134", "202", "262")
    resp = await client.get(
        "/w/resource", params={"url": "http://example.com/", "closest": "20140401000000"}
    )
    body = await resp.read()
    assert resp.status == 200, body[:300]
    assert '"offset": "202"' in resp.headers["Warcserver-Cdx"]
    assert b"Content-Length: -1" not in body
    assert b"Content-Length: abc" not in body
    assert _check_record(body) == b""
    assert "cannot be read" in resp.headers["ResErrors"]

    # Nothing else: a 502 naming the file and each offset.
    client = await client_of("134", "262")
    for path in ("/w/resource?url=http://example.com/", "/w/20140401000000id_/http://example.com/"):
        resp = await client.get(path)
        answer = await resp.json()
        assert resp.status == 502, answer
        assert "'bad.arc' offset 134" in answer["message"]
        assert "'bad.arc' offset 262" in answer["message"]
        assert "cannot be read" in answer["message"]
