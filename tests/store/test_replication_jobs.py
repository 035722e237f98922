"""Replication as background work (issue 13 §3, "done when"): the policy holds by itself
in ``gateway serve``, whose director, workers and scrub find and mend a lost primary and a
damaged replica with no command run; a batch that cannot make a file safe ends ``unsafe``
with the reason, shown by ``gateway jobs``; a copier's tick is time-boxed (the files it
has no time for are left, claimed, to the next tick of the same object)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.config import load_config
from gateway.jobs.db import JobObject, parse_time, utcnow
from gateway.jobs.hooks import hookimpl
from gateway.jobs.settings import JobsSettings
from gateway.store.integrity.copy_scrub import PartialDigest, ScrubReport, verify_copies_of
from gateway.store.layout import Layout
from gateway.store.object_types import BATCH, COPY, DIRECTOR
from gateway.store.replication.batch import BatchActor, read_batch_copies
from gateway.store.replication.copy import CopyActor
from gateway.store.replication.director_actor import DirectorActor
from gateway.store.replication.passes import (
    enqueue_pass,
    open_jobs,
    read_pass,
    report_of,
    work_pass,
)
from gateway.store.replication.replicas import Replicas
from tests.conftest import MakeClient
from tests.jobs.process_support import run_gateway
from tests.store.replication_support import (
    body_for,
    closed_files,
    copy_rows,
    gateway_store,
    local_place,
    record_files,
    write_config,
)
from tests.store.store_support import store_path

#: A WARC file to import while serving (warcio's test data, in ../shared/data).
SAMPLE = Path(__file__).resolve().parents[3] / "shared" / "data" / "warcio-test" / "example.warc.gz"

#: Background work at a pace a test can watch: the director every 0.3 s, every file
#: verified again about every 2 s (2.5e-5 days).
FAST_JOBS = {
    "poll_s": 0.1,
    "replicate_interval_s": 0.3,
    "scrub_interval_days": 2.5e-5,
}


def _flip(data: bytes, at: int) -> bytes:
    damaged = bytearray(data)
    damaged[at] ^= 0x20
    return bytes(damaged)


async def _until(what: str, check: Callable[[], bool], *, timeout_s: float = 90.0) -> None:
    """Wait until ``check()`` holds (a "did not hang" bound, not a timing)."""
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        await asyncio.sleep(0.2)


def _batches(root: Path) -> dict[str, int]:
    with sqlite3.connect(root / "index.sqlite3") as conn:
        rows = conn.execute(f"SELECT status, COUNT(*) FROM {BATCH.table} GROUP BY status")
        return {str(status): int(n) for status, n in rows}


@pytest.mark.timeout(180)
async def test_the_policy_holds_by_itself_in_a_serving_gateway(
    tmp_path: Path, make_client: MakeClient
) -> None:
    root = tmp_path / "store"
    await asyncio.to_thread(
        record_files, root, captures=4, body_bytes=30_000, rollover_bytes=60_000
    )
    files = closed_files(root)
    assert len(files) >= 2
    backup = local_place(tmp_path, "backup")
    backup_dir = Path(str(backup.spec["path"]))
    config = write_config(tmp_path / "c.yaml", root, [backup], copies=2, jobs=FAST_JOBS)
    client = await make_client(config.read_text("utf-8"))

    def all_present() -> bool:
        rows = copy_rows(root)
        return all(rows.get((name, "backup")) == ("present", sha) for name, sha in files.items())

    await _until("every file copied to backup by the gateway's own workers", all_present)
    for name in files:
        assert (backup_dir / name).read_bytes() == store_path(root / "warcs", name).read_bytes()
    with sqlite3.connect(root / "index.sqlite3") as conn:
        (passes,) = conn.execute(f"SELECT passes FROM {DIRECTOR.table}").fetchone()
    assert passes >= 1
    assert _batches(root).get("done", 0) >= 1

    lost, damaged = sorted(files)[0], sorted(files)[1]
    primary = store_path(root / "warcs", lost)
    lost_bytes = primary.read_bytes()
    primary.unlink()
    replica = backup_dir / damaged
    good = replica.read_bytes()
    replica.write_bytes(_flip(good, len(good) // 2))

    def mended() -> bool:
        return (
            primary.exists()
            and primary.read_bytes() == lost_bytes
            and replica.read_bytes() == good
            and all_present()
        )

    await _until("the lost primary restored and the damaged replica replaced", mended)
    for i in range(4):
        answer = await client.get(
            "/stored/resource", params={"url": f"http://example.com/replicated/{i}"}
        )
        assert answer.status == 200, await answer.text()
        assert body_for(i, 30_000) in await answer.read()
    # The mending copies are made by the second batch's copy objects; the batch
    # itself ends at its next look, which may come after the copies are seen.
    await _until("a second batch done", lambda: _batches(root).get("done", 0) >= 2)
    report = await (await client.get("/_jobs")).json()
    assert report["types"]["replication_batch"]["states"]["done"] >= 2
    assert report["types"]["replication_director"]["states"]["waiting"] == 1
    status = (await (await client.get("/_status")).json())["store"]
    assert status["files"]["safe"] == len(files)
    counts = {"missing": 0, "ongoing": 0, "present": len(files), "corrupted": 0}
    assert status["copies"] == {"primary": counts, "backup": counts}
    metrics = await (await client.get("/metrics")).text()
    assert f'gateway_store_copies{{status="present",storage="backup"}} {len(files)}.0' in metrics
    assert f'gateway_store_replicated_files{{state="safe"}} {len(files)}.0' in metrics


def test_a_batch_that_cannot_make_a_file_safe_ends_unsafe_with_the_reason(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    record_files(root, captures=4, body_bytes=30_000, rollover_bytes=60_000)
    files = closed_files(root)
    victim = sorted(files)[0]
    store_path(root / "warcs", victim).write_bytes(b"not the file")
    config = write_config(tmp_path / "c.yaml", root, [local_place(tmp_path, "backup")], copies=2)
    done = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert done.returncode == 1
    assert f"not safe: {victim} (0 of 2 copies)" in done.stderr
    assert _batches(root) == {"unsafe": 1}
    with sqlite3.connect(root / "index.sqlite3") as conn:
        (problems, outcomes) = conn.execute(
            f"SELECT problems, outcomes FROM {BATCH.table}"
        ).fetchone()
    assert list(json.loads(problems)) == [victim]
    assert json.loads(outcomes) == {"copied": len(files) - 1, "source_corrupt": 1}
    shown = run_gateway("jobs", "--config", str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "replication_batch" in shown.stdout
    assert "unsafe: #1 store-" in shown.stdout
    assert f"1 file(s) not safe: {victim}: primary -> backup: source_corrupt" in shown.stdout


async def test_a_copier_leaves_the_files_its_tick_has_no_time_for_to_its_next_tick(
    tmp_path: Path,
) -> None:
    """The worker claims every copy and hands the group to one copy object; a copier
    whose tick has no time left after a copy leaves the rest of the group, still
    claimed, to the next tick of the same object; the last one wakes the batch,
    whose next tick ends it."""
    root = tmp_path / "store"
    await asyncio.to_thread(
        record_files, root, captures=6, body_bytes=30_000, rollover_bytes=60_000
    )
    files = closed_files(root)
    assert len(files) >= 3
    config = write_config(tmp_path / "c.yaml", root, [local_place(tmp_path, "backup")], copies=2)
    settings = load_config(config).store
    replicas = Replicas(settings, Layout(root))
    db, ctx = await open_jobs(root, settings, None, [BATCH, COPY], "test")
    seen: list[dict[tuple[str, str], tuple[str, str]]] = []

    class Recorder:
        @hookimpl
        def on_actor_tick_end(self, actor: object, obj: JobObject[Any]) -> None:
            if obj.type is COPY:
                seen.append(copy_rows(root))

    ctx.hooks.manager.register(Recorder())
    try:
        pass_id = await enqueue_pass(replicas, ctx)
        batch_actor = BatchActor(ctx)
        await batch_actor.run()
        (batch,) = await db.call(read_pass, pass_id)
        assert (batch_actor.ticks, batch.status) == (1, "copying")
        (group,) = await db.call(read_batch_copies, batch.id)
        assert (group.row.source, group.row.destination) == ("primary", "backup")
        assert sorted(group.row.files) == sorted(files)
        rows = copy_rows(root)
        assert all(rows[(name, "backup")] == ("ongoing", sha) for name, sha in files.items())

        copy_actor = CopyActor(ctx)
        copy_actor.budget_s = 0.0  # one copy per tick
        await copy_actor.run()
        assert copy_actor.ticks == len(files)
        for ticked, rows in enumerate(seen, start=1):  # claimed until copied
            statuses = sorted(rows[(name, "backup")][0] for name in files)
            assert statuses == ["ongoing"] * (len(files) - ticked) + ["present"] * ticked
        (group,) = await db.call(read_batch_copies, batch.id)
        assert group.status == "done", group
        assert group.row.outcomes["copied"] == len(files)
        (batch,) = await db.call(read_pass, pass_id)
        assert batch.status == "copying"
        assert batch.retry_at is not None
        assert parse_time(batch.retry_at) <= utcnow()  # woken by its copy's last transition
        await BatchActor(ctx).run()
        (batch,) = await db.call(read_pass, pass_id)
        assert batch.status == "done", batch
        assert batch.row.outcomes["copied"] == len(files)
    finally:
        await db.close()
        await replicas.close()
    rows = copy_rows(root)
    assert all(rows[(name, "backup")] == ("present", sha) for name, sha in files.items())


async def test_a_batch_writes_the_copy_objects_its_dead_worker_did_not(tmp_path: Path) -> None:
    """The worker moves its batch to ``copying`` first and writes its copy objects
    after (a copier could otherwise end, and wake the batch, while the worker still
    leases it); killed between the two, it leaves the groups in the batch, whose next
    tick writes the missing objects."""
    root = tmp_path / "store"
    await asyncio.to_thread(
        record_files, root, captures=4, body_bytes=30_000, rollover_bytes=60_000
    )
    files = closed_files(root)
    config = write_config(tmp_path / "c.yaml", root, [local_place(tmp_path, "backup")], copies=2)
    settings = load_config(config).store
    replicas = Replicas(settings, Layout(root))
    db, ctx = await open_jobs(root, settings, None, [BATCH, COPY], "test")
    try:
        pass_id = await enqueue_pass(replicas, ctx)
        await BatchActor(ctx).run()
        with sqlite3.connect(root / "index.sqlite3") as conn:  # what the kill left
            conn.execute(f"DELETE FROM {COPY.table}")
            conn.execute(f"UPDATE {BATCH.table} SET retry_at = '2000-01-01T00:00:00.000000Z'")
        objects = await work_pass(ctx, pass_id)
    finally:
        await db.close()
        await replicas.close()
    assert [obj.status for obj in objects] == ["done"]
    assert report_of(objects).outcomes == {"copied": len(files)}
    rows = copy_rows(root)
    assert all(rows[(name, "backup")] == ("present", sha) for name, sha in files.items())


async def test_a_copy_is_read_back_a_chunk_at_a_time_across_ticks(tmp_path: Path) -> None:
    """The scrub's copy verification is time-boxed inside a copy: with its deadline
    already past, each call reads one chunk (1 MiB) and keeps the digest so far, the
    next call reads on; the verdict is the whole copy's."""
    root = tmp_path / "store"
    await asyncio.to_thread(
        record_files, root, captures=2, body_bytes=1_500_000, rollover_bytes=2_500_000
    )
    files = closed_files(root)
    name, sha256 = sorted(files.items())[0]
    size = store_path(root / "warcs", name).stat().st_size
    chunks = -(-size // (1 << 20))
    assert chunks >= 2
    backup = local_place(tmp_path, "backup")
    config = write_config(tmp_path / "c.yaml", root, [backup], copies=2)
    settings = load_config(config).store
    replicas = Replicas(settings, Layout(root))
    try:
        db, ctx = await open_jobs(root, settings, None, [BATCH, COPY], "test")
        try:
            (_batch,) = await work_pass(ctx, await enqueue_pass(replicas, ctx))
        finally:
            await db.close()
        assert copy_rows(root)[(name, "backup")] == ("present", sha256)

        async def scrub(since: float) -> tuple[int, ScrubReport]:
            report, partials, calls = ScrubReport(), dict[tuple[str, str], PartialDigest](), 0
            while True:
                calls += 1
                assert calls < 100
                done = await verify_copies_of(
                    replicas,
                    name,
                    sha256,
                    since=since,
                    deadline=time.monotonic(),
                    report=report,
                    partials=partials,
                )
                if done:
                    assert partials == {}
                    return calls, report

        calls, report = await scrub(time.time())
        assert (calls, report.verified, report.ok) == (2 * chunks, 2, True)  # primary, backup
        replica = Path(str(backup.spec["path"])) / name
        replica.write_bytes(_flip(replica.read_bytes(), size - 10))  # in its last chunk
        calls, report = await scrub(time.time())
        assert calls == 2 * chunks
        assert [(f, p) for f, p, _ in report.corrupted] == [(name, "backup")]
    finally:
        await replicas.close()
    assert copy_rows(root)[(name, "backup")] == ("corrupted", sha256)


@pytest.mark.timeout(180)
async def test_a_file_closed_while_serving_wakes_the_director(
    tmp_path: Path, make_client: MakeClient
) -> None:
    """The director's interval is an hour here: a file the store closes (an online
    import) is copied at once all the same, the transaction that closed it having
    made the director due."""
    root = tmp_path / "store"
    await asyncio.to_thread(
        record_files, root, captures=2, body_bytes=30_000, rollover_bytes=40_000
    )
    backup = local_place(tmp_path, "backup")
    jobs = {**FAST_JOBS, "replicate_interval_s": 3600}
    config = write_config(tmp_path / "c.yaml", root, [backup], copies=2, jobs=jobs)
    await make_client(config.read_text("utf-8"))

    def safe() -> bool:
        files, rows = closed_files(root), copy_rows(root)
        return all(rows.get((name, "backup")) == ("present", sha) for name, sha in files.items())

    await _until("the files recorded before start copied by the first pass", safe)
    before = set(closed_files(root))
    added = await asyncio.to_thread(
        run_gateway, "store", "add", str(SAMPLE), "--config", str(config), cwd=tmp_path
    )
    assert added.returncode == 0, added.stdout + added.stderr
    assert len(set(closed_files(root)) - before) == 1
    await _until("the imported file copied well before the director's interval", safe)


def test_the_directors_lease_follows_a_shorter_replicate_max_tick_s() -> None:
    # A director killed mid-tick holds its lease: replication waits that long.
    assert DirectorActor.limits(JobsSettings()) == (1, 600.0)
    assert DirectorActor.limits(JobsSettings(replicate_max_tick_s=4.0)) == (1, 4.0)
