"""CORS on every API: headers on every answer (errors included) and preflights."""

from __future__ import annotations

import json

import pytest

from tests.conftest import MakeClient

PRINT_CSS = "http://www.iana.org/_css/2013.1/print.css"
BOLD_TTF = "http://www.iana.org/_css/2013.1/fonts/OpenSans-Bold.ttf"  # 225 KB: streamed


@pytest.mark.parametrize(
    ("path", "status"),
    [
        (f"/iana/timegate/{PRINT_CSS}", 302),
        (f"/iana/timemap/link/{PRINT_CSS}", 200),
        (f"/iana/20140126200625id_/{PRINT_CSS}", 200),
        (f"/iana/index?url={PRINT_CSS}", 200),
        (f"/iana/cdx?url={PRINT_CSS}", 200),
        (f"/iana/resource?url={PRINT_CSS}", 200),
        (f"/iana/resource?url={BOLD_TTF}", 200),
        ("/iana/index?url=iana.org&limit=abc", 400),
        ("/nope/index?url=iana.org", 404),
        ("/iana/no-such-api", 404),
    ],
)
async def test_cors_headers_on_every_answer(
    make_client: MakeClient, sample_yaml: str, path: str, status: int
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(path, allow_redirects=False)
    assert resp.status == status
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    exposed = {h.strip() for h in resp.headers["Access-Control-Expose-Headers"].split(",")}
    assert {"Link", "Location", "Memento-Datetime", "Content-Location"} <= exposed
    assert {"ResErrors", "Warcserver-Cdx"} <= exposed


async def test_cors_preflight(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.options(
        f"/iana/timegate/{PRINT_CSS}",
        headers={
            "Origin": "http://app.example",
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "accept-datetime",
        },
    )
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert "GET" in resp.headers["Access-Control-Allow-Methods"].split(", ")
    assert resp.headers["Access-Control-Allow-Headers"] == "accept-datetime"
    assert int(resp.headers["Access-Control-Max-Age"]) > 0
    missing = await client.options("/", headers={"Access-Control-Request-Method": "DELETE"})
    assert missing.status == 204  # "/" exists (GET); the browser then refuses DELETE itself
    assert "DELETE" not in missing.headers["Access-Control-Allow-Methods"]
    unknown = await client.options("/a/b/c/d", headers={"Access-Control-Request-Method": "GET"})
    assert unknown.status == 404
    assert unknown.headers["Access-Control-Allow-Origin"] == "*"
    assert json.loads(await unknown.read())["message"]


async def test_a_method_a_path_does_not_take_is_a_json_405(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.delete("/iana/index?url=iana.org")
    assert resp.status == 405
    assert {m.strip() for m in resp.headers["Allow"].split(",")} == {"GET", "HEAD", "POST"}
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert "DELETE /iana/index" in (await resp.json())["message"]
