"""Fixtures for the snapshot store tests: a fresh store directory and an open store;
the SeaweedFS bucket replication copies to; the live web recording gateways fetch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.storage.seaweedfs import SeaweedFS, run_in_thread
from tests.store.replication_support import BUCKET, live_page


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """An empty directory for a store (``<tmp>/archive``, created by Store.open)."""
    return tmp_path / "archive"


@pytest.fixture
def settings(store_root: Path) -> StoreSettings:
    """Default settings (dedup ``revisit``, fsync ``always``) rooted at ``store_root``."""
    return StoreSettings(root=str(store_root))


@pytest.fixture
async def store(settings: StoreSettings) -> AsyncIterator[Store]:
    """An open store, closed after the test."""
    opened = await Store.open(settings)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(scope="session")
def replication_bucket(seaweedfs: SeaweedFS) -> str:
    """The bucket replication tests copy to (each test under a prefix of its own)."""
    run_in_thread(seaweedfs.create_bucket(BUCKET))
    return BUCKET


@pytest.fixture
async def live_web() -> AsyncIterator[str]:
    """The live web on 127.0.0.1 (its base URL): ``/page/N[?noise=BYTES]`` answers
    :func:`live_page`."""

    async def page(request: web.Request) -> web.Response:
        noise = int(request.query.get("noise", "0"))
        return web.Response(
            text=live_page(int(request.match_info["n"]), noise), content_type="text/html"
        )

    app = web.Application()
    app.router.add_get("/page/{n}", page)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()
