"""index_group deadlines, honest errors, circuit breaker and cancellation.

Real aiohttp servers on 127.0.0.1 play a hanging archive, one that accepts a
connection and never answers, one that answers garbage, one that answers
503 with Retry-After, one that refuses every query with a 400 (the client's
error: it never opens a breaker) and one that answers 401. Timing assertions
use margins of 5x or more.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.config import parse_config
from gateway.server.app import create_app
from tests.conftest import MakeClient

TIMEOUT_S = 0.3
MARGIN = 5


@dataclass
class Upstream:
    """A stand-in remote CDX archive with switchable behaviour."""

    mode: str = "hang"
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    requests: int = 0


async def _upstream_app(upstream: Upstream, sample_dir: Path) -> web.Application:
    lines = (sample_dir / "cdxj" / "example.cdxj").read_bytes()

    async def cdx(request: web.Request) -> web.StreamResponse:
        upstream.requests += 1
        upstream.started.set()
        if upstream.mode == "hang":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                upstream.cancelled.set()
                raise
        if upstream.mode == "garbage":
            return web.Response(body=b"<html>\x00\xffnot an index</html>\n")
        if upstream.mode == "busy":
            return web.Response(status=503, headers={"Retry-After": "120"})
        if upstream.mode == "refuse":
            return web.Response(status=400, text="Invalid URL: " + request.query.get("url", ""))
        if upstream.mode == "unauthorized":
            return web.Response(status=401, text="who are you?")
        return web.Response(body=lines, content_type="text/x-cdxj")

    app = web.Application()
    app.router.add_get("/cdx", cdx)
    return app


@pytest.fixture
async def upstream(
    sample_dir: Path,
) -> AsyncIterator[tuple[Upstream, str]]:
    state = Upstream()
    server = TestServer(
        await _upstream_app(state, sample_dir), host="127.0.0.1", handler_cancellation=True
    )
    await server.start_server()
    try:
        yield state, f"http://127.0.0.1:{server.port}/cdx"
    finally:
        await server.close()


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A TCP server that accepts connections and never reads or writes."""
    writers: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


Client = TestClient[web.Request, web.Application]


def _group(sample_dir: Path, remote: str, timeout_s: float = TIMEOUT_S) -> str:
    return (
        f"collections:\n  g:\n    index_group:\n"
        f"      local: {sample_dir}/cdxj/iana.cdxj\n"
        f"      remote: cdx+{remote}\n"
        f"    timeout: {timeout_s}\n"
    )


async def test_hanging_member_answers_within_timeout_and_is_cancelled(
    make_client: MakeClient, sample_dir: Path, upstream: tuple[Upstream, str]
) -> None:
    state, url = upstream
    client = await make_client(_group(sample_dir, url))
    started = time.monotonic()
    resp = await client.get("/g/index", params={"url": "iana.org"})
    elapsed = time.monotonic() - started
    assert resp.status == 200
    assert len((await resp.text()).splitlines()) == 1  # the local member's capture
    assert elapsed < TIMEOUT_S * MARGIN
    errors = json.loads(resp.headers["ResErrors"])
    assert errors == {"remote": f"timeout after {TIMEOUT_S:g} s"}
    outcomes = json.loads(resp.headers["Warcserver-Source-Outcomes"])
    assert outcomes == {"local": "ok: 1 capture", "remote": f"timeout after {TIMEOUT_S:g} s"}
    # The upstream request was cancelled, not left running.
    await asyncio.wait_for(state.cancelled.wait(), TIMEOUT_S * MARGIN)


async def test_a_lone_hanging_source_times_out_and_is_cancelled(
    make_client: MakeClient, upstream: tuple[Upstream, str]
) -> None:
    # One member streams its answer: the deadline covers its first record, and
    # the timer is armed only once the source has to wait (aggregate._first_within).
    state, url = upstream
    client = await make_client(
        f"collections:\n  g:\n    index: cdx+{url}\n    timeout: {TIMEOUT_S}\n"
    )
    started = time.monotonic()
    resp = await client.get("/g/index", params={"url": "iana.org"})
    assert time.monotonic() - started < TIMEOUT_S * MARGIN
    assert resp.status == 503
    body = await resp.json()
    assert body["errors"] == {"g": f"timeout after {TIMEOUT_S:g} s"}
    await asyncio.wait_for(state.cancelled.wait(), TIMEOUT_S * MARGIN)


