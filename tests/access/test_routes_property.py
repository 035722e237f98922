"""A property over random rule sets and every route: no excluded capture is
reachable, and what a search lists is what a load serves.

Each example writes a random ``.aclj`` file (prefix and exact rules, dated
rules, every access type) over the sample's ``iana.cdxj``, serves it with
``default_access`` drawn too, and asks, for a few of its URLs: the Index API
(exact and domain), the IA CDX API, TimeMaps (link and CDXJ), the TimeGate,
raw mementos at every capture's time, the Resource API at every capture's
time, and the page. The oracle is :mod:`tests.access.acl_oracle`.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import parse_config
from gateway.server.app import create_app
from tests.access.acl_oracle import OracleRule, decide

SAMPLE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pywb-sample"


def _captures() -> dict[str, list[tuple[str, str, bool]]]:
    """url -> [(urlkey, timestamp, is_revisit)] of iana.cdxj: every capture of
    the url's key (one key may be captured under several URLs)."""
    by_key: dict[str, list[tuple[str, str, bool]]] = {}
    keys: dict[str, str] = {}
    for line in (SAMPLE / "cdxj" / "iana.cdxj").read_text().splitlines():
        urlkey, timestamp, block = line.split(" ", 2)
        fields = json.loads(block)
        keys[fields["url"]] = urlkey
        by_key.setdefault(urlkey, []).append(
            (urlkey, timestamp, fields.get("mime") == "warc/revisit")
        )
    return {url: by_key[key] for url, key in keys.items()}


CAPTURES = _captures() if SAMPLE.is_dir() else {}
URLS = sorted(CAPTURES)
PREFIXES = sorted(
    {key[:n] for captures in CAPTURES.values() for key, _, _ in captures for n in (10, 14, 20, 40)}
    | {"org,iana)/", "org,", "*,"}
)

RULES = st.lists(
    st.builds(
        OracleRule,
        key=st.sampled_from(PREFIXES or ["org,"]),
        access=st.sampled_from(["allow", "block", "exclude", "allow_ignore_embargo"]),
        exact=st.just(False),
        before=st.sampled_from([None, None, "20140126200700", "20140126201000"]),
    )
    | st.builds(
        OracleRule,
        key=st.sampled_from(sorted({k for c in CAPTURES.values() for k, _, _ in c}) or ["org,"]),
        access=st.sampled_from(["allow", "block", "exclude"]),
        exact=st.just(True),
    ),
    max_size=8,
)
TIMESTAMP_IN_MEMENTO = re.compile(r"/(\d{14})id_/")


def _ts(http_date: str) -> str:
    return parsedate_to_datetime(http_date).strftime("%Y%m%d%H%M%S")


async def _check(rules: list[OracleRule], default: str, urls: list[str], tmp: Path) -> None:
    acl = tmp / "rules.aclj"
    acl.write_text("".join(rule.line() + "\n" for rule in rules))
    config = (
        f"collections:\n  iana:\n    index: {SAMPLE}/cdxj/iana.cdxj\n"
        f"    resource: {SAMPLE}/warcs/\n    acl_paths: {acl}\n    default_access: {default}\n"
    )
    async with TestClient(TestServer(create_app(parse_config(config)))) as client:
        listed = await _listed(client, "/iana/index", {"url": "iana.org", "matchType": "domain"})
        for (urlkey, timestamp), access in listed.items():
            assert access == decide(rules, urlkey, timestamp, default=default) != "exclude"
        for url in urls:
            await _check_url(client, rules, default, url)


async def _listed(
    client: TestClient,  # type: ignore[type-arg]
    path: str,
    params: dict[str, str],
) -> dict[tuple[str, str], str]:
    resp = await client.get(path, params=params)
    assert resp.status == 200, await resp.text()
    listed = {}
    for line in (await resp.text()).splitlines():
        urlkey, timestamp, block = line.split(" ", 2)
        listed[(urlkey, timestamp)] = json.loads(block)["access"]
    return listed


async def _check_url(client: TestClient, rules: list[OracleRule], default: str, url: str) -> None:  # type: ignore[type-arg]
    captures = CAPTURES[url]
    want = {ts: decide(rules, key, ts, default=default) for key, ts, _ in captures}
    visible = {ts for ts, access in want.items() if access != "exclude"}
    revisits = {ts for _, ts, revisit in captures if revisit}
    # search: the Index API, the IA CDX API, TimeMaps, the page
    listed = await _listed(client, "/iana/index", {"url": url})
    assert {ts for _, ts in listed} == visible, url
    assert all(listed[(k, ts)] == want[ts] for k, ts in listed)
    resp = await client.get("/iana/cdx", params={"url": url, "output": "json", "fl": "timestamp"})
    rows = json.loads(await resp.text() or "[]")
    assert {row[0] for row in rows[1:]} == visible, url
    for fmt in ("link", "cdxj"):
        resp = await client.get(f"/iana/timemap/{fmt}/{url}")
        text = await resp.text()
        found = (
            set(TIMESTAMP_IN_MEMENTO.findall(text))
            if fmt == "link"
            else {line.split(" ", 2)[1] for line in text.splitlines() if line}
        )
        assert found == visible if visible else resp.status == 404, (fmt, url, resp.status)
    resp = await client.get("/iana/", params={"url": url})
    page = await resp.text()
    assert not [ts for ts in set(want) - visible if ts in page], url
    # load: the TimeGate, raw mementos and the Resource API at every capture's time
    resp = await client.get(f"/iana/timegate/{url}", allow_redirects=False)
    if not visible:
        assert resp.status == 404, url
    else:
        assert resp.status == 302
        assert TIMESTAMP_IN_MEMENTO.search(resp.headers["Location"]).group(1) in visible  # type: ignore[union-attr]
    for ts in want:
        for path, params in (
            (f"/iana/{ts}id_/{url}", {}),
            ("/iana/resource", {"url": url, "closest": ts}),
        ):
            resp = await client.get(path, params=params, allow_redirects=False)
            body = await resp.text() if resp.status >= 400 else ""
            await resp.release()
            if resp.status in (200, 302):
                if resp.status == 302:  # to the URI-M of the capture served
                    served = TIMESTAMP_IN_MEMENTO.search(resp.headers["Location"]).group(1)  # type: ignore[union-attr]
                else:
                    served = _ts(resp.headers["Memento-Datetime"])
                assert want.get(served) == "allow", (path, ts, served)
            elif resp.status == 451:
                assert "block" in want.values(), (path, ts)
            else:
                assert resp.status == 404, (path, ts, resp.status, body)
                # nothing listed, or what is listed cannot load (a revisit's original denied)
                assert not visible or revisits & visible or "block" in want.values(), (
                    path,
                    ts,
                    body,
                )
            if (
                want[ts] == "allow"
                and ts in visible
                and path == "/iana/resource"
                and ts not in revisits
            ):
                assert resp.status in (200, 451), (url, ts, resp.status, body)


@pytest.mark.skipif(not SAMPLE.is_dir(), reason="../shared/data/pywb-sample is missing")
@settings(max_examples=25, deadline=None)
@given(
    rules=RULES,
    default=st.sampled_from(["allow", "block", "exclude"]),
    urls=st.lists(st.sampled_from(URLS or ["-"]), min_size=1, max_size=3, unique=True),
)
def test_no_route_reaches_an_excluded_capture_and_search_and_load_agree(
    rules: list[OracleRule], default: str, urls: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_check(rules, default, urls, Path(tmp)))
