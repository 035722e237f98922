"""The remote Memento source (gateway.sources.memento_api) against real servers.

aiohttp servers on 127.0.0.1 play Memento archives: :class:`MementoArchive`
(TimeGate 302 / 200 / pywb-style, TimeMaps, mementos with or without
navigation links) and hand-written pages (paged TimeMaps with
``rel="timemap"`` from/until and ``rel="next"``, a page linking to itself,
endless pages, a hanging server, garbage and error answers). The last tests
drive real pywb 2.10 (``pywb_wayback``) and compare with the sample archive's
own CDXJ and WARC files.
"""

from __future__ import annotations

import asyncio
import dataclasses
import doctest
import gzip
import itertools
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.cdx import cdxops
from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.cdx.memento import timestamp_to_http_date
from gateway.cdx.query import CaptureQuery, parse_query
from gateway.clients import SharedClients
from gateway.config import parse_config
from gateway.errors import ConfigError, SourceBadAnswer, SourceRefused, SourceUnavailable
from gateway.index.group import IndexGroup
from gateway.loaders.replay import ReplayLoader
from gateway.server.app import create_app
from gateway.sources import memento_api, memento_config, upstream
from gateway.sources.memento_api import (
    TIMEGATE_MAX_LIMIT,
    MementoSource,
    MementoSourceConfig,
)
from tests.conftest import free_port
from tests.sources.memento_archive import Capture, MementoArchive

AiohttpServer = Callable[..., Awaitable[TestServer]]
AiohttpClient = Callable[..., Awaitable[TestClient]]  # type: ignore[type-arg]

PAGE = "http://example.com/page"
OTHER = "http://example.com/other"


def _timestamps(count: int, seed: int) -> list[str]:
    """``count`` increasing, irregularly spaced 14-digit timestamps from 2010 on."""
    rng = random.Random(seed)
    when = datetime(2010, 1, 1, tzinfo=UTC)
    out = []
    for _ in range(count):
        when += timedelta(seconds=rng.choice([60, 3600, 86400, 40 * 86400, 300 * 86400]))
        when += timedelta(seconds=rng.randrange(0, 50_000))
        out.append(when.strftime("%Y%m%d%H%M%S"))
    return out


PAGE_TIMES = _timestamps(40, seed=7)
#: 40 captures of PAGE, one more under www. at the same second as the 20th
#: (two mementos, same urlkey and timestamp), and three of OTHER.
CAPTURES = (
    [(PAGE, ts) for ts in PAGE_TIMES]
    + [("http://www.example.com/page", PAGE_TIMES[20])]
    + [(OTHER, ts) for ts in _timestamps(3, seed=8)]
)


async def serve(aiohttp_server: AiohttpServer, app: web.Application) -> str:
    """Start ``app`` on 127.0.0.1; its base URL ``http://127.0.0.1:PORT``."""
    server = await aiohttp_server(app, host="127.0.0.1")
    return str(server.make_url("")).rstrip("/")


async def archive_source(
    aiohttp_server: AiohttpServer, clients: SharedClients, **options: Any
) -> tuple[MementoArchive, MementoSource, str]:
    archive = MementoArchive.of(CAPTURES, **options)
    base = await serve(aiohttp_server, archive.app()) + "/web/"
    config = MementoSourceConfig.from_shorthand(f"memento+{base}")
    return archive, MementoSource(config, name="remote", clients=clients), base


def query(url: str, **params: str) -> CaptureQuery:
    return parse_query({"url": [url], **{k: [v] for k, v in params.items()}})


async def lookup(source: MementoSource, q: CaptureQuery) -> list[CdxRecord]:
    return [record async for record in source.lookup(q)]


def closest_oracle(captures: list[Capture], closest: str, limit: int) -> list[str]:
    """Timestamps of the ``limit`` captures closest to ``closest``, sorted.

    Timestamps, not captures: two captures of one second are equally close,
    and either may come first.
    """
    target = cdxops.timestamp_to_seconds(closest)
    order = sorted(
        range(len(captures)),
        key=lambda i: (abs(cdxops.timestamp_to_seconds(captures[i].timestamp) - target), i),
    )
    return sorted(captures[i].timestamp for i in order[:limit])


def stamps(records: list[CdxRecord], captures: list[Capture]) -> list[str]:
    """Sorted timestamps of ``records``, each checked to be one of ``captures``."""
    known = {(c.timestamp, c.url) for c in captures}
    assert all((r.timestamp, r.url) in known for r in records)
    assert len({(r.timestamp, r.url) for r in records}) == len(records)
    return sorted(r.timestamp for r in records)


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize("module", [memento_api, memento_config, upstream])
def test_the_module_doctests_pass(module: ModuleType) -> None:
    result = doctest.testmod(module)
    assert result.failed == 0
    assert result.attempted >= 2


