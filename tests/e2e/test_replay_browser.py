"""Replay in the browser (docs/replay.md), as a user runs it: ``gateway serve``
in a temporary directory with the config of docs/replay.md, and Debian's
Chromium (``scripts/install-browser``) driven by Playwright with JavaScript on.

wabac.js is the install ``scripts/install-wabac`` made in the checkout's
``.wabac/`` (``scripts/test`` runs it); the working directory gets a ``.wabac``
link to it, so the documented ``wabac_dir: ./.wabac/`` finds it. Every
request the browser makes is recorded: none may leave the gateway.

A ``gateway export`` WACZ is replayed twice: served by the gateway as a
collection of its own, and opened by wabac.js itself as ReplayWeb.page opens
a WACZ (an ``addColl`` of the file's URL, read with Range requests), with no
gateway running.

With ``GATEWAY_SCREENSHOT_DIR`` set, the replayed iana.org page's screenshot
is written there as ``replay-iana.png`` (docs/img/replay-iana.png comes from
``GATEWAY_SCREENSHOT_DIR=docs/img .venv/bin/python -m pytest tests/e2e/test_replay_browser.py``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from aiohttp import web
from playwright.async_api import BrowserContext, Frame, Page, async_playwright

from tests.conftest import CHROMIUM_ARGS, REPO_ROOT, free_port
from tests.e2e.support import gateway, get, serve

WABAC_INSTALL: Final = REPO_ROOT / ".wabac"
HOME: Final = "http://www.iana.org/"
CAPTURED: Final = "20140126200624"
#: The frame's name: wabac.js's REPLAY_TOP_FRAME_NAME (templates/replay.html).
FRAME: Final = "___wb_replay_top_frame"
#: Generous bounds for a loaded 2-core machine: nothing here is timed.
WAIT_MS: Final = 90_000


def documented_config() -> str:
    """The ``yaml`` block of docs/replay.md, as written."""
    text = (REPO_ROOT / "docs" / "replay.md").read_text(encoding="utf-8")
    block = re.search(r"^```yaml\n(.*?)^```", text, re.S | re.M)
    assert block is not None, "docs/replay.md has no yaml block"
    return block.group(1)


def sample_workdir(root: Path, sample_dir: Path) -> Path:
    """``root`` laid out as docs/replay.md's config expects: the sample's iana.org
    captures in ``archive/``, the config in ``collections.yaml``."""
    (root / "archive" / "indexes").mkdir(parents=True)
    (root / "archive" / "warcs").mkdir()
    shutil.copy(sample_dir / "cdxj" / "iana.cdxj", root / "archive" / "indexes")
    shutil.copy(sample_dir / "warcs" / "iana.warc.gz", root / "archive" / "warcs")
    (root / "collections.yaml").write_text(documented_config(), encoding="utf-8")
    return root


@pytest.fixture
def replaying(tmp_path: Path, sample_dir: Path) -> Iterator[str]:
    """Base URL of ``gateway serve`` with replay on (docs/replay.md's config)."""
    if not (WABAC_INSTALL / "sw.js").is_file():
        pytest.fail(
            f"{WABAC_INSTALL} has no wabac.js: run scripts/install-wabac (scripts/test does)"
        )
    workdir = sample_workdir(tmp_path / "work", sample_dir)
    (workdir / ".wabac").symlink_to(WABAC_INSTALL)
    checked = gateway(["check-config"], workdir)
    assert checked.returncode == 0, checked.stderr
    assert f"replay in the browser: on: wabac.js from {workdir}/.wabac/" in checked.stdout
    server, port = serve(workdir)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
async def browser(chromium: str, tmp_path: Path) -> AsyncIterator[BrowserContext]:
    """Headless Chromium with an empty profile and JavaScript on."""
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=chromium,
            headless=True,
            args=list(CHROMIUM_ARGS),
            viewport={"width": 1200, "height": 900},
        )
        context.set_default_timeout(WAIT_MS)
        try:
            yield context
        finally:
            await context.close()


async def replay_frame(page: Page, link_text: str) -> Frame:
    """The replay frame, once the archived page in it shows a link ``link_text``."""
    await (
        page.frame_locator("#replay_iframe")
        .locator("a", has_text=link_text)
        .wait_for(timeout=WAIT_MS)
    )
    frame = page.frame(name=FRAME)
    assert frame is not None
    return frame


