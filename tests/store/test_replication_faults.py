"""Replication's failure modes, shown rather than argued (issue 13 §7):

- the S3 server killed in the middle of a copy: the run fails and releases its
  claim (``missing``: a claim is never a copy), the next run makes the copy at
  once once the server is back, and what the killed upload left is removed
  once older than ``archival_max_age_s``;
- the S3 server down for a copy object's first round: the copy is retried by its
  object after a backoff, the claim renewed, and made once the server is back;
- ``gateway store replicate`` SIGKILLed at 20 random moments while it uploads
  (multipart uploads to SeaweedFS): no ``present`` copy is ever incomplete or
  wrong, and a run after the last kill makes every file safe;
- ``gateway worker`` (the jobs' replication worker, fed by its own director)
  SIGKILLed at random moments while it uploads: the same, and the next worker
  ticks the dead one's batch once its lease expires and makes every file safe
  with no command run.

The seed is printed so that a failing run can be repeated
(``REPLICATION_CRASH_SEED=... pytest ...``).
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
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from gateway.config import load_config
from gateway.jobs.db import JobObject, parse_time, utcnow
from gateway.storage.pool import StoragePool
from gateway.storage.s3 import S3Storage
from gateway.store.job_rows import BatchColumns, CopyColumns
from gateway.store.layout import Layout
from gateway.store.object_types import BATCH, COPY
from gateway.store.replication.batch import BatchActor, read_batch_copies
from gateway.store.replication.copy import ROUND_BACKOFF_BASE_S, CopyActor
from gateway.store.replication.passes import enqueue_pass, open_jobs, read_pass, work_pass
from gateway.store.replication.replicas import Replicas
from tests.conftest import run_seaweedfs
from tests.jobs.process_support import start_worker
from tests.storage.seaweedfs import SeaweedFS
from tests.store.replication_support import (
    BUCKET,
    REPO,
    closed_files,
    copies_json,
    copy_rows,
    gateway_store,
    record_files,
    s3_place,
    write_config,
)
from tests.store.store_support import store_path

#: Captures of 4 MB: a WARC file of three holds 12 MB, a multipart upload of 3 parts.
BODY_BYTES: Final = 4_000_000
KILL_ROUNDS: Final = 20
#: Kills of ``gateway worker`` (each waits for the dead worker's lease to expire).
WORKER_KILL_ROUNDS: Final = 5
#: The replication worker's lease in that test: how long a dead worker's batch waits.
WORKER_LEASE_S: Final = 4.0
MAX_AGE_S: Final = 1.0
#: Long enough for the copier's retries, a SeaweedFS restart and a run before it expires.
STOPPED_MAX_AGE_S: Final = 30.0


@pytest.fixture(scope="module")
def own_seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A SeaweedFS of this module's own, which a test kills and restarts."""
    yield from run_seaweedfs(tmp_path_factory.mktemp("seaweedfs-replication"), [BUCKET])


def _start_replicate(config: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "gateway.cli", "store", "replicate", "--once"),
            *("--no-progress", "--config", str(config)),
        ],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_ongoing(
    root: Path, proc: subprocess.Popen[str] | subprocess.Popen[bytes], timeout_s: float = 60
) -> bool:
    """Wait until a copy is ``ongoing`` (True) or the process has ended (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = copy_rows(root) if (root / "index.sqlite3").exists() else {}
        if any(status == "ongoing" for status, _ in rows.values()):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    raise AssertionError("no copy started in time")


async def _objects(config: Path) -> dict[str, tuple[int, str]]:
    """Every object under the S3 storage's prefix: name -> (size, SHA-256 read back)."""
    pool = StoragePool(load_config(config).store.storages)
    try:
        storage = await pool.get("s3")
        found = {}
        async for info in storage.iter():
            found[info.name] = (info.size, await storage.digest(info.name))
        return found
    finally:
        await pool.close()


async def _leftovers(config: Path) -> list[str]:
    """Staging keys and multipart uploads under the storage's prefix."""
    pool = StoragePool(load_config(config).store.storages)
    try:
        storage = await pool.get("s3")
        assert isinstance(storage, S3Storage)
        bucket, staging = storage.config.bucket, storage.config.prefix + ".partial/"
        listing = await storage.client.list_objects_v2(Bucket=bucket, Prefix=staging)
        uploads = await storage.client.list_multipart_uploads(Bucket=bucket, Prefix=staging)
        return [item["Key"] for item in listing.get("Contents", [])] + [
            upload["Key"] for upload in uploads.get("Uploads", [])
        ]
    finally:
        await pool.close()