def test_shorthand_builds_pywb_templates() -> None:
    config = parse_config("collections:\n  m: memento+http://arc.example/web\n")
    (step,) = config.collections["m"].steps
    ((_, spec),) = step.members
    assert spec.type == "memento"
    assert spec.config == MementoSourceConfig(
        timegate_url="http://arc.example/web/{url}",
        timemap_url="http://arc.example/web/timemap/link/{url}",
        replay_url="http://arc.example/web/{timestamp}id_/{url}",
        timemap_page_budget=10,
    )


def test_mapping_form_with_templates_and_budget() -> None:
    config = parse_config(
        """
collections:
  m:
    index:
      type: memento
      timegate_url: "https://arc.example/tg/{url}"
      timemap_url: "https://arc.example/tm?url={url}"
      replay_url: "https://arc.example/raw/{timestamp}/{url}"
      timemap_page_budget: 3
"""
    )
    ((_, spec),) = config.collections["m"].steps[0].members
    assert spec.config.timemap_page_budget == 3
    assert spec.config.timemap_url == "https://arc.example/tm?url={url}"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ("timegate_url: 'http://a/tg/'", "lacks {url}"),
        ("replay_url: 'http://a/{url}'", "lacks {timestamp}"),
        ("timemap_url: 'http://a/{url}/{page}'", "unknown placeholder {page}"),
        ("timemap_url: 'ftp://a/{url}'", "not an http(s) URL template"),
        ("timemap_url: 'http://a/{url'", "not a valid template"),
        ("timemap_page_budget: 0", "at least 1 page"),
        ("timemap_page_budget: 'many'", "expected an integer"),
        ("pages: 3", "unknown key"),
    ],
)
def test_bad_mapping_forms_name_the_problem(fields: str, problem: str) -> None:
    base = {
        "timegate_url": "'http://a/{url}'",
        "timemap_url": "'http://a/timemap/link/{url}'",
        "replay_url": "'http://a/{timestamp}id_/{url}'",
    }
    key = fields.split(":")[0]
    base[key] = fields.split(":", 1)[1].strip()
    body = "".join(f"      {k}: {v}\n" for k, v in base.items())
    text = f"collections:\n  m:\n    index:\n      type: memento\n{body}"
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert problem in str(caught.value)
    assert "collections.m.index" in str(caught.value)


def test_a_plain_http_url_is_a_memento_timegate_prefix_as_in_pywb() -> None:
    config = parse_config("collections:\n  m: https://arc.example/web/\n")
    ((_, spec),) = config.collections["m"].steps[0].members
    assert spec.type == "memento"
    assert spec.config.timegate_url == "https://arc.example/web/{url}"


@pytest.mark.parametrize(
    "text", ["memento+", "memento+ftp://a/", "memento+http://", "memento+http://a/{url}"]
)
def test_bad_shorthands_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match=r"collections\.m"):
        parse_config(f"collections:\n  m: '{text}'\n")