async def test_the_iana_capture_replays_styled_and_its_links_stay_in_the_archive(
    replaying: str, browser: BrowserContext, tmp_path: Path
) -> None:
    requested: list[str] = []
    browser.on("request", lambda request: requested.append(request.url))
    page = await browser.new_page()

    # The collection page links each capture to its replay page.
    await page.goto(f"{replaying}/web/?url={HOME}")
    replay_link = page.locator("tr.capture a.replay").first
    assert await replay_link.get_attribute("href") == f"/web/{CAPTURED}/{HOME}"
    await replay_link.click()
    await page.wait_for_url(f"{replaying}/web/{CAPTURED}/{HOME}")

    frame = await replay_frame(page, "Root Zone Management")
    assert frame.url == f"{replaying}/web/{CAPTURED}mp_/{HOME}"
    # Styled by its archived CSS (screen.css sets Open Sans, served from the
    # archive as a web font), not the browser's default serif of raw HTML.
    family = await frame.evaluate("getComputedStyle(document.body).fontFamily")
    assert family.startswith('"Open Sans"'), family
    fonts = await frame.evaluate(
        "document.fonts.ready.then((fonts) =>"
        " Array.from(fonts, (font) => [font.family, font.weight, font.status]))"
    )
    assert ["Open Sans", "400", "loaded"] in fonts, fonts  # @font-face of screen.css
    sheets = await frame.evaluate(
        "Array.from(document.styleSheets, (sheet) => [sheet.href, sheet.cssRules.length])"
    )
    rules = dict(sheets).get(HOME + "_css/2013.1/screen.css", 0)
    assert rules > 100, sheets
    # Its archived images load, from the archive: the <img>, and the logo
    # screen.css puts behind the <h1>.
    images = await frame.evaluate(
        "Array.from(document.images, (image) => [image.currentSrc, image.naturalWidth])"
    )
    assert images, "no images in the replayed page"
    for src, width in images:
        assert src.startswith(f"{replaying}/web/{CAPTURED}"), src
        assert width > 0, src
    logo = await frame.evaluate(
        "performance.getEntriesByType('resource')"
        ".filter((entry) => entry.name.endsWith('/_img/2013.1/iana-logo-homepage.png'))"
        ".map((entry) => [entry.name, entry.responseStatus, entry.decodedBodySize])"
    )
    assert len(logo) == 1, logo
    [(logo_url, logo_status, logo_size)] = logo
    assert logo_url.startswith(f"{replaying}/web/{CAPTURED}"), logo_url
    assert logo_status == 200
    assert logo_size > 1000

    # The banner: the capture time and links to the TimeMap and the WARC record.
    assert await page.locator("#capture-time").inner_text() == "2014-01-26 20:06:24"
    timemap = await page.locator("#link-timemap").get_attribute("href")
    assert timemap == f"/web/timemap/link/{HOME}"
    record_href = await page.locator("#link-record").get_attribute("href")
    assert record_href is not None
    record = await page.request.get(f"{replaying}{record_href}")
    assert record.status == 200
    assert record.headers["content-type"] == "application/warc-record"
    assert record.headers["warc-target-uri"] == HOME
    assert (await page.request.get(f"{replaying}{timemap}")).status == 200

    screenshot = tmp_path / "replay-iana.png"
    await page.screenshot(path=str(screenshot))
    assert screenshot.read_bytes().startswith(b"\x89PNG")
    if target := os.environ.get("GATEWAY_SCREENSHOT_DIR"):
        shutil.copyfile(screenshot, Path(target) / "replay-iana.png")

    # A link inside the archived page leads to the archived page it names.
    await frame.locator("a", has_text="Root Zone Management").click()
    await page.wait_for_url(re.compile(r".*/web/\d{14}/http://www\.iana\.org/domains/root$"))
    frame = await replay_frame(page, "Root Zone Database")
    assert frame.url.startswith(f"{replaying}/web/{CAPTURED}mp_/"), frame.url
    assert frame.url.endswith("/http://www.iana.org/domains/root")
    assert page.url == f"{replaying}/web/20140126200912/http://www.iana.org/domains/root"
    assert await page.locator("#capture-time").inner_text() == "2014-01-26 20:09:12"
    family = await frame.evaluate("getComputedStyle(document.body).fontFamily")
    assert family.startswith('"Open Sans"'), family

    # The address bar's URL is the shareable one: opened again (the service
    # worker now in control), it shows the same page.
    shared = await browser.new_page()
    await shared.goto(page.url)
    frame = await replay_frame(shared, "Root Zone Database")
    assert frame.url == f"{replaying}/web/20140126200912mp_/http://www.iana.org/domains/root"
    assert await shared.locator("#capture-time").inner_text() == "2014-01-26 20:09:12"

    # Nothing the browser asked for left the gateway.
    assert requested
    outside = [url for url in requested if not url.startswith(f"{replaying}/")]
    assert outside == [], outside


