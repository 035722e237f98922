"""warcio, a real WARC client, reads every capture the Resource API serves.

The gateway runs on a real 127.0.0.1 port over the sample archive, with two
index sets: the sample's own (every ``*.cdxj`` of ``cdxj/``, post-test.cdxj
sorted: see ``tests/api/sample_support.py``), and an index of every sample
WARC/ARC file written by the gateway's indexer (more writers, WARC-Block-Digest
headers, ARC records). Every capture of those indexes is asked for
on its own (``closest`` plus exact filters on ``filename`` and ``offset``; the
POST captures through ``/resource/postreq`` with the request the WARC
recorded), each answer is parsed by warcio's ``ArchiveIterator`` and written
to a file, and warcio's checker (``warcio check``) verifies every digest.
"""

from __future__ import annotations

import contextlib
import io
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

import aiohttp
import pytest
from aiohttp import web
from warcio.archiveiterator import ArchiveIterator
from warcio.checker import Checker

from gateway.cdx.cdxj import CdxRecord
from gateway.config import parse_config
from gateway.index.indexer import write_cdxj_index
from gateway.server.app import create_app
from tests.api.sample_support import sorted_sample_indexes

#: Captures the Resource API refuses on purpose: (urlkey, timestamp) -> reason.
#: A 3xx whose Location is the requested URL is skipped (pywb ``SelfRedirect``).
SELF_REDIRECTS = {
    ("org,iana)/", "20140127171238"): "redirects to itself",
    ("org,iana)/dnssec", "20140126201306"): "redirects to itself",
    ("org,iana)/domains/root/db", "20140126200927"): "redirects to itself",
}
#: example-extra.warc's second response is broken on purpose ("HTTPX/1.1 200 OK").
BROKEN_RECORD = {
    ("com,example)/?example=2", "20140103030321"): "Expected Status Line",
}
#: bad.arc's records of length -1 and abc (write_cdxj_index, unlike ``gateway
#: index``, checks nothing and indexes them): never served as records, a 502.
UNFRAMED = {
    ("com,example)/", "20140401000000"): "is not a number of bytes",
}


def _reindexed(sample_dir: Path, folder: Path) -> Path:
    """Every sample WARC/ARC file indexed by the gateway's indexer (cdxj-indexer)."""
    folder.mkdir(parents=True)
    with (folder / "warcs.cdxj").open("w") as out:
        write_cdxj_index([sample_dir / "warcs"], out)
    return folder


@pytest.fixture(params=["sample-indexes", "reindexed-warcs"])
async def gateway(
    request: pytest.FixtureRequest, sample_dir: Path, tmp_path: Path
) -> AsyncIterator[tuple[str, Path, dict[tuple[str, str], str]]]:
    """Base URL of the gateway on 127.0.0.1 (OS-chosen port), its index folder, and
    the captures expected to be refused, over one of two index sets: the sample's
    own indexes, or an index of every sample WARC/ARC file."""
    if request.param == "sample-indexes":
        indexes = sorted_sample_indexes(sample_dir, tmp_path / "cdxj")
        refused = SELF_REDIRECTS
    else:
        indexes = _reindexed(sample_dir, tmp_path / "cdxj")
        refused = SELF_REDIRECTS | BROKEN_RECORD | UNFRAMED
    config = parse_config(
        f"collections:\n  all:\n    index: {indexes}/\n    resource: {sample_dir}/warcs/\n"
    )
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}", indexes, refused
    finally:
        await runner.cleanup()


def _post_requests(warc: Path) -> dict[str, bytes]:
    """The request records of ``warc`` as wrapped-request messages, by WARC-Date."""
    out = {}
    with warc.open("rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type != "request":
                continue
            http = record.http_headers
            head = f"{http.protocol} {http.statusline}\r\n"
            head += "".join(f"{name}: {value}\r\n" for name, value in http.headers)
            body = record.content_stream().read()
            out[record.rec_headers.get_header("WARC-Date")] = head.encode() + b"\r\n" + body
    return out


def _iso(timestamp: str) -> str:
    t = timestamp
    return f"{t[:4]}-{t[4:6]}-{t[6:8]}T{t[8:10]}:{t[10:12]}:{t[12:14]}Z"


async def test_warcio_reads_and_checks_every_served_capture(
    gateway: tuple[str, Path, dict[tuple[str, str], str]], sample_dir: Path, tmp_path: Path
) -> None:
    base, indexes, not_served = gateway
    posts = _post_requests(sample_dir / "warcs" / "post-test.warc.gz")
    captures = [
        CdxRecord.parse(line)
        for index in sorted(indexes.glob("*.cdxj"))
        for line in index.read_text("utf-8").splitlines()
        if line.strip()
    ]
    assert len(captures) > 190
    assert any("__wb_method=" in capture.urlkey for capture in captures)

    written: list[Path] = []
    refused: dict[tuple[str, str], str] = {}
    async with aiohttp.ClientSession() as session:
        for number, capture in enumerate(captures):
            params = [
                ("url", capture.url),
                ("closest", capture.timestamp),
                ("filter", f"=filename:{capture.filename}"),
                ("filter", f"=offset:{capture.offset}"),
            ]
            if "__wb_method=" in capture.urlkey:
                request = session.post(
                    f"{base}/all/resource/postreq",
                    params=params,
                    data=posts[_iso(capture.timestamp)],
                )
            else:
                request = session.get(f"{base}/all/resource", params=params)
            async with request as resp:
                body = await resp.read()
                if resp.status != 200:
                    unframed = (capture.urlkey, capture.timestamp) in UNFRAMED
                    assert resp.status == (502 if unframed else 404), body
                    refused[(capture.urlkey, capture.timestamp)] = body.decode()
                    continue
                got = CdxRecord.parse(resp.headers["Warcserver-Cdx"])
                assert (got.urlkey, got.timestamp, got.filename, got.offset) == (
                    capture.urlkey,
                    capture.timestamp,
                    capture.filename,
                    capture.offset,
                )
                assert int(resp.headers["Content-Length"]) == len(body)
            path = tmp_path / f"{number:03d}.warc"
            path.write_bytes(body)
            written.append(path)

    assert set(refused) == set(not_served)
    for key, reason in not_served.items():
        assert reason in refused[key]

    # warcio's ArchiveIterator: one whole record per answer, digests verified.
    checked = revisits_checked = 0
    for path in written:
        with path.open("rb") as stream:
            records = list(_read_all(stream))
        assert len(records) == 1, path
        rec_type, passed, problems, resolved = records[0]
        assert rec_type in ("response", "revisit", "resource"), path
        assert passed is not False, (path, problems)
        checked += passed is True
        revisits_checked += passed is True and resolved
    assert checked > 150
    assert revisits_checked > 10  # revisits served with their originals' payloads

    # warcio's checker (`warcio check -v`) over every file: no digest problem.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exit_value = Checker(
            types.SimpleNamespace(inputs=list(map(str, written)), verbose=True)
        ).process_all()
    report = out.getvalue()
    assert exit_value == 0, report
    assert report.count("digest pass") == checked


def _read_all(stream: BinaryIO) -> list[tuple[str, bool | None, list[str], bool]]:
    """(WARC-Type, digests passed, problems, resolved revisit) of each record, read whole."""
    records = []
    for record in ArchiveIterator(stream, check_digests=True):
        record.content_stream().read()
        records.append(
            (
                record.rec_type,
                record.digest_checker.passed,
                list(record.digest_checker.problems),
                bool(record.rec_headers.get_header("WARC-Refers-To-Date")),
            )
        )
    return records
