"""The IA CDX dialect ``GET /{coll}/cdx`` over the sample archive, and cdx_toolkit against it.

Expected answers are computed in the tests from the unpaged, unlimited answer
(itself checked against the pywb dialect's lines) with small reference
implementations of the IA's rules, so every parameter is checked against an
independent statement of what it means.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import cdx_toolkit  # type: ignore[import-untyped]
import cdx_toolkit.myrequests  # type: ignore[import-untyped]
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.config import parse_config
from gateway.index.indexer import write_cdxj_index
from gateway.server.app import create_app
from tests.api.sample_support import sorted_sample_indexes
from tests.conftest import MakeClient

Client = TestClient[web.Request, web.Application]
Line = list[str]
IA_FIELDS = ["urlkey", "timestamp", "original", "mimetype", "statuscode", "digest", "length"]


def _params(**params: str | int | Sequence[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name, value in params.items():
        name = {"from_": "from"}.get(name, name)
        if isinstance(value, (list, tuple)):
            out.extend((name, str(v)) for v in value)
        else:
            out.append((name, str(value)))
    return out


async def fetch(client: Client, coll: str, **params: str | int | Sequence[str]) -> str:
    resp = await client.get(f"/{coll}/cdx", params=_params(**params))
    assert resp.status == 200, await resp.text()
    return await resp.text()


async def lines(client: Client, coll: str, **params: str | int | Sequence[str]) -> list[Line]:
    """Text output split into lines of fields (no resume key expected)."""
    text = await fetch(client, coll, **params)
    assert "\n\n" not in text, "unexpected resume key"
    return [line.split(" ") for line in text.splitlines()]


async def bad(client: Client, coll: str, **params: str | int | Sequence[str]) -> str:
    resp = await client.get(f"/{coll}/cdx", params=_params(**params))
    assert resp.status == 400, await resp.text()
    body = await resp.json()
    assert set(body) == {"message", "param"}
    param: str = body["param"]
    return param


@pytest.fixture(scope="session")
def sorted_indexes(sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample's CDXJ indexes, with post-test.cdxj (not sorted, see FIELD-NOTES)
    replaced by a sorted index of post-test.warc.gz written by the gateway's indexer."""
    return sorted_sample_indexes(sample_dir, tmp_path_factory.mktemp("sorted-cdxj"))


@pytest.fixture
async def client(make_client: MakeClient, sample_yaml: str, sorted_indexes: Path) -> Client:
    """Collections pywb, iana, example (tests/api/conftest.py) and ``all``: every
    sample index, sorted."""
    return await make_client(sample_yaml + f"  all: {sorted_indexes}/\n")


# -- output ------------------------------------------------------------------------


async def test_default_text_lines_are_the_seven_ia_fields_of_the_engines_answer(
    client: Client,
) -> None:
    resp = await client.get("/all/cdx", params={"url": "*.org"})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/plain"
    got = [line.split(" ") for line in (await resp.text()).splitlines()]

    pywb = await client.get("/all/index", params={"url": "*.org", "output": "json"})
    expected = []
    for row in map(json.loads, (await pywb.text()).splitlines()):
        expected.append(
            [
                row["urlkey"],
                row["timestamp"],
                row["url"],
                row.get("mime", "-"),
                row.get("status", "-"),
                row.get("digest", "-").removeprefix("sha1:"),
                row.get("length", "-"),
            ]
        )
    assert len(got) > 150
    assert got == expected


async def test_json_is_an_array_of_string_arrays_after_a_header_row(client: Client) -> None:
    resp = await client.get("/all/cdx", params={"url": "iana.org", "output": "json"})
    assert resp.headers["Content-Type"] == "application/json"
    rows = json.loads(await resp.text())
    assert rows[0] == IA_FIELDS
    assert rows[1:] == await lines(client, "all", url="iana.org")
    assert all(isinstance(value, str) for row in rows for value in row)
    # the revisit has no status: "-" as a string, never null
    assert rows[3][3:5] == ["warc/revisit", "-"]


async def test_empty_answers(client: Client) -> None:
    assert await fetch(client, "all", url="nothing.example") == ""
    assert await fetch(client, "all", url="nothing.example", output="json") == "[]\n"


