"""Several processes on one store (the lock model of gateway/store/layout.py), all real.

A recording ``gateway serve`` (the writer), a second ``gateway serve`` that
only serves ``$store`` (shared), three ``gateway store add`` processes
importing at the same time, ``store check`` and ``store repair`` beside
them; a second recording gateway is refused. Every capture recorded and
every file imported is served by the other process without a restart, and
no process ever reports ``database is locked``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Final

import aiohttp
import pytest

from gateway.store.integrity.check import check_store
from gateway.store.layout import Layout
from tests.conftest import free_port
from tests.store.record_driver import import_body, import_url, write_import
from tests.store.store_support import warc_files

REPO: Final = Path(__file__).resolve().parents[2]
START_TIMEOUT_S: Final = 60.0

Proc = asyncio.subprocess.Process


async def _gateway(*args: str) -> Proc:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        *args,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _serve(config: Path, session: aiohttp.ClientSession) -> tuple[Proc, str]:
    """``gateway serve`` on a free port, once its /_health answers."""
    port = free_port()
    proc = await _gateway(
        "serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(port)
    )
    base = f"http://127.0.0.1:{port}"
    deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
    while True:
        assert proc.returncode is None, "gateway serve exited during start-up"
        try:
            async with session.get(f"{base}/_health") as resp:
                if resp.status == 200:
                    return proc, base
        except aiohttp.ClientConnectionError:
            pass
        assert asyncio.get_running_loop().time() < deadline, "gateway serve did not start"
        await asyncio.sleep(0.1)


async def _finish(proc: Proc, timeout_s: float = 60.0) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _stop(proc: Proc) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    status, _out, err = await _finish(proc)
    return status, err


@pytest.mark.timeout(240)
async def test_one_writer_many_readers_and_importers(tmp_path: Path, live_web: str) -> None:
    root = tmp_path / "store"
    recorder = tmp_path / "record.yaml"
    recorder.write_text(
        f"store: {{root: {root}, fsync: close}}\n"
        "collections:\n"
        "  rec:\n"
        "    index: {type: live, allow_private_networks: true}\n"
        "    record: true\n"
    )
    reader = tmp_path / "serve.yaml"
    reader.write_text(f"store: {{root: {root}}}\ncollections:\n  stored: $store\n")
    batches = []
    for batch in range(3):
        directory = tmp_path / f"imports{batch}"
        directory.mkdir()
        for number in range(8):
            write_import(directory / f"batch{batch}-{number}.warc.gz")
        batches.append(sorted(directory.iterdir()))

    async with aiohttp.ClientSession() as session:
        writer, writer_url = await _serve(recorder, session)
        shared, shared_url = await _serve(reader, session)
        try:
            # Only one process writes WARC files: a second recording gateway is refused.
            second = await _gateway(
                "serve",
                "--config",
                str(recorder),
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
            )
            status, _out, err = await _finish(second)
            assert status == 1
            assert "only one may write WARC files" in err

            async def record(n: int) -> None:
                url = f"{live_web}/page/{n}"
                async with session.get(f"{writer_url}/rec/resource", params={"url": url}) as resp:
                    assert resp.status == 200
                    await resp.read()

            async def look_up() -> int:
                answered = 0
                for n in range(80):
                    url = f"{live_web}/page/{n % 40}"
                    async with session.get(
                        f"{shared_url}/stored/index", params={"url": url}
                    ) as resp:
                        assert resp.status == 200, await resp.text()
                        answered += 1
                return answered

            adds = [
                await _gateway("store", "add", "--root", str(root), *map(str, files))
                for files in batches
            ]
            traffic = asyncio.gather(*(record(n) for n in range(40)), look_up())
            finished = await asyncio.gather(*(_finish(add) for add in adds))
            await traffic
            for status, out, err in finished:
                assert status == 0, err
                assert out.count("added as warcs/") == 8
                assert "locked" not in err
            # check beside the running processes: the writer's file is skipped, the rest is OK.
            status, out, err = await _finish(await _gateway("store", "check", "--root", str(root)))
            assert status == 0, out + err
            assert "being written or imported skipped" in out
            # repair needs the store to itself.
            status, out, err = await _finish(await _gateway("store", "repair", "--root", str(root)))
            assert status == 2
            assert "in use by another process" in err

            # The serving process finds every import and every recorded capture, no restart.
            for files in batches:
                for path in files:
                    params = {"url": import_url(path.name)}
                    async with session.get(f"{shared_url}/stored/resource", params=params) as resp:
                        assert resp.status == 200, await resp.text()
                        assert import_body(path.name) in await resp.read()
            for n in range(40):
                url = f"{live_web}/page/{n}"
                for _ in range(100):  # the writer acknowledges after the client's answer
                    async with session.get(
                        f"{shared_url}/stored/resource", params={"url": url}
                    ) as resp:
                        if resp.status == 200:
                            assert f"live page {n} ".encode() in await resp.read()
                            break
                    await asyncio.sleep(0.05)
                else:
                    pytest.fail(f"capture of {url} never became visible to the other process")
        finally:
            stopped = [await _stop(proc) for proc in (shared, writer)]
    for status, err in stopped:
        assert status == 0, err
        assert "locked" not in err
    report = await asyncio.to_thread(check_store, Layout(root), progress=False)
    assert report.ok, report.problems
    assert not list(root.glob("warcs/*.open"))
    assert not list(root.glob("incoming/*"))
    one = batches[0][0].name
    [stored] = [p for p in warc_files(root / "warcs") if p.name == one]
    assert stored.read_bytes() == batches[0][0].read_bytes()
