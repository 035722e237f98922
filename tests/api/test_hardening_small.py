"""Issue 21 §5: requests no route can take, the pages' filesystem paths, a prefix 404.

- ``CONNECT host:443`` (and ``OPTIONS *``), whose target is not a path, reach
  the catch-all route: a JSON 405 with ``Allow`` and the CORS headers (204
  with ``Allow`` for ``OPTIONS *``), never aiohttp's plain-text 404. Raw
  requests to a real server on 127.0.0.1.
- The HTML pages hide the server's filesystem paths unless the operator asks
  (``create_app(show_paths=True)``, ``GATEWAY_SHOW_PATHS=1``).
- ``/resource?url=...*`` finding nothing says the ``*`` asked for a prefix and
  that ``matchType=exact`` asks for the URL itself (pywb's reading, kept).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.config import parse_config
from gateway.server.app import create_app
from tests.conftest import MakeClient, serving

Client = TestClient[web.Request, web.Application]
AiohttpClient = Callable[..., Awaitable[Client]]
HTML = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


async def _raw(port: int, head: str) -> tuple[str, dict[str, str], bytes]:
    """Send ``head`` (a request line and headers) and read the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head.encode("latin-1") + b"\r\n")
        await writer.drain()
        status = (await reader.readline()).decode("latin-1").strip()
        headers: dict[str, str] = {}
        while (line := (await reader.readline()).decode("latin-1").strip()) != "":
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return status, headers, body
    finally:
        writer.close()


# ------------------------------------------------------------------- §5 (a)
async def test_connect_and_options_star_are_answered_by_the_app(sample_dir: Path) -> None:
    yaml_text = f"collections:\n  iana:\n    index: {sample_dir}/cdxj/iana.cdxj\n"
    async with serving(yaml_text) as port:
        for target in ("example.com:443", "127.0.0.1:8080", "/iana/index"):
            status, headers, body = await _raw(
                port,
                f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nOrigin: http://a.example\r\n",
            )
            assert status == "HTTP/1.1 405 Method Not Allowed", (target, status, body)
            assert headers["content-type"].startswith("application/json")
            assert headers["access-control-allow-origin"] == "*"
            assert set(headers["allow"].split(",")) == {"GET", "HEAD", "OPTIONS", "POST"}
            assert json.loads(body) == {"message": f"Method Not Allowed: CONNECT {target}"}
        status, headers, body = await _raw(port, "OPTIONS * HTTP/1.1\r\nHost: x\r\n")
        assert status == "HTTP/1.1 204 No Content"
        assert set(headers["allow"].split(",")) == {"GET", "HEAD", "OPTIONS", "POST"}
        assert headers["access-control-allow-origin"] == "*"
        # Methods a path does not take, and unknown paths: JSON as before.
        status, headers, body = await _raw(port, "TRACE /iana/index HTTP/1.1\r\nHost: x\r\n")
        assert status == "HTTP/1.1 405 Method Not Allowed"
        assert headers["allow"] == "GET,HEAD,POST"  # POST: the post-request API
        status, headers, body = await _raw(port, "GET /no/such/thing HTTP/1.1\r\nHost: x\r\n")
        assert status == "HTTP/1.1 404 Not Found"
        assert json.loads(body)["message"] == "Not Found: GET /no/such/thing"
        # Counted on /metrics under the catch-all route, as unknown paths are.
        status, headers, body = await _raw(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n")
        assert 'method="*",route="unrouted",status="405"' in body.decode()


# ------------------------------------------------------------------- §5 (b)
def _yaml(index: Path, sample_dir: Path) -> str:
    return (
        f"collections:\n  c:\n    index: {{type: file, path: {index}, stat_interval_s: 0}}\n"
        f"    resource: {sample_dir}/warcs/\n  d:\n    index: {sample_dir}/cdxj/\n"
    )


async def test_pages_hide_filesystem_paths_by_default(
    aiohttp_client: AiohttpClient, sample_dir: Path, tmp_path: Path
) -> None:
    index = tmp_path / "private" / "iana.cdxj"
    index.parent.mkdir()
    shutil.copy(sample_dir / "cdxj" / "iana.cdxj", index)
    client = await aiohttp_client(create_app(parse_config(_yaml(index, sample_dir))))
    home = await (await client.get("/", headers=HTML)).text()
    assert "directory … (" in home  # what it is, not where
    assert "file … (CDXJ" in home
    page = await (await client.get("/c/", params={"url": "iana.org"}, headers=HTML)).text()
    assert "file … (CDXJ" in page
    index.unlink()  # failures name the path: hidden too
    for _ in range(4):
        resp = await client.get("/c/", params={"url": "iana.org"}, headers=HTML)
    page = await resp.text()
    assert resp.status == 503
    assert "index file … does not exist" in page
    for text in (home, page):
        assert str(tmp_path) not in text
        assert str(sample_dir) not in text
    # The JSON description of / (for operators' tools) is unchanged.
    described = await (await client.get("/")).text()
    assert str(sample_dir) in described


@pytest.mark.parametrize("how", ["argument", "environment"])
async def test_an_operator_can_show_the_paths(
    how: str,
    aiohttp_client: AiohttpClient,
    sample_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = tmp_path / "iana.cdxj"
    shutil.copy(sample_dir / "cdxj" / "iana.cdxj", index)
    config = parse_config(_yaml(index, sample_dir))
    if how == "argument":
        app = create_app(config, show_paths=True)
    else:
        monkeypatch.setenv("GATEWAY_SHOW_PATHS", "1")
        app = create_app(config)
    client = await aiohttp_client(app)
    home = await (await client.get("/", headers=HTML)).text()
    assert f"file {index} (CDXJ" in home
    assert f"directory {sample_dir}/cdxj (" in home


# ------------------------------------------------------------------- §5 (c)
async def test_a_prefix_404_says_what_the_star_asked_for(
    make_client: MakeClient, sample_dir: Path
) -> None:
    client = await make_client(
        f"collections:\n  iana:\n    index: {sample_dir}/cdxj/iana.cdxj\n"
        f"    resource: {sample_dir}/warcs/\n"
    )
    resp = await client.get("/iana/resource", params={"url": "http://nothing.example/a*"})
    body = await resp.json()
    assert resp.status == 404
    assert "the trailing '*' of url= asked for the URLs that start with" in body["message"]
    assert "http://nothing.example/a" in body["message"]
    assert "matchType=exact looks up the URL itself" in body["message"]
    resp = await client.get("/iana/resource", params={"url": "*.nothing.example"})
    assert "the leading '*.' of url=" in (await resp.json())["message"]
    # Asked for explicitly, or without a wildcard: the 404 as it was.
    for params in (
        {"url": "http://nothing.example/a*", "matchType": "exact"},
        {"url": "http://nothing.example/a", "matchType": "prefix"},
        {"url": "http://nothing.example/a"},
    ):
        body = await (await client.get("/iana/resource", params=params)).json()
        assert "'*'" not in body["message"], params
    # pywb's semantics stay: the * still asks for a prefix, which finds captures.
    resp = await client.get("/iana/resource", params={"url": "http://www.iana.org/*"})
    assert resp.status == 200
