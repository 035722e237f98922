"""pywb parity found missing by the differential run, and the deliberate differences.

The same answers as pywb 2.10's warcserver over the sample archive:
``closest`` shorter than 14 digits (warcio pads it toward the end of its
period), ``resolveRevisits``, ``collapseTime``, the mode listing and
``list_sources``. Then the four documented deliberate differences (README,
"Deliberate differences from pywb"), each shown against pywb itself.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import aiohttp
import pytest

from tests.api.test_differential import _compare_index_answers
from tests.conftest import MakeClient, free_port

pytestmark = pytest.mark.peer


async def _pywb_text(url: str, method: str = "GET", **kwargs: object) -> str:
    """The body of pywb's 200 answer."""
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, **kwargs) as resp,  # type: ignore[arg-type]
    ):
        assert resp.status == 200, (url, resp.status)
        return await resp.text()


async def test_short_closest_resolve_revisits_and_collapse_time_answer_as_pywb(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str
) -> None:
    client = await make_client(sample_yaml)
    queries = [
        ("pywb", {"url": "http://www.iana.org/", "closest": closest})
        for closest in ("2014", "201401", "2014012620", "20140127", "2013", "2015")
    ]
    queries += [
        ("iana", {"url": "iana.org", "matchType": "host", "closest": "20140126", "limit": "5"}),
        ("pywb", {"url": "example.com", "resolveRevisits": "true"}),
        ("pywb", {"url": "example.com", "resolveRevisits": "true", "output": "json"}),
        ("pywb", {"url": "http://www.iana.org/", "resolveRevisits": "1", "closest": "2014"}),
        ("iana", {"url": "iana.org", "matchType": "host", "resolveRevisits": "1", "limit": "30"}),
        (
            "iana",
            {"url": "iana.org", "matchType": "host", "resolveRevisits": "true",
             "filter": "mime:text/css"},
        ),
        ("iana", {"url": "iana.org", "matchType": "host", "collapseTime": "10", "limit": "20"}),
        ("iana", {"url": "iana.org", "matchType": "host", "collapseTime": "12"}),
        ("iana", {"url": "iana.org", "matchType": "host", "collapseTime": "8", "output": "text"}),
        ("pywb", {"url": "http://www.iana.org/", "collapseTime": "4"}),
    ]  # fmt: skip
    answered = await _compare_index_answers(client, pywb_warcserver, queries)
    assert answered == len(queries)


@pytest.mark.parametrize("coll", ["pywb", "iana", "example", "zip"])
async def test_mode_listing_and_list_sources_answer_as_pywb(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str, coll: str
) -> None:
    client = await make_client(sample_yaml)
    for method, path in (("GET", ""), ("POST", "/postreq"), ("GET", "/list_sources")):
        expected = json.loads(
            await _pywb_text(f"{pywb_warcserver}/{coll}{path}", method, data=b"x")
        )
        resp = await client.request(method, f"/{coll}{path}", data=b"x")
        assert resp.status == 200
        assert resp.headers["Access-Control-Allow-Origin"] == "*"
        assert await resp.json() == expected, (method, path)
    assert (await client.get("/nope")).status == 404
    assert (await client.get("/nope/list_sources")).status == 404


async def test_list_sources_names_every_member_of_every_step(
    make_client: MakeClient, sample_dir: Path
) -> None:
    s = sample_dir
    client = await make_client(f"""
collections:
  seq:
    sequence:
      - index: {s}/cdxj/
      - index_group:
          one: {s}/cdxj/iana.cdxj
          web: $live
          far: cdx+http://127.0.0.1:1/cdx
          arch: memento+http://127.0.0.1:1/web/
          keys: redis://127.0.0.1:1/0/coll:*:cdxj
""")
    resp = await client.get("/seq/list_sources")
    assert await resp.json() == {
        "sources": {
            "step1": "file_dir",
            "one": "file",
            "web": "live",
            "far": "cdx",
            "arch": "memento",
            "keys": "redis-multikey",
        }
    }


# -- deliberate differences ------------------------------------------------------------


async def test_ties_between_files_of_one_directory_follow_the_file_names(
    make_client: MakeClient, tmp_path: Path
) -> None:
    # pywb orders equal (urlkey, timestamp) lines by their text: "b.cdxj"'s
    # line ("...{"a": ...") would come first. The gateway: by file name.
    (tmp_path / "a.cdxj").write_text(
        'com,example)/ 20140101000000 {"url": "http://example.com/", "z": "1"}\n'
    )
    (tmp_path / "b.cdxj").write_text(
        'com,example)/ 20140101000000 {"a": "1", "url": "http://example.com/"}\n'
    )
    client = await make_client(f"collections:\n  d:\n    index: {tmp_path}/\n")
    resp = await client.get("/d/index", params={"url": "http://example.com/", "output": "json"})
    sources = [json.loads(line)["source"] for line in (await resp.text()).splitlines()]
    assert sources == ["d:a.cdxj", "d:b.cdxj"]
    assert sorted(("a", "b"), key=lambda f: (tmp_path / f"{f}.cdxj").read_text()) == ["b", "a"]


async def test_limit_zero_answers_no_lines_where_pywb_answers_all(
    make_client: MakeClient, sample_yaml: str, pywb_warcserver: str
) -> None:
    client = await make_client(sample_yaml)
    params = {"url": "example.com", "limit": "0"}
    theirs = await _pywb_text(f"{pywb_warcserver}/pywb/index", params=params)
    assert len(theirs.splitlines()) == 4  # pywb: 0 means no limit
    resp = await client.get("/pywb/index", params=params)
    assert resp.status == 200
    assert await resp.text() == ""


async def test_a_failed_live_fetch_is_a_404_naming_the_failure(make_client: MakeClient) -> None:
    client = await make_client(
        "collections:\n  live:\n    index: {type: live, allow_private_networks: true}\n"
    )
    url = f"http://127.0.0.1:{free_port()}/page"
    resp = await client.get("/live/resource", params={"url": url})
    assert resp.status == 404
    body = await resp.json()
    assert "could be loaded" in body["message"]
    (reason,) = body["errors"].values()
    assert f"live fetch of {url} failed" in reason


async def test_the_unsorted_post_index_is_binary_searched_key_by_key(
    make_client: MakeClient,
    sample_yaml: str,
    pywb_warcserver: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # post-test.cdxj is not sorted. pywb's exact lookup of its first key
    # reads on past the key and answers all three POST lines, and finds
    # nothing for the other two; the gateway answers each key its own line
    # and warns that the file is not sorted.
    client = await make_client(sample_yaml)
    keys = ["foo=bar&test=abc", "a=1&b=[]&c=3", "data=^&foo=bar"]
    for position, key in enumerate(keys):
        params = {
            "url": f"http://httpbin.org/post?__wb_method=post&{key}",
            "fl": "urlkey",
            "allowFuzzy": "0",
        }
        theirs = (await _pywb_text(f"{pywb_warcserver}/pywb/index", params=params)).splitlines()
        with caplog.at_level(logging.WARNING):
            resp = await client.get("/pywb/index", params=params)
            ours = (await resp.text()).splitlines()
        assert len(ours) == 1
        assert key in ours[0]
        assert len(theirs) == (3 if position == 0 else 0)
    assert "post-test.cdxj is not sorted" in caplog.text
