"""Memento (RFC 7089) compliance of the TimeGate, TimeMap and raw memento routes.

One test per statement of the README's "Memento (RFC 7089)" section, over the
pywb sample archive. Archived headers the sample lacks (cookies, a payload
stored chunked, redirects) are tested in ``test_memento_replay.py``, CORS in
``test_cors.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.memento import Link, parse_link_format, parse_link_header, timestamp_to_http_date
from gateway.config import parse_config
from gateway.server.app import create_app
from tests.conftest import MakeClient

AiohttpClient = Callable[..., Awaitable[TestClient]]  # type: ignore[type-arg]

PRINT_CSS = "http://www.iana.org/_css/2013.1/print.css"
#: Captures of PRINT_CSS in cdxj/iana.cdxj, ascending (one per second).
PRINT_CSS_TS = [
    "20140126200625",
    "20140126200653",
    "20140126200706",
    "20140126200716",
    "20140126200737",
    "20140126200804",
    "20140126200816",
    "20140126200825",
    "20140126200912",
    "20140126200929",
    "20140126201054",
    "20140126201127",
    "20140126201227",
    "20140126201239",
    "20140126201248",
    "20140126201307",
]
ADT = "Accept-Datetime"


def _links(resp: ClientResponse) -> list[Link]:
    return parse_link_header(", ".join(resp.headers.getall("Link", [])))


def _with_rel(links: list[Link], rel: str) -> list[Link]:
    return [link for link in links if link.has_rel(rel)]


def _urim(client: TestClient, coll: str, ts: str, url: str) -> str:  # type: ignore[type-arg]
    return str(client.make_url(f"/{coll}/{ts}id_/{url}"))


def _mementos(links: list[Link]) -> dict[str, tuple[str, ...]]:
    """``{datetime: rels}`` of the memento links."""
    return {link.params["datetime"]: link.rels for link in _with_rel(links, "memento")}


def _date(ts: str) -> str:
    return timestamp_to_http_date(ts)


# ------------------------------------------------------------------------------ TimeGate
async def test_timegate_redirects_with_vary_and_one_original(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(
        f"/iana/timegate/{PRINT_CSS}",
        headers={ADT: "Sun, 26 Jan 2014 20:07:00 GMT"},
        allow_redirects=False,
    )
    assert resp.status == 302
    assert resp.headers["Vary"] == "accept-datetime"
    assert "Memento-Datetime" not in resp.headers
    # 20:07:06 is 6 s away, 20:06:53 is 7 s away.
    assert resp.headers["Location"] == _urim(client, "iana", "20140126200706", PRINT_CSS)
    links = _links(resp)
    originals = _with_rel(links, "original")
    assert [link.url for link in originals] == [PRINT_CSS]
    timemaps = _with_rel(links, "timemap")
    link_format = [tm for tm in timemaps if tm.params.get("type") == "application/link-format"]
    assert len(link_format) == 1
    assert link_format[0].url == str(client.make_url(f"/iana/timemap/link/{PRINT_CSS}"))
    assert link_format[0].params["from"] == _date(PRINT_CSS_TS[0])
    assert link_format[0].params["until"] == _date(PRINT_CSS_TS[-1])
    assert [link.url for link in _with_rel(links, "timegate")] == [
        str(client.make_url(f"/iana/timegate/{PRINT_CSS}"))
    ]
    assert _mementos(links) == {
        _date("20140126200625"): ("first", "memento"),
        _date("20140126200653"): ("prev", "memento"),
        _date("20140126200706"): ("memento",),
        _date("20140126200716"): ("next", "memento"),
        _date("20140126201307"): ("last", "memento"),
    }
    for link in _with_rel(links, "memento"):
        ts = next(t for t in PRINT_CSS_TS if _date(t) == link.params["datetime"])
        assert link.url == _urim(client, "iana", ts, PRINT_CSS)


async def test_timegate_combines_rels_of_one_memento(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.head(
        f"/iana/timegate/{PRINT_CSS}", headers={ADT: _date("20140126200653")}, allow_redirects=False
    )
    assert resp.status == 302
    assert resp.headers["Location"].endswith(f"/20140126200653id_/{PRINT_CSS}")
    mementos = _mementos(_links(resp))
    assert mementos[_date(PRINT_CSS_TS[0])] == ("first", "prev", "memento")
    assert mementos[_date("20140126200706")] == ("next", "memento")


async def test_timegate_equal_distance_chooses_the_earlier(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    # 20:07:11 is 5 s after 20:07:06 and 5 s before 20:07:16.
    resp = await client.get(
        f"/iana/timegate/{PRINT_CSS}", headers={ADT: _date("20140126200711")}, allow_redirects=False
    )
    assert resp.headers["Location"].endswith(f"/20140126200706id_/{PRINT_CSS}")


async def test_timegate_without_accept_datetime_is_the_latest(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(f"/iana/timegate/{PRINT_CSS}", allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"] == _urim(client, "iana", PRINT_CSS_TS[-1], PRINT_CSS)
    mementos = _mementos(_links(resp))
    assert mementos[_date(PRINT_CSS_TS[-1])] == ("last", "memento")
    assert mementos[_date(PRINT_CSS_TS[-2])] == ("prev", "memento")


@pytest.mark.parametrize(
    ("accept", "expected", "neighbour", "neighbour_rels"),
    [
        ("Sat, 01 Jan 2000 00:00:00 GMT", PRINT_CSS_TS[0], PRINT_CSS_TS[1], ("next", "memento")),
        ("Fri, 01 Jan 2100 00:00:00 GMT", PRINT_CSS_TS[-1], PRINT_CSS_TS[-2], ("prev", "memento")),
    ],
)
async def test_timegate_outside_the_timemap_gives_first_or_last(
    make_client: MakeClient,
    sample_yaml: str,
    accept: str,
    expected: str,
    neighbour: str,
    neighbour_rels: tuple[str, ...],
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(
        f"/iana/timegate/{PRINT_CSS}", headers={ADT: accept}, allow_redirects=False
    )
    assert resp.status == 302
    assert resp.headers["Location"] == _urim(client, "iana", expected, PRINT_CSS)
    mementos = _mementos(_links(resp))
    assert mementos[_date(neighbour)] == neighbour_rels
    assert len(mementos) == 3  # first, last, and the neighbour


@pytest.mark.parametrize("value", ["yesterday", "2014-01-26T20:06:24Z", "Sun, 99 Foo 2014"])
async def test_malformed_accept_datetime_is_400_naming_the_header(
    make_client: MakeClient, sample_yaml: str, value: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(
        f"/iana/timegate/{PRINT_CSS}", headers={ADT: value}, allow_redirects=False
    )
    assert resp.status == 400
    body = await resp.json()
    assert body["param"] == "Accept-Datetime"
    assert value in body["message"]


@pytest.mark.parametrize(
    "path",
    [
        "/iana/timegate/http://nothing.example/",
        "/iana/timemap/link/http://nothing.example/",
        "/iana/timemap/json/http://nothing.example/",
        "/iana/20140126200625id_/http://nothing.example/",
    ],
)
async def test_no_mementos_is_404_that_carries_the_original_link(
    make_client: MakeClient, sample_yaml: str, path: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(path, allow_redirects=False)
    assert resp.status == 404
    assert "message" in await resp.json()
    links = _links(resp)
    assert [link.url for link in _with_rel(links, "original")] == ["http://nothing.example/"]
    assert _with_rel(links, "timegate")
    assert _with_rel(links, "timemap")


async def test_timegate_keeps_the_urls_own_query_string(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/example/timegate/http://example.com?example=1", allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"].endswith("/20140103030341id_/http://example.com?example=1")
    assert _with_rel(_links(resp), "original")[0].url == "http://example.com?example=1"


async def test_wayback_style_timegate_alias(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.head(
        f"/iana/{PRINT_CSS}", headers={ADT: _date("20140126200825")}, allow_redirects=False
    )
    assert resp.status == 302
    assert resp.headers["Vary"] == "accept-datetime"
    assert resp.headers["Location"] == _urim(client, "iana", "20140126200825", PRINT_CSS)


# ------------------------------------------------------------------------------ TimeMaps
async def test_link_timemap(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(f"/iana/timemap/link/{PRINT_CSS}")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/link-format"
    assert resp.headers["X-Memento-Count"] == "16"
    links = parse_link_format(await resp.text())
    assert links[0].rels == ("original",)
    assert links[0].url == PRINT_CSS
    assert links[1].rels == ("self",)
    assert links[1].url == str(client.make_url(f"/iana/timemap/link/{PRINT_CSS}"))
    assert links[1].params == {
        "type": "application/link-format",
        "from": _date(PRINT_CSS_TS[0]),
        "until": _date(PRINT_CSS_TS[-1]),
    }
    assert links[2].rels == ("timegate",)
    mementos = links[3:]
    assert [m.params["datetime"] for m in mementos] == [_date(ts) for ts in PRINT_CSS_TS]
    assert [m.url for m in mementos] == [
        _urim(client, "iana", ts, PRINT_CSS) for ts in PRINT_CSS_TS
    ]
    assert mementos[0].rels == ("first", "memento")
    assert mementos[-1].rels == ("last", "memento")
    assert all(m.rels == ("memento",) for m in mementos[1:-1])


async def test_json_timemap(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(f"/iana/timemap/json/{PRINT_CSS}")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.headers["X-Memento-Count"] == "16"
    body = await resp.json()
    base = str(client.make_url("/iana"))
    assert body["original_uri"] == PRINT_CSS
    assert body["timegate_uri"] == f"{base}/timegate/{PRINT_CSS}"
    assert body["timemap_uri"] == {
        "link_format": f"{base}/timemap/link/{PRINT_CSS}",
        "json_format": f"{base}/timemap/json/{PRINT_CSS}",
        "cdxj_format": f"{base}/timemap/cdxj/{PRINT_CSS}",
    }
    listed = body["mementos"]["list"]
    assert [m["uri"] for m in listed] == [f"{base}/{ts}id_/{PRINT_CSS}" for ts in PRINT_CSS_TS]
    assert listed[0]["datetime"] == "2014-01-26T20:06:25Z"
    assert body["mementos"]["first"] == listed[0]
    assert body["mementos"]["last"] == listed[-1]
    assert body["pages"] == {}


async def test_cdxj_timemap_lists_every_capture_with_its_source(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/pywb/timemap/cdxj/http://www.iana.org/")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/x-cdxj"
    # Three captures, two in the same second: two mementos.
    assert resp.headers["X-Memento-Count"] == "2"
    records = [CdxRecord.parse(line) for line in (await resp.text()).splitlines()]
    assert [(r.timestamp, r.fields["source"]) for r in records] == [
        ("20140126200624", "pywb:iana.cdxj"),
        ("20140127171238", "pywb:dupes.cdxj"),
        ("20140127171238", "pywb:dupes.cdxj"),
    ]


async def test_same_second_from_several_sources_is_one_memento(
    make_client: MakeClient, sample_dir: Path
) -> None:
    client = await make_client(
        f"""
