"""The README's first steps on the default collections.yaml: index, copy, serve."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.config import load_config
from gateway.server.app import create_app

ROOT = Path(__file__).resolve().parents[1]
Client = TestClient[web.Request, web.Application]


async def test_gateway_index_and_copy_is_all_a_user_needs(
    sample_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    shutil.copy(ROOT / "collections.yaml", tmp_path / "collections.yaml")
    monkeypatch.chdir(tmp_path)
    # A fresh machine: nothing exists yet; serving creates both directories.
    client = await aiohttp_client(create_app(load_config("collections.yaml")))
    assert (tmp_path / "archive" / "indexes").is_dir()
    assert (tmp_path / "archive" / "warcs").is_dir()
    empty = await client.get("/web/index", params={"url": "iana.org"})
    assert (empty.status, await empty.text()) == (200, "")

    result = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "index",
            str(sample_dir / "warcs" / "iana.warc.gz"),
            "-o",
            "archive/indexes/iana.cdxj",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    shutil.copy(sample_dir / "warcs" / "iana.warc.gz", tmp_path / "archive" / "warcs")

    # The directory source notices the new index file without a restart,
    # within its stat_interval_s (1 s by default; 10 s is "did not hang").
    for _ in range(50):
        index = await client.get("/web/index", params={"url": "iana.org"})
        assert index.status == 200
        lines = (await index.text()).splitlines()
        if lines:
            break
        await asyncio.sleep(0.2)
    assert len(lines) == 1
    assert '"source": "web:iana.cdxj"' in lines[0]
    resource = await client.get("/web/resource", params={"url": "iana.org"})
    assert resource.status == 200
    assert resource.headers["WARC-Target-URI"] == "http://www.iana.org/"
    assert b"Internet Assigned Numbers Authority" in await resource.read()
