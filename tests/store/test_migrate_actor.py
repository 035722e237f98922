"""The migrator actor (``migrate`` objects): batches newest first, restarts, new layouts, workers.

Stores are real (written by the store's own code, in layout 1), the
orchestrator and the actor are the ones ``gateway serve`` and ``gateway
worker`` run; ``gateway worker`` is a real process.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest

from gateway.commands.store import main as store_cli
from gateway.jobs.actors import ActorType, JobContext, object_types_of
from gateway.jobs.db import JobObject
from gateway.jobs.hooks import Hooks, hookimpl
from gateway.jobs.jobs_db import JobsDB
from gateway.jobs.orchestrator import Orchestrator
from gateway.jobs.settings import JobsSettings
from gateway.store.db import IndexDB
from gateway.store.integrity.check import check_store
from gateway.store.layout import Layout
from gateway.store.migration.actor import MigrateActor
from gateway.store.object_types import OBJECT_TYPES
from gateway.store.store_actor import StoreContext
from tests.jobs.process_support import jobs_config, start_worker
from tests.store.migrate_support import layout_chain, placed_files, written_store
from tests.store.test_store_migrate import CHAIN_3

DONE_WITHIN_S: Final = 60.0


class SmallBatches(MigrateActor):
    """Five files a tick (the default is 100)."""

    batch_size = 5


class StopAfterOneBatch:
    """A plugin that stops the orchestrator and its actor after the first batch."""

    def __init__(self) -> None:
        self.orchestrator: Orchestrator | None = None

    @hookimpl
    def on_transition_migrate_moving_to_moving_end(
        self, actor: ActorType, obj: JobObject[Any], won: bool
    ) -> None:
        actor.stopping = True
        assert self.orchestrator is not None
        self.orchestrator.stop()


def _migrate_objects(root: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(Layout(root).db_path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM jobs_migrate ORDER BY fs_version")]
    finally:
        conn.close()


def _versions_by_id(root: Path) -> list[int]:
    """Each file's ``fs_version``, oldest row first."""
    conn = sqlite3.connect(Layout(root).db_path)
    try:
        return [int(v) for (v,) in conn.execute("SELECT fs_version FROM files ORDER BY id")]
    finally:
        conn.close()


@pytest.fixture
async def jobs_db(tmp_path: Path) -> AsyncIterator[JobsDB]:
    root = tmp_path / "archive"
    written_store(root, 12)
    IndexDB(Layout(root).db_path).close()  # the schema steps, as opening the store runs them
    db = JobsDB(Layout(root).db_path, OBJECT_TYPES)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


async def _run(
    db: JobsDB, root: Path, actor_type: type[MigrateActor], plugin: object | None = None
) -> None:
    """One orchestrator with the migrator only, until its object is no longer ``moving``."""
    hooks = Hooks([plugin] if plugin is not None else [])
    hooks.add_object_types(object_types_of([actor_type]))
    settings = JobsSettings(poll_s=0.1)
    ctx = JobContext(
        db=db, hooks=hooks, settings=settings, owner="test", app=StoreContext(root=root)
    )
    orchestrator = Orchestrator(ctx, [actor_type])
    if isinstance(plugin, StopAfterOneBatch):
        plugin.orchestrator = orchestrator
    task = asyncio.create_task(orchestrator.run())
    deadline = time.monotonic() + DONE_WITHIN_S
    try:
        while not task.done():
            await asyncio.sleep(0.05)
            objects = _migrate_objects(root)
            settled = objects and all(o["status"] != "moving" for o in objects)
            if settled and not any(orchestrator.running.values()):
                break
            assert time.monotonic() < deadline, objects
    finally:
        orchestrator.stop()
        await asyncio.wait_for(task, DONE_WITHIN_S)


async def test_the_migrator_moves_newest_first_in_batches_and_goes_on_after_a_restart(
    tmp_path: Path, jobs_db: JobsDB
) -> None:
    root = tmp_path / "archive"
    assert _versions_by_id(root) == [1] * 12
    await _run(jobs_db, root, SmallBatches, StopAfterOneBatch())
    # One tick: the five newest files, and the pass's place is kept.
    assert _versions_by_id(root) == [1] * 7 + [2] * 5
    [obj] = _migrate_objects(root)
    assert (obj["status"], obj["processed"], obj["migrated"]) == ("moving", 5, 5)
    assert obj["cursor_id"] == 7
    # A new orchestrator (a restart) goes on from there to the end.
    await _run(jobs_db, root, SmallBatches)
    assert _versions_by_id(root) == [2] * 12
    [obj] = _migrate_objects(root)
    assert (obj["status"], obj["processed"], obj["migrated"], obj["passes"]) == (
        "current",
        12,
        12,
        1,
    )
    assert obj["cursor_id"] is None
    assert "12 migrated" in obj["result"]
    assert placed_files(root)[1] == []
    report = await asyncio.to_thread(check_store, Layout(root))
    assert report.ok, report.problems


