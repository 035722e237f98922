"""Health that a client cannot trip (issue 21 §2).

Six requests of ``GET /mem/index?url=javascript:alert(1)`` to a collection with
a ``memento+`` source got an upstream 400 each; each counted as a failure of
the source, its circuit breaker opened, every client got 503 and ``/_ready``
said not ready. Here a real aiohttp server stands in for the remote archive
(Memento TimeGate and TimeMap, and a CDX server) and answers ``400 Bad
Request`` to everything, as an archive does for a URL it cannot take; the
gateway is asked again and again on every route that reaches it. Then: no
5xx, every answer a 4xx naming the archive's reason (or, within a group, the
refusal listed beside the answer), every breaker closed on ``/_status``,
``/_ready`` 200, nothing logged at ERROR.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.conftest import MakeClient

AiohttpServer = Callable[..., Awaitable[TestServer]]
Client = TestClient[web.Request, web.Application]

#: Twice the breaker's threshold of three failures in a row.
ROUNDS = 6


async def _refusing_archive(aiohttp_server: AiohttpServer) -> tuple[str, list[str]]:
    """A remote archive answering 400 to every request; its base URL and the paths asked."""
    asked: list[str] = []

    async def refuse(request: web.Request) -> web.Response:
        asked.append(request.raw_path)
        return web.Response(status=400, text="Bad Request: this archive cannot take that URL")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    server = await aiohttp_server(app, host="127.0.0.1")
    return f"http://127.0.0.1:{server.port}", asked


async def _assert_healthy(client: Client) -> None:
    status = await (await client.get("/_status")).json()
    states = [
        (coll, step, member, breaker)
        for coll, steps in status["breakers"].items()
        for step, members in steps.items()
        for member, breaker in members.items()
    ]
    assert states
    for coll, step, member, breaker in states:
        assert breaker["state"] == "closed", (coll, step, member, breaker)
        assert breaker["failures"] == 0, (coll, step, member, breaker)
    ready = await client.get("/_ready")
    assert (ready.status, await ready.json()) == (200, {"ready": True})


async def test_a_client_cannot_open_a_breaker_with_urls_the_archive_refuses(
    aiohttp_server: AiohttpServer,
    make_client: MakeClient,
    sample_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    base, asked = await _refusing_archive(aiohttp_server)
    client = await make_client(f"""
collections:
  mem:
    index: memento+{base}/web/
  cdx:
    index: cdx+{base}/cdx
  grp:
    index_group:
      local: {sample_dir}/cdxj/iana.cdxj
      ia: memento+{base}/web/
      remote: cdx+{base}/cdx
    resource: {sample_dir}/warcs/
""")
    url = "http://example.com/page"
    refused_upstream = [
        f"/mem/index?url={url}",
        f"/mem/index?url={url}&closest=2014&limit=1",  # the TimeGate
        f"/mem/resource?url={url}",
        f"/mem/timemap/link/{url}",
        f"/mem/timegate/{url}",
        f"/mem/20140101000000id_/{url}",
        f"/cdx/index?url={url}",
        f"/cdx/resource?url={url}",
        f"/cdx/cdx?url={url}",
    ]
    not_sent = ["/mem/index?url=javascript:alert(1)", "/mem/resource?url=javascript:alert(1)"]
    statuses: list[int] = []
    with caplog.at_level(logging.INFO):
        for _ in range(ROUNDS):
            for path in refused_upstream:
                resp = await client.get(path)
                body = await resp.json()
                statuses.append(resp.status)
                assert resp.status == 400, (path, body)
                assert "the archive refused the query" in body["message"], (path, body)
                assert "answered HTTP 400 Bad Request" in body["message"], (path, body)
                if "TimeGate" not in body["message"]:  # a HEAD: no text to quote
                    assert "(Bad Request: this archive cannot take that URL)" in body["message"]
            before = len(asked)
            for path in not_sent:
                resp = await client.get(path)
                body = await resp.json()
                statuses.append(resp.status)
                assert resp.status == 400, (path, body)
                assert "a Memento archive holds http(s) URLs" in body["message"]
            assert len(asked) == before  # refused here: the archive was not asked
            # A group answers with what its other members hold; the refusals are listed.
            for target in ("javascript:alert(1)", "iana.org"):
                resp = await client.get("/grp/index", params={"url": target})
                statuses.append(resp.status)
                assert resp.status == 200
                errors = json.loads(resp.headers["ResErrors"])
                assert set(errors) == {"ia", "remote"}
                assert "http(s)" in errors["ia"] or "refused the query" in errors["ia"]
            resp = await client.get("/grp/resource", params={"url": "iana.org"})
            statuses.append(resp.status)
            assert resp.status == 200
            resp = await client.get("/mem/", params={"url": url}, headers={"Accept": "text/html"})
            statuses.append(resp.status)
            assert resp.status == 400
            assert "the archive refused the query" in await resp.text()
    assert asked  # the archive was asked, and refused, every round
    assert max(statuses) < 500
    await _assert_healthy(client)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    # The refusals are counted apart on /metrics, never as errors.
    metrics = await (await client.get("/metrics")).text()
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("gateway_source_lookups_total{") and 'collection="mem"' in line
    ]
    assert any('outcome="refused"' in line and not line.endswith(" 0.0") for line in counted)
    assert all(line.endswith(" 0.0") for line in counted if 'outcome="error"' in line)
