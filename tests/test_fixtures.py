"""The shared fixtures start real servers that answer as the other tests expect."""

from __future__ import annotations

import socket
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio

from tests.conftest import free_port

# pywb 2.10's answer to /pywb/index?url=iana.org over the sample archive: the
# capture from iana.cdxj, then both from dupes.cdxj (pywb appends the source).
PYWB_IANA_INDEX = [
    'org,iana)/ 20140126200624 {"url": "http://www.iana.org/", "mime": "text/html", '
    '"status": "200", "digest": "OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB", "length": "2258", '
    '"offset": "334", "filename": "iana.warc.gz", "source": "pywb:iana.cdxj", '
    '"source-coll": "pywb"}',
    'org,iana)/ 20140127171238 {"url": "http://iana.org", "mime": "unk", "status": "302", '
    '"digest": "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ", "length": "343", "offset": "1858", '
    '"filename": "dupes.warc.gz", "source": "pywb:dupes.cdxj", "source-coll": "pywb"}',
    'org,iana)/ 20140127171238 {"url": "http://www.iana.org/", "mime": "warc/revisit", '
    '"digest": "OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB", "length": "536", "offset": "2678", '
    '"filename": "dupes.warc.gz", "source": "pywb:dupes.cdxj", "source-coll": "pywb"}',
]


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_sample_dir_holds_the_sample_archive(sample_dir: Path) -> None:
    assert (sample_dir / "warcs" / "iana.warc.gz").is_file()
    assert (sample_dir / "cdxj" / "iana.cdxj").is_file()


async def test_redis_server_answers_ping(redis_server: str) -> None:
    assert redis_server.startswith("redis://127.0.0.1:")
    client = redis.asyncio.Redis.from_url(redis_server)
    try:
        assert await client.ping()
        await client.set("gateway:fixture-check", "1")
        assert await client.get("gateway:fixture-check") == b"1"
    finally:
        await client.aclose()


@pytest.mark.peer
async def test_pywb_warcserver_serves_the_sample_index(pywb_warcserver: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{pywb_warcserver}/pywb/index", params={"url": "iana.org"}) as response,
    ):
        assert response.status == 200
        body = await response.text()
    assert body.splitlines() == PYWB_IANA_INDEX


@pytest.mark.peer
async def test_pywb_wayback_serves_a_timemap(pywb_wayback: str) -> None:
    url = f"{pywb_wayback}/pywb/timemap/link/http://iana.org"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        assert response.content_type == "application/link-format"
        body = await response.text()
    mementos = [line for line in body.splitlines() if 'rel="memento"' in line]
    assert mementos == [
        f'<{pywb_wayback}/pywb/20140126200624mp_/http://www.iana.org/>; rel="memento"; '
        'datetime="Sun, 26 Jan 2014 20:06:24 GMT"; collection="pywb",',
        f'<{pywb_wayback}/pywb/20140127171238mp_/http://iana.org>; rel="memento"; '
        'datetime="Mon, 27 Jan 2014 17:12:38 GMT"; collection="pywb",',
        f'<{pywb_wayback}/pywb/20140127171238mp_/http://www.iana.org/>; rel="memento"; '
        'datetime="Mon, 27 Jan 2014 17:12:38 GMT"; collection="pywb"',
    ]
    assert f'<{pywb_wayback}/pywb/http://iana.org>; rel="timegate"' in body
