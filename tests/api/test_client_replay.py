"""The replay routes (gateway.api.client_replay, docs/replay.md) over the sample archive.

The install directory here is a stand-in written by the test (a few bytes of
``sw.js``, a ``package.json`` with a version): the gateway must serve
whatever is installed, unmodified. The real wabac.js in a real browser is
``tests/e2e/test_replay_browser.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gateway.config import parse_config
from gateway.errors import ConfigError
from tests.conftest import MakeClient

HOME = "http://www.iana.org/"
STAND_IN_SW = b"// a stand-in for wabac.js's dist/sw.js\n"


@pytest.fixture
def install(tmp_path: Path) -> Path:
    """A directory laid out as scripts/install-wabac lays it out."""
    directory = tmp_path / "wabac"
    directory.mkdir()
    (directory / "sw.js").write_bytes(STAND_IN_SW)
    (directory / "LICENSE.md").write_text("GNU AFFERO GENERAL PUBLIC LICENSE\n")
    (directory / "package.json").write_text(json.dumps({"version": "9.9.9"}))
    return directory


def config(sample_dir: Path, replay: str) -> str:
    return (
        f"collections:\n  iana:\n    index: {sample_dir}/cdxj/iana.cdxj\n"
        f"    resource: {sample_dir}/warcs/\n{replay}"
    )


async def test_the_service_worker_is_served_unmodified_for_the_whole_origin(
    make_client: MakeClient, sample_dir: Path, install: Path
) -> None:
    client = await make_client(config(sample_dir, f"replay:\n  wabac_dir: {install}\n"))
    resp = await client.get("/_wabac/sw.js")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/javascript; charset=utf-8"
    assert resp.headers["Service-Worker-Allowed"] == "/"
    assert resp.headers["Cache-Control"] == "no-cache"
    assert await resp.read() == STAND_IN_SW
    resp = await client.get("/_wabac/LICENSE.md")
    assert resp.status == 200
    assert (await resp.text()).startswith("GNU AFFERO")
    assert (await client.get("/_wabac/package.json")).status == 404


async def test_the_replay_page_names_the_closest_capture_and_sets_up_wabac(
    make_client: MakeClient, sample_dir: Path, install: Path
) -> None:
    client = await make_client(config(sample_dir, f"replay:\n  wabac_dir: {install}\n"))
    resp = await client.get(f"/iana/2014/{HOME}", headers={"Accept": "text/html"})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
    page = await resp.text()
    assert '<time id="capture-time" datetime="20140126200624">2014-01-26 20:06:24</time>' in page
    assert f'href="/iana/timemap/link/{HOME}"' in page
    assert (
        'href="/iana/resource?url=http%3A%2F%2Fwww.iana.org%2F&amp;closest=20140126200624"' in page
    )
    assert "replayed by wabac.js 9.9.9" in page
    noscript = '<noscript><p id="replay-noscript">Replay runs in your browser and needs JavaScript'
    assert noscript in page
    assert f'the <a href="/iana/20140126200624id_/{HOME}">raw memento</a> needs none' in page
    assert 'href="https://github.com/webrecorder/wabac.js/tree/v9.9.9">source</a>' in page
    setup = re.search(r"const setup = (\{.*?\});", page)
    assert setup is not None
    assert json.loads(setup.group(1)) == {
        "coll": "iana",
        "url": HOME,
        "timestamp": "20140126200624",
        "prefix": "/iana/",
        "serviceWorker": "/_wabac/sw.js?replayPrefix=",
        "scope": "/",
    }
    # The collection page links each capture to its replay page.
    resp = await client.get(f"/iana/?url={HOME}", headers={"Accept": "text/html"})
    assert f'<a class="replay" href="/iana/20140126200624/{HOME}">replay</a>' in await resp.text()


async def test_the_frame_url_reaching_the_gateway_goes_to_the_replay_page(
    make_client: MakeClient, sample_dir: Path, install: Path
) -> None:
    client = await make_client(config(sample_dir, f"replay:\n  wabac_dir: {install}\n"))
    resp = await client.get(f"/iana/20140126200624mp_/{HOME}?a=1", allow_redirects=False)
    assert resp.status == 302
    base = f"http://{resp.url.host}:{resp.url.port}"
    assert resp.headers["Location"] == f"{base}/iana/20140126200624/{HOME}?a=1"


async def test_bad_replay_urls_say_what_is_wrong(
    make_client: MakeClient, sample_dir: Path, install: Path
) -> None:
    client = await make_client(config(sample_dir, f"replay:\n  wabac_dir: {install}\n"))
    html = {"Accept": "text/html"}

    resp = await client.get("/iana/2014/http://nothing.example/", headers=html)
    assert resp.status == 404
    page = await resp.text()
    assert "Not in the archive" in page
    assert "no capture of http://nothing.example/ in this collection" in page
    resp = await client.get("/iana/2014/http://nothing.example/")
    assert resp.status == 404
    assert (await resp.json())["message"].startswith("no capture of http://nothing.example/")

    resp = await client.get(f"/nope/2014/{HOME}", headers=html)
    assert resp.status == 404
    assert "unknown collection" in await resp.text()

    for path, param in [
        (f"/iana/\u0662\u0660\u0661\u0664/{HOME}", "timestamp"),  # Arabic-Indic digits
        ("/iana/2014/http://a..b/", "url"),
        ("/iana/2014/", "url"),
    ]:
        resp = await client.get(path)
        assert resp.status == 400, path
        assert (await resp.json())["param"] == param, path


async def test_replay_off_leaves_the_pages_as_they_were(
    make_client: MakeClient, sample_dir: Path, install: Path
) -> None:
    replay = f"replay:\n  client_side_replay: false\n  wabac_dir: {install}\n"
    client = await make_client(config(sample_dir, replay))
    resp = await client.get(f"/iana/2014/{HOME}", allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"].endswith(f"/iana/2014id_/{HOME}")
    resp = await client.get(f"/iana/?url={HOME}", headers={"Accept": "text/html"})
    assert 'class="replay"' not in await resp.text()
    resp = await client.get("/_wabac/sw.js")
    assert resp.status == 404
    assert "scripts/install-wabac" in (await resp.json())["message"]


def test_replay_settings_are_checked_at_load(sample_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-install"
    required = parse_config(
        config(sample_dir, f"replay:\n  client_side_replay: true\n  wabac_dir: {missing}\n")
    ).replay
    # Asked by serve and check-config only (tests/e2e/test_replay_browser.py).
    with pytest.raises(ValueError, match=r"no wabac\.js install there") as raised:
        required.require_install()
    assert str(raised.value).startswith(f"wabac_dir {missing}: no wabac.js install there")
    with pytest.raises(
        ConfigError,
        match=r"^replay.wabac: unknown key; expected one of client_side_replay, wabac_dir$",
    ):
        parse_config(config(sample_dir, "replay:\n  wabac: x\n"))
    settings = parse_config(config(sample_dir, f"replay:\n  wabac_dir: {missing}\n")).replay
    assert (settings.wabac_dir, settings.enabled) == (str(missing), False)
