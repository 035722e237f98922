"""The gateway's router (gateway.server.app._Router) routes as aiohttp's own does.

Collection routes ``/{coll}/NAME`` are found in a dict instead of aiohttp's
walk over the routes' regular expressions; for every path and method below,
the route and match found must be those of aiohttp's ``UrlDispatcher.resolve``
on the same app, and the answers of a served gateway (404 and 405 in JSON
included) those the routes give.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from gateway.config import parse_config
from gateway.server.app import create_app

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")
PATHS = (
    "/iana/index",
    "/iana/cdx",
    "/iana/resource",
    "/iana/resource-post",
    "/iana/postreq",
    "/iana/list_sources",
    "/iana/index/postreq",
    "/iana/resource/postreq",
    "/iana/timegate/http://example.com/",
    "/iana/timemap/link/http://example.com/",
    "/iana/2014id_/http://example.com/",
    "/iana/http://example.com/",
    "/iana",
    "/iana/",
    "/iana/index/",
    "/iana/nothing",
    "/unknown/index",
    "/_status/index",
    "/_jobs/index",
    "/metrics/index",
    "/a%2Fb/index",
    "/a%25b/index",
    "/caf%C3%A9/index",
    "/{x}/index",
    "/iana//index",
    "/",
    "/_status",
    "/metrics",
    "/openapi.json",
)


@pytest.fixture
def app(sample_dir: Path) -> web.Application:
    index = sample_dir / "cdxj" / "iana.cdxj"
    return create_app(parse_config(f"collections:\n  iana:\n    index: {index}\n"))


def _resolve(app: web.Application, method: str, path: str, *, aiohttp_only: bool) -> Any:
    request = make_mocked_request(method, path, app=app)
    router = app.router
    resolving = (
        web.UrlDispatcher.resolve(router, request) if aiohttp_only else router.resolve(request)
    )
    try:
        resolving.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("resolve waited")


def test_the_dict_takes_the_collection_routes_it_should(app: web.Application) -> None:
    taken = {key for key in app.router.by_name}  # type: ignore[attr-defined]
    assert {("index", "GET"), ("index", "HEAD"), ("cdx", "GET"), ("resource", "GET")} <= taken
    assert {("index", "POST"), ("resource", "POST"), ("list_sources", "GET")} <= taken


@pytest.mark.parametrize(("method", "path"), list(itertools.product(METHODS, PATHS)))
def test_every_path_and_method_resolves_as_aiohttp_does(
    app: web.Application, method: str, path: str
) -> None:
    ours = _resolve(app, method, path, aiohttp_only=False)
    theirs = _resolve(app, method, path, aiohttp_only=True)
    if theirs.http_exception is not None:  # aiohttp's 404/405: ours is the same error
        assert ours.http_exception is not None
        assert ours.http_exception.status == theirs.http_exception.status
        return
    assert ours.route is theirs.route
    assert dict(ours) == dict(theirs)


async def test_answers_through_the_dict_and_around_it(app: web.Application) -> None:
    async with TestClient(TestServer(app)) as client:
        found = await client.get("/iana/index", params={"url": "http://www.iana.org/"})
        assert found.status == 200
        assert (await found.text()).startswith("org,iana)/ 20140126200624 ")
        assert found.headers["Access-Control-Allow-Origin"] == "*"
        unknown = await client.get("/nope/index", params={"url": "http://www.iana.org/"})
        assert unknown.status == 404
        assert "unknown collection 'nope'" in json.loads(await unknown.text())["message"]
        wrong = await client.put("/iana/index")
        assert wrong.status == 405
        assert set(wrong.headers["Allow"].split(",")) >= {"GET", "HEAD", "POST"}
        assert json.loads(await wrong.text())["message"].startswith("Method Not Allowed: PUT")
        nothing = await client.get("/iana/nothing")
        assert nothing.status == 404
        assert json.loads(await nothing.text()) == {"message": "Not Found: GET /iana/nothing"}