collections:
  twice:
    index_group:
      a: {sample_dir}/cdxj/iana.cdxj
      b: {sample_dir}/cdxj/iana.cdxj
    resource: {sample_dir}/warcs/
"""
    )
    resp = await client.get(f"/twice/timemap/link/{PRINT_CSS}")
    assert resp.headers["X-Memento-Count"] == "16"
    mementos = [m for m in parse_link_format(await resp.text()) if m.has_rel("memento")]
    assert [m.params["datetime"] for m in mementos] == [_date(ts) for ts in PRINT_CSS_TS]
    resp = await client.get(f"/twice/timemap/cdxj/{PRINT_CSS}")
    sources = [CdxRecord.parse(line).fields["source"] for line in (await resp.text()).splitlines()]
    assert sources == ["a", "b"] * 16


async def test_timemaps_are_paged_past_the_page_size(
    aiohttp_client: AiohttpClient, sample_yaml: str
) -> None:
    app = create_app(parse_config(sample_yaml + "memento:\n  timemap_page_size: 5\n"))
    client = await aiohttp_client(app)
    url = str(client.make_url(f"/iana/timemap/link/{PRINT_CSS}"))
    origin = str(client.make_url("/")).rstrip("/")
    seen: list[str] = []
    pages = 0
    previous: str | None = None
    while url:
        assert url.startswith(origin)
        resp = await client.get(url[len(origin) :])
        assert resp.status == 200
        assert resp.headers["X-Memento-Count"] == "16"
        links = parse_link_format(await resp.text())
        mementos = [link for link in links if link.has_rel("memento")]
        dates = [m.params["datetime"] for m in mementos]
        assert len(dates) == min(5, 16 - len(seen))
        (this,) = _with_rel(links, "self")
        assert this.url == url
        assert (this.params["from"], this.params["until"]) == (dates[0], dates[-1])
        assert (mementos[0].rels[0] == "first") == (pages == 0)
        assert (mementos[-1].rels[0] == "last") == (len(seen) + len(dates) == 16)
        prev = [link for link in links if link.rels == ("prev", "timemap")]
        assert [link.url for link in prev] == ([previous] if previous else [])
        nexts = [link for link in links if link.rels == ("next", "timemap")]
        if nexts:
            following = PRINT_CSS_TS[len(seen) + 5 : len(seen) + 10]
            assert nexts[0].params["from"] == _date(following[0])
            assert nexts[0].params["until"] == _date(following[-1])
            assert nexts[0].params["type"] == "application/link-format"
        seen.extend(dates)
        previous, url = url, nexts[0].url if nexts else ""
        pages += 1
    assert pages == 4
    assert seen == [_date(ts) for ts in PRINT_CSS_TS]
    # The JSON format pages the same way.
    resp = await client.get(f"/iana/timemap/json/20140126200804/{PRINT_CSS}")
    body = await resp.json()
    assert [m["datetime"][11:19] for m in body["mementos"]["list"]] == [
        "20:08:04",
        "20:08:16",
        "20:08:25",
        "20:09:12",
        "20:09:29",
    ]
    assert body["pages"]["prev"]["from"] == "2014-01-26T20:06:25Z"
    assert body["pages"]["prev"]["until"] == "2014-01-26T20:07:37Z"
    assert body["pages"]["next"]["from"] == "2014-01-26T20:10:54Z"
    assert body["mementos"]["first"]["datetime"] == "2014-01-26T20:06:25Z"


async def test_unknown_timemap_format_is_400(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(f"/iana/timemap/xml/{PRINT_CSS}")
    assert resp.status == 400
    assert (await resp.json())["param"] == "format"


@pytest.mark.parametrize(
    "path",
    [
        f"/iana/timemap/link/{PRINT_CSS}",
        f"/iana/timemap/json/{PRINT_CSS}",
        f"/iana/timemap/cdxj/{PRINT_CSS}",
        f"/iana/20140126200625id_/{PRINT_CSS}",
    ],
)
async def test_timemaps_and_mementos_do_not_vary_on_accept_datetime(
    make_client: MakeClient, sample_yaml: str, path: str
) -> None:
    client = await make_client(sample_yaml)
    plain = await client.get(path, allow_redirects=False)
    dated = await client.get(
        path, headers={ADT: "Sat, 01 Jan 2000 00:00:00 GMT"}, allow_redirects=False
    )
    assert plain.status == dated.status == 200
    assert "accept-datetime" not in plain.headers.get("Vary", "").lower()
    assert await plain.read() == await dated.read()


# ------------------------------------------------------------------------------ raw mementos
def _archived(path: Path, offset: int) -> tuple[StatusAndHeaders, bytes, StatusAndHeaders]:
    """The HTTP headers, payload and WARC headers of the record at ``offset``, read by warcio."""
    with path.open("rb") as fh:
        fh.seek(offset)
        record = next(iter(ArchiveIterator(fh)))
        return record.http_headers, record.raw_stream.read(), record.rec_headers


async def test_raw_memento_is_the_archived_response(
    make_client: MakeClient, sample_yaml: str, sample_dir: Path
) -> None:
    client = await make_client(sample_yaml)
    http, payload, _ = _archived(sample_dir / "warcs" / "iana.warc.gz", 50482)
    resp = await client.get(f"/iana/20140126200625id_/{PRINT_CSS}", allow_redirects=False)
    assert resp.status == 200
    assert resp.status == int(http.get_statuscode())
    assert await resp.read() == payload
    assert resp.headers["Content-Length"] == str(len(payload))
    assert resp.headers["Content-Type"] == http.get_header("Content-Type")
    assert resp.headers["Memento-Datetime"] == "Sun, 26 Jan 2014 20:06:25 GMT"
    assert resp.headers["X-Archive-Orig-Date"] == http.get_header("Date")
    assert "Vary" not in resp.headers
    links = _links(resp)
    assert [link.url for link in _with_rel(links, "original")] == [PRINT_CSS]
    assert _with_rel(links, "timegate")
    assert _mementos(links) == {
        _date(PRINT_CSS_TS[0]): ("first", "memento"),
        _date(PRINT_CSS_TS[1]): ("next", "memento"),
        _date(PRINT_CSS_TS[-1]): ("last", "memento"),
    }
    head = await client.head(f"/iana/20140126200625id_/{PRINT_CSS}", allow_redirects=False)
    assert head.status == 200
    assert head.headers["Content-Length"] == str(len(payload))
    assert await head.read() == b""


async def test_raw_memento_of_a_revisit_is_resolved(
    make_client: MakeClient, sample_yaml: str, sample_dir: Path
) -> None:
    client = await make_client(sample_yaml)
    _, original_payload, _ = _archived(sample_dir / "warcs" / "dupes.warc.gz", 334)
    resp = await client.get("/pywb/20140127171251id_/http://example.com", allow_redirects=False)
    assert resp.status == 200
    assert resp.headers["Memento-Datetime"] == "Mon, 27 Jan 2014 17:12:51 GMT"
    assert resp.headers["Content-Type"] == "text/html"
    assert await resp.read() == original_payload


async def test_raw_memento_of_a_url_agnostic_revisit(
    make_client: MakeClient, sample_dir: Path
) -> None:
    client = await make_client(
        f"""
