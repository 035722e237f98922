"""A client that leaves mid-answer is logged at DEBUG on every route, never as an error.

Each answer is larger than the socket buffers hold, so the server is still
writing when the client goes away (:func:`tests.conftest.leave_mid_answer`
asserts the DEBUG line and that nothing was logged at ERROR). ``/index`` and
``/resource`` are covered in their own modules.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from gateway.index.indexer import write_cdxj_index
from tests.conftest import leave_mid_answer, serving, write_big_warc


def _long_index(path: Path, lines: int) -> Path:
    path.write_text(
        "".join(
            f'com,example)/p{i:06d} 20140101000000 {{"url": "http://example.com/p{i:06d}", '
            f'"mime": "text/html", "status": "200", "length": "100", "offset": "{i * 100}", '
            f'"filename": "big.warc.gz"}}\n'
            for i in range(lines)
        ),
        "utf-8",
    )
    return path


@pytest.mark.parametrize(
    "target",
    [
        "/big/cdx?url=example.com/&matchType=prefix",
        "/big/cdx?url=example.com/&matchType=prefix&output=json",
    ],
)
async def test_leaving_an_index_answer_is_not_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, target: str
) -> None:
    big = _long_index(tmp_path / "big.cdxj", 100_000)
    route = target.split("?")[0].rsplit("/", 1)[-1]
    await leave_mid_answer(
        f"collections:\n  big:\n    index: {big}\n",
        target,
        caplog,
        expect_log=f"client left during GET /big/{route}",
    )


async def test_leaving_a_raw_memento_is_not_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    warc = write_big_warc(tmp_path / "big.warc.gz")
    with (tmp_path / "big.cdxj").open("w") as index:
        write_cdxj_index([warc], index)
    timestamp = (tmp_path / "big.cdxj").read_text().split(" ", 2)[1]
    await leave_mid_answer(
        f"collections:\n  big:\n    index: {tmp_path / 'big.cdxj'}\n    resource: {tmp_path}/\n",
        f"/big/{timestamp}id_/http://example.com/big",
        caplog,
        expect_log=f"client left during GET /big/{timestamp}id_/",
    )


@pytest.mark.parametrize(
    "target",
    [
        "/big/cdx?url=example.com/&matchType=prefix&showNumPages=true",
        "/big/cdx?url=example.com/&matchType=prefix&page=60",
    ],
)
async def test_leaving_before_the_answer_starts_is_not_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, target: str
) -> None:
    # The lookup scans 60,000 lines before the first byte is written; the
    # client is gone by then, so writing the status line fails.
    big = _long_index(tmp_path / "big.cdxj", 60_000)
    async with serving(f"collections:\n  big:\n    index: {big}\n") as port:
        with caplog.at_level(logging.DEBUG):
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            await writer.drain()
            writer.transport.abort()
            for _ in range(400):
                if "client left during GET /big/" in caplog.text:
                    break
                await asyncio.sleep(0.05)
    assert "client left during GET /big/" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "request_line",
    [
        b"GET /big/index?url=a b HTTP/1.1",  # a space in the target
        b"GET /big/index?url=" + b"a" * 9000 + b" HTTP/1.1",  # past aiohttp's 8190 bytes
    ],
)
async def test_requests_aiohttp_refuses_are_logged_in_one_short_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, request_line: bytes
) -> None:
    # aiohttp answers these itself (a plain-text 400) before the app sees
    # them; the gateway makes its log record one INFO line, the input cut.
    big = _long_index(tmp_path / "big.cdxj", 10)
    async with serving(f"collections:\n  big:\n    index: {big}\n") as port:
        with caplog.at_level(logging.DEBUG):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request_line + b"\r\nHost: 127.0.0.1\r\n\r\n")
            assert (await reader.readline()).startswith(b"HTTP/1.0 400")
            writer.close()
    (record,) = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert record.levelno == logging.INFO
    assert record.exc_info is None
    assert "bad HTTP request from 127.0.0.1" in record.getMessage()
    assert len(record.getMessage()) < 400
