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

from gateway.jobs.actors import JobContext
from gateway.jobs.db import format_time, read_counts, utcnow
from gateway.jobs.hooks import Hooks
from gateway.jobs.jobs_db import JobsDB
from gateway.jobs.orchestrator import Orchestrator
from gateway.jobs.schema import connect
from gateway.jobs.settings import JobsSettings
from gateway.store.layout import Layout
from gateway.store.object_types import OBJECT_TYPES
from gateway.store.online_import import IMPORT, ImportActor, add_files
from gateway.store.settings import StoreSettings
from gateway.store.store_actor import StoreContext
from tests.jobs.process_support import (
    Process,
    get_json,
    jobs_config,
    run_gateway,
    start_serve,
    start_worker,
)
from tests.store.store_support import store_path, warc_files

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


def _scrub_now(root: Path, name: str) -> None:
    conn = connect(Layout(root).db_path)
    try:
        conn.execute(
            "UPDATE jobs_scrub SET retry_at = ? WHERE file_name = ?",
            (format_time(utcnow()), name),
        )
    finally:
        conn.close()


def _scrub_passes(root: Path, name: str) -> int:
    conn = connect(Layout(root).db_path, read_only=True)
    try:
        row = conn.execute(
            "SELECT passes, status FROM jobs_scrub WHERE file_name = ?", (name,)
        ).fetchone()
    finally:
        conn.close()
    return int(row[0]) if row is not None and row[1] == "good" else 0


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
        # The server's scrub actor runs too: make the imported file's next
        # verification due now (as if 30 days had passed) and see it done.
        _scrub_now(tmp_path / "archive", "iana.warc.gz")
        deadline = time.monotonic() + DONE_WITHIN_S
        while _scrub_passes(tmp_path / "archive", "iana.warc.gz") != 1:
            assert time.monotonic() < deadline, serve.logs()
            time.sleep(0.1)
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
        deadline = time.monotonic() + DONE_WITHIN_S
        while _import_counts(tmp_path / "archive")["imported"] != 1:
            assert time.monotonic() < deadline, _import_counts(tmp_path / "archive")
            time.sleep(0.1)
    finally:
        worker.stop()
    assert worker.proc.returncode == 0, worker.describe()
    source = sample_dir / "warcs" / "example.warc.gz"
    copy = store_path(Layout(tmp_path / "archive").warcs, "example.warc.gz")
    assert (
        hashlib.sha256(copy.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    )
    assert not list((tmp_path / "archive" / "incoming").iterdir())


async def test_store_add_settles_what_the_store_decides_before_handing_anything_in(
    tmp_path: Path, sample_dir: Path
) -> None:
    settings = StoreSettings(root=str(tmp_path / "archive"))
    source = sample_dir / "warcs" / "example.warc.gz"
    first = await add_files(settings, [source])
    assert [o.status for o in first.objects] == ["imported"]
    assert (first.objects[0].row.stored_as, first.settled) == ("example.warc.gz", [])
    again = await add_files(settings, [source])
    assert (again.objects, again.settled) == ([], [(source, "present", "example.warc.gz")])
    impostor = tmp_path / "other" / "example.warc.gz"
    impostor.parent.mkdir()
    shutil.copy(sample_dir / "warcs" / "iana.warc.gz", impostor)
    other = await add_files(settings, [impostor, tmp_path / "missing.warc.gz"])
    assert other.objects == []
    outcome = {path: (status, detail) for path, status, detail in other.settled}
    assert outcome[impostor][0] == outcome[tmp_path / "missing.warc.gz"][0] == "refused"
    assert "a different file named example.warc.gz is already in the store" in outcome[impostor][1]
    assert "not a regular file" in outcome[tmp_path / "missing.warc.gz"][1]
    assert not other.ok


async def _run_import_actor(root: Path) -> None:
    """An orchestrator of this process with the import actor, until nothing is due."""
    db = JobsDB(Layout(root).db_path, OBJECT_TYPES)
    await db.open()
    hooks = Hooks()
    hooks.add_object_types([IMPORT])
    ctx = JobContext(
        db=db, hooks=hooks, settings=JobsSettings(), owner="test", app=StoreContext(root=root)
    )
    orchestrator = Orchestrator(ctx, [ImportActor])
    task = asyncio.create_task(orchestrator.run())
    deadline = time.monotonic() + DONE_WITHIN_S
    try:
        while _import_counts(root)["queued"] + _import_counts(root)["verified"]:
            assert time.monotonic() < deadline, _import_counts(root)
            await asyncio.sleep(0.05)
    finally:
        orchestrator.stop()
        await asyncio.wait_for(task, DONE_WITHIN_S)
        await db.close()


@pytest.mark.parametrize("name", ["example-bad.warc.gz.bad", "bad.arc"])
async def test_the_actor_refuses_a_broken_file_with_the_record_and_offset(
    tmp_path: Path, sample_dir: Path, name: str
) -> None:
    root = tmp_path / "archive"
    source = tmp_path / "broken.warc.gz"
    shutil.copy(sample_dir / "warcs" / name, source)
    handed = await add_files(StoreSettings(root=str(root)), [source], wait=False)
    assert [o.status for o in handed.objects] == ["queued"]
    await _run_import_actor(root)
    conn = connect(Layout(root).db_path, read_only=True)
    try:
        [(status, reason)] = conn.execute("SELECT status, reason FROM jobs_import").fetchall()
    finally:
        conn.close()
    assert status == "refused"
    assert "offset" in reason
    assert not warc_files(Layout(root).warcs)


async def test_the_actor_refuses_the_second_of_two_files_with_one_name(
    tmp_path: Path, sample_dir: Path
) -> None:
    """Both pass the check before hand-in; the store decides when the first is in."""
    root = tmp_path / "archive"
    one = sample_dir / "warcs" / "example.warc.gz"
    other = tmp_path / "other" / "example.warc.gz"
    other.parent.mkdir()
    shutil.copy(sample_dir / "warcs" / "iana.warc.gz", other)
    report = await add_files(StoreSettings(root=str(root)), [one, other])
    assert [o.status for o in report.objects] == ["imported", "refused"]
    assert "a different file named example.warc.gz" in report.objects[1].row.reason
    assert store_path(Layout(root).warcs, "example.warc.gz").read_bytes() == one.read_bytes()
