"""Bearer tokens at the door (RFC 6750 §3): 401/403/400 before any fetch or write.

A real aiohttp server on 127.0.0.1 plays the live web and counts what it is
asked; the gateway records through a ``record: true`` live step into a store
in tmp_path; a ``$store`` collection and a file collection show what stays
open.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.access.tokens import token_sha256

Client = TestClient[web.Request, web.Application]

RECORD_TOKEN = "record-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789ab"
#: What ``WWW-Authenticate`` starts with on a recording collection.
RECORD_CHALLENGE = 'Bearer realm="gateway", scope="record"'


class LiveWeb:
    """What the live web stand-in was asked: paths, and the headers of each request."""

    def __init__(self) -> None:
        self.base = ""
        self.requests: list[tuple[str, str, dict[str, str]]] = []


@pytest.fixture
async def live_web() -> AsyncIterator[LiveWeb]:
    seen = LiveWeb()

    async def page(request: web.Request) -> web.Response:
        seen.requests.append((request.method, request.path, dict(request.headers)))
        await request.read()
        return web.Response(text="<html>a live page</html>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", page)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    seen.base = f"http://127.0.0.1:{server.port}"
    try:
        yield seen
    finally:
        await server.close()


def _config(store_root: Path, sample_dir: Path, auth: str | None = None) -> str:
    auth = (
        f"""
auth:
  tokens:
    - sha256: {token_sha256(RECORD_TOKEN)}
      scopes: [record]
    - sha256: {token_sha256(ADMIN_TOKEN)}
      scopes: [admin]
"""
        if auth is None
        else auth
    )
    return f"""
store:
  root: {store_root}
  fsync: never
collections:
  rec:
    index: {{type: live, allow_private_networks: true}}
    record: true
  stored: $store
  iana:
    index: {sample_dir}/cdxj/iana.cdxj
    resource: {sample_dir}/warcs/
{auth}"""


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _stored(client: Client, url: str, expected: int) -> int:
    """How many captures of ``url`` the store serves, once ``expected`` are visible
    (acks are asynchronous) or after 5 s."""
    rows = 0
    for _ in range(100):
        resp = await client.get("/stored/index", params={"url": url, "output": "json"})
        rows = len([line for line in (await resp.text()).splitlines() if line.strip()])
        if rows >= expected:
            break
        await asyncio.sleep(0.05)
    return rows


@pytest.fixture
async def client(
    make_client: Callable[[str], Awaitable[Client]], tmp_path: Path, sample_dir: Path
) -> Client:
    return await make_client(_config(tmp_path / "store", sample_dir))


@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [
        ({}, 401, None),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, 401, None),
        (_bearer("not-a-token-we-know-0000"), 401, "invalid_token"),
        (_bearer(ADMIN_TOKEN), 403, "insufficient_scope"),
        ({"Authorization": "Bearer"}, 400, "invalid_request"),
        ({"Authorization": "Bearer two words"}, 400, "invalid_request"),
    ],
)
async def test_recording_without_the_scope_is_refused_before_any_fetch(
    client: Client,
    live_web: LiveWeb,
    headers: dict[str, str],
    status: int,
    error: str | None,
) -> None:
    url = f"{live_web.base}/page"
    for method, path in [
        ("GET", "/rec/resource"),
        ("HEAD", "/rec/resource"),
        ("GET", "/rec/index"),
        ("POST", "/rec/resource"),
        ("POST", "/rec/resource-post"),
    ]:
        resp = await client.request(method, path, params={"url": url}, headers=headers, data=b"")
        assert resp.status == status, (method, path, await resp.text())
        challenge = resp.headers["WWW-Authenticate"]
        assert challenge.startswith(RECORD_CHALLENGE)
        assert ("error=" in challenge) == (error is not None)
        if error is not None:
            assert challenge.endswith(f'error="{error}"')
        if method != "HEAD":
            body = await resp.json()
            assert set(body) == {"message"}
            assert "not-a-token-we-know" not in body["message"]
        assert resp.headers["Access-Control-Allow-Origin"] == "*"
    resp = await client.get(
        "/rec/timegate/" + url, headers=headers, allow_redirects=False
    )  # a Memento route too
    assert resp.status == status
    assert live_web.requests == []
    assert await _stored(client, url, 0) == 0  # nothing fetched: nothing to wait for


async def test_the_record_token_records(client: Client, live_web: LiveWeb) -> None:
    url = f"{live_web.base}/page"
    resp = await client.get("/rec/resource", params={"url": url}, headers=_bearer(RECORD_TOKEN))
    assert resp.status == 200
    assert b"a live page" in await resp.read()
    assert [(m, p) for m, p, _ in live_web.requests] == [("GET", "/page")]
    assert await _stored(client, url, 1) == 1
    # ``bearer`` is as good as ``Bearer`` (RFC 9110 §11.1: the scheme is case-insensitive).
    resp = await client.get(
        "/rec/index", params={"url": url}, headers={"Authorization": f"bearer {RECORD_TOKEN}"}
    )
    assert resp.status == 200


async def test_a_direct_post_never_sends_or_records_the_gateways_token(
    client: Client, live_web: LiveWeb, tmp_path: Path
) -> None:
    url = f"{live_web.base}/form"
    resp = await client.post(
        "/rec/resource",
        params={"url": url},
        data=b"q=1",
        headers={
            **_bearer(RECORD_TOKEN),
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Client-Header": "kept",
        },
    )
    assert resp.status == 200, await resp.text()
    await resp.read()
    ((method, path, sent),) = live_web.requests
    assert (method, path) == ("POST", "/form")
    assert sent["X-Client-Header"] == "kept"
    assert "Authorization" not in sent
    assert await _stored(client, f"{url}?__wb_method=post&q=1", 1) == 1
    # Nor does the store hold it: not in the request record, nor anywhere else.
    held = b""
    for file in (tmp_path / "store").rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            held += gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    assert b"X-Client-Header: kept" in held  # the request record is there
    assert RECORD_TOKEN.encode() not in held


async def test_read_only_routes_stay_open(client: Client, live_web: LiveWeb) -> None:
    for path in [
        "/",
        "/_health",
        "/_ready",
        "/_status",
        "/metrics",
        "/openapi.json",
        "/iana/index?url=iana.org",
        "/iana/resource?url=iana.org",
        "/stored/index?url=iana.org",
        "/nope/index?url=iana.org",
    ]:
        resp = await client.get(path)
        assert resp.status in (200, 404), (path, resp.status)
        assert "WWW-Authenticate" not in resp.headers, path
    resp = await client.get("/iana/resource?url=iana.org")
    assert resp.status == 200
    # A preflight carries no token, and never needs one.
    resp = await client.options(
        "/rec/resource",
        headers={
            "Origin": "http://app.example",
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization",
        },
    )
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Headers"] == "authorization"
    assert live_web.requests == []


async def test_jobs_needs_the_admin_scope(client: Client) -> None:
    resp = await client.get("/_jobs")
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="gateway", scope="admin"'
    assert "operator route" in (await resp.json())["message"]
    resp = await client.get("/_jobs", headers=_bearer(RECORD_TOKEN))
    assert resp.status == 403
    resp = await client.get("/_jobs", headers=_bearer(ADMIN_TOKEN))
    assert resp.status == 200
    assert isinstance(await resp.json(), dict)


async def test_metrics_when_the_operator_asks(
    make_client: Callable[[str], Awaitable[Client]], tmp_path: Path, sample_dir: Path
) -> None:
    auth = f"""
