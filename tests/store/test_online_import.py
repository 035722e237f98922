"""Online import: ``gateway store add`` while ``gateway serve`` runs on the same store.

The server, the workers and ``store add`` are real processes; the load is
real HTTP requests to the server on 127.0.0.1 while the import runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Final

import aiohttp
import pytest

from gateway.jobs.db import connect, read_counts
from gateway.store.layout import Layout
from gateway.store.online_import import IMPORT, add_files
from tests.jobs.process_support import (
    Process,
    get_json,
    jobs_config,
    run_gateway,
    start_serve,
    start_worker,
)

DONE_WITHIN_S: Final = 120.0
#: Requests of the load at most (bounded even if the import were slow).
MAX_LOAD_REQUESTS: Final = 20_000


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "collections.yaml"
    config.write_text(jobs_config(tmp_path / "archive", plugins=()))
    return config


def _store_add(
    config: Path, *files: Path, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    args = ["store", "add", "--config", str(config), "--no-progress", *extra, *map(str, files)]
    return run_gateway(*args, cwd=config.parent, timeout_s=DONE_WITHIN_S)


async def _load(port: int, stop: asyncio.Event, statuses: Counter[int]) -> None:
    """Index lookups and health checks, four at a time, until ``stop``."""
    paths = ["/stored/index?url=http://www.iana.org/", "/_health", "/stored/index?url=iana.org"]
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:

        async def one_client(offset: int) -> None:
            sent = offset
            while not stop.is_set() and sum(statuses.values()) < MAX_LOAD_REQUESTS:
                async with session.get(paths[sent % len(paths)]) as response:
                    await response.read()
                    statuses[response.status] += 1
                sent += 1

        await asyncio.gather(*(one_client(i) for i in range(4)))


async def test_store_add_while_serving_under_load_fails_no_request(
    tmp_path: Path, sample_dir: Path
) -> None:
    config = _config(tmp_path)
    serve, port = await asyncio.to_thread(start_serve, config, tmp_path)
    statuses: Counter[int] = Counter()
    stop = asyncio.Event()
    try:
        load = asyncio.create_task(_load(port, stop, statuses))
        await asyncio.sleep(0.3)
        before = sum(statuses.values())
        result = await asyncio.to_thread(
            _store_add,
            config,
            sample_dir / "warcs" / "iana.warc.gz",
            sample_dir / "warcs" / "example.warc.gz",
        )
        stop.set()
        await load
        assert result.returncode == 0, result.stderr
        assert "iana.warc.gz: added as warcs/iana.warc.gz" in result.stdout
        assert "store add: 2 imported, 0 already present, 0 refused" in result.stdout
        # The server answered every request of the load, during the import too.
        assert set(statuses) == {200}, statuses
        assert sum(statuses.values()) > before
        # Captures are findable at once, without a restart.
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
            async with session.get("/stored/index?url=http://www.iana.org/") as response:
                lines = (await response.text()).splitlines()
            assert response.status == 200
            assert lines
            assert all('"filename": "iana.warc.gz"' in line for line in lines)
            async with session.get("/stored/resource?url=http://example.com?example=1") as response:
                body = await response.read()
            assert response.status == 200
            assert b"Example Domain" in body
    finally:
        stop.set()
        await asyncio.to_thread(serve.stop)
    assert serve.proc.returncode == 0, serve.describe()
    assert "Traceback" not in serve.logs()


def _import_counts(root: Path) -> dict[str, int]:
    conn = connect(Layout(root).db_path, read_only=True)
    try:
        return read_counts(conn, [IMPORT])["import"]
    finally:
        conn.close()


def _wait_imported(port: int, count: int) -> dict[str, object]:
    deadline = time.monotonic() + DONE_WITHIN_S
    while True:
        status, report = get_json(port, "/_jobs")
        assert status == 200
        states = report["types"]["import"]["states"]
        if states["imported"] == count:
            return report  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, report
        time.sleep(0.1)


def test_files_handed_in_without_waiting_are_imported_by_the_server(
    tmp_path: Path, sample_dir: Path
) -> None:
    config = _config(tmp_path)
    serve, port = start_serve(config, tmp_path)
    try:
        result = _store_add(config, sample_dir / "warcs" / "iana.warc.gz", extra=("--no-wait",))
        assert result.returncode == 0, result.stderr
        assert "handed in 1 file(s)" in result.stdout
        _wait_imported(port, 1)
        status, _ = get_json(port, "/_health")
        assert status == 200
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/stored/index?url=http://www.iana.org/")
        response = conn.getresponse()
        assert response.status == 200
        assert b'"filename": "iana.warc.gz"' in response.read()
        conn.close()
    finally:
        serve.stop()
    assert serve.proc.returncode == 0, serve.describe()


def test_a_worker_imports_what_was_handed_in(tmp_path: Path, sample_dir: Path) -> None:
    config = _config(tmp_path)
    result = _store_add(config, sample_dir / "warcs" / "example.warc.gz", extra=("--no-wait",))
    assert result.returncode == 0, result.stderr
    worker: Process = start_worker(config, tmp_path)
    try:
        copy = Layout(tmp_path / "archive").warcs / "example.warc.gz"
        deadline = time.monotonic() + DONE_WITHIN_S
        while _import_counts(tmp_path / "archive")["imported"] != 1:
            assert time.monotonic() < deadline, _import_counts(tmp_path / "archive")
            time.sleep(0.1)
    finally:
        worker.stop()
    assert worker.proc.returncode == 0, worker.describe()
    source = sample_dir / "warcs" / "example.warc.gz"
    assert (
        hashlib.sha256(copy.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    )
    assert not list((tmp_path / "archive" / "incoming").iterdir())


async def test_the_same_name_with_other_bytes_is_refused_and_the_same_file_is_present(
    tmp_path: Path, sample_dir: Path
) -> None:
    root = tmp_path / "archive"
    source = sample_dir / "warcs" / "example.warc.gz"
    first = await add_files(root, [source])
    assert [o.status for o in first.objects] == ["imported"]
    again = await add_files(root, [source])
    assert [o.status for o in again.objects] == ["present"]
    impostor = tmp_path / "other" / "example.warc.gz"
    impostor.parent.mkdir()
    shutil.copy(sample_dir / "warcs" / "iana.warc.gz", impostor)
    other = await add_files(root, [impostor, tmp_path / "missing.warc.gz"])
    assert [o.status for o in other.objects] == ["refused", "refused"]
    assert "a different file named example.warc.gz is already in the store" in str(
        other.objects[0]["reason"]
    )
    assert "cannot read" in str(other.objects[1]["reason"])
    assert not other.ok


@pytest.mark.parametrize("name", ["example-bad.warc.gz.bad", "bad.arc"])
async def test_a_broken_file_is_refused_with_the_record_and_offset(
    tmp_path: Path, sample_dir: Path, name: str
) -> None:
    source = tmp_path / "broken.warc.gz"
    shutil.copy(sample_dir / "warcs" / name, source)
    report = await add_files(tmp_path / "archive", [source])
    [obj] = report.objects
    assert obj.status == "refused"
    assert "offset" in str(obj["reason"])
    assert not list(Layout(tmp_path / "archive").warcs.iterdir())
    assert not list((tmp_path / "archive" / "incoming").iterdir())