async def test_member_that_never_answers_times_out(
    make_client: MakeClient, sample_dir: Path, silent_port: int
) -> None:
    client = await make_client(_group(sample_dir, f"http://127.0.0.1:{silent_port}/cdx"))
    started = time.monotonic()
    resp = await client.get("/g/index", params={"url": "iana.org"})
    assert time.monotonic() - started < TIMEOUT_S * MARGIN
    assert resp.status == 200
    assert "timeout after" in json.loads(resp.headers["ResErrors"])["remote"]


async def test_garbage_answer_is_reported(
    make_client: MakeClient, sample_dir: Path, upstream: tuple[Upstream, str]
) -> None:
    state, url = upstream
    state.mode = "garbage"
    client = await make_client(_group(sample_dir, url))
    resp = await client.get("/g/index", params={"url": "example.com/?example=1"})
    assert resp.status == 200
    assert "remote" in json.loads(resp.headers["ResErrors"])


async def test_all_members_failed_is_503_with_each_reason(
    make_client: MakeClient, sample_dir: Path, upstream: tuple[Upstream, str], silent_port: int
) -> None:
    _, url = upstream
    client = await make_client(
        f"collections:\n  g:\n    index_group:\n      a: cdx+{url}\n"
        f"      b: cdx+http://127.0.0.1:{silent_port}/cdx\n    timeout: {TIMEOUT_S}\n"
    )
    resp = await client.get("/g/index", params={"url": "example.com/?example=1"})
    assert resp.status == 503
    body = await resp.json()
    assert set(body["errors"]) == {"a", "b"}
    assert all("timeout after" in reason for reason in body["errors"].values())


async def test_retry_after_opens_the_breaker_and_the_skip_is_reported(
    make_client: MakeClient, sample_dir: Path, upstream: tuple[Upstream, str]
) -> None:
    state, url = upstream
    state.mode = "busy"
    client = await make_client(_group(sample_dir, url))
    first = await client.get("/g/index", params={"url": "iana.org"})
    assert "503" in json.loads(first.headers["ResErrors"])["remote"]
    requests_before = state.requests
    second = await client.get("/g/index", params={"url": "iana.org"})
    assert second.status == 200
    assert "circuit breaker" in json.loads(second.headers["ResErrors"])["remote"]
    assert state.requests == requests_before  # skipped: not asked again
    status = await (await client.get("/_status")).json()
    breaker = status["breakers"]["g"]["g"]["remote"]
    assert breaker["state"] == "open"
    assert breaker["retry_in_s"] > 60


async def test_repeated_timeouts_open_the_breaker(
    make_client: MakeClient, sample_dir: Path, upstream: tuple[Upstream, str]
) -> None:
    _, url = upstream
    client = await make_client(_group(sample_dir, url, timeout_s=0.1))
    for _ in range(3):
        resp = await client.get("/g/index", params={"url": "iana.org"})
        assert "timeout after" in json.loads(resp.headers["ResErrors"])["remote"]
    started = time.monotonic()
    resp = await client.get("/g/index", params={"url": "iana.org"})
    assert time.monotonic() - started < 0.1 * MARGIN
    assert "circuit breaker" in json.loads(resp.headers["ResErrors"])["remote"]


async def test_client_disconnect_cancels_upstream_calls(
    sample_dir: Path, upstream: tuple[Upstream, str]
) -> None:
    state, url = upstream
    app = create_app(parse_config(_group(sample_dir, url, timeout_s=30)))
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(TimeoutError):
                async with session.get(
                    f"http://127.0.0.1:{port}/g/index",
                    params={"url": "iana.org"},
                    timeout=aiohttp.ClientTimeout(total=0.3),
                ):
                    pass
        await asyncio.wait_for(state.cancelled.wait(), 0.3 * MARGIN * 2)
    finally:
        await runner.cleanup()


async def test_a_hanging_record_load_is_cut_off_by_load_timeout(
    make_client: MakeClient, aiohttp_server: Callable[..., Awaitable[TestServer]]
) -> None:
    line = (
        'com,example)/ 20140127171200 {"url": "http://example.com/", "mime": "text/html", '
        '"status": "200"}\n'
    )
    cancelled = asyncio.Event()

    async def cdx(request: web.Request) -> web.Response:
        return web.Response(text=line, content_type="text/x-cdxj")

    async def replay(request: web.Request) -> web.Response:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    app = web.Application()
    app.router.add_get("/coll-cdx", cdx)
    app.router.add_get("/coll/{tail:.*}", replay)
    server = await aiohttp_server(app)  # pytest-aiohttp enables handler_cancellation
    client = await make_client(
        f"collections:\n  slow:\n    index: cdx+http://127.0.0.1:{server.port}/coll-cdx\n"
        f"    load_timeout: {TIMEOUT_S}\n"
    )
    started = time.monotonic()
    resp = await client.get("/slow/resource", params={"url": "http://example.com/"})
    assert time.monotonic() - started < TIMEOUT_S * MARGIN
    assert resp.status == 503  # the capture exists; its archive did not answer in time
    reasons = list((await resp.json())["errors"].values())
    assert any(reason.startswith(f"load timeout after {TIMEOUT_S:g} s") for reason in reasons)
    await asyncio.wait_for(cancelled.wait(), TIMEOUT_S * MARGIN)