def test_without_wabac_the_pages_work_as_before(tmp_path: Path, sample_dir: Path) -> None:
    """The same documented config, less ``client_side_replay: true``, and no install."""
    workdir = sample_workdir(tmp_path, sample_dir)
    config = workdir / "collections.yaml"
    text = config.read_text(encoding="utf-8")
    config.write_text(re.sub(r"(?m)^  client_side_replay:.*\n", "", text), encoding="utf-8")
    checked = gateway(["check-config"], workdir)
    assert checked.returncode == 0, checked.stderr
    off = f"replay in the browser: off: no wabac.js install in {workdir}/.wabac/"
    assert off in checked.stdout
    server, port = serve(workdir)
    try:
        assert off in server.logs()
        status, _headers, body = get(port, f"/web/?url={HOME}")
        assert status == 200
        page = body.decode()
        assert 'class="replay"' not in page
        assert f'class="memento" href="/web/{CAPTURED}id_/{HOME}"' in page

        status, headers, _body = get(port, f"/web/{CAPTURED}/{HOME}")
        assert status == 302
        assert headers["location"] == f"http://127.0.0.1:{port}/web/{CAPTURED}id_/{HOME}"
        status, headers, _body = get(port, f"/web/{CAPTURED}mp_/{HOME}")
        assert (status, headers["location"]) == (
            302,
            f"http://127.0.0.1:{port}/web/{CAPTURED}id_/{HOME}",
        )
        status, headers, body = get(port, f"/web/{CAPTURED}id_/{HOME}")
        assert status == 200
        assert b"Internet Assigned Numbers Authority" in body

        status, _headers, body = get(port, "/_wabac/sw.js")
        assert status == 404
        assert b"scripts/install-wabac" in body
    finally:
        server.stop()


def test_client_side_replay_true_without_an_install_stops_start_up(
    tmp_path: Path, sample_dir: Path
) -> None:
    workdir = sample_workdir(tmp_path, sample_dir)  # docs/replay.md's config, no .wabac/
    missing = workdir / ".wabac"
    port = str(free_port())
    for command in (["check-config"], ["serve", "--host", "127.0.0.1", "--port", port]):
        done = gateway(command, workdir, timeout_s=60)
        assert done.returncode == 2, (command, done.stderr)
        assert f"replay: wabac_dir {missing}/: no wabac.js install there (no sw.js)" in done.stderr
        assert "scripts/install-wabac" in done.stderr
    # The commands that serve no pages do not need wabac.js.
    exported = gateway(["export", "iana.org", "-o", "exports/home.wacz"], workdir)
    assert exported.returncode == 0, exported.stderr
    assert (workdir / "exports" / "home.wacz").stat().st_size > 0


async def test_a_collection_that_is_only_an_export_replays_in_the_browser(
    tmp_path: Path, sample_dir: Path, browser: BrowserContext
) -> None:
    """``gateway export`` of docs/replay.md's collection, the archive then removed,
    and a config whose only collection is the exported WACZ: its capture of
    iana.org replays through wabac.js styled by its archived CSS and font, with
    its images, and a link in it leads to another page of the export."""
    if not (WABAC_INSTALL / "sw.js").is_file():
        pytest.fail(f"{WABAC_INSTALL} has no wabac.js: run scripts/install-wabac")
    workdir = sample_workdir(tmp_path / "work", sample_dir)
    (workdir / ".wabac").symlink_to(WABAC_INSTALL)
    exported = gateway(
        ["export", "iana.org", "--match-type", "domain", "-o", "exports/iana.wacz"], workdir
    )
    assert exported.returncode == 0, exported.stderr
    shutil.rmtree(workdir / "archive")  # nothing left but the export
    web = "  web:\n    index: ./archive/indexes/\n    resource: ./archive/warcs/\n"
    config = documented_config()
    assert web in config
    (workdir / "exported.yaml").write_text(
        config.replace(web, "  exported:\n    index: ./exports/iana.wacz\n"), encoding="utf-8"
    )
    server, port = serve(workdir, "--config", "exported.yaml")
    base = f"http://127.0.0.1:{port}"
    try:
        requested: list[str] = []
        browser.on("request", lambda request: requested.append(request.url))
        page = await browser.new_page()
        await page.goto(f"{base}/exported/{CAPTURED}/{HOME}")
        frame = await replay_frame(page, "Root Zone Management")
        assert frame.url == f"{base}/exported/{CAPTURED}mp_/{HOME}"
        family = await frame.evaluate("getComputedStyle(document.body).fontFamily")
        assert family.startswith('"Open Sans"'), family
        images = await frame.evaluate(
            "Array.from(document.images, (image) => [image.currentSrc, image.naturalWidth])"
        )
        assert images, "no images in the replayed page"
        for src, width in images:
            assert src.startswith(f"{base}/exported/{CAPTURED}"), src
            assert width > 0, src
        assert await page.locator("#capture-time").inner_text() == "2014-01-26 20:06:24"

        await frame.locator("a", has_text="Root Zone Management").click()
        await page.wait_for_url(f"{base}/exported/20140126200912/http://www.iana.org/domains/root")
        frame = await replay_frame(page, "Root Zone Database")
        family = await frame.evaluate("getComputedStyle(document.body).fontFamily")
        assert family.startswith('"Open Sans"'), family

        outside = [url for url in requested if not url.startswith(f"{base}/")]
        assert requested
        assert outside == [], outside
    finally:
        server.stop()


