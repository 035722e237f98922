"""Recording under ``--workers``: a worker forwards the recording collections to the recorder.

Two real gateway apps in the test's loop stand for two workers of ``gateway
serve --workers 2`` (the processes themselves are in ``tests/test_workers.py``):
the recorder (worker 0: the store's writer) served on a Unix socket in
tmp_path, and a forwarding worker (worker 1: the store opened shared) served
on 127.0.0.1. A real aiohttp server on 127.0.0.1 plays the live web.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.config import parse_config
from gateway.server.app import create_app
from gateway.server.recorder_link import RecorderLink

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def live_web() -> AsyncIterator[tuple[str, list[str]]]:
    """The live web: ``/page/<n>`` says its number; a POST echoes its body. Logs each hit."""
    hits: list[str] = []

    async def page(request: web.Request) -> web.Response:
        # A Via would be the forwarding hop's, not the client's: fetched and recorded.
        via = f" via {request.headers['Via']}" if "Via" in request.headers else ""
        hits.append(f"{request.method} {request.path}{via}")
        body = await request.read()
        text = f"<html>page {request.match_info['n']}: {body.decode()}</html>"
        return web.Response(text=text, content_type="text/html")

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
collections:
  rec:
    sequence:
      - name: live
        index: {{type: live, allow_private_networks: true}}
        record: true
  stored: $store
"""


async def serve_recorder(config: str, path: str) -> AsyncIterator[str]:
    """Worker 0 of two with ``config``, serving on the Unix socket ``path``; yields
    ``path`` (the body of a ``recorder`` fixture)."""
    app = create_app(parse_config(config), recorder=RecorderLink(path, 0))
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, path).start()
    try:
        yield path
    finally:
        await runner.cleanup()


MakeWorker = Callable[[str], Awaitable[Client]]


def worker_maker(aiohttp_client: Callable[..., Awaitable[Client]], config: str) -> MakeWorker:
    """``await make(socket_path)``: worker 1 of two with ``config``, forwarding to that socket."""

    async def make(path: str) -> Client:
        return await aiohttp_client(
            create_app(parse_config(config), recorder=RecorderLink(path, 1))
        )

    return make


@pytest.fixture
async def recorder(tmp_path: Path) -> AsyncIterator[str]:
    """Worker 0 of two, serving on a Unix socket; yields the socket's path."""
    async for path in serve_recorder(_config(tmp_path / "store"), str(tmp_path / "recorder.sock")):
        yield path


@pytest.fixture
def worker(aiohttp_client: Callable[..., Awaitable[Client]], tmp_path: Path) -> MakeWorker:
    """``await worker(socket_path)``: worker 1 of two, forwarding to that socket."""
    return worker_maker(aiohttp_client, _config(tmp_path / "store"))


async def _stored(client: Client, url: str, expected: int) -> list[dict[str, str]]:
    """The store's captures of ``url`` (prefix) once ``expected`` are visible."""
    rows: list[dict[str, str]] = []
    for _ in range(200):
        params = {"url": url, "matchType": "prefix", "output": "json"}
        resp = await client.get("/stored/index", params=params)
        rows = [json.loads(line) for line in (await resp.text()).splitlines()]
        if len(rows) >= expected:
            break
        await asyncio.sleep(0.05)
    return rows


async def test_recording_requests_are_recorded_by_the_recorder_and_read_here(
    recorder: str, worker: MakeWorker, live_web: tuple[str, list[str]]
) -> None:
    base, hits = live_web
    client = await worker(recorder)
    resp = await client.get("/rec/resource", params={"url": f"{base}/page/1"})
    assert resp.status == 200
    assert resp.headers["Via"] == "1.1 gateway-worker-1"
    assert resp.headers["Content-Type"] == "application/warc-record"
    assert b"<html>page 1: </html>" in await resp.read()
    # The body crosses the hop too: the POST itself is what is fetched and recorded.
    resp = await client.post(
        "/rec/resource", params={"url": f"{base}/page/2"}, data=b"sent through"
    )
    assert resp.status == 200
    assert b"<html>page 2: sent through</html>" in await resp.read()
    assert hits == ["GET /page/1", "POST /page/2"]
    # This worker opened the store shared: it serves what the recorder wrote itself.
    rows = await _stored(client, f"{base}/page/", 2)
    assert sorted(row["url"] for row in rows) == [f"{base}/page/1", f"{base}/page/2"]
    resp = await client.get("/stored/index", params={"url": f"{base}/page/1"})
    assert resp.status == 200
    assert "Via" not in resp.headers  # not forwarded


async def test_a_gzip_answer_crosses_the_hop_as_it_is(
    recorder: str, worker: MakeWorker, live_web: tuple[str, list[str]]
) -> None:
    base, _ = live_web
    client = await worker(recorder)
    params = {"url": f"{base}/page/3", "compress": "gzip"}
    resp = await client.get("/rec/resource", params=params, auto_decompress=False)
    assert resp.status == 200
    assert resp.headers["Content-Encoding"] == "gzip"
    assert (await resp.read())[:2] == b"\x1f\x8b"  # not inflated by the hop


async def test_without_the_recorder_a_recording_request_is_503_and_the_rest_is_served(
    worker: MakeWorker, tmp_path: Path, live_web: tuple[str, list[str]]
) -> None:
    base, hits = live_web
    client = await worker(str(tmp_path / "no-recorder.sock"))
    resp = await client.get("/rec/resource", params={"url": f"{base}/page/1"})
    assert resp.status == 503
    assert resp.headers["Retry-After"] == "1"
    body = await resp.json()
    assert "the worker that records is not running" in body["message"]
    assert "recorder" in body["errors"]
    assert hits == []
    resp = await client.get("/stored/index", params={"url": f"{base}/page/1"})
    assert resp.status == 200  # the store's own collection does not need the recorder