async def test_a_pass_that_leaves_a_file_behind_waits_then_tries_again(
    tmp_path: Path, jobs_db: JobsDB
) -> None:
    root = tmp_path / "archive"
    layout = Layout(root)
    db = IndexDB(layout.db_path)
    try:
        newest = db.file_by_name(max(p.name for p in layout.walk()))
        assert newest is not None
        assert newest.date is not None
        blocker = layout.path_of(newest.name, fs_version=2, date=newest.date)
    finally:
        db.close()
    blocker.parent.mkdir(parents=True)
    blocker.write_bytes(b"another file of that name")  # a name clash at the new place
    await _run(jobs_db, root, MigrateActor)
    [obj] = _migrate_objects(root)
    assert (obj["status"], obj["migrated"], obj["left_behind"]) == ("waiting", 11, 1)
    assert obj["retry_at"] > obj["updated_at"]  # not due at once
    assert blocker.read_bytes() == b"another file of that name"
    blocker.unlink()
    conn = sqlite3.connect(layout.db_path)
    conn.execute("UPDATE jobs_migrate SET retry_at = updated_at")  # the 10 minutes are up
    conn.commit()
    conn.close()
    await _run(jobs_db, root, MigrateActor)
    [obj] = _migrate_objects(root)
    assert (obj["status"], obj["migrated"], obj["left_behind"], obj["passes"]) == (
        "current",
        1,
        0,
        2,
    )
    versions, stray = placed_files(root)
    assert (set(versions.values()), stray) == ({2}, [])


async def test_a_new_layout_step_is_taken_by_the_migrator_and_the_old_object_is_superseded(
    tmp_path: Path, jobs_db: JobsDB
) -> None:
    root = tmp_path / "archive"
    await _run(jobs_db, root, MigrateActor)
    assert [o["status"] for o in _migrate_objects(root)] == ["current"]
    conn = sqlite3.connect(Layout(root).db_path)
    conn.execute("UPDATE jobs_migrate SET retry_at = updated_at")  # its daily check is due
    conn.commit()
    conn.close()
    with layout_chain(*CHAIN_3):  # a release that adds layout 3
        await _run(jobs_db, root, MigrateActor)
        assert _versions_by_id(root) == [3] * 12
        assert placed_files(root)[1] == []
        assert all("/v3/" in str(path) for path in Layout(root).walk())
    objects = _migrate_objects(root)
    assert [(o["fs_version"], o["status"]) for o in objects] == [
        (2, "superseded"),
        (3, "current"),
    ]
    assert objects[0]["retry_at"] is None  # final, kept as history
    assert objects[1]["migrated"] == 12


def test_gateway_worker_runs_the_migrator(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    written_store(root, 6)
    config = tmp_path / "jobs.yaml"
    config.write_text(jobs_config(root, plugins=()), encoding="utf-8")
    worker = start_worker(config, tmp_path)
    try:
        deadline = time.monotonic() + DONE_WITHIN_S
        while _versions_by_id(root) != [2] * 6 or [o["status"] for o in _migrate_objects(root)] != [
            "current"
        ]:
            assert time.monotonic() < deadline, worker.describe()
            time.sleep(0.1)
    finally:
        worker.stop()
    assert worker.proc.returncode == 0, worker.describe()
    assert placed_files(root)[1] == []


#: Files of the worker kill test, and kills: small files, so the test stays short.
KILL_FILES: Final = 300
WORKER_KILLS: Final = 8


def _moved(root: Path) -> int:
    return _versions_by_id(root).count(2)


@pytest.mark.timeout(300)
def test_kill_9_of_a_worker_moving_files_loses_nothing_and_the_next_one_goes_on(
    tmp_path: Path,
) -> None:
    """A worker's migrator killed mid-batch: its lease expires, the next worker goes on."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    root = tmp_path / "archive"
    written_store(root, KILL_FILES, payload=lambda i: f"capture {i}\n".encode() * 50)
    config = tmp_path / "jobs.yaml"
    config.write_text(
        f"store:\n  root: {root}\n  fsync: never\n"
        "jobs:\n  poll_s: 0.2\n  migrate_max_tick_s: 1.5\n"
        "collections:\n  stored: $store\n",
        encoding="utf-8",
    )
    kills_in_moves = 0
    for kill in range(WORKER_KILLS):
        before = _moved(root)
        share = (KILL_FILES - before) / (WORKER_KILLS - kill + 1)
        target = min(KILL_FILES - 1, before + max(1, round(share * rng.uniform(0.3, 1.7))))
        worker = start_worker(config, tmp_path, name=f"worker{kill}")
        try:
            deadline = time.monotonic() + DONE_WITHIN_S
            while _moved(root) < target and worker.proc.poll() is None:
                assert time.monotonic() < deadline, (seed, kill, worker.describe())
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.01))  # somewhere inside the next move
            os.kill(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait(timeout=DONE_WITHIN_S)
        finally:
            worker.stop()
        assert worker.proc.returncode == -signal.SIGKILL, (seed, kill, worker.describe())
        kills_in_moves += before < _moved(root) < KILL_FILES
        report = check_store(Layout(root), progress=False)
        assert report.ok, (seed, kill, [str(p) for p in report.problems])
    assert kills_in_moves >= WORKER_KILLS // 2, (seed, kills_in_moves)
    worker = start_worker(config, tmp_path, name="last")
    try:
        deadline = time.monotonic() + DONE_WITHIN_S
        while [o["status"] for o in _migrate_objects(root)] != ["current"]:
            assert time.monotonic() < deadline, (seed, worker.describe())
            time.sleep(0.1)
    finally:
        worker.stop()
    assert _versions_by_id(root) == [2] * KILL_FILES
    # What kills left between a commit and a removal (an old copy) the command's
    # reconcile pass removes; nothing else is out of place.
    assert store_cli(["migrate", "--root", str(root), "--no-progress"]) == 0
    assert placed_files(root)[1] == []
    report = check_store(Layout(root), progress=False)
    assert report.ok, [str(p) for p in report.problems]
    assert report.notes == []
