"""The page for people, in a real browser: headless Chromium driven by Playwright.

Debian's ``chromium`` (``scripts/install-browser``; Playwright's own browser
download cannot run here) is launched through Playwright with a fresh
profile and **JavaScript off**: the search, the calendar and the links to
mementos work without it. The gateway serves the pywb sample archive on
127.0.0.1.

With ``GATEWAY_SCREENSHOT_DIR`` set, the calendar page's screenshot is also
written there (``docs/page.png`` in the README comes from
``GATEWAY_SCREENSHOT_DIR=docs .venv/bin/python -m pytest tests/api/test_browser.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest
from aiohttp import web
from playwright.async_api import BrowserContext, async_playwright

from gateway.config import parse_config
from gateway.server.app import create_app
from tests.conftest import CHROMIUM_ARGS

PRINT_CSS: Final = "http://www.iana.org/_css/2013.1/print.css"


@pytest.fixture
async def gateway(sample_yaml: str) -> AsyncIterator[str]:
    """Base URL of the gateway serving the sample archive (``pywb``, ``iana``, ...)."""
    app = create_app(parse_config(sample_yaml))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def browser(chromium: str, tmp_path: Path) -> AsyncIterator[BrowserContext]:
    """A headless Chromium with a fresh profile and JavaScript off."""
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=chromium,
            headless=True,
            args=list(CHROMIUM_ARGS),
            java_script_enabled=False,
            viewport={"width": 1200, "height": 900},
        )
        try:
            yield context
        finally:
            await context.close()


async def test_search_a_url_open_a_capture_get_its_memento(
    gateway: str, browser: BrowserContext, tmp_path: Path
) -> None:
    page = await browser.new_page()
    home = await page.goto(f"{gateway}/")
    assert home is not None
    assert home.status == 200
    assert await page.title() == "archive gateway"
    assert await page.locator("#coll-pywb .state").first.inner_text() == "ok"

    # Search a URL of the sample archive in the pywb collection.
    await page.locator("#coll-pywb input[name=url]").fill(PRINT_CSS)
    await page.locator("#coll-pywb button[type=submit]").click()
    await page.wait_for_load_state()
    assert page.url.startswith(f"{gateway}/pywb/?url=")
    summary = await page.locator("main > p").first.inner_text()
    assert summary.startswith("17 captures between 2014-01-26 20:06:25 and 2014-01-27 17:12:39")
    assert await page.locator(".years .selected").inner_text() == "2014 (17)"
    screenshot = tmp_path / "page.png"
    await page.screenshot(path=str(screenshot))
    assert screenshot.read_bytes().startswith(b"\x89PNG")
    if target := os.environ.get("GATEWAY_SCREENSHOT_DIR"):
        shutil.copyfile(screenshot, Path(target) / "page.png")

    # Open a day of the calendar: its captures are listed.
    await page.locator("#calendar a", has_text="26").click()
    await page.wait_for_load_state()
    assert "day=20140126" in page.url
    captures = page.locator("tr.capture")
    assert await captures.count() == 16  # and one on the 27th
    first = captures.first
    assert (await first.locator("td").first.inner_text()) == "20:06:25"

    # Its memento: the archived response, with Memento-Datetime.
    record_href = await first.locator("a.record").get_attribute("href")
    async with page.expect_navigation() as navigation:
        await first.locator("a.memento").click()
    memento = await navigation.value
    assert memento is not None
    assert memento.status == 200
    assert memento.url == f"{gateway}/pywb/20140126200625id_/{PRINT_CSS}"
    assert memento.headers["memento-datetime"] == "Sun, 26 Jan 2014 20:06:25 GMT"
    assert memento.headers["content-type"].startswith("text/css")
    assert "IANA Style Sheet for Print display" in await page.locator("body").inner_text()

    # Its WARC record, as the Resource API serves it.
    assert record_href is not None
    record = await page.request.get(f"{gateway}{record_href}")
    assert record.status == 200
    assert record.headers["content-type"] == "application/warc-record"
    assert (await record.body()).startswith(b"WARC/1.0\r\n")
    assert record.headers["warc-target-uri"] == PRINT_CSS


async def test_prefix_search_lists_urls_and_bad_input_is_explained(
    gateway: str, browser: BrowserContext
) -> None:
    page = await browser.new_page()
    await page.goto(f"{gateway}/iana/")
    await page.locator("input[name=url]").fill("http://www.iana.org/_css/*")
    await page.locator("button[type=submit]").click()
    await page.wait_for_load_state()
    rows = page.locator("#urls tr")
    assert await rows.count() > 2
    async with page.expect_navigation():
        await page.locator("#urls a", has_text="print.css").click()
    assert "16 captures" in await page.locator("main").inner_text()  # iana.cdxj alone

    bad = await page.goto(f"{gateway}/iana/?url={PRINT_CSS}&day=2014")
    assert bad is not None
    assert bad.status == 400
    alert = await page.locator("[role=alert]").inner_text()
    assert "'2014' is not a day; expected YYYYMMDD" in alert
