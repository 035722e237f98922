"""The pages for people (``GET /`` for browsers, ``GET /{coll}/``), read as HTML."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.conftest import free_port

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[str], Awaitable[Client]]
HTML = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}  # what browsers send


async def test_root_is_a_page_for_browsers_and_json_for_everyone_else(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    page = await client.get("/", headers=HTML)
    assert page.status == 200
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    text = await page.text()
    for name in ("pywb", "iana", "example", "zip"):
        assert f'<section class="card" id="coll-{name}">' in text
        assert f'<form class="search" method="get" action="/{name}/"' in text
    assert '<span class="state ok" title="">ok</span>' in text
    for accept in ("*/*", "application/json", "application/json, text/html"):
        api = await client.get("/", headers={"Accept": accept})
        assert api.headers["Content-Type"].startswith("application/json"), accept
        assert set((await api.json())["collections"]) == {"pywb", "iana", "example", "zip"}


async def test_collection_page_without_a_url_is_a_search_form(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/iana/")
    text = await resp.text()
    assert resp.status == 200
    assert 'name="url" value=""' in text
    assert "captures between" not in text


async def test_calendar_counts_and_links(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    url = "http://www.iana.org/_css/2013.1/print.css"
    resp = await client.get("/iana/", params={"url": url, "day": "20140126"})
    text = await resp.text()
    assert resp.status == 200
    assert "<strong>16</strong> captures" in text
    assert '<span class="selected">2014 (16)</span>' in text
    assert text.count('<tr class="capture">') == 16
    assert f'href="/iana/20140126200625id_/{url}">memento</a>' in text
    quoted = "http%3A%2F%2Fwww.iana.org%2F_css%2F2013.1%2Fprint.css"
    assert f'href="/iana/resource?url={quoted}&amp;closest=20140126200625">' in text
    assert f'href="/iana/timemap/link/{url}">link</a>' in text
    # Every link on the page answers.
    for href in (
        f"/iana/20140126200625id_/{url}",
        f"/iana/resource?url={quoted}&closest=20140126200625",
        f"/iana/index?url={quoted}&from=20140126200625&to=20140126200625",
        f"/iana/timemap/json/{url}",
    ):
        assert (await client.get(href)).status == 200, href


async def test_no_captures_and_bad_input_are_explained(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    none = await client.get("/iana/", params={"url": "http://example.net/nothing"})
    assert none.status == 200
    assert "No captures of" in await none.text()
    for params, message in (
        ({"url": "http://www.iana.org/", "year": "14"}, "&#39;14&#39; is not a year"),
        ({"url": "http://www.iana.org/", "day": "2014"}, "&#39;2014&#39; is not a day"),
        ({"url": "*."}, "url: empty after removing the wildcard"),
    ):
        resp = await client.get("/iana/", params=params, headers=HTML)
        assert resp.status == 400, params
        assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
        assert message in await resp.text()
        api = await client.get("/iana/", params=params)  # not asking for HTML: the API's JSON
        assert (api.status, api.content_type) == (400, "application/json"), params
        assert (await api.json())["message"]
    unknown = await client.get("/nowhere/", headers=HTML)
    assert unknown.status == 404
    assert "unknown collection &#39;nowhere&#39;" in await unknown.text()
    api = await client.get("/nowhere/")
    assert (api.status, api.content_type) == (404, "application/json")


async def test_text_from_the_request_is_escaped(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/iana/", params={"url": 'http://x.org/"><script>alert(1)</script>'})
    text = await resp.text()
    assert "<script>" not in text
    assert "&lt;script&gt;" in text


async def test_a_collection_whose_sources_all_fail_is_a_503_page(make_client: MakeClient) -> None:
    client = await make_client(f"collections:\n  gone: cdx+http://127.0.0.1:{free_port()}/cdx\n")
    resp = await client.get("/gone/", params={"url": "http://example.com/"}, headers=HTML)
    text = await resp.text()
    assert resp.status == 503
    assert "every source of collection &#39;gone&#39; failed" in text
    assert "<code>gone</code>:" in text  # the failure, by source
    home = await client.get("/", headers=HTML)
    assert '<span class="state failing"' in await home.text()


async def test_a_year_without_captures(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/iana/", params={"url": "http://www.iana.org/", "year": "2013"})
    text = await resp.text()
    assert resp.status == 200
    assert '<a href="/iana/?url=http%3A%2F%2Fwww.iana.org%2F&amp;year=2014">2014 (' in text
    assert "No captures in 2013" in text
    assert 'class="capture"' not in text