#: A page that opens a WACZ in wabac.js as ReplayWeb.page does (an ``addColl``
#: message naming the file's URL), then shows a capture of it in a frame.
WACZ_VIEWER: Final = """<!doctype html>
<html><body><iframe id="replay" style="width:1100px;height:800px"></iframe>
<script>
(async () => {
  const sw = navigator.serviceWorker;
  const added = new Promise((resolve, reject) => sw.addEventListener("message", (event) => {
    if (event.data.msg_type === "collAdded") resolve();
    if (event.data.msg_type === "collProgress" && event.data.error) reject(event.data.error);
  }));
  await sw.register("/sw.js", { scope: "/" });
  await sw.ready;
  const message = { msg_type: "addColl", name: "exported", file: { sourceUrl: WACZ_URL } };
  if (sw.controller) sw.controller.postMessage(message);
  else sw.addEventListener("controllerchange", () => sw.controller.postMessage(message));
  await added;
  document.getElementById("replay").src = FRAME_URL;
})().catch((error) => { document.title = "failed: " + error; });
</script></body></html>
"""


def wacz_viewer_app(wacz: Path) -> web.Application:
    """wabac.js's service worker, the viewer page and ``wacz`` (Range requests
    answered, as ReplayWeb.page's loader asks), from one origin."""

    async def page(_request: web.Request) -> web.Response:
        html = WACZ_VIEWER.replace("WACZ_URL", '"/iana.wacz"')
        html = html.replace("FRAME_URL", f'"/w/exported/{CAPTURED}mp_/{HOME}"')
        return web.Response(text=html, content_type="text/html")

    async def service_worker(_request: web.Request) -> web.FileResponse:
        return web.FileResponse(
            WABAC_INSTALL / "sw.js", headers={"Content-Type": "application/javascript"}
        )

    async def archive(_request: web.Request) -> web.FileResponse:
        return web.FileResponse(wacz, headers={"Content-Type": "application/zip"})

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/sw.js", service_worker)
    app.router.add_get("/iana.wacz", archive)
    return app


async def test_an_export_opens_in_wabac_js_as_replayweb_page_opens_a_wacz(
    tmp_path: Path, sample_dir: Path, browser: BrowserContext, aiohttp_server: Any
) -> None:
    """The file ``gateway export`` writes, given to wabac.js itself (no gateway
    running): wabac.js reads its datapackage, index and WARC entry and replays
    iana.org from it, styled by its archived CSS and font, with its images."""
    if not (WABAC_INSTALL / "sw.js").is_file():
        pytest.fail(f"{WABAC_INSTALL} has no wabac.js: run scripts/install-wabac")
    workdir = sample_workdir(tmp_path / "work", sample_dir)
    (workdir / ".wabac").symlink_to(WABAC_INSTALL)
    exported = gateway(
        ["export", "iana.org", "--match-type", "domain", "-o", "exports/iana.wacz"], workdir
    )
    assert exported.returncode == 0, exported.stderr
    server = await aiohttp_server(wacz_viewer_app(workdir / "exports" / "iana.wacz"))
    base = str(server.make_url("")).rstrip("/")
    requested: list[str] = []
    browser.on("request", lambda request: requested.append(request.url))
    page = await browser.new_page()
    await page.goto(f"{base}/")
    replay = page.frame_locator("#replay")
    await replay.locator("a", has_text="Root Zone Management").wait_for(timeout=WAIT_MS)
    # wabac.js names the WACZ inside the collection: /w/exported/:{its id}/{ts}mp_/{url}
    frame = next(f for f in page.frames if f.url.startswith(f"{base}/w/exported/"))
    assert frame.url.endswith(f"/{CAPTURED}mp_/{HOME}"), frame.url
    family = await frame.evaluate("getComputedStyle(document.body).fontFamily")
    assert family.startswith('"Open Sans"'), family
    images = await frame.evaluate(
        "Array.from(document.images, (image) => [image.currentSrc, image.naturalWidth])"
    )
    assert images, "no images in the replayed page"
    for src, width in images:
        assert src.startswith(f"{base}/w/exported/"), src
        assert width > 0, src
    assert not (await page.title()).startswith("failed"), await page.title()
    outside = [url for url in requested if not url.startswith(f"{base}/")]
    assert outside == [], outside
