"""A record that breaks off while the export reads it: skipped while still held
back, the export failed once part of it is out (never a WACZ that looks whole).

The WARC is real: two 12 MiB responses of random bytes (they do not compress,
so a gzip member outgrows the 8 MiB the export holds back), indexed whole,
then cut short at 2 MB (inside what is held back) or at 10 MB (past it).
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import zipfile
from pathlib import Path

import aiohttp
import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from gateway.index.export import SPOOL_BYTES
from gateway.index.indexer import write_cdxj_index
from tests.conftest import serving
from tests.e2e.support import gateway


@pytest.fixture(scope="module")
def big_warc(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``big.warc.gz`` and its CDXJ index text (made before any cut)."""
    folder = tmp_path_factory.mktemp("big")
    warc = folder / "big.warc.gz"
    with warc.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        for number in range(2):
            http = StatusAndHeaders(
                "200 OK", [("Content-Type", "application/octet-stream")], protocol="HTTP/1.1"
            )
            payload = io.BytesIO(os.urandom(12 * 1024 * 1024))
            url = f"http://example.com/big/{number}"
            record = writer.create_warc_record(url, "response", payload=payload, http_headers=http)
            writer.write_record(record)
            record.raw_stream.close()  # warcio spooled the payload to a temporary file
    index = io.StringIO()
    write_cdxj_index([warc], index)
    return warc, index.getvalue()


def _cut(big_warc: tuple[Path, str], folder: Path, size: int) -> Path:
    """``folder/collections.yaml`` of a collection ``cut`` whose first record ends at ``size``."""
    warc, index = big_warc
    assert 2 * 1024 * 1024 < SPOOL_BYTES < 10_000_000
    shutil.copy(warc, folder / "big.warc.gz")
    with (folder / "big.warc.gz").open("r+b") as data:
        data.truncate(size)
    first = index.splitlines(keepends=True)[0]
    (folder / "cut.cdxj").write_text(first)
    (folder / "collections.yaml").write_text(
        "collections:\n  cut:\n    index: ./cut.cdxj\n    resource: ./\n"
    )
    return folder


async def test_cut_inside_what_is_held_back_is_skipped_and_said(
    big_warc: tuple[Path, str], tmp_path: Path
) -> None:
    folder = _cut(big_warc, tmp_path, 2_000_000)
    yaml_text = (folder / "collections.yaml").read_text().replace("./", f"{folder}/")
    async with (
        serving(yaml_text) as port,
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/cut/export.wacz?url=example.com/big/0") as answer,
    ):
        assert answer.status == 200
        body = await answer.read()
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        assert archive.read("indexes/index.cdx") == b""
        log = [json.loads(line) for line in archive.read("logs/export.log").splitlines()]
    assert log[0]["message"].startswith("capture skipped")
    assert "truncated" in log[0]["details"]["reason"]


async def test_cut_past_what_is_held_back_fails_the_export(
    big_warc: tuple[Path, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _cut(big_warc, tmp_path, 10_000_000)
    yaml_text = (folder / "collections.yaml").read_text().replace("./", f"{folder}/")
    with caplog.at_level(logging.ERROR):
        async with (
            serving(yaml_text) as port,
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/cut/export.wacz?url=example.com/big/0") as answer,
        ):
            assert answer.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await answer.read()  # the connection closed before the end of the answer
    assert "export failed after the answer started" in caplog.text
    assert "truncated" in caplog.text
    # The command: exit 1, the reason said, no file left behind.
    result = gateway(["export", "example.com/big/0", "-o", "cut.wacz"], folder)
    assert result.returncode == 1
    assert "record truncated" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(folder.glob("cut.wacz*"))
