"""``record: true``: captures served from the live web land in the snapshot store.

A real aiohttp server on 127.0.0.1 plays the live web; the gateway records
through a ``{type: live, allow_private_networks: true}`` step into a store in
tmp_path, and a ``$store`` collection serves what was recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def live_web() -> AsyncIterator[tuple[str, dict[str, int]]]:
    hits = {"page": 0}

    async def page(request: web.Request) -> web.Response:
        hits["page"] += 1
        return web.Response(text="<html>same content every time</html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/page", page)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}", hits
    finally:
        await server.close()


def _config(store_root: Path, extra_step: str = "") -> str:
    return f"""
store:
  root: {store_root}
  fsync: never
collections:
  rec:
    dedup: revisit
    sequence:
      - name: live
        index: {{type: live, allow_private_networks: true}}
        record: true
{extra_step}
  stored: $store
"""


async def _stored(client: Client, url: str, expected: int) -> list[dict[str, str]]:
    """The store's captures of ``url`` once ``expected`` are visible (acks are async)."""
    rows: list[dict[str, str]] = []
    for _ in range(100):
        resp = await client.get("/stored/index", params={"url": url, "output": "json"})
        rows = [json.loads(line) for line in (await resp.text()).splitlines()]
        if len(rows) >= expected:
            return rows
        await asyncio.sleep(0.05)
    return rows


async def test_live_captures_are_recorded_and_deduplicated(
    make_client: Callable[[str], Awaitable[Client]],
    live_web: tuple[str, dict[str, int]],
    tmp_path: Path,
) -> None:
    base, hits = live_web
    client = await make_client(_config(tmp_path / "store"))
    url = f"{base}/page"
    for _ in range(2):
        resp = await client.get("/rec/resource", params={"url": url})
        assert resp.status == 200
        assert b"same content every time" in await resp.read()
    assert hits["page"] == 2
    rows = await _stored(client, url, 2)
    assert len(rows) == 2
    assert sorted(row.get("mime", "") for row in rows).count("warc/revisit") == 1
    # The recorded capture is served back from the store, revisit resolved.
    resp = await client.get("/stored/resource", params={"url": url, "sort": "reverse"})
    assert resp.status == 200
    assert b"same content every time" in await resp.read()


async def test_skip_if_updated_days_serves_the_store_copy(
    make_client: Callable[[str], Awaitable[Client]],
    live_web: tuple[str, dict[str, int]],
    tmp_path: Path,
) -> None:
    base, hits = live_web
    config = _config(tmp_path / "store").replace(
        "        record: true\n", "        record: true\n        skip_if_updated_days: 1\n"
    )
    client = await make_client(config)
    url = f"{base}/page"
    resp = await client.get("/rec/resource", params={"url": url})
    assert resp.status == 200
    await resp.read()
    assert len(await _stored(client, url, 1)) == 1
    resp = await client.get("/rec/resource", params={"url": url})
    assert resp.status == 200
    assert b"same content every time" in await resp.read()
    assert hits["page"] == 1  # served from the store, not fetched again
    assert json.loads(resp.headers["Warcserver-Cdx"].split(" ", 2)[2])["source"] == "store"


async def test_captures_are_kept_when_clients_leave_while_the_queue_is_full(
    make_client: Callable[[str], Awaitable[Client]],
    live_web: tuple[str, dict[str, int]],
    tmp_path: Path,
) -> None:
    """A full store queue never makes a finished capture depend on the client staying."""
    import aiohttp

    config = _config(tmp_path / "store").replace(
        "  fsync: never\n", "  fsync: never\n  max_queued_captures: 1\n"
    )
    client = await make_client(config)
    base, _ = live_web
    urls = [f"{base}/page?n={n}" for n in range(20)]
    connector = aiohttp.TCPConnector(force_close=True)  # close right after each answer
    async with aiohttp.ClientSession(connector=connector) as session:

        async def fetch(url: str) -> None:
            async with session.get(client.make_url("/rec/resource"), params={"url": url}) as resp:
                assert resp.status == 200
                await resp.read()

        await asyncio.gather(*(fetch(url) for url in urls))
    for url in urls:
        assert len(await _stored(client, url, 1)) == 1, url
