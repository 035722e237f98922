"""Layout migration under kill -9 and under load (issue 14 §5), with real processes.

- **kill -9**: a layout-1 store of 1,000 files (ten of 2.5 MB, copied in
  several chunks, so kills land inside copies too) is migrated by
  ``gateway store migrate`` processes killed with SIGKILL at 50 random
  moments, while a ``gateway serve`` process serves the store throughout.
  After every kill: ``store check`` passes and every capture loads through
  ``/resource`` with its payload; once a last run finishes, every file is
  in layout 2, exactly once, and nothing else is left under ``warcs/``.
  Most kills land when the run has moved a random number of files more
  (the test watches the index), a random few milliseconds into the next
  move; one in eight lands at a random moment from the start of the
  process (opening the store, the first batch). The seed is printed
  (``MIGRATE_CRASH_SEED=... pytest ...`` repeats a run).
- **under load**: the release at af8b42d's own store opens in ``gateway
  serve`` and serves at once; ``gateway store migrate`` moves it while
  clients keep requesting every capture, and no request fails.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, Final, Protocol

import aiohttp
import pytest

from gateway.store.integrity.check import check_store
from gateway.store.layout import Layout
from tests.conftest import free_port
from tests.store.migrate_support import payload_of, placed_files, url_of, written_store
from tests.store.test_store_legacy import _extract

REPO: Final = Path(__file__).resolve().parents[2]
FILES: Final = 1_000
KILLS: Final = 50
START_TIMEOUT_S: Final = 60.0
#: Concurrent requests of the verification and of the load.
CONCURRENCY: Final = 16
#: The serving gateway's migrator moves the five files of the fixture within this.
DONE_WITHIN_S: Final = 120.0


def _spawn(*args: str, stdin: int | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


class Serve(Protocol):
    """Starts ``gateway serve`` of a store (``jobs``: with its background work); its base URL."""

    def __call__(
        self, root: Path, session: aiohttp.ClientSession, *, jobs: bool = False
    ) -> Awaitable[str]: ...


@pytest.fixture
async def serve_store(tmp_path: Path) -> AsyncIterator[Serve]:
    """``start(root, session)``: ``gateway serve`` of the store at ``root`` (``$store`` as
    ``stored``) on a free port, once it is ready; returns its base URL. Stopped after."""
    procs: list[subprocess.Popen[bytes]] = []

    async def start(root: Path, session: aiohttp.ClientSession, *, jobs: bool = False) -> str:
        config = tmp_path / "serve.yaml"
        config.write_text(
            f"store: {{root: {root}}}\njobs: {{enabled: {str(jobs).lower()}, poll_s: 0.2}}\n"
            "collections:\n  stored: $store\n"
        )
        port = str(free_port())
        proc = _spawn(
            "gateway.cli", "serve", "--config", str(config), "--host", "127.0.0.1", "--port", port
        )
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, proc.communicate()[0].decode()[-2000:]
            try:
                async with session.get(f"{base}/_ready") as resp:
                    if resp.status == 200:
                        return base
            except aiohttp.ClientConnectionError:
                pass
            assert time.monotonic() < deadline, "gateway serve did not start"
            await asyncio.sleep(0.05)

    yield start
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.communicate, None, 60)


async def _load(
    session: aiohttp.ClientSession,
    base: str,
    payloads: dict[str, bytes],
    urls: list[str],
    failures: list[str],
) -> int:
    """GET ``urls`` in turn, each record holding its payload, until cancelled; count them."""
    done = 0
    try:
        while True:
            for url in urls:
                async with session.get(f"{base}/stored/resource", params={"url": url}) as resp:
                    body = await resp.read()
                    if resp.status != 200 or payloads[url] not in body:
                        failures.append(f"{url}: {resp.status} {body[:300]!r}")
                done += 1
    except asyncio.CancelledError:
        return done


async def _every_capture_loads(
    session: aiohttp.ClientSession, base: str, payloads: dict[str, bytes], method: str
) -> None:
    """Every capture through ``/resource``, ``CONCURRENCY`` at a time.

    ``GET``: each record holds its payload. ``HEAD``: each record is found
    and opened, its headers read (``store check`` has verified every
    record's digests and every file's SHA-256 against its row).
    """
    queue = list(payloads)

    async def worker() -> None:
        while queue:
            url = queue.pop()
            params = {"url": url}
            async with session.request(method, f"{base}/stored/resource", params=params) as resp:
                body = await resp.read()
                assert resp.status == 200, (url, body[:500])
                assert method == "HEAD" or payloads[url] in body, url

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


def _moved(root: Path) -> int:
    db = sqlite3.connect(f"{(root / 'index.sqlite3').as_uri()}?mode=ro", uri=True)
    try:
        (count,) = db.execute("SELECT COUNT(*) FROM files WHERE fs_version = 2").fetchone()
    finally:
        db.close()
    return int(count)


def _driver(root: Path) -> subprocess.Popen[bytes]:
    """A migrate process, started and ready (its imports done), waiting for the word."""
    proc = _spawn("tests.store.migrate_driver", str(root), stdin=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    return proc


async def _kill_at_random(
    proc: subprocess.Popen[bytes], root: Path, rng: random.Random, target: int | None, limit: int
) -> bytes:
    """Start the run; SIGKILL it once ``target`` files are moved (then a few ms more),
    or, with no target, at a random moment from its start, before ``limit`` files are
    moved. Returns its output."""
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    if target is None:
        until = time.monotonic() + rng.uniform(0.0, 0.3)
        while time.monotonic() < until and _moved(root) < limit:
            if proc.poll() is not None:
                break  # it ended: the assertion after the kill says so
            await asyncio.sleep(0.002)
    else:
        deadline = time.monotonic() + 120
        while _moved(root) < target and proc.poll() is None:
            assert time.monotonic() < deadline, "the migration made no progress"
            await asyncio.sleep(0.002)
        await asyncio.sleep(rng.uniform(0.0, 0.012))  # somewhere inside the next move
    proc.send_signal(signal.SIGKILL)
    output, _ = await asyncio.to_thread(proc.communicate, None, 30)
    return output


@pytest.mark.timeout(600)
async def test_kill_9_during_a_migration_at_50_random_moments(
    tmp_path: Path, serve_store: Serve
) -> None:
    seed = int(os.environ.get("MIGRATE_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"migrate crash test seed: {seed}")
    root = tmp_path / "store"
    await asyncio.to_thread(written_store, root, FILES)
    payloads = {url_of(index): payload_of(index) for index in range(FILES)}
    urls = list(payloads)
    kills_in_moves = served_while_moving = 0
    failures: list[str] = []
    async with aiohttp.ClientSession() as session:
        base = await serve_store(root, session)
        proc = await asyncio.to_thread(_driver, root)
        for kill in range(KILLS):
            before = _moved(root)
            step = max(1, round((FILES - before) / (KILLS - kill + 1) * rng.uniform(0.3, 1.7)))
            # At least 10 files a kill, and 30 more, are left for the kills after this
            # one: a kill lands some files after its target (more on an idle machine,
            # where moves are quick), and the last must not find the end.
            last_target = max(before + 1, FILES - 10 * (KILLS - kill) - 30)
            target = None if rng.random() < 1 / 8 else min(last_target, before + step)
            # Clients keep loading captures while the files move, then the kill.
            load = [
                asyncio.create_task(_load(session, base, payloads, rng.sample(urls, 50), failures))
                for _ in range(2)
            ]
            output = await _kill_at_random(proc, root, rng, target, last_target)
            for task in load:
                task.cancel()
            served_while_moving += sum(await asyncio.gather(*load))
            assert proc.returncode == -signal.SIGKILL, (seed, kill, output.decode()[-2000:])
            assert failures == [], (seed, kill)
            kills_in_moves += before < _moved(root)
            # The next process starts while the state this kill left is verified.
            spawning = asyncio.create_task(asyncio.to_thread(_driver, root))
            checked = asyncio.to_thread(check_store, Layout(root), progress=False)
            report, _ = await asyncio.gather(
                checked, _every_capture_loads(session, base, payloads, "HEAD")
            )
            assert report.ok, (seed, kill, [str(p) for p in report.problems])
            proc = await spawning
        assert _moved(root) < FILES, "the migration ended before the last kill"
        assert kills_in_moves >= KILLS // 2, kills_in_moves
        assert served_while_moving > KILLS
        # The last run goes to the end.
        assert proc.stdin is not None
        output, _ = await asyncio.to_thread(proc.communicate, b"go\n", 300)
        assert proc.returncode == 0, output.decode()[-3000:]
        assert b"0 imported, 0 invalid, 0 merged" in output
        versions, stray = placed_files(root)
        assert len(versions) == FILES
        assert set(versions.values()) == {2}
        assert stray == []
        await _every_capture_loads(session, base, payloads, "GET")
    report = await asyncio.to_thread(check_store, Layout(root), progress=False)
    assert report.ok, [str(p) for p in report.problems]
    assert report.notes == []


class LegacyLoad:
    """``CONCURRENCY`` clients loading the captures of the ``clean`` fixture, each from its file.

    ``failures``: every answer that is not a 200; ``completed``: for each
    request done, how many files were in layout 2 when it completed.
    """

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.captures = [
            row for row in manifest["clean"]["index"] if "__wb_method=post" not in row["urlkey"]
        ]
        self.failures: list[str] = []
        self.completed: list[int] = []
        self._wanted = 0
        self._enough = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, session: aiohttp.ClientSession, base: str) -> None:
        rows = self.captures
        self._tasks = [
            asyncio.create_task(self._client(session, base, rows[n::4] or rows))
            for n in range(CONCURRENCY)
        ]

    async def more(self, rounds: int) -> None:
        """Wait until each capture was loaded ``rounds`` more times (in all)."""
        self._wanted = len(self.completed) + rounds * len(self.captures)
        self._enough.clear()
        await self._enough.wait()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _client(
        self, session: aiohttp.ClientSession, base: str, rows: list[dict[str, str]]
    ) -> None:
        while True:
            for row in rows:
                params = {
                    "url": row["url"],
                    "closest": row["timestamp"],
                    "filter": f"filename:{row['filename'].removesuffix('.open')}",
                }
                async with session.get(f"{base}/stored/resource", params=params) as resp:
                    await resp.read()
                    if resp.status != 200:
                        self.failures.append(f"{resp.status} {row}")
                self.completed.append(_moved(self.root))
                if len(self.completed) >= self._wanted:
                    self._enough.set()


@pytest.mark.timeout(300)
async def test_the_previous_releases_store_migrates_while_served_under_load(
    tmp_path: Path, serve_store: Serve
) -> None:
    root = tmp_path / "clean"
    load = LegacyLoad(root, _extract(tmp_path))
    async with aiohttp.ClientSession() as session:
        base = await serve_store(root, session)  # it opens and serves at once, unmigrated
        load.start(session, base)
        await load.more(5)  # under load before the migration starts
        migrate = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway.cli",
            "store",
            "migrate",
            "--root",
            str(root),
            "--no-progress",
            cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await migrate.communicate()
        await load.more(5)  # and after it
        await load.stop()
    assert migrate.returncode == 0, output.decode()
    assert b"5 processed, 5 migrated" in output
    assert load.failures == []
    assert load.completed[0] == 0
    assert load.completed[-1] == 5
    versions, stray = placed_files(root)
    assert sorted(versions.values()) == [1, 2, 2, 2, 2, 2]  # the file it adopted stays
    assert stray == []


@pytest.mark.timeout(300)
async def test_the_servers_own_migrator_moves_the_previous_releases_store_under_load(
    tmp_path: Path, serve_store: Serve
) -> None:
    """No command: the migrator actor of ``gateway serve`` moves the files while it serves."""
    root = tmp_path / "clean"
    load = LegacyLoad(root, _extract(tmp_path))
    async with aiohttp.ClientSession() as session:
        base = await serve_store(root, session, jobs=True)
        load.start(session, base)
        deadline = time.monotonic() + DONE_WITHIN_S
        while not load.completed or load.completed[-1] < 5:
            assert time.monotonic() < deadline, (load.completed[-1:], placed_files(root))
            await asyncio.sleep(0.1)
        await load.more(2)  # and requests after it
        await load.stop()
    assert load.failures == []
    versions, stray = placed_files(root)
    assert sorted(versions.values()) == [1, 2, 2, 2, 2, 2]  # the file it adopted stays
    assert stray == []
    conn = sqlite3.connect(root / "index.sqlite3")
    try:
        [(status, migrated)] = conn.execute("SELECT status, migrated FROM jobs_migrate").fetchall()
    finally:
        conn.close()
    assert (status, migrated) == ("current", 5)