def _long_index(path: Path, lines: int = 12_000) -> Path:
    """A sorted CDXJ of ``lines`` captures of example.com pages (~1.3 MB: a scan of
    the whole domain passes many 64 KiB checkpoints)."""
    out = [
        f'com,example)/p{i:05d} 20140101000000 {{"url": "http://example.com/p{i:05d}", '
        f'"mime": "text/html", "status": "200", "length": "100", "offset": "{i * 100}", '
        f'"filename": "big.warc.gz"}}'
        for i in range(lines)
    ]
    path.write_text("\n".join(out) + "\n", "utf-8")
    return path


async def test_local_members_that_must_wait_go_on_in_tasks(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    # Local members start in the request's task; one whose scan reaches a
    # checkpoint goes on in a task of the group, and every capture arrives.
    big = _long_index(tmp_path / "big.cdxj")
    client = await make_client(
        f"collections:\n  g:\n    index_group:\n      big: {big}\n"
        f"      also: {big}\n      iana: {sample_dir}/cdxj/iana.cdxj\n"
    )
    resp = await client.get("/g/index", params={"url": "example.com", "matchType": "domain"})
    assert resp.status == 200
    lines = (await resp.text()).splitlines()
    assert len(lines) == 2 * 12_000
    # ascending by (urlkey, timestamp), ties to the member listed first
    sources = [json.loads(line.split(" ", 2)[2])["source"] for line in lines[:4]]
    assert sources == ["big", "also", "big", "also"]
    outcomes = json.loads(resp.headers["Warcserver-Source-Outcomes"])
    assert outcomes == {
        "big": "ok: 12000 captures",
        "also": "ok: 12000 captures",
        "iana": "ok: 0 captures",
    }


async def test_a_single_local_member_past_its_first_checkpoint_streams_every_capture(
    make_client: MakeClient, tmp_path: Path
) -> None:
    # A one-member lookup is taken at once up to the scan's first checkpoint
    # (64 KiB read); the rest streams from where it stopped, nothing lost or repeated.
    big = _long_index(tmp_path / "big.cdxj")
    client = await make_client(f"collections:\n  one:\n    index: {big}\n")
    resp = await client.get("/one/index", params={"url": "example.com", "matchType": "domain"})
    assert resp.status == 200
    lines = (await resp.text()).splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == [
        f"com,example)/p{i:05d}" for i in range(12_000)
    ]
    limited = await client.get(
        "/one/index", params={"url": "example.com", "matchType": "domain", "limit": "9000"}
    )
    assert len((await limited.text()).splitlines()) == 9000


async def test_a_long_local_scan_past_the_deadline_times_out(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    # The deadline holds for local members too: the long scan is cut off at a
    # checkpoint, the short one finishes without ever waiting.
    big = _long_index(tmp_path / "big.cdxj", lines=60_000)
    client = await make_client(
        f"collections:\n  g:\n    index_group:\n      big: {big}\n"
        f"      iana: {sample_dir}/cdxj/iana.cdxj\n    timeout: 0.001\n"
    )
    resp = await client.get("/g/index", params={"url": "*.com"})
    assert resp.status == 200
    assert await resp.text() == ""
    assert json.loads(resp.headers["ResErrors"]) == {"big": "timeout after 0.001 s"}
    outcomes = json.loads(resp.headers["Warcserver-Source-Outcomes"])
    assert outcomes == {"big": "timeout after 0.001 s", "iana": "ok: 0 captures"}


@pytest.mark.parametrize("route", ["index", "resource"])
async def test_the_fuzzy_retry_shares_the_exact_lookups_deadline(
    make_client: MakeClient, sample_dir: Path, upstream: tuple[Upstream, str], route: str
) -> None:
    # The exact lookup finds nothing locally and the remote member hangs past
    # the deadline; the widened retry runs under that same deadline, so the
    # hanging member is not waited on a second time (was: 2x the timeout).
    state, url = upstream
    client = await make_client(_group(sample_dir, url) + f"    resource: {sample_dir}/warcs/\n")
    started = time.monotonic()
    resp = await client.get(
        f"/g/{route}",
        params={"url": "http://www.iana.org/_css/2013.1/screen.css?_=1390766400"},
    )
    elapsed = time.monotonic() - started
    assert resp.status == 200, await resp.text()
    assert "timeout after" in json.loads(resp.headers["ResErrors"])["remote"]
    if route == "index":
        assert '"is_fuzzy": "1"' in await resp.text()
    else:
        assert '"is_fuzzy": "1"' in resp.headers["Warcserver-Cdx"]
    assert state.requests == 1  # the widened lookup never reached the hanging member
    assert elapsed < TIMEOUT_S * MARGIN


# --------------------------------------------------------- the client's error (issue 21 §2)
async def _breakers_closed_and_ready(client: Client) -> None:
    status = await (await client.get("/_status")).json()
    for steps in status["breakers"].values():
        for members in steps.values():
            for name, breaker in members.items():
                assert breaker["state"] == "closed", (name, breaker)
                assert breaker["failures"] == 0, (name, breaker)
    ready = await client.get("/_ready")
    assert (ready.status, await ready.json()) == (200, {"ready": True})


async def test_a_refusing_member_is_listed_and_never_opens_the_breaker(
    make_client: MakeClient, sample_dir: Path, upstream: tuple[Upstream, str]
) -> None:
    state, url = upstream
    state.mode = "refuse"
    client = await make_client(_group(sample_dir, url))
    for attempt in range(1, 7):  # twice the breaker's threshold
        resp = await client.get("/g/index", params={"url": "iana.org"})
        assert resp.status == 200
        assert len((await resp.text()).splitlines()) == 1  # the local member's capture
        reason = json.loads(resp.headers["ResErrors"])["remote"]
        assert reason.startswith("the archive refused the query: CDX server ")
        assert reason.endswith("answered HTTP 400 Bad Request (Invalid URL: iana.org)")
        assert state.requests == attempt  # asked every time: never skipped
    await _breakers_closed_and_ready(client)
    metrics = await (await client.get("/metrics")).text()
    refused = [line for line in metrics.splitlines() if 'outcome="refused"' in line]
    assert any('source="remote"' in line and line.endswith(" 6.0") for line in refused), refused


async def test_a_lone_refusing_member_gives_the_client_its_4xx(
    make_client: MakeClient, upstream: tuple[Upstream, str], caplog: pytest.LogCaptureFixture
) -> None:
    state, url = upstream
    state.mode = "refuse"
    client = await make_client(f"collections:\n  g:\n    index: cdx+{url}\n")
    for _ in range(6):
        for path in ("/g/index", "/g/resource", "/g/cdx"):
            resp = await client.get(path, params={"url": "http://example.com/%3C%3E"})
            body = await resp.json()
            assert resp.status == 400, (path, body)
            assert (
                "answered HTTP 400 Bad Request (Invalid URL: http://example.com/"
                in (body["message"])
            )
            assert list(body["errors"]) == ["g"]
    await _breakers_closed_and_ready(client)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_every_member_refusing_is_a_4xx_and_a_fault_beside_a_refusal_a_503(
    make_client: MakeClient, sample_dir: Path, upstream: tuple[Upstream, str], silent_port: int
) -> None:
    state, url = upstream
    state.mode = "refuse"
    client = await make_client(
        f"collections:\n  both:\n    index_group:\n      a: cdx+{url}\n      b: cdx+{url}\n"
        f"  mixed:\n    index_group:\n      a: cdx+{url}\n"
        f"      b: cdx+http://127.0.0.1:{silent_port}/cdx\n    timeout: {TIMEOUT_S}\n"
    )
    resp = await client.get("/both/index", params={"url": "iana.org"})
    body = await resp.json()
    assert resp.status == 400
    assert set(body["errors"]) == {"a", "b"}
    # One refused, one is down: a retry may be answered (503), as when every one fails.
    resp = await client.get("/mixed/index", params={"url": "iana.org"})
    body = await resp.json()
    assert resp.status == 503
    assert "refused the query" in body["errors"]["a"]
    assert "timeout after" in body["errors"]["b"]


async def test_a_401_is_the_sources_fault_and_opens_the_breaker(
    make_client: MakeClient, sample_dir: Path, upstream: tuple[Upstream, str]
) -> None:
    state, url = upstream
    state.mode = "unauthorized"
    client = await make_client(_group(sample_dir, url))
    for _ in range(3):
        resp = await client.get("/g/index", params={"url": "iana.org"})
        assert "HTTP 401" in json.loads(resp.headers["ResErrors"])["remote"]
    resp = await client.get("/g/index", params={"url": "iana.org"})
    assert "circuit breaker" in json.loads(resp.headers["ResErrors"])["remote"]