@pytest.mark.timeout(240)
def test_the_s3_server_stopped_in_the_middle_of_a_copy(
    own_seaweedfs: SeaweedFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in own_seaweedfs.environ().items():
        monkeypatch.setenv(key, value)
    root = tmp_path / "store"
    record_files(root, captures=6, body_bytes=BODY_BYTES, rollover_bytes=30_000_000)
    files = closed_files(root)
    assert len(files) == 1
    ((name, sha256),) = files.items()
    place = s3_place(own_seaweedfs.endpoint)
    config = write_config(
        tmp_path / "c.yaml", root, [place], copies=2, archival_max_age_s=STOPPED_MAX_AGE_S
    )
    proc = _start_replicate(config, dict(os.environ))
    try:
        assert _wait_for_ongoing(root, proc), "the copy ended before the server could be stopped"
        time.sleep(0.3)  # the upload is under way
        killed_at = time.time()
        own_seaweedfs.kill()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out + err
    assert f"not safe: {name} (1 of 2 copies): primary -> s3: retry:" in err
    # The run ended: its claim is released, never left to count as a copy (issue 25 §3).
    assert copy_rows(root)[(name, "s3")] == ("missing", sha256)
    listing = copies_json(config)
    assert listing["files"][0]["copies"]["s3"]["status"] == "missing"
    assert "released" in listing["files"][0]["copies"]["s3"]["detail"]
    assert "retry" in listing["files"][0]["copies"]["s3"]["detail"]
    own_seaweedfs.restart()
    # The next run makes the copy at once, not after archival_max_age_s.
    soon = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert soon.returncode == 0, soon.stdout + soon.stderr
    assert "1 copied" in soon.stdout
    assert copy_rows(root)[(name, "s3")] == ("present", sha256)
    # What the killed multipart upload left goes once older than archival_max_age_s.
    time.sleep(max(0.0, killed_at + STOPPED_MAX_AGE_S + 0.2 - time.time()))
    later = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert later.returncode == 0, later.stderr
    assert "removed" in later.stdout  # what the killed multipart upload left
    objects = asyncio.run(_objects(config))
    assert objects == {name: (store_path(root / "warcs", name).stat().st_size, sha256)}
    assert asyncio.run(_leftovers(config)) == []


@pytest.mark.timeout(240)
def test_a_copy_that_failed_transiently_is_retried_by_its_copy_object(
    own_seaweedfs: SeaweedFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The S3 server down for the first round of a copy object: the copy fails
    transiently (after the copier's own retries), keeps its ``ongoing`` claim, and the
    object is due again after its backoff; with the server back, its next round renews
    the claim and makes the copy, and the batch ends ``done``."""
    for key, value in own_seaweedfs.environ().items():
        monkeypatch.setenv(key, value)
    root = tmp_path / "store"
    record_files(root, captures=2, body_bytes=30_000, rollover_bytes=1_000_000)
    ((name, sha256),) = closed_files(root).items()
    config = write_config(tmp_path / "c.yaml", root, [s3_place(own_seaweedfs.endpoint)], copies=2)
    settings = load_config(config).store

    async def replicate() -> tuple[JobObject[BatchColumns], JobObject[CopyColumns], float, float]:
        replicas = Replicas(settings, Layout(root))
        db, ctx = await open_jobs(root, settings, None, [BATCH, COPY], "test")
        try:
            pass_id = await enqueue_pass(replicas, ctx)
            await BatchActor(ctx).run()
            (batch,) = await db.call(read_pass, pass_id)
            first_claim = _claimed_at(root, name)
            own_seaweedfs.kill()
            await CopyActor(ctx).run()  # the first round; the second is not due yet
            (copy,) = await db.call(read_batch_copies, batch.id)
            assert (copy.status, copy.row.rounds) == ("queued", 1), copy
            assert [item.name for item in copy.row.todo] == [name]
            assert copy_rows(root)[(name, "s3")] == ("ongoing", sha256)
            assert copy.retry_at is not None
            due_in_s = (parse_time(copy.retry_at) - utcnow()).total_seconds()
            assert 0 < due_in_s <= ROUND_BACKOFF_BASE_S
            own_seaweedfs.restart()
            objects = await work_pass(ctx, pass_id)  # waits for the backoff, then copies
            (copy,) = await db.call(read_batch_copies, batch.id)
            return objects[0], copy, first_claim, _claimed_at(root, name)
        finally:
            await db.close()
            await replicas.close()

    batch, copy, first_claim, last_claim = asyncio.run(replicate())
    assert (batch.status, copy.status) == ("done", "done")
    assert batch.row.outcomes == {"copied": 1, "retry": 1}
    assert batch.row.rounds == 1
    assert copy_rows(root)[(name, "s3")] == ("present", sha256)
    assert last_claim > first_claim  # the retry renewed the claim; present since then
    objects = asyncio.run(_objects(config))
    assert objects == {name: (store_path(root / "warcs", name).stat().st_size, sha256)}


def _claimed_at(root: Path, name: str) -> float:
    with sqlite3.connect(root / "index.sqlite3") as conn:
        (mtime,) = conn.execute(
            "SELECT mtime FROM copies WHERE name = ? AND storage = 's3'", (name,)
        ).fetchone()
    return float(mtime)


def _reset(root: Path) -> None:
    """Forget every copy (rows and, by the caller, objects): the next round starts over."""
    with sqlite3.connect(root / "index.sqlite3") as conn:
        conn.execute("DELETE FROM copies")


async def _delete_objects(config: Path) -> None:
    pool = StoragePool(load_config(config).store.storages)
    try:
        storage = await pool.get("s3")
        assert isinstance(storage, S3Storage)
        names = [info.name async for info in storage.iter()]
        for name in names:
            await storage.client.delete_object(
                Bucket=storage.config.bucket, Key=storage.config.prefix + name
            )
    finally:
        await pool.close()


def _copying_s(config: Path, root: Path, env: dict[str, str]) -> float:
    """Seconds from the first ``ongoing`` copy to the end of a whole ``replicate --once``.

    The copies are then forgotten (rows and objects): the caller starts from
    nothing copied.
    """
    proc = _start_replicate(config, env)
    assert _wait_for_ongoing(root, proc)
    started = time.monotonic()
    out, err = proc.communicate(timeout=120)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, out + err
    asyncio.run(_delete_objects(config))
    _reset(root)
    return seconds


@pytest.mark.timeout(420)
def test_sigkill_of_the_worker_at_random_moments(
    s3_env: SeaweedFS, replication_bucket: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("REPLICATION_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"replication crash test seed: {seed}")
    root = tmp_path / "store"
    record_files(root, captures=6, body_bytes=BODY_BYTES, rollover_bytes=10_000_000)
    files = closed_files(root)
    assert len(files) == 2  # two files of three 4 MB captures: 3 parts each on S3
    config = write_config(
        tmp_path / "c.yaml",
        root,
        [s3_place(s3_env.endpoint)],
        copies=2,
        archival_max_age_s=MAX_AGE_S,
        parallel_copies=2,
    )
    env = dict(os.environ)
    # Kill moments spread over what the copies take here under the present
    # load (a fixed second was past the end of most copies on a busy machine).
    window_s = _copying_s(config, root, env)
    mid_copy = rounds = 0
    # KILL_ROUNDS kills, and more (up to three times as many) until half of
    # them have landed mid-copy: where a kill lands depends on the load.
    while rounds < KILL_ROUNDS or (mid_copy < KILL_ROUNDS // 2 and rounds < 3 * KILL_ROUNDS):
        if rounds:  # start each round from nothing copied; the last one's state stays
            asyncio.run(_delete_objects(config))
            _reset(root)
        round_no = rounds
        rounds += 1
        proc = _start_replicate(config, env)
        try:
            started = _wait_for_ongoing(root, proc)
            if started:
                time.sleep(rng.uniform(0.0, window_s))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
        mid_copy += any(status == "ongoing" for status, _ in copy_rows(root).values())
        _check_whole(config, root, files, f"seed {seed}, round {round_no}")  # ever
    print(f"{mid_copy} of {rounds} kills landed mid-copy (kill window {window_s:.2f} s)")
    assert mid_copy >= KILL_ROUNDS // 2, f"seed {seed}: too few kills landed mid-copy"
    left = asyncio.run(_leftovers(config))
    time.sleep(MAX_AGE_S + 0.2)  # the killed claims expire
    done = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert done.returncode == 0, done.stdout + done.stderr
    if left:
        assert "leftover(s) of interrupted copies" in done.stdout
    listing = copies_json(config)
    assert listing["summary"]["safe"] == len(files), listing
    assert asyncio.run(_objects(config)) == {
        name: (store_path(root / "warcs", name).stat().st_size, sha) for name, sha in files.items()
    }
    assert asyncio.run(_leftovers(config)) == []


def _check_whole(config: Path, root: Path, files: dict[str, str], why: str) -> None:
    """Every object under the name is whole, and every ``present`` row is true."""
    objects = asyncio.run(_objects(config))
    for name, (size, digest) in objects.items():
        assert digest == files[name], f"{why}: {name} is not whole"
        assert size == store_path(root / "warcs", name).stat().st_size, why
    for (name, storage), (status, sha256) in copy_rows(root).items():
        if storage == "s3" and status == "present":  # (the worker's scrub verifies primaries)
            assert objects.get(name, (0, ""))[1] == sha256 == files[name], why


def _all_present(root: Path, files: dict[str, str]) -> bool:
    rows = copy_rows(root)
    return all(rows.get((name, "s3")) == ("present", sha) for name, sha in files.items())


@pytest.mark.timeout(900)
def test_sigkill_of_gateway_worker_mid_upload_then_a_new_worker_converges(
    s3_env: SeaweedFS, replication_bucket: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("REPLICATION_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"replication worker crash test seed: {seed}")
    root = tmp_path / "store"
    record_files(root, captures=6, body_bytes=BODY_BYTES, rollover_bytes=10_000_000)
    files = closed_files(root)
    assert len(files) == 2  # 3 parts each on S3
    jobs = {"poll_s": 0.1, "replicate_interval_s": 0.3, "replicate_max_tick_s": WORKER_LEASE_S}
    config = write_config(
        tmp_path / "c.yaml",
        root,
        [s3_place(s3_env.endpoint)],
        copies=2,
        archival_max_age_s=MAX_AGE_S,
        parallel_copies=2,
        jobs=jobs,
    )
    mid_copy = 0
    # At least WORKER_KILL_ROUNDS kills, and more (up to 3x) until one lands mid-copy:
    # how long a copy takes depends on the machine, a kill's moment on the seed.
    rounds = WORKER_KILL_ROUNDS * 3
    for round_no in range(rounds):
        worker = start_worker(config, tmp_path, name=f"worker-{round_no}")
        try:
            # The first round's director starts at once; later ones wait for the
            # dead worker's lease on its batch to expire.
            started = _wait_for_ongoing(root, worker.proc, timeout_s=WORKER_LEASE_S + 60)
            if started:
                time.sleep(rng.uniform(0.0, 1.0))
        finally:
            worker.proc.send_signal(signal.SIGKILL)
            worker.proc.wait(timeout=60)
        mid_copy += not _all_present(root, files)
        _check_whole(config, root, files, f"seed {seed}, round {round_no}")
        if round_no + 1 >= WORKER_KILL_ROUNDS and mid_copy >= 1:
            break
        if round_no < rounds - 1:  # start the next round from nothing copied
            asyncio.run(_delete_objects(config))
            _reset(root)
    print(f"{mid_copy} of {round_no + 1} kills landed before every copy was made")
    assert mid_copy >= 1, f"seed {seed}: no kill landed mid-copy"
    worker = start_worker(config, tmp_path, name="worker-last")
    try:
        deadline = time.monotonic() + WORKER_LEASE_S + 90
        while not _all_present(root, files):
            assert worker.proc.poll() is None, worker.logs()
            assert time.monotonic() < deadline, f"seed {seed}: not safe in time: {copy_rows(root)}"
            time.sleep(0.2)
    finally:
        worker.stop()
    assert worker.proc.returncode == 0, worker.logs()
    _check_whole(config, root, files, f"seed {seed}, after the last worker")
    assert copies_json(config)["summary"]["safe"] == len(files)