auth:
  realm: archive gateway
  tokens:
    - {{sha256: {token_sha256(ADMIN_TOKEN)}, scopes: [admin]}}
  require:
    record: false
    admin: [/metrics, /_status]
"""
    client = await make_client(_config(tmp_path / "store", sample_dir, auth))
    for path in ("/metrics", "/_status"):
        resp = await client.get(path)
        assert resp.status == 401
        assert resp.headers["WWW-Authenticate"] == 'Bearer realm="archive gateway", scope="admin"'
        resp = await client.get(path, headers=_bearer(ADMIN_TOKEN))
        assert resp.status == 200
    resp = await client.get("/_jobs")  # not named: open
    assert resp.status == 200
    resp = await client.get("/rec/index", params={"url": "http://127.0.0.1:1/"})
    assert resp.status == 200  # record: false


async def test_without_an_auth_section_the_client_authorization_goes_through(
    make_client: Callable[[str], Awaitable[Client]],
    tmp_path: Path,
    sample_dir: Path,
    live_web: LiveWeb,
) -> None:
    """No ``auth:``: nothing is required, and a direct POST's ``Authorization`` is
    the client's, for the live site, as before."""
    client = await make_client(_config(tmp_path / "store", sample_dir, auth=""))
    resp = await client.post(
        "/rec/resource",
        params={"url": f"{live_web.base}/form"},
        data=b"",
        headers={"Authorization": "Bearer for-the-live-site"},
    )
    assert resp.status == 200
    await resp.read()
    ((_, _, sent),) = live_web.requests
    assert sent["Authorization"] == "Bearer for-the-live-site"
    resp = await client.get("/_jobs")
    assert resp.status == 200
