"""``GET /_ready``: ready once started, not while a collection has every source down."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.api.readiness import READINESS
from gateway.config import parse_config
from gateway.server.app import create_app
from tests.conftest import free_port

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[str], Awaitable[Client]]


async def test_ready_once_started(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/_ready")
    assert (resp.status, await resp.json()) == (200, {"ready": True})
    health = await client.get("/_health")
    assert (health.status, await health.json()) == (200, {"ok": True})


async def test_not_ready_while_a_collection_has_every_source_down(
    make_client: MakeClient, sample_dir: Path
) -> None:
    refused = f"cdx+http://127.0.0.1:{free_port()}/cdx"
    client = await make_client(f"""
collections:
  local: {sample_dir}/cdxj/iana.cdxj
  degraded:
    index_group:
      here: {sample_dir}/cdxj/iana.cdxj
      gone: {refused}
  down:
    index_group:
      a: {refused}
      b: {refused}
""")
    for _ in range(3):  # three failures in a row open each breaker
        assert (await client.get("/degraded/index", params={"url": "iana.org"})).status == 200
        assert (await client.get("/down/index", params={"url": "iana.org"})).status == 503
    resp = await client.get("/_ready")
    body = await resp.json()
    assert resp.status == 503
    assert body["ready"] is False
    # A group with one member answering is degraded, not down.
    assert list(body["reasons"]) == ["collection down"]
    reason = body["reasons"]["collection down"]
    assert reason.startswith("every source is down: a: ")
    assert "; b: " in reason
    assert "Cannot connect" in reason or "refused" in reason


async def test_a_subsystem_can_hold_readiness(
    aiohttp_client: Callable[..., Awaitable[Client]], sample_yaml: str
) -> None:
    app = create_app(parse_config(sample_yaml))
    client = await aiohttp_client(app)
    app[READINESS].block("migration", "moving files to layout 2")
    resp = await client.get("/_ready")
    assert resp.status == 503
    assert await resp.json() == {
        "ready": False,
        "reasons": {"migration": "moving files to layout 2"},
    }
    app[READINESS].clear("migration")
    assert (await client.get("/_ready")).status == 200


async def test_not_ready_before_start_up_and_after_shutdown(sample_yaml: str) -> None:
    app = create_app(parse_config(sample_yaml))
    assert app[READINESS].reasons() == {"startup": "the app is starting"}
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        assert app[READINESS].reasons() == {}
    finally:
        await runner.cleanup()
    assert "shutdown" in app[READINESS].reasons()


async def test_the_store_opens_before_the_app_is_ready(tmp_path: Path) -> None:
    app = create_app(parse_config(f"store:\n  root: {tmp_path}\ncollections:\n  s: $store\n"))
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        assert app[READINESS].reasons() == {}
        assert (tmp_path / "index.sqlite3").exists()
    finally:
        await runner.cleanup()
