"""Tokens under ``--workers``: a forwarding worker checks before it forwards, and the
recorder checks again.

As in ``tests/test_recorder_link.py``: two real gateway apps in the test's loop
stand for two workers of ``gateway serve --workers 2``, the recorder (worker
0) on a Unix socket in tmp_path and a forwarding worker (worker 1) on
127.0.0.1; a real aiohttp server on 127.0.0.1 plays the live web.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.access.tokens import token_sha256
from tests.test_recorder_link import MakeWorker, serve_recorder, worker_maker

Client = TestClient[web.Request, web.Application]

TOKEN = "worker-test-token-0123456789"


@pytest.fixture
async def live_web() -> AsyncIterator[tuple[str, list[str]]]:
    """The live web: logs each request, with the Authorization it carried if any."""
    hits: list[str] = []

    async def page(request: web.Request) -> web.Response:
        auth = f" {request.headers['Authorization']}" if "Authorization" in request.headers else ""
        hits.append(f"{request.method} {request.path}{auth}")
        return web.Response(text="<html>live</html>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/page/{n}", page)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}", hits
    finally:
        await server.close()


def _config(store: Path) -> str:
    return f"""
store: {{root: {store}, fsync: never}}
jobs: {{enabled: false}}
auth:
  tokens:
    - {{sha256: {token_sha256(TOKEN)}, scopes: [record]}}
  require: {{admin: []}}
collections:
  rec:
    index: {{type: live, allow_private_networks: true}}
    record: true
  stored: $store
"""


@pytest.fixture
async def recorder(tmp_path: Path) -> AsyncIterator[str]:
    """Worker 0 of two, serving on a Unix socket; yields the socket's path."""
    async for path in serve_recorder(_config(tmp_path / "store"), str(tmp_path / "recorder.sock")):
        yield path


@pytest.fixture
def worker(aiohttp_client: Callable[..., Awaitable[Client]], tmp_path: Path) -> MakeWorker:
    """``await worker(socket_path)``: worker 1 of two, forwarding to that socket."""
    return worker_maker(aiohttp_client, _config(tmp_path / "store"))


async def test_the_check_comes_before_the_forward(
    worker: MakeWorker, tmp_path: Path, live_web: tuple[str, list[str]]
) -> None:
    """With no recorder at the socket, a forwarded request would be a 503: a request
    without the token is a 401, answered here, never forwarded."""
    base, hits = live_web
    client = await worker(str(tmp_path / "no-recorder.sock"))
    params = {"url": f"{base}/page/1"}
    resp = await client.get("/rec/resource", params=params)
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="gateway", scope="record"'
    resp = await client.get(
        "/rec/resource", params=params, headers={"Authorization": f"Bearer {TOKEN}0"}
    )
    assert resp.status == 401
    assert "Via" not in resp.headers
    resp = await client.get(
        "/rec/resource", params=params, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert resp.status == 503  # let through: forwarded, and no recorder there
    assert hits == []


async def test_the_token_crosses_the_hop_and_the_recorder_checks_it(
    recorder: str, worker: MakeWorker, live_web: tuple[str, list[str]]
) -> None:
    base, hits = live_web
    client = await worker(recorder)
    resp = await client.post(
        "/rec/resource",
        params={"url": f"{base}/page/1"},
        data=b"body",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert resp.status == 200, await resp.text()
    assert resp.headers["Via"] == "1.1 gateway-worker-1"
    await resp.read()
    assert hits == ["POST /page/1"]  # fetched without the gateway's token
    for _ in range(200):
        stored = await client.get("/stored/index", params={"url": f"{base}/page/1"})
        if stored.status == 200:
            break
        await asyncio.sleep(0.05)
    assert stored.status == 200
    # The recorder's own socket is no way around the check.
    connector = aiohttp.UnixConnector(path=recorder)
    async with aiohttp.ClientSession(connector=connector) as session:
        url = f"http://recorder/rec/resource?url={base}/page/2"
        async with session.get(url) as direct:
            assert direct.status == 401
        async with session.get(url, headers={"Authorization": f"Bearer {TOKEN}"}) as direct:
            assert direct.status == 200
    assert hits == ["POST /page/1", "GET /page/2"]
