"""Differential suite: the gateway against real pywb 2.10 warcserver, same files.

Both serve ../shared/data/pywb-sample with the collections ``pywb`` (the
cdxj/ directory), ``iana`` and ``example`` (single files), resources from
warcs/. ``/index`` answers are compared line by line and ``/resource``
answers byte by byte, plus the headers pywb sets.

Fuzzy matching (an empty exact lookup widened, :mod:`gateway.index.fuzzy`) is
compared too, on lookups that have no exact captures.

Deliberate differences (README, "Deliberate differences from pywb") are not
compared here: bad-input handling (400 vs pywb's 500), the ``ResErrors``
header contents, sequence/group tie rules, and fuzzy answers to lookups with
``closest`` or filters (pywb drops both from the widened lookup; a test below
shows the gateway keeping ``closest``).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from gateway.cdx.cdxj import CdxRecord
from tests.conftest import MakeClient

pytestmark = pytest.mark.peer

HEADERS_COMPARED = (
    "Content-Type",
    "Warcserver-Type",
    "Warcserver-Cdx",
    "Warcserver-Source-Coll",
    "WARC-Target-URI",
    "Link",
    "Memento-Datetime",
)


def _iana_urls(sample_dir: Path) -> list[str]:
    urls: list[str] = []
    for line in (sample_dir / "cdxj" / "iana.cdxj").read_text().splitlines():
        url = json.loads(line.split(" ", 2)[2])["url"]
        if url not in urls:
            urls.append(url)
    return urls


INDEX_QUERIES: list[tuple[str, dict[str, str]]] = [
    ("pywb", {"url": "iana.org"}),
    ("pywb", {"url": "iana.org", "output": "json"}),
    ("pywb", {"url": "iana.org", "output": "text"}),
    ("pywb", {"url": "iana.org", "output": "link"}),
    ("pywb", {"url": "http://www.iana.org/", "closest": "20140127171300"}),
    ("pywb", {"url": "http://www.iana.org/", "closest": "20140126", "limit": "1"}),
    ("pywb", {"url": "example.com/?example=1"}),
    ("pywb", {"url": "http://www.iana.org/_css/*", "fl": "urlkey,timestamp,url,status"}),
    ("iana", {"url": "http://www.iana.org/_css/*", "sort": "reverse", "limit": "3"}),
    ("iana", {"url": "*.iana.org", "limit": "40", "output": "json", "fl": "url,mime"}),
    ("iana", {"url": "iana.org", "matchType": "host", "filter": "=status:200", "limit": "25"}),
    ("iana", {"url": "iana.org", "matchType": "host", "filter": "~mime:image/.*"}),
    ("iana", {"url": "iana.org", "matchType": "host", "filter": "!mime:html", "limit": "20"}),
    ("iana", {"url": "iana.org", "matchType": "domain", "from": "2014012620", "to": "20140126201"}),
    ("iana", {"url": "http://www.iana.org/domains/*", "output": "text", "fl": "url,digest"}),
    ("example", {"url": "http://example.com?example=1", "output": "json"}),
]


async def _pywb(session: aiohttp.ClientSession, url: str, params: dict[str, str]) -> str:
    async with session.get(url, params=params) as resp:
        assert resp.status == 200, (url, params, resp.status)
        return await resp.text()


async def test_index_answers_match_pywb_line_by_line(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str, sample_dir: Path
) -> None:
    client = await make_client(sample_yaml)
    queries = list(INDEX_QUERIES)
    queries += [("iana", {"url": url}) for url in _iana_urls(sample_dir)]
    answered = await _compare_index_answers(client, pywb_warcserver, queries)
    assert answered == len(queries)


async def _compare_index_answers(
    client: TestClient,  # type: ignore[type-arg]
    pywb_base: str,
    queries: list[tuple[str, dict[str, str]]],
) -> int:
    """Compare each ``/index`` answer with pywb's; the number of non-empty answers.

    CDXJ is compared by tie group (:func:`_tie_groups`), other outputs line by line.
    """
    answered = 0
    async with aiohttp.ClientSession() as session:
        for coll, params in queries:
            expected = await _pywb(session, f"{pywb_base}/{coll}/index", params)
            resp = await client.get(f"/{coll}/index", params=params)
            assert resp.status == 200, (coll, params, await resp.text())
            got = await resp.text()
            if params.get("output", "cdxj") == "cdxj":
                assert _tie_groups(got) == _tie_groups(expected), (coll, params)
            else:
                assert got.splitlines() == expected.splitlines(), (coll, params)
            answered += bool(got)
    return answered


def _tie_groups(text: str) -> list[tuple[str, list[str]]]:
    """CDXJ lines grouped by (urlkey, timestamp) in order, each group sorted.

    pywb orders captures with equal (urlkey, timestamp) from different files by
    the text of the line; the gateway by file (member) order, on purpose. Group
    order and group contents must match exactly; order inside a tie may differ.
    """
    groups: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        key = " ".join(line.split(" ", 2)[:2])
        if groups and groups[-1][0] == key:
            groups[-1][1].append(line)
        else:
            groups.append((key, [line]))
    return [(key, sorted(lines)) for key, lines in groups]


async def test_ties_follow_file_order_not_line_text(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/pywb/index", params={"url": "example.com/?example=1"})
    sources = [
        json.loads(line.split(" ", 2)[2])["source"] for line in (await resp.text()).splitlines()
    ]
    first_tie = [s for s in sources if s.endswith(("example-no-digest.cdxj", "example.cdxj"))][:2]
    assert first_tie == ["pywb:example-no-digest.cdxj", "pywb:example.cdxj"]


#: Captures that tie across files of the ``pywb`` directory (example.cdxj and
#: example-no-digest.cdxj): same record served, but pywb picks the tied line by
#: its text, so the capture headers name the other file.
TIED_HEADERS = ("Warcserver-Cdx", "Warcserver-Source-Coll")


def _resource_cases(sample_dir: Path) -> list[tuple[str, dict[str, str], bool]]:
    cases: list[tuple[str, dict[str, str], bool]] = [
        ("pywb", {"url": "iana.org"}, False),
        ("pywb", {"url": "http://www.iana.org/", "closest": "20140127171238"}, False),
        ("pywb", {"url": "http://example.com?example=1"}, True),
        ("pywb", {"url": "http://example.com?example=1", "closest": "20140103030341"}, True),
        ("example", {"url": "http://example.com?example=1", "closest": "20140103030341"}, False),
    ]
    urls = _iana_urls(sample_dir)
    cases += [("iana", {"url": url}, False) for url in urls[::7]]
    return cases


async def test_resource_answers_match_pywb_byte_by_byte(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str, sample_dir: Path
) -> None:
    client = await make_client(sample_yaml)
    async with aiohttp.ClientSession() as session:
        for coll, params, tied in _resource_cases(sample_dir):
            compared = [h for h in HEADERS_COMPARED if not (tied and h in TIED_HEADERS)]
            async with session.get(f"{pywb_warcserver}/{coll}/resource", params=params) as ref:
                assert ref.status == 200, (coll, params)
                expected_body = await ref.read()
                expected_headers = {h: ref.headers.get(h) for h in compared}
            resp = await client.get(f"/{coll}/resource", params=params)
            assert resp.status == 200, (coll, params, await resp.text())
            body = await resp.read()
            assert body == expected_body, (coll, params)
            assert {h: resp.headers.get(h) for h in compared} == expected_headers, (coll, params)
            assert resp.headers["Content-Length"] == str(len(body))


CSS = "http://www.iana.org/_css/2013.1/screen.css"

#: Exact lookups with no captures: pywb's generic fuzzy rule widens some of them.
FUZZY_INDEX_QUERIES: list[tuple[str, dict[str, str]]] = [
    # a file (it has an extension): the same path with any query
    ("iana", {"url": f"{CSS}?_=1390766400"}),
    ("iana", {"url": f"{CSS}?v=2", "output": "json"}),
    ("iana", {"url": f"{CSS}?v=2", "output": "text"}),
    ("iana", {"url": f"{CSS}?v=2", "output": "link"}),
    ("iana", {"url": f"{CSS}?v=2", "limit": "3"}),
    ("iana", {"url": "http://www.iana.org/_img/2013.1/iana-logo-header.svg?x"}),
    # not a file: equal once cache busters and campaign arguments are removed
    ("iana", {"url": "http://www.iana.org/about?utm_source=feed&utm_medium=rss"}),
    ("pywb", {"url": "http://example.com/?example=1&fbclid=abc"}),
    # nothing stands in for these (pywb compares a scheme-less URL as given)
    ("iana", {"url": "http://www.iana.org/about/?x=1"}),
    ("iana", {"url": "http://www.iana.org/domains?callback=jsonp12345"}),
    ("iana", {"url": "http://www.iana.org/abou"}),
    ("iana", {"url": "iana.org/_js/2013.1/iana.js?v=2"}),
    ("iana", {"url": f"{CSS}?_=1390766400", "allowFuzzy": "0"}),
    ("iana", {"url": f"{CSS}?_=1390766400", "allowFuzzy": "false"}),
]


async def test_fuzzy_index_answers_match_pywb_line_by_line(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str
) -> None:
    client = await make_client(sample_yaml)
    answered = await _compare_index_answers(client, pywb_warcserver, FUZZY_INDEX_QUERIES)
    assert answered == 8  # the cases above that find something


async def test_fuzzy_resource_answers_match_pywb_byte_by_byte(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str
) -> None:
    client = await make_client(sample_yaml)
    async with aiohttp.ClientSession() as session:
        for params in ({"url": f"{CSS}?_=1390766400"}, {"url": f"{CSS}?v=2"}):
            async with session.get(f"{pywb_warcserver}/iana/resource", params=params) as ref:
                assert ref.status == 200, params
                expected_body = await ref.read()
                expected_headers = {h: ref.headers.get(h) for h in HEADERS_COMPARED}
            resp = await client.get("/iana/resource", params=params)
            assert resp.status == 200, (params, await resp.text())
            assert await resp.read() == expected_body, params
            assert {h: resp.headers.get(h) for h in HEADERS_COMPARED} == expected_headers
            assert '"is_fuzzy": "1"' in resp.headers["Warcserver-Cdx"]


async def test_fuzzy_resource_keeps_closest_where_pywb_drops_it(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str
) -> None:
    params = {"url": f"{CSS}?_=1390766400", "closest": "20140126201250"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{pywb_warcserver}/iana/resource", params=params) as ref,
    ):
        assert ref.headers["Memento-Datetime"] == "Sun, 26 Jan 2014 20:06:25 GMT"
    client = await make_client(sample_yaml)
    resp = await client.get("/iana/resource", params=params)
    assert resp.status == 200
    # The closest capture (a revisit of the 20:06:25 response, served as its original).
    assert resp.headers["Memento-Datetime"] == "Sun, 26 Jan 2014 20:12:48 GMT"
    assert CdxRecord.parse(resp.headers["Warcserver-Cdx"]).timestamp == "20140126201248"


#: Lookups in the sample ZipNum cluster (zipcdx/) that span at most ten of its
#: blocks: pywb answers those whole.
ZIPNUM_QUERIES: list[tuple[str, dict[str, str]]] = [
    ("zip", {"url": "example.com"}),
    ("zip", {"url": "http://www.iana.org/_css/2013.1/fonts/opensans-bold.ttf"}),
    ("zip", {"url": "iana.org/domains/*"}),
    ("zip", {"url": "http://www.iana.org/time-zones", "closest": "20140126200737"}),
    ("zip", {"url": "iana.org", "matchType": "domain", "output": "json", "limit": "3"}),
    ("zip", {"url": "http://www.iana.org/", "output": "text"}),
]


async def test_zipnum_index_answers_match_pywb_line_by_line(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str
) -> None:
    client = await make_client(sample_yaml)
    answered = await _compare_index_answers(client, pywb_warcserver, ZIPNUM_QUERIES)
    assert answered == len(ZIPNUM_QUERIES)


async def test_zipnum_answers_past_ten_blocks_continue_where_pywb_stops(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str, sample_dir: Path
) -> None:
    # pywb answers a ZipNum lookup with its first page of blocks (ten) unless
    # asked for a page; the gateway answers the whole range (limit= cuts it).
    params = {"url": "iana.org", "matchType": "domain"}
    async with aiohttp.ClientSession() as session:
        expected = (await _pywb(session, f"{pywb_warcserver}/zip/index", params)).splitlines()
    client = await make_client(sample_yaml)
    got = (await (await client.get("/zip/index", params=params)).text()).splitlines()
    assert len(expected) == 46
    assert got[: len(expected)] == expected
    shard = gzip.decompress((sample_dir / "zipcdx" / "zipnum-sample.cdx.gz").read_bytes())
    # Every iana.org line of the cluster (its blocks do not end with a newline).
    assert len(got) == shard.count(b"org,iana)/")


async def test_zipnum_resource_answers_match_pywb_byte_by_byte(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str
) -> None:
    client = await make_client(sample_yaml)
    params = {"url": "http://www.iana.org/time-zones", "closest": "20140126200737"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{pywb_warcserver}/zip/resource", params=params) as ref,
    ):
        assert ref.status == 200
        expected_body = await ref.read()
        expected_headers = {h: ref.headers.get(h) for h in HEADERS_COMPARED}
    resp = await client.get("/zip/resource", params=params)
    assert resp.status == 200, await resp.text()
    assert await resp.read() == expected_body
    assert {h: resp.headers.get(h) for h in HEADERS_COMPARED} == expected_headers