collections:
  agnostic:
    index: {sample_dir}/cdxj/url-agnost-example.cdxj
    resource: {sample_dir}/warcs/
"""
    )
    _, original_payload, _ = _archived(
        sample_dir / "warcs" / "example-url-agnostic-orig.warc.gz", 353
    )
    resp = await client.get(
        "/agnostic/20130729195151id_/http://test@example.com/", allow_redirects=False
    )
    assert resp.status == 200
    assert resp.headers["Memento-Datetime"] == "Mon, 29 Jul 2013 19:51:51 GMT"
    assert await resp.read() == original_payload
    assert original_payload.startswith(b"<!doctype html>")


@pytest.mark.parametrize(("asked", "exact"), [("20140126200700", "20140126200706"), ("2015", "")])
async def test_non_exact_timestamp_redirects_to_the_closest_capture(
    make_client: MakeClient, sample_yaml: str, asked: str, exact: str
) -> None:
    exact = exact or PRINT_CSS_TS[-1]
    client = await make_client(sample_yaml)
    resp = await client.get(f"/iana/{asked}id_/{PRINT_CSS}", allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"] == _urim(client, "iana", exact, PRINT_CSS)
    assert "Memento-Datetime" not in resp.headers
    followed = await client.get(f"/iana/{asked}id_/{PRINT_CSS}")
    assert followed.status == 200
    assert followed.headers["Memento-Datetime"] == _date(exact)
