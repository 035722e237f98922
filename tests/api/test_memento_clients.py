"""Real Memento clients against a real gateway listening on 127.0.0.1.

- memento-client (PyPI ``memento_client``), which follows the TimeGate's
  redirect and reads the navigation links, run in a thread (it uses
  ``requests`` synchronously) while the gateway serves on the test's loop;
- pywb 2.10's ``wayback`` configured with ``memento+http://127.0.0.1:PORT/{coll}/``
  as its index: it asks the gateway's TimeGate and TimeMap, then loads and
  serves the gateway's raw mementos.

Nothing leaves 127.0.0.1: memento-client is given a stand-in for its HEAD of
the original URL on the live web (``req_uri_response=``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests
from aiohttp import web
from memento_client import MementoClient  # type: ignore[import-untyped]

from gateway.config import parse_config
from gateway.server.app import create_app
from tests.conftest import PYWB_BIN, _http_get, _Server, _start_until_ready

PRINT_CSS = "http://www.iana.org/_css/2013.1/print.css"


@pytest.fixture
async def gateway(sample_dir: Path) -> AsyncIterator[str]:
    """Base URL of the gateway serving the sample archive on a free 127.0.0.1 port."""
    config = parse_config(
        f"""
collections:
  iana:
    index: {sample_dir}/cdxj/iana.cdxj
    resource: {sample_dir}/warcs/
  pywb:
    index: {sample_dir}/cdxj/
    resource: {sample_dir}/warcs/
"""
    )
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def _memento_info(timegate: str, url: str, when: datetime) -> dict[str, Any]:
    stand_in = requests.Response()  # the live original would answer without Link headers
    stand_in.status_code = 200
    stand_in.url = url
    with MementoClient(timegate_uri=timegate, check_native_timegate=False) as client:
        info: dict[str, Any] = client.get_memento_info(
            url, accept_datetime=when, req_uri_response=stand_in
        )
        return info


@pytest.mark.parametrize(
    ("when", "closest", "prev", "next_"),
    [
        (datetime(2014, 1, 26, 20, 7, 0), "20140126200706", "20140126200653", "20140126200716"),
        (datetime(2014, 1, 26, 20, 10, 0), "20140126200929", "20140126200912", "20140126201054"),
        (datetime(2000, 1, 1), "20140126200625", None, "20140126200653"),
        (datetime(2030, 1, 1), "20140126201307", "20140126201248", None),
    ],
)
async def test_memento_client_gets_the_right_memento(
    gateway: str, when: datetime, closest: str, prev: str | None, next_: str | None
) -> None:
    info = await asyncio.to_thread(_memento_info, f"{gateway}/iana/timegate/", PRINT_CSS, when)

    def urim(ts: str) -> str:
        return f"{gateway}/iana/{ts}id_/{PRINT_CSS}"

    def dt(ts: str) -> datetime:
        return datetime.strptime(ts, "%Y%m%d%H%M%S")

    mementos = info["mementos"]
    assert info["original_uri"] == PRINT_CSS
    assert info["timegate_uri"] == f"{gateway}/iana/timegate/{PRINT_CSS}"
    assert mementos["closest"]["uri"] == [urim(closest)]
    assert mementos["closest"]["datetime"] == dt(closest)
    assert mementos["closest"]["http_status_code"] == 200
    assert mementos["first"] == {"uri": [urim("20140126200625")], "datetime": dt("20140126200625")}
    assert mementos["last"] == {"uri": [urim("20140126201307")], "datetime": dt("20140126201307")}
    for rel, ts in (("prev", prev), ("next", next_)):
        if ts is None:
            assert rel not in mementos
        else:
            assert mementos[rel] == {"uri": [urim(ts)], "datetime": dt(ts)}


# ------------------------------------------------------------------------------ pywb


def _start_pywb(workdir: Path, gateway: str) -> tuple[_Server, int]:
    """pywb's wayback with the gateway's ``iana`` collection as a memento source."""
    binary = PYWB_BIN / "wayback"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"pywb is not installed: {binary} is missing; run scripts/install-peers")
    config = {
        "collections": {"gw": f"memento+{gateway}/iana/"},
        "enable_memento": True,
    }
    (workdir / "config.yaml").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    env = dict(os.environ)
    env["PYWB_CONFIG_FILE"] = str(workdir / "config.yaml")

    def argv(port: int) -> list[str]:
        return [str(binary), "-b", "127.0.0.1", "-p", str(port)]

    def ready(port: int) -> bool:
        answer = _http_get(port, "/gw/")
        return answer is not None and answer[0] == 200

    return _start_until_ready("pywb-wayback-memento", argv, workdir, ready, env)


@pytest.mark.peer
async def test_pywb_uses_the_gateway_as_a_memento_source(gateway: str, tmp_path: Path) -> None:
    # Start-up polls with blocking sleeps: keep them off the loop the gateway runs on.
    server, port = await asyncio.to_thread(_start_pywb, tmp_path, gateway)
    pywb = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{gateway}/iana/20140126200706id_/{PRINT_CSS}") as resp:
                assert resp.status == 200
                expected = await resp.read()
            # pywb asks the gateway's TimeGate (Accept-Datetime), then loads the raw memento.
            async with session.get(f"{pywb}/gw/20140126200700id_/{PRINT_CSS}") as resp:
                assert resp.status == 200, await resp.text()
                assert resp.headers["Memento-Datetime"] == "Sun, 26 Jan 2014 20:07:06 GMT"
                assert await resp.read() == expected
            # pywb's TimeMap is built from the gateway's link-format TimeMap.
            async with session.get(f"{pywb}/gw/timemap/link/{PRINT_CSS}") as resp:
                assert resp.status == 200
                text = await resp.text()
            async with session.get(f"{gateway}/iana/timemap/link/{PRINT_CSS}") as resp:
                count = int(resp.headers["X-Memento-Count"])
            assert text.count('memento"; datetime=') == count == 16
            assert 'datetime="Sun, 26 Jan 2014 20:13:07 GMT"' in text
    finally:
        await asyncio.to_thread(server.stop)