async def test_fl_takes_ia_and_pywb_names_and_answers_with_ia_names(client: Client) -> None:
    full = await lines(client, "iana", url="iana.org/*")
    got = await lines(client, "iana", url="iana.org/*", fl="timestamp,mime,s,original")
    assert got == [[line[1], line[3], line[4], line[2]] for line in full]
    rows = json.loads(await fetch(client, "iana", url="iana.org", fl="url,length", output="json"))
    assert rows[0] == ["original", "length"]
    extra = await lines(client, "iana", url="iana.org", fl="offset,filename")
    assert extra[0] == ["334", "iana.warc.gz"]


async def test_digest_is_shown_bare_as_the_ia_shows_it(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    with (tmp_path / "dupes.cdxj").open("w") as out:
        write_cdxj_index([sample_dir / "warcs" / "dupes.warc.gz"], out)
    assert '"digest": "sha1:' in (tmp_path / "dupes.cdxj").read_text()
    client = await make_client(f"collections:\n  d: {tmp_path / 'dupes.cdxj'}\n")
    got = await lines(client, "d", url="example.com", fl="digest")
    assert got == [["B2LTWWPUOYAH7UIPQ7ZUPQ4VMBSVC36A"]] * 2
    # and filters see the same value
    digest = "digest:B2LTWWPUOYAH7UIPQ7ZUPQ4VMBSVC36A"
    assert len(await lines(client, "d", url="example.com", filter=digest)) == 2


# -- url, matchType, from, to ------------------------------------------------------


async def test_wildcards_and_match_types(client: Client) -> None:
    full = await lines(client, "all", url="*.org")
    assert await lines(client, "all", url="org", matchType="domain") == full
    prefix = await lines(client, "all", url="www.iana.org/_css/*")
    assert prefix == await lines(client, "all", url="www.iana.org/_css/", matchType="prefix")
    assert prefix
    assert all(line[0].startswith("org,iana)/_css/") for line in prefix)
    host = await lines(client, "all", url="iana.org/about", matchType="host")
    assert {line[0].split(")")[0] for line in host} == {"org,iana"}
    assert len(host) < len(await lines(client, "all", url="*.iana.org"))  # + example.iana.org
    exact = await lines(client, "all", url="http://www.iana.org/")
    assert {line[0] for line in exact} == {"org,iana)/"}


async def test_from_and_to_are_inclusive_and_padded(client: Client) -> None:
    full = await lines(client, "all", url="*.org")
    got = await lines(client, "all", url="*.org", from_="20140127", to="2014012717123")
    expected = [x for x in full if "20140127000000" <= x[1] <= "20140127171239"]
    assert got == expected
    assert {x[1] for x in got} >= {"20140127171238", "20140127171239"}


# -- filter --------------------------------------------------------------------------


async def test_filter_regex_matches_the_whole_field(client: Client) -> None:
    full = await lines(client, "all", url="*.org")
    assert await lines(client, "all", url="*.org", filter="statuscode:20") == []
    assert await lines(client, "all", url="*.org", filter="statuscode:2..") == [
        x for x in full if x[4] == "200"
    ]
    assert await lines(client, "all", url="*.org", filter="!statuscode:200") == [
        x for x in full if x[4] != "200"
    ]
    assert await lines(client, "all", url="*.org", filter="mimetype:text/.*") == [
        x for x in full if x[3].startswith("text/")
    ]


async def test_filter_contains_index_whole_line_and_and(client: Client) -> None:
    full = await lines(client, "all", url="*.org")
    assert await lines(client, "all", url="*.org", filter="~original:/_img/") == [
        x for x in full if "/_img/" in x[2]
    ]
    assert await lines(client, "all", url="*.org", filter="!~mime:image") == [
        x for x in full if "image" not in x[3]
    ]
    assert await lines(client, "all", url="*.org", filter="4:302") == [
        x for x in full if x[4] == "302"
    ]
    assert await lines(client, "all", url="*.org", filter=".* warc/revisit .*") == [
        x for x in full if x[3] == "warc/revisit"
    ]
    both = ["mimetype:warc/revisit", "~urlkey:_css"]
    expected = [x for x in full if x[3] == "warc/revisit" and "_css" in x[0]]
    assert expected
    assert await lines(client, "all", url="*.org", filter=both) == expected


async def test_a_filtered_limited_group_lookup_holds_only_what_it_answers(
    make_client: MakeClient, tmp_path: Path
) -> None:
    # Two members of 40,000 lines each, every one passing the filter: the
    # members hold at most the limit each, not their whole ranges.
    lines_out = [
        f"com,example)/p{i:06d} 20200101000000 "
        + json.dumps({"url": f"http://example.com/p{i:06d}", "mime": "text/html", "status": "200"})
        for i in range(40_000)
    ]
    for name in ("a", "b"):
        (tmp_path / f"{name}.cdxj").write_text("\n".join(lines_out) + "\n")
    client = await make_client(
        f"collections:\n  g:\n    index_group:\n"
        f"      a: {tmp_path}/a.cdxj\n      b: {tmp_path}/b.cdxj\n"
    )
    params = {"url": "example.com/*", "filter": "statuscode:200", "limit": "5"}
    tracemalloc.start()
    try:
        resp = await client.get("/g/cdx", params=params)
        text = await resp.text()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert resp.status == 200
    assert [line.split(" ")[0] for line in text.splitlines()] == [
        "com,example)/p000000",
        "com,example)/p000000",
        "com,example)/p000001",
        "com,example)/p000001",
        "com,example)/p000002",
    ]
    # Holding both ranges as records takes tens of MB.
    assert peak < 4 * 1024 * 1024, peak


async def test_a_sequence_step_with_no_line_passing_the_filters_falls_through(
    make_client: MakeClient, tmp_path: Path
) -> None:
    def line(status: str) -> str:
        fields = {"url": "http://example.com/", "mime": "text/html", "status": status}
        return f"com,example)/ 20200101000000 {json.dumps(fields)}\n"

    (tmp_path / "first.cdxj").write_text(line("404"))
    (tmp_path / "second.cdxj").write_text(line("200"))
    client = await make_client(
        f"collections:\n  seq:\n    sequence:\n"
        f"      - {{name: first, index: {tmp_path}/first.cdxj}}\n"
        f"      - {{name: second, index: {tmp_path}/second.cdxj}}\n"
    )
    resp = await client.get("/seq/cdx", params={"url": "example.com", "filter": "statuscode:200"})
    assert resp.headers["Warcserver-Step"] == "second"
    assert [row.split(" ")[4] for row in (await resp.text()).splitlines()] == ["200"]


# -- collapse ----------------------------------------------------------------------------


def collapse_ref(rows: list[Line], column: int, chars: int | None) -> list[Line]:
    out: list[Line] = []
    previous: str | None = None
    for row in rows:
        value = row[column] if chars is None else row[column][:chars]
        if value != previous:
            out.append(row)
            previous = value
    return out


async def test_collapse_over_adjacent_lines(client: Client) -> None:
    full = await lines(client, "all", url="*.org")
    urlkeys = await lines(client, "all", url="*.org", collapse="urlkey")
    assert urlkeys == collapse_ref(full, 0, None)
    assert [x[0] for x in urlkeys] == sorted({x[0] for x in full})
    hours = await lines(client, "all", url="*.org", collapse="timestamp:10")
    assert hours == collapse_ref(full, 1, 10)
    digests = await lines(client, "all", url="*.org", collapse="digest")
    assert digests == collapse_ref(full, 5, None)
    # only adjacent duplicates go: some digests repeat further apart
    assert len({x[5] for x in digests}) < len(digests)


async def test_several_collapses_apply_in_order_after_filters(client: Client) -> None:
    full = await lines(client, "all", url="*.org")
    got = await lines(
        client,
        "all",
        url="*.org",
        filter="!mimetype:warc/revisit",
        collapse=["timestamp:8", "mimetype"],
    )
    kept = [x for x in full if x[3] != "warc/revisit"]
    assert got == collapse_ref(collapse_ref(kept, 1, 8), 3, None)
    assert len(got) > 1


# -- limit, offset, fastLatest ----------------------------------------------------------


async def test_limit_offset_and_negative_limit(client: Client) -> None:
    full = await lines(client, "all", url="*.org")
    assert await lines(client, "all", url="*.org", limit=5) == full[:5]
    assert await lines(client, "all", url="*.org", limit=-5) == full[-5:]
    assert await lines(client, "all", url="*.org", limit=0) == []
    assert await lines(client, "all", url="*.org", offset=3, limit=4) == full[3:7]
    assert await lines(client, "all", url="*.org", offset=3, limit=-2) == full[3:][-2:]
    assert await lines(client, "all", url="*.org", offset=len(full) - 2) == full[-2:]
    collapsed = collapse_ref(full, 0, None)
    assert await lines(client, "all", url="*.org", collapse="urlkey", limit=-3) == collapsed[-3:]


async def test_fast_latest(client: Client) -> None:
    full = await lines(client, "iana", url="iana.org/*")
    assert await lines(client, "iana", url="iana.org/*", fastLatest="true") == full[-1:]
    assert await lines(client, "iana", url="iana.org/*", fastLatest="true", limit=-4) == full[-4:]
    assert await lines(client, "iana", url="iana.org/*", fastLatest="true", limit=4) == full[-4:]
    exact = await lines(client, "iana", url="http://www.iana.org/")
    assert await lines(client, "iana", url="http://www.iana.org/", fastLatest="1") == exact[-1:]
    ties = await lines(client, "all", url="iana.org")  # two captures at one timestamp
    assert await lines(client, "all", url="iana.org", fastLatest="true", limit=-2) == ties[-2:]


# -- pages -------------------------------------------------------------------------------


async def pages_of(client: Client, coll: str, **params: str | int | Sequence[str]) -> list[str]:
    """Bodies of page 0, 1, 2... up to and including the first empty one."""
    bodies = []
    for page in range(10_000):
        body = await fetch(client, coll, page=page, **params)
        bodies.append(body)
        if body == "":
            return bodies
    raise AssertionError("pages never end")


@pytest.mark.parametrize("page_size", [1, 7, 50, 1000])
async def test_pages_concatenated_equal_the_unpaged_answer(client: Client, page_size: int) -> None:
    full = await fetch(client, "all", url="*.org")
    bodies = await pages_of(client, "all", url="*.org", pageSize=page_size)
    assert "".join(bodies) == full
    sizes = [len(body.splitlines()) for body in bodies[:-1]]
    assert all(size == page_size for size in sizes[:-1])
    assert 0 < sizes[-1] <= page_size
    count = await fetch(client, "all", url="*.org", pageSize=page_size, showNumPages="true")
    assert int(count) == len(sizes) == -(-len(full.splitlines()) // page_size)
    assert await fetch(client, "all", url="*.org", pageSize=page_size, page=len(sizes) + 5) == ""


async def test_json_pages_and_filtered_collapsed_pages(client: Client) -> None:
    params: dict[str, str | int | Sequence[str]] = {
        "url": "*.org",
        "filter": "!statuscode:302",
        "collapse": "digest",
        "pageSize": 6,
    }
    full = json.loads(await fetch(client, "all", output="json", **params))
    rows: list[Line] = []
    for body in (await pages_of(client, "all", output="json", **params))[:-1]:
        page = json.loads(body)
        assert page[0] == IA_FIELDS
        assert 0 < len(page) - 1 <= 6
        rows.extend(page[1:])
    assert rows == full[1:]
    assert "".join(await pages_of(client, "all", **params)) == await fetch(
        client, "all", **{k: v for k, v in params.items() if k != "pageSize"}
    )


async def test_default_page_size_and_negative_page(client: Client) -> None:
    full = await fetch(client, "all", url="*.org")
    assert await fetch(client, "all", url="*.org", page=0) == full  # fewer than 3000 lines
    assert await fetch(client, "all", url="*.org", showNumPages="true") == "1\n"
    assert await fetch(client, "all", url="*.org", page=1) == ""
    assert await fetch(client, "all", url="*.org", page=-1, pageSize=1) == full
    assert await fetch(client, "all", url="nothing.example", showNumPages="true") == "0\n"
    assert await fetch(client, "all", url="nothing.example", page=0, output="json") == ""


# -- resume keys -------------------------------------------------------------------------


async def resumed(
    client: Client, coll: str, limit: int, **params: str | int | Sequence[str]
) -> tuple[list[str], int]:
    """All lines through showResumeKey/resumeKey rounds of ``limit``, and the round count."""
    out: list[str] = []
    key: str | None = None
    for rounds in range(1, 10_000):
        extra: dict[str, str | int | Sequence[str]] = {"resumeKey": key} if key else {}
        text = await fetch(client, coll, limit=limit, showResumeKey="true", **params, **extra)
        body, sep, tail = text.partition("\n\n")
        got = body.splitlines() if sep else text.splitlines()
        assert len(got) <= limit
        out.extend(got)
        if not sep:
            return out, rounds
        assert len(got) == limit
        assert tail.endswith("\n")
        assert "\n" not in tail[:-1]
        key = tail[:-1]
    raise AssertionError("resume keys never end")


@pytest.mark.parametrize(
    ("coll", "url", "ties"), [("iana", "iana.org/*", False), ("all", "*.org", True)]
)
@pytest.mark.parametrize("limit", [1, 2, 7])
async def test_resume_keys_concatenated_equal_the_full_answer(
    client: Client, coll: str, url: str, ties: bool, limit: int
) -> None:
    full = (await fetch(client, coll, url=url)).splitlines()
    got, rounds = await resumed(client, coll, limit, url=url)
    assert got == full
    assert rounds == -(-len(full) // limit)
    # with identical (urlkey, timestamp) pairs in the answer, none was lost or repeated
    pairs = [tuple(line.split(" ")[:2]) for line in full]
    assert (len(set(pairs)) < len(pairs)) == ties


async def test_resume_key_breaks_ties_between_equal_keys(client: Client) -> None:
    full = await fetch(client, "all", url="iana.org")
    assert len(full.splitlines()) == 3  # two captures at 20140127171238
    text = await fetch(client, "all", url="iana.org", limit=2, showResumeKey="true")
    body, _, key = text.partition("\n\n")
    assert body.splitlines() == full.splitlines()[:2]
    assert key == "org%2Ciana%29%2F+20140127171238%211\n"
    assert await fetch(client, "all", url="iana.org", resumeKey=key.strip()) == "".join(
        full.splitlines(keepends=True)[2:]
    )
    # the key decoded once (pasted into a URL as printed) means the same
    decoded = "org,iana)/ 20140127171238!1"
    assert await fetch(client, "all", url="iana.org", resumeKey=decoded) == "".join(
        full.splitlines(keepends=True)[2:]
    )
    # the IA's own form skips every line of that key; without '!' none of them
    assert await fetch(client, "all", url="iana.org", resumeKey="org,iana)/ 20140127171238!") == ""
    same = await fetch(client, "all", url="iana.org", resumeKey="org,iana)/ 20140127171238")
    assert same == "".join(full.splitlines(keepends=True)[1:])


async def test_resume_key_in_json_and_with_collapse_filter_and_pages(client: Client) -> None:
    text = await fetch(client, "all", url="*.org", limit=3, showResumeKey="true", output="json")
    rows = json.loads(text)
    assert rows[0] == IA_FIELDS
    assert len(rows) == 1 + 3 + 2
    assert rows[4] == []
    assert len(rows[5]) == 1
    rest = json.loads(await fetch(client, "all", url="*.org", output="json", resumeKey=rows[5][0]))
    full = json.loads(await fetch(client, "all", url="*.org", output="json"))
    assert rows[1:4] + rest[1:] == full[1:]

    params: dict[str, str | int | Sequence[str]] = {
        "url": "*.org",
        "collapse": "timestamp:11",
        "filter": "!mimetype:image/.*",
    }
    got, _ = await resumed(client, "all", 4, **params)
    assert got == (await fetch(client, "all", **params)).splitlines()

    page = (await fetch(client, "all", url="*.org", pageSize=20, page=2)).splitlines()
    got, rounds = await resumed(client, "all", 6, url="*.org", pageSize=20, page=2)
    assert got == page
    assert rounds == 4


async def test_no_resume_key_when_nothing_is_left(client: Client) -> None:
    full = await fetch(client, "iana", url="iana.org")
    assert await fetch(client, "iana", url="iana.org", limit=3, showResumeKey="true") == full
    assert await fetch(client, "iana", url="iana.org", limit=-1, showResumeKey="true") == "".join(
        full.splitlines(keepends=True)[-1:]
    )


async def test_sequence_answers_with_its_step_and_resumes(
    make_client: MakeClient, sample_dir: Path
) -> None:
    client = await make_client(f"""
collections:
  seq:
    sequence:
      - name: first
        index: {sample_dir}/cdxj/example.cdxj
      - name: second
        index: {sample_dir}/cdxj/iana.cdxj
""")
    resp = await client.get("/seq/cdx", params={"url": "iana.org/_css/*"})
    assert resp.headers["Warcserver-Step"] == "second"
    full = (await resp.text()).splitlines()
    got, _ = await resumed(client, "seq", 5, url="iana.org/_css/*")
    assert got == full


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({}, "url"),
        ({"url": "*"}, "url"),
        ({"url": "a.org", "matchType": "any"}, "matchType"),
        ({"url": "*.a.org", "matchType": "prefix"}, "matchType"),
        ({"url": "a.org", "from": "2014x"}, "from"),
        ({"url": "a.org", "to": "201401011234567"}, "to"),
        ({"url": "a.org", "filter": "statuscode:("}, "filter"),
        ({"url": "a.org", "filter": "nosuchfield:1"}, "filter"),
        ({"url": "a.org", "filter": "9:1"}, "filter"),
        ({"url": "a.org", "collapse": "digest:x"}, "collapse"),
        ({"url": "a.org", "collapse": "digest:0"}, "collapse"),
        ({"url": "a.org", "collapse": "nosuchfield"}, "collapse"),
        ({"url": "a.org", "fl": "urlkey,nosuchfield"}, "fl"),
        ({"url": "a.org", "output": "cdxj"}, "output"),
        ({"url": "a.org", "limit": "ten"}, "limit"),
        ({"url": "a.org", "offset": "-1"}, "offset"),
        ({"url": "a.org", "page": "first"}, "page"),
        ({"url": "a.org", "pageSize": "0"}, "pageSize"),
        ({"url": "a.org", "pageSize": "100001"}, "pageSize"),
        ({"url": "a.org", "resumeKey": "garbage"}, "resumeKey"),
        ({"url": "a.org", "resumeKey": "org,a)/ 2014!x"}, "resumeKey"),
        ({"url": "a.org", "showResumeKey": "maybe"}, "showResumeKey"),
        ({"url": "a.org", "showNumPages": "maybe"}, "showNumPages"),
        ({"url": "a.org", "fastLatest": "2"}, "fastLatest"),
        ({"url": "a.org", "sort": "reverse"}, "sort"),
        ({"url": "a.org", "closest": "2014"}, "closest"),
        ({"url": "a.org", "showDupeCount": "true"}, "showDupeCount"),
        ({"url": "a.org", "limit": ["1", "2"]}, "limit"),
    ],
)
async def test_bad_input_is_a_400_naming_the_parameter(
    client: Client, params: dict[str, str | Sequence[str]], param: str
) -> None:
    assert await bad(client, "all", **params) == param


async def test_unknown_collection_is_a_404(client: Client) -> None:
    resp = await client.get("/nope/cdx", params={"url": "iana.org"})
    assert resp.status == 404


# -- cdx_toolkit, a real IA client -------------------------------------------------------


@pytest.fixture
async def gateway_url(sample_yaml: str, sorted_indexes: Path) -> AsyncIterator[str]:
    """The gateway over the sample archive on a real 127.0.0.1 port (OS-chosen)."""
    config = parse_config(sample_yaml + f"  all: {sorted_indexes}/\n")
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
def fast_cdx_toolkit(monkeypatch: pytest.MonkeyPatch) -> None:
    """cdx_toolkit waits 3 s between requests to an unknown host; not to our own server."""
    monkeypatch.setitem(
        cdx_toolkit.myrequests.retry_info,
        "127.0.0.1",
        {"next_fetch": 0, "minimum_interval": 0.0},
    )


def _toolkit_captures(endpoint: str, url: str, **kwargs: Any) -> list[list[str]]:
    fetcher = cdx_toolkit.CDXFetcher(source=endpoint)
    names = ["urlkey", "timestamp", "url", "mime", "status", "digest", "length"]
    return [[obj[name] for name in names] for obj in fetcher.iter(url, **kwargs)]


async def test_cdx_toolkit_pages_through_every_capture(
    gateway_url: str, fast_cdx_toolkit: None
) -> None:
    endpoint = f"{gateway_url}/all/cdx"
    got: list[list[str]] = []
    for domain in ("*.org", "*.com"):
        got += await asyncio.to_thread(_toolkit_captures, endpoint, domain, pageSize=9)
    expected: list[list[str]] = []
    pywb_lines: list[str] = []
    async with aiohttp.ClientSession() as session:
        for domain in ("*.org", "*.com"):
            async with session.get(endpoint, params={"url": domain}) as resp:
                expected += [line.split(" ") for line in (await resp.text()).splitlines()]
            index = f"{gateway_url}/all/index"
            async with session.get(index, params={"url": domain}) as resp:
                pywb_lines += (await resp.text()).splitlines()
        async with session.get(
            endpoint, params={"url": "*.org", "pageSize": "9", "showNumPages": "true"}
        ) as resp:
            pages = int(await resp.text())
    assert pages > 10  # cdx_toolkit had to walk many pages
    assert got == expected
    assert len(got) == len(pywb_lines) > 180
