"""Many machines, no shared disk (issue 13 §5), end to end and all real: a recording
``gateway serve`` stores live captures, and its own background work (the replication
director and workers) copies each closed WARC file to SeaweedFS and, once it is safe
there, publishes its CDXJ lines to a Redis sorted set; a second ``gateway serve``, in a
directory of its own with a config naming only Redis and the S3 prefix, serves those
captures. A capture whose file is still open is not served there until its file is
closed and replicated (here by ``gateway store replicate``, the recorder stopped)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Final

import aiohttp
import pytest
import yaml

from tests.conftest import free_port
from tests.storage.seaweedfs import SeaweedFS
from tests.store.replication_support import (
    REPO,
    closed_files,
    gateway_store,
    live_page,
    s3_place,
    write_config,
)

START_TIMEOUT_S: Final = 60.0
#: Pages that fill a WARC file each (``rollover_bytes`` 10 kB): closed at once.
PAGES: Final = 3


def _url(live_web: str, number: int) -> str:
    """Page ``number``: 30 kB of noise for the first PAGES (each fills a WARC file), then 1 kB."""
    return f"{live_web}/page/{number}?noise={15_000 if number < PAGES else 500}"


def _page(number: int) -> bytes:
    return live_page(number, 15_000 if number < PAGES else 500).encode()


class _Gateway:
    """``gateway serve`` in a process of its own, output to files in ``workdir``."""

    def __init__(self, proc: asyncio.subprocess.Process, base: str, workdir: Path) -> None:
        self.proc = proc
        self.base = base
        self.workdir = workdir

    @classmethod
    async def start(cls, config: Path, workdir: Path, session: aiohttp.ClientSession) -> _Gateway:
        port = free_port()
        with (workdir / "stderr.log").open("ab") as err:
            proc = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)),
                *("--host", "127.0.0.1", "--port", str(port)),
                cwd=workdir,
                env=dict(os.environ, PYTHONPATH=str(REPO)),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=err,
            )
        gateway = cls(proc, f"http://127.0.0.1:{port}", workdir)
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
        while True:
            assert proc.returncode is None, f"gateway serve exited: {gateway.logs()}"
            try:
                async with session.get(f"{gateway.base}/_ready") as answer:
                    if answer.status == 200:
                        return gateway
            except aiohttp.ClientConnectionError:
                pass
            assert asyncio.get_running_loop().time() < deadline, gateway.logs()
            await asyncio.sleep(0.1)

    def logs(self) -> str:
        return (self.workdir / "stderr.log").read_text("utf-8", errors="replace")[-3000:]

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), 60)


async def _replicate(config: Path) -> str:
    done = await asyncio.to_thread(
        gateway_store, ["replicate", "--once", "--no-progress", "--config", str(config)]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


async def _count_reaches(root: Path, sql: str, count: int, *, timeout_s: float) -> None:
    """Wait until ``sql`` (a COUNT over the store's index) reaches ``count`` (a "did
    not hang" bound)."""
    import sqlite3

    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        with sqlite3.connect(root / "index.sqlite3") as conn:
            (n,) = conn.execute(sql).fetchone()
        if n >= count:
            return
        assert asyncio.get_running_loop().time() < deadline, f"{n} of {count}: {sql}"
        await asyncio.sleep(0.05)


async def _recorded(root: Path, count: int) -> None:
    """Wait until the store has indexed ``count`` response records (recording is acked
    after the client got its answer)."""
    sql = "SELECT COUNT(*) FROM captures WHERE rec_type = 'response'"
    await _count_reaches(root, sql, count, timeout_s=30)


async def _published(root: Path, count: int) -> None:
    """Wait until ``count`` files are published to Redis."""
    await _count_reaches(root, "SELECT COUNT(*) FROM publications", count, timeout_s=90)


@pytest.mark.timeout(300)
async def test_a_fleet_gateway_serves_what_a_recording_host_stored(
    tmp_path: Path,
    live_web: str,
    s3_env: SeaweedFS,
    replication_bucket: str,
    redis_server: str,
) -> None:
    host = tmp_path / "recording-host"
    fleet = tmp_path / "fleet-host"
    host.mkdir()
    fleet.mkdir()
    root = host / "store"
    key = f"fleet:{uuid.uuid4().hex}:cdxj"
    place = s3_place(s3_env.endpoint)
    recorder = write_config(
        host / "record.yaml",
        root,
        [place],
        copies=2,
        publish={"redis": f"{redis_server}/0/{key}"},
        collections={
            "rec": {"index": {"type": "live", "allow_private_networks": True}, "record": True}
        },
    )
    settings = yaml.safe_load(recorder.read_text())
    settings["store"]["rollover_bytes"] = 10_000  # a file per capture
    settings["jobs"] = {"poll_s": 0.1, "replicate_interval_s": 0.3}  # a director pass each 0.3 s
    recorder.write_text(yaml.safe_dump(settings))
    spec = place.spec
    resource = f"s3+{spec['endpoint']}/{spec['bucket']}/{spec['prefix']}"
    serving = fleet / "serve.yaml"
    serving.write_text(
        yaml.safe_dump(
            {"collections": {"archive": {"index": f"{redis_server}/0/{key}", "resource": resource}}}
        )
    )
    assert str(root) not in serving.read_text()  # nothing of the store's disk

    async with aiohttp.ClientSession() as session:
        writer = await _Gateway.start(recorder, host, session)
        reader = await _Gateway.start(serving, fleet, session)
        try:
            for n in range(PAGES + 1):  # the last page is small: its file stays open
                url = _url(live_web, n)
                async with session.get(f"{writer.base}/rec/resource", params={"url": url}) as r:
                    assert r.status == 200, await r.text()
            await _recorded(root, PAGES + 1)
            assert len(closed_files(root)) == PAGES
            await _published(root, PAGES)  # by the recording gateway itself: no command run
            for n in range(PAGES + 1):
                url = _url(live_web, n)
                async with session.get(
                    f"{reader.base}/archive/resource", params={"url": url}
                ) as answer:
                    body = await answer.read()
                    if n < PAGES:
                        assert answer.status == 200, body[:500]
                        assert _page(n) in body
                        assert answer.headers["Warcserver-Source-Coll"] == "archive"
                    else:
                        assert answer.status == 404, "its file is still open: not published"
            async with session.get(
                f"{reader.base}/archive/index", params={"url": _url(live_web, 0)}
            ) as index:
                line = await index.text()
            assert '"filename": "gateway-' in line
            assert await writer.stop() == 0  # closes the last file
            out = await _replicate(recorder)
            assert "published 1 capture(s) of 1 file(s)" in out
            url = _url(live_web, PAGES)
            async with session.get(f"{reader.base}/archive/resource", params={"url": url}) as r:
                assert r.status == 200
                assert _page(PAGES) in await r.read()
        finally:
            await writer.stop()
            await reader.stop()