# --------------------------------------------------------------------------- TimeMap
async def test_timemap_answer_is_complete_and_sorted(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    archive, source, base = await archive_source(aiohttp_server, clients, shuffle=True, gzip=True)
    records = await lookup(source, query(PAGE))
    key = canonical_urlkey(PAGE)
    expected = sorted((c.timestamp, c.url) for c in archive.by_key[key])
    assert [(r.timestamp, r.url) for r in records] == expected
    assert [r.sort_key() for r in records] == sorted(r.sort_key() for r in records)
    assert {r.urlkey for r in records} == {key}
    assert len(records) == 41
    for record in records:
        assert record.fields == {
            "url": record.url,
            "load_url": f"{base}{record.timestamp}id_/{record.url}",
        }
    assert archive.count("timemap") == 1
    assert archive.count("timegate") == 0


async def test_a_prefix_or_domain_query_asks_about_its_url_only(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    _, source, _ = await archive_source(aiohttp_server, clients)
    records = await lookup(source, query("example.com/page", matchType="domain"))
    assert {r.url for r in records} == {PAGE, "http://www.example.com/page"}
    assert await lookup(source, CaptureQuery(url=PAGE, key="b", end_key="a")) == []


async def test_a_widened_fuzzy_lookup_asks_the_archive_nothing(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    # A TimeMap holds one URL's mementos: it cannot stand in for a prefix
    # search, so pywb's MementoIndexSource refuses fuzzy lookups too.
    archive, source, _ = await archive_source(aiohttp_server, clients)
    widened = query(PAGE, matchType="prefix").evolve(fuzzy=True)
    assert await lookup(source, widened) == []
    assert archive.requests == []
    assert await lookup(source, query(PAGE, matchType="prefix")) != []


async def test_id_memento_uris_are_loaded_as_they_are(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    archive = MementoArchive.of(CAPTURES, id_uris=True)
    base = await serve(aiohttp_server, archive.app()) + "/web/"
    config = MementoSourceConfig(
        timegate_url=base + "{url}",
        timemap_url=base + "timemap/link/{url}",
        replay_url="http://127.0.0.1:9/elsewhere/{timestamp}/{url}",
    )
    source = MementoSource(config, name="remote", clients=clients)
    records = await lookup(source, query(OTHER))
    assert len(records) == 3
    for record in records:
        assert record.fields["load_url"] == f"{base}{record.timestamp}id_/{OTHER}"
    archive.id_uris = False
    for record in await lookup(source, query(OTHER)):
        assert (
            record.fields["load_url"] == f"http://127.0.0.1:9/elsewhere/{record.timestamp}/{OTHER}"
        )


async def test_not_archived_is_an_empty_answer(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    archive, source, _ = await archive_source(aiohttp_server, clients)
    assert await lookup(source, query("http://nothing.example/")) == []
    assert await lookup(source, query("http://nothing.example/", closest="2014", limit="1")) == []
    assert archive.count("timemap") == 1
    assert archive.count("timegate") == 1


# --------------------------------------------------------------------------- TimeGate
def _closest_values() -> list[str]:
    values = ["19990101000000", "20990101000000", PAGE_TIMES[20]]
    for before, after in zip(PAGE_TIMES[::6], PAGE_TIMES[1::6], strict=False):
        values.append(before)
        middle = (cdxops.timestamp_to_seconds(before) + cdxops.timestamp_to_seconds(after)) // 2
        values.append(datetime.fromtimestamp(middle + 1, UTC).strftime("%Y%m%d%H%M%S"))
    return values


@pytest.mark.parametrize("style", ["302", "200"])
async def test_timegate_navigation_gives_the_closest_captures(
    aiohttp_server: AiohttpServer, clients: SharedClients, style: str
) -> None:
    archive, source, _ = await archive_source(aiohttp_server, clients, timegate=style)
    captures = archive.by_key[canonical_urlkey(PAGE)]
    checked = 0
    for closest in _closest_values():
        for limit in (1, 2, 3, 5, TIMEGATE_MAX_LIMIT):
            before = len(archive.requests)
            records = await lookup(source, query(PAGE, closest=closest, limit=str(limit)))
            assert stamps(records, captures) == closest_oracle(captures, closest, limit), (
                closest,
                limit,
            )
            assert [r.sort_key() for r in records] == sorted(r.sort_key() for r in records)
            requests = archive.requests[before:]
            assert len(requests) <= limit + 2, (closest, limit, requests)
            assert requests[0][:2] == ("HEAD", "timegate")
            if limit == 1:
                assert len(requests) == 1
            checked += 1
    assert checked > 40
    assert archive.count("timemap") == 0


async def test_timegate_without_navigation_links_falls_back_to_the_timemap(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    archive, source, _ = await archive_source(aiohttp_server, clients, timegate="pywb", chain=False)
    captures = archive.by_key[canonical_urlkey(PAGE)]
    closest = PAGE_TIMES[17]
    one = await lookup(source, query(PAGE, closest=closest, limit="1"))
    assert stamps(one, captures) == closest_oracle(captures, closest, 1)
    assert archive.count("timemap") == 0
    q = query(PAGE, closest=closest, limit="4")
    records = [r async for r in cdxops.process(source.lookup(q), q)]
    assert stamps(records, captures) == closest_oracle(captures, closest, 4)
    assert archive.count("timemap") == 1


async def test_more_than_the_threshold_or_a_filter_reads_the_timemap(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    archive, source, _ = await archive_source(aiohttp_server, clients)
    for params in (
        {"closest": PAGE_TIMES[3], "limit": str(TIMEGATE_MAX_LIMIT + 1)},
        {"closest": PAGE_TIMES[3], "limit": "2", "filter": "status:200"},
        {"closest": PAGE_TIMES[3], "limit": "2", "from": "2011"},
        {"limit": "1"},
    ):
        before = archive.count("timemap")
        assert len(await lookup(source, query(PAGE, **params))) == 41
        assert archive.count("timemap") == before + 1, params
    assert archive.count("timegate") == 0


async def test_a_plain_redirect_before_the_timegate_is_followed(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    archive = MementoArchive.of(CAPTURES)
    app = archive.app()

    async def moved(request: web.Request) -> web.Response:
        target = request.raw_path.replace("/old/", "/web/", 1)
        return web.Response(status=301, headers={"Location": target})

    app.router.add_route("*", "/old/{rest:.*}", moved)
    base = await serve(aiohttp_server, app)
    source = MementoSource(
        MementoSourceConfig.from_shorthand(f"memento+{base}/old/"), name="remote", clients=clients
    )
    records = await lookup(source, query(PAGE, closest=PAGE_TIMES[5], limit="3"))
    captures = archive.by_key[canonical_urlkey(PAGE)]
    assert stamps(records, captures) == closest_oracle(captures, PAGE_TIMES[5], 3)


# --------------------------------------------------------------------------- paged TimeMaps
D = timestamp_to_http_date


def memento(year: int, url: str = "http://a.example/", rel: str = "memento") -> str:
    ts = f"{year}0101000000"
    return f'<http://arc.example/{ts}/{url}>; rel="{rel}"; datetime="{D(ts)}"'


class Pages:
    """Fixed answers by raw path, counting hits; unknown paths are 404."""

    def __init__(self) -> None:
        self.answers: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {}
        self.hits: dict[str, int] = {}

    def add(
        self, path: str, body: str, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        async def answer(request: web.Request) -> web.StreamResponse:
            return web.Response(status=status, text=body, headers=headers)

        self.answers[path] = answer

    def app(self) -> web.Application:
        async def handle(request: web.Request) -> web.StreamResponse:
            path = request.raw_path
            self.hits[path] = self.hits.get(path, 0) + 1
            answer = self.answers.get(path)
            if answer is None:
                return web.Response(status=404)
            return await answer(request)

        app = web.Application(handler_args={"handler_cancellation": True})
        app.router.add_route("*", "/{tail:.*}", handle)
        return app


def pages_source(base: str, clients: SharedClients, budget: int = 10) -> MementoSource:
    config = MementoSourceConfig(
        timegate_url=base + "/tg/{url}",
        timemap_url=base + "/tm/{url}",
        replay_url=base + "/raw/{timestamp}id_/{url}",
        timemap_page_budget=budget,
    )
    return MementoSource(config, name="remote", clients=clients)


def link_body(*links: str) -> str:
    return ",\n".join(links) + "\n"


async def test_paged_timemaps_are_followed_once_each(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    pages = Pages()
    base = await serve(aiohttp_server, pages.app())
    first = "/tm/http://a.example/"
    pages.add(
        first,
        link_body(
            f'<{base}{first}>; rel="self"; type="application/link-format"',
            '<http://a.example/>; rel="original"',
            memento(2011),
            memento(2010),
            f'</tm/p2>; rel="timemap"; from="{D("20120101000000")}"; until="{D("20131231000000")}"',
            f'<{base}/tm/p3>; rel="timemap"; from="{D("20140101000000")}"; '
            f'until="{D("20151231000000")}"',
            f'<{base}/tm/json>; rel="timemap"; type="application/json"',
        ),
    )
    pages.add(
        "/tm/p2",
        link_body(memento(2012), memento(2013), memento(2011), f'<{base}/tm/p4>; rel="next"'),
    )
    pages.add(
        "/tm/p3",
        link_body(
            memento(2014),
            f'</tm/p2>; rel="timemap"; from="{D("20120101000000")}"; until="{D("20131231000000")}"',
        ),
    )
    pages.add("/tm/p4", link_body(memento(2016), memento(2017, rel="next memento")))
    source = pages_source(base, clients)
    records = await lookup(source, query("http://a.example/"))
    assert [r.timestamp[:4] for r in records] == [
        "2010",
        "2011",
        "2012",
        "2013",
        "2014",
        "2016",
        "2017",
    ]
    assert {r.urlkey for r in records} == {"example,a)/"}
    assert pages.hits == {first: 1, "/tm/p2": 1, "/tm/p3": 1, "/tm/p4": 1}

    pages.hits.clear()
    records = await lookup(source, query("http://a.example/", **{"from": "2015"}))
    assert pages.hits == {first: 1, "/tm/p3": 1}  # p2 ends before 2015; p4 only via p2
    assert [r.timestamp[:4] for r in records] == ["2010", "2011", "2014"]


async def test_a_page_linking_to_itself_is_read_once(
    aiohttp_server: AiohttpServer, clients: SharedClients, caplog: pytest.LogCaptureFixture
) -> None:
    pages = Pages()
    base = await serve(aiohttp_server, pages.app())
    path = "/tm/http://a.example/"
    pages.add(
        path,
        link_body(
            memento(2010),
            f'<{base}{path}>; rel="self"',
            f'<{base}{path}>; rel="next"',
            f'<{path}>; rel="timemap"; from="{D("20100101000000")}"',
        ),
    )
    with caplog.at_level(logging.WARNING):
        records = await lookup(pages_source(base, clients), query("http://a.example/"))
    assert len(records) == 1
    assert pages.hits == {path: 1}
    assert not caplog.records


async def test_endless_pages_stop_at_the_budget_with_a_warning(
    aiohttp_server: AiohttpServer, clients: SharedClients, caplog: pytest.LogCaptureFixture
) -> None:
    pages = Pages()
    base = await serve(aiohttp_server, pages.app())

    async def endless(request: web.Request) -> web.Response:
        number = int(request.query.get("n", "0"))
        body = link_body(memento(2000 + number), f'<{base}/tm/x?n={number + 1}>; rel="next"')
        return web.Response(text=body)

    pages.answers["/tm/http://a.example/"] = endless
    for n in range(1, 40):
        pages.answers[f"/tm/x?n={n}"] = endless
    with caplog.at_level(logging.WARNING, logger="gateway.sources.memento_api"):
        records = await lookup(pages_source(base, clients, budget=3), query("http://a.example/"))
    assert [r.timestamp[:4] for r in records] == ["2000", "2001", "2002"]
    assert sum(pages.hits.values()) == 3
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING
    assert "timemap_page_budget=3" in warning.getMessage()


# --------------------------------------------------------------------------- errors
async def test_garbage_and_error_answers(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    pages = Pages()
    base = await serve(aiohttp_server, pages.app())
    source = pages_source(base, clients)

    async def fails(url: str, error: type[Exception], match: str, **params: str) -> Any:
        with pytest.raises(error, match=match) as caught:
            await lookup(source, query(url, **params))
        return caught.value

    pages.add("/tm/http://html.example/", "<!DOCTYPE html>\n<html>Not found</html>")
    await fails("http://html.example/", SourceBadAnswer, "not application/link-format")
    pages.add("/tm/http://nodate.example/", link_body('<http://arc/1/x>; rel="memento"'))
    await fails("http://nodate.example/", SourceBadAnswer, "none has a valid datetime")
    pages.add("/tm/http://busy.example/", "busy", status=503, headers={"Retry-After": "120"})
    busy = await fails("http://busy.example/", SourceUnavailable, "HTTP 503")
    assert busy.retry_after_s == 120.0
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    pages.add("/tm/http://slow.example/", "slow down", status=429, headers={"Retry-After": later})
    throttled = await fails("http://slow.example/", SourceUnavailable, "HTTP 429")
    assert 3000 < throttled.retry_after_s <= 3600
    pages.add("/tm/http://closed.example/", "forbidden", status=403)
    closed = await fails("http://closed.example/", SourceRefused, "HTTP 403 Forbidden")
    assert closed.status == 403  # about the URL: the client's to hear, not a fault
    pages.add(
        "/tm/http://half.example/",
        link_body(memento(2010, "http://half.example/"), f'<{base}/tm/broken>; rel="next"'),
    )
    pages.add("/tm/broken", "oops", status=500)
    await fails("http://half.example/", SourceUnavailable, "/tm/broken answered HTTP 500")
    pages.add("/tm/http://gone.example/", "", status=410)
    assert await lookup(source, query("http://gone.example/")) == []
    pages.add("/tm/http://empty.example/", "")
    assert await lookup(source, query("http://empty.example/")) == []
    pages.add(
        "/tm/http://brotli.example/", link_body(memento(2010)), headers={"Content-Encoding": "br"}
    )
    await fails("http://brotli.example/", SourceBadAnswer, "unsupported Content-Encoding")
    pages.add("/tm/http://badgz.example/", "not gzip at all", headers={"Content-Encoding": "gzip"})
    await fails("http://badgz.example/", SourceBadAnswer, "corrupt gzip body")
    pages.add(
        "/tm/http://mixed.example/",
        link_body(
            '<http://mixed.example/>; rel="original"',
            '<http://arc/x>; rel="memento"; datetime="yesterday"',
            memento(2012, "http://mixed.example/"),
        ),
    )
    (only,) = await lookup(source, query("http://mixed.example/"))
    assert only.timestamp == "20120101000000"
    pages.add("/tm/http://moved.example/", "", status=302, headers={"Location": "/tm/new"})
    pages.add("/tm/new", link_body(memento(2012, "http://moved.example/"), '<p5>; rel="next"'))
    pages.add("/tm/p5", link_body(memento(2013, "http://moved.example/")))
    moved = await lookup(source, query("http://moved.example/"))
    assert [r.timestamp[:4] for r in moved] == ["2012", "2013"]  # <p5> relative to /tm/new
    assert {r.url for r in moved} == {"http://moved.example/"}

    # TimeGate answers (closest and a small limit).
    tg = {"closest": "2014", "limit": "1"}
    pages.add("/tg/http://link.example/", "", headers={"Link": "<http://arc/x; rel=memento"})
    await fails("http://link.example/", SourceBadAnswer, "unterminated '<'", **tg)
    pages.add(
        "/tg/http://nomemento.example/", "a page", headers={"Link": '<http://a/>; rel="original"'}
    )
    await fails("http://nomemento.example/", SourceBadAnswer, "expected exactly one", **tg)
    pages.add("/tg/http://nolocation.example/", "", status=302, headers={"Vary": "accept-datetime"})
    await fails("http://nolocation.example/", SourceBadAnswer, "without Location", **tg)
    pages.add("/tg/http://tgbusy.example/", "", status=503, headers={"Retry-After": "7"})
    tg_busy = await fails("http://tgbusy.example/", SourceUnavailable, "TimeGate", **tg)
    assert tg_busy.retry_after_s == 7.0
    assert await lookup(source, query("http://unknown.example/", **tg)) == []


async def test_a_4xx_about_the_clients_url_is_a_refusal_not_a_fault(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    """What the client's URL causes is the client's error (issue 21 §2): an archive
    answering 400 for a URL it cannot take gives :class:`SourceRefused` (a 4xx,
    which no breaker counts); statuses about the archive itself stay faults."""
    pages = Pages()
    base = await serve(aiohttp_server, pages.app())
    source = pages_source(base, clients)
    tg = {"closest": "2014", "limit": "1"}

    async def refused(url: str, **params: str) -> SourceRefused:
        with pytest.raises(SourceRefused) as caught:
            await lookup(source, query(url, **params))
        return caught.value

    json_type = {"Content-Type": "application/json"}
    pages.add("/tm/http://bad.example/%3C%3E", '{"error": "invalid URL:  <>"}', 400, json_type)
    bad = await refused("http://bad.example/%3C%3E")
    assert bad.status == 400
    assert bad.source == "remote"
    assert "the archive refused the query: TimeMap " in bad.reason
    assert "answered HTTP 400 Bad Request" in bad.reason
    assert '({"error": "invalid URL: <>"})' in bad.reason  # its text, on one line
    html = {"Content-Type": "text/html"}
    pages.add("/tm/http://html.example/x", "<html>" + "x" * 5000, 400, html)
    assert (await refused("http://html.example/x")).reason.endswith("400 Bad Request")
    pages.add("/tm/http://long.example/", "", 414)
    assert (await refused("http://long.example/")).status == 414
    pages.add("/tm/http://odd.example/", "", 418)
    assert (await refused("http://odd.example/")).status == 400  # other 4xx: a 400
    pages.add("/tg/http://bad.example/tg", "", 400)
    timegate = await refused("http://bad.example/tg", **tg)
    assert "TimeGate " in timegate.reason
    assert "HTTP 400 Bad Request" in timegate.reason

    # Not the client's doing: the archive's credentials, timeout or rate, a page it linked.
    for status in (401, 407, 408, 429):
        pages.add(f"/tm/http://s{status}.example/", "", status)
        with pytest.raises(SourceUnavailable, match=f"HTTP {status}"):
            await lookup(source, query(f"http://s{status}.example/"))
    pages.add("/tm/http://paged.example/", link_body(memento(2010), f'<{base}/tm/p9>; rel="next"'))
    pages.add("/tm/p9", "no such page", 400)
    with pytest.raises(SourceUnavailable, match="/tm/p9 answered HTTP 400"):
        await lookup(source, query("http://paged.example/"))

    # Refused before anything is sent: a URL that is not http(s).
    pages.hits.clear()
    for url in ("javascript:alert(1)", "mailto:a@b.example", "urn:x:y"):
        for params in ({}, tg):
            reason = (await refused(url, **params)).reason
            assert "a Memento archive holds http(s) URLs" in reason
    assert pages.hits == {}
    # A host and port is no scheme; no scheme is http.
    assert await lookup(source, query("a.example:8080/")) == []
    assert await lookup(source, query("a.example/x")) == []


async def test_gzip_and_a_cut_off_body(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    pages = Pages()
    base = await serve(aiohttp_server, pages.app())
    body = gzip.compress(link_body(memento(2010), memento(2009)).encode())

    async def gzipped(request: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Encoding": "gzip"})

    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "100000"})
        await response.prepare(request)
        await response.write(link_body(memento(2010)).encode())
        assert request.transport is not None
        request.transport.close()
        return response

    pages.answers["/tm/http://a.example/"] = gzipped
    pages.answers["/tm/http://cut.example/"] = cut
    source = pages_source(base, clients)
    records = await lookup(source, query("http://a.example/"))
    assert [r.timestamp for r in records] == ["20090101000000", "20100101000000"]
    with pytest.raises(SourceUnavailable, match="cannot read TimeMap"):
        await lookup(source, query("http://cut.example/"))


async def test_a_timegate_refusing_head_is_asked_with_get(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    pages = Pages()
    base = await serve(aiohttp_server, pages.app())
    uri = "http://arc.example/20140101000000/http://a.example/"

    async def get_only(request: web.Request) -> web.Response:
        if request.method == "HEAD":
            return web.Response(status=405, headers={"Allow": "GET"})
        link = f'<{uri}>; rel="memento"; datetime="{D("20140101000000")}"'
        return web.Response(status=302, headers={"Location": uri, "Link": link})

    pages.answers["/tg/http://a.example/"] = get_only
    source = pages_source(base, clients)
    (record,) = await lookup(source, query("http://a.example/", closest="2014", limit="1"))
    assert record.timestamp == "20140101000000"
    assert pages.hits == {"/tg/http://a.example/": 2}


async def test_connection_refused_is_unavailable(clients: SharedClients) -> None:
    config = MementoSourceConfig.from_shorthand(f"memento+http://127.0.0.1:{free_port()}/web/")
    source = MementoSource(config, name="remote", clients=clients)
    for params in ({}, {"closest": "2014", "limit": "1"}):
        with pytest.raises(SourceUnavailable, match="Cannot connect") as caught:
            await lookup(source, query(PAGE, **params))
        assert caught.value.source == "remote"


async def test_an_answer_about_another_url_is_dropped(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    pages = Pages()
    base = await serve(aiohttp_server, pages.app())
    pages.add(
        "/tm/http://a.example/",
        link_body('<http://b.example/>; rel="original"', memento(2010, "http://b.example/")),
    )
    assert await lookup(pages_source(base, clients), query("http://a.example/")) == []


async def test_a_hanging_archive_times_out_in_the_group_and_is_cancelled(
    aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    pages = Pages()

    async def hang(request: web.Request) -> web.Response:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return web.Response()  # pragma: no cover

    pages.answers["/tm/http://a.example/"] = hang
    base = await serve(aiohttp_server, pages.app())
    group = IndexGroup([pages_source(base, clients)], timeout_s=0.3)
    began = time.monotonic()
    answer = await group.lookup(query("http://a.example/"))
    elapsed = time.monotonic() - began
    assert [r async for r in answer] == []
    assert answer.failed_all
    assert answer.errors == {"remote": "timeout after 0.3 s"}
    assert started.is_set()
    assert elapsed < 0.3 * 10
    await asyncio.wait_for(cancelled.wait(), timeout=5)


# --------------------------------------------------------------------------- loading
async def test_resource_api_loads_a_capture_through_the_replay_loader(
    aiohttp_server: AiohttpServer, aiohttp_client: AiohttpClient
) -> None:
    archive = MementoArchive.of(CAPTURES)
    base = await serve(aiohttp_server, archive.app())
    app = create_app(parse_config(f"collections:\n  remote: memento+{base}/web/\n"))
    client = await aiohttp_client(app)
    closest = PAGE_TIMES[9]
    resp = await client.get("/remote/resource", params={"url": PAGE, "closest": closest})
    assert resp.status == 200, await resp.text()
    body = await resp.read()
    warc_head, _, rest = body.partition(b"\r\n\r\n")
    http_head, _, payload = rest.partition(b"\r\n\r\n")
    assert payload == f"payload of {PAGE} at {closest}".encode()
    assert b"WARC-Type: response" in warc_head
    assert f"WARC-Target-URI: {PAGE}".encode() in warc_head
    assert http_head.startswith(b"HTTP/1.1 200")
    assert resp.headers["Memento-Datetime"] == timestamp_to_http_date(closest)
    cdx = resp.headers["Warcserver-Cdx"].split(" ", 2)
    assert cdx[1] == closest
    assert json.loads(cdx[2])["load_url"] == f"{base}/web/{closest}id_/{PAGE}"


def test_the_source_offers_a_replay_loader_for_its_own_captures() -> None:
    config = MementoSourceConfig.from_shorthand("memento+http://127.0.0.1:9/web/")
    source = MementoSource(config, name="remote", clients=SharedClients())
    (loader,) = source.resource_loaders()
    assert isinstance(loader, ReplayLoader)
    mine = CdxRecord("k", "20140101000000", {"load_url": "http://x/", "source-coll": "remote"})
    theirs = CdxRecord("k", "20140101000000", {"load_url": "http://x/", "source-coll": "other"})
    assert loader.accepts(mine)
    assert not loader.accepts(theirs)
    assert "memento" in source.describe()
    assert dataclasses.replace(config, timemap_page_budget=2).timemap_page_budget == 2


# --------------------------------------------------------------------------- real pywb
#: iana.org URLs of the sample archive: 2 to 16 captures each, revisits among
#: them, http and https captures under one urlkey, and two captures of one
#: second (``http://iana.org`` and ``http://www.iana.org/``) under ``org,iana)/``.
PYWB_URLS = (
    "http://www.iana.org/",
    "http://www.iana.org/_css/2013.1/screen.css",
    "http://www.iana.org/_js/2013.1/jquery.js",
    "http://www.iana.org/_img/2013.1/iana-logo-homepage.png",
    "http://www.iana.org/_css/2013.1/fonts/Inconsolata.otf",
    "http://www.iana.org/domains/root/db",
)


def local_records(sample_dir: Path, url: str) -> list[CdxRecord]:
    """The lines for ``url``'s urlkey in cdxj/*.cdxj (the files pywb's collection reads)."""
    key = canonical_urlkey(url).encode()
    return [
        CdxRecord.parse(line)
        for path in sorted((sample_dir / "cdxj").glob("*.cdxj"))
        for line in path.read_bytes().splitlines()
        if line.startswith(key + b" ")
    ]


def local_captures(sample_dir: Path, url: str) -> list[tuple[str, str, str]]:
    """(urlkey, timestamp, url) of :func:`local_records`, sorted."""
    return sorted((r.urlkey, r.timestamp, r.url) for r in local_records(sample_dir, url))


def pywb_yaml(pywb_wayback: str, sample_dir: Path) -> str:
    return (
        "collections:\n"
        f"  remote: memento+{pywb_wayback}/pywb/\n"
        "  local:\n"
        f"    index: {sample_dir}/cdxj/\n"
        f"    resource: {sample_dir}/warcs/\n"
    )


async def index_lines(client: TestClient, coll: str, **params: str) -> list[dict[str, str]]:  # type: ignore[type-arg]
    resp = await client.get(f"/{coll}/index", params={"output": "json", **params})
    assert resp.status == 200, (coll, params, await resp.text())
    assert "ResErrors" not in resp.headers, resp.headers["ResErrors"]
    return [json.loads(line) for line in (await resp.text()).splitlines()]


def triples(lines: list[dict[str, str]]) -> list[tuple[str, str, str]]:
    return sorted((line["urlkey"], line["timestamp"], line["url"]) for line in lines)


@pytest.mark.peer
async def test_pywb_timemaps_give_the_captures_of_the_local_index(
    aiohttp_client: AiohttpClient, pywb_wayback: str, sample_dir: Path
) -> None:
    client = await aiohttp_client(create_app(parse_config(pywb_yaml(pywb_wayback, sample_dir))))
    total = 0
    for url in PYWB_URLS:
        expected = local_captures(sample_dir, url)
        remote = await index_lines(client, "remote", url=url)
        assert triples(remote) == expected, url
        assert [(r["urlkey"], r["timestamp"]) for r in remote] == sorted(
            (r["urlkey"], r["timestamp"]) for r in remote
        )
        assert all(r["load_url"].startswith(f"{pywb_wayback}/pywb/") for r in remote)
        assert all(r["source"] == "remote" for r in remote)
        total += len(remote)
    assert total >= 40
    assert await index_lines(client, "remote", url="http://www.iana.org/no/such/page") == []


@pytest.mark.peer
async def test_pywb_timegate_gives_the_closest_capture_of_the_local_index(
    aiohttp_client: AiohttpClient, pywb_wayback: str, sample_dir: Path
) -> None:
    client = await aiohttp_client(create_app(parse_config(pywb_yaml(pywb_wayback, sample_dir))))
    compared = 0
    for url in PYWB_URLS:
        captures = local_captures(sample_dir, url)
        times = sorted({ts for _, ts, _ in captures})
        candidates = [times[0], times[-1], times[len(times) // 2], "19990101000000"]
        for before, after in itertools.pairwise(times):
            seconds = cdxops.timestamp_to_seconds(before) + 1
            if seconds < cdxops.timestamp_to_seconds(after) - 1:
                candidates.append(datetime.fromtimestamp(seconds, UTC).strftime("%Y%m%d%H%M%S"))
        for closest in candidates[:8]:
            params = {"url": url, "closest": closest, "limit": "1"}
            # A TimeGate selects among the mementos it can replay: pywb skips
            # 3xx captures redirecting to their own urlkey (all 3xx here).
            local_params = {**params, "filter": "!status:30"}
            local = triples(await index_lines(client, "local", **local_params))
            remote = triples(await index_lines(client, "remote", **params))
            assert len(remote) == 1, (url, closest)
            assert remote[0][:2] == local[0][:2], (url, closest)
            if sum(1 for _, ts, _ in captures if ts == local[0][1]) == 1:
                assert remote == local, (url, closest)  # one capture that second
            compared += 1
    assert compared >= 25


def payload_of(record: bytes) -> tuple[bytes, bytes]:
    """(HTTP status line, payload) of a WARC response record served by /resource."""
    _warc_head, _, rest = record.partition(b"\r\n\r\n")
    http_head, _, payload = rest.partition(b"\r\n\r\n")
    return http_head.split(b"\r\n", 1)[0], payload


@pytest.mark.peer
async def test_pywb_mementos_load_with_the_payloads_of_the_local_warcs(
    aiohttp_client: AiohttpClient, pywb_wayback: str, sample_dir: Path
) -> None:
    client = await aiohttp_client(create_app(parse_config(pywb_yaml(pywb_wayback, sample_dir))))
    compared = 0
    for url in PYWB_URLS:
        captures = local_captures(sample_dir, url)
        # Not the 3xx captures: they redirect to their own urlkey and are skipped.
        times = sorted(
            {r.timestamp for r in local_records(sample_dir, url) if not r.status.startswith("3")}
        )
        for closest, limit in ((times[0], "1"), (times[-1], "5"), (times[len(times) // 2], "")):
            params = {"url": url, "closest": closest}
            if limit:
                params["limit"] = limit
            local = await client.get("/local/resource", params=params)
            remote = await client.get("/remote/resource", params=params)
            assert local.status == 200, await local.text()
            assert remote.status == 200, (url, closest, await remote.text())
            assert remote.headers["Content-Type"] == "application/warc-record"
            assert remote.headers["Memento-Datetime"] == local.headers["Memento-Datetime"]
            if sum(1 for _, ts, _ in captures if ts == closest) == 1:
                # Two captures of one second (http://iana.org, www.iana.org) are equally
                # close; either may be served, pywb then picks www.iana.org's payload.
                assert remote.headers["WARC-Target-URI"] == local.headers["WARC-Target-URI"]
            remote_status, remote_payload = payload_of(await remote.read())
            local_status, local_payload = payload_of(await local.read())
            assert remote_status == local_status, (url, closest)
            assert remote_payload == local_payload, (url, closest)
            assert remote_payload, (url, closest)
            assert int(remote.headers["Content-Length"]) > len(remote_payload)
            compared += 1
    assert compared == 3 * len(PYWB_URLS)
