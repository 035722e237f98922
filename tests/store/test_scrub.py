"""Scrub: closed WARC files verified again in time-boxed ticks, damage reported.

Real stores written by :class:`~gateway.store.store.Store` (small rollover,
so files close), the scrub actor under a real orchestrator, real damage
(bytes flipped on disk, index rows changed), ``store repair`` afterwards.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import threading
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.jobs.actors import ActorType, JobContext, WorkCancelled, object_types_of
from gateway.jobs.db import JobObject, format_time, read_counts, utcnow
from gateway.jobs.hooks import Hooks, hookimpl
from gateway.jobs.jobs_db import JobsDB
from gateway.jobs.orchestrator import Orchestrator
from gateway.jobs.schema import connect
from gateway.jobs.settings import JobsSettings
from gateway.store.db import IndexDB
from gateway.store.integrity.repair import repair_store
from gateway.store.integrity.scrub import SCRUB, ScrubActor, verify_chunk
from gateway.store.job_rows import ScrubColumns
from gateway.store.layout import Layout
from gateway.store.object_types import OBJECT_TYPES
from gateway.store.online_import import add_files
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from gateway.store.store_actor import StoreContext
from gateway.store.verify import verify_file
from tests.jobs.process_support import jobs_config, run_gateway, start_worker
from tests.store.store_support import make_capture, read_all_records, warc_files

DONE_WITHIN_S = 60.0


def _body(i: int) -> bytes:
    """3 kB that gzip cannot shrink (so that small files fill and close)."""
    return random.Random(i).randbytes(3000)


async def _fill(root: Path, captures: int = 12) -> list[Path]:
    """Record ``captures`` into a store with tiny files; return the closed WARC files."""
    settings = StoreSettings(root=str(root), rollover_bytes=6_000, fsync="never")
    async with await Store.open(settings) as store:
        for i in range(captures):
            await store.record(make_capture(f"http://example.com/{i}", _body(i)))
    return [p for p in warc_files(Layout(root).warcs) if p.name.endswith(".warc.gz")]


def _scrubs(root: Path) -> dict[str, dict[str, Any]]:
    conn = connect(Layout(root).db_path, read_only=True)
    try:
        rows = conn.execute(
            "SELECT file_name, status, retry_at, verified_at, records, result, problems, passes"
            " FROM jobs_scrub"
        ).fetchall()
    finally:
        conn.close()
    keys = ("status", "retry_at", "verified_at", "records", "result", "problems", "passes")
    return {row[0]: dict(zip(keys, row[1:], strict=True)) for row in rows}


def _make_due(root: Path, order: list[str] | None = None) -> None:
    """Every scrub object due now (in ``order``: the first the most overdue)."""
    conn = connect(Layout(root).db_path)
    names = order or [r[0] for r in conn.execute("SELECT file_name FROM jobs_scrub")]
    for position, name in enumerate(names):
        when = utcnow() - timedelta(hours=len(names) - position)
        conn.execute(
            "UPDATE jobs_scrub SET retry_at = ? WHERE file_name = ?", (format_time(when), name)
        )
    conn.close()


class Ticks:
    """A plugin recording which file each scrub tick took, and the chunks."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.chunks = 0

    @hookimpl
    def on_actor_tick_start(self, actor: ActorType, obj: JobObject[ScrubColumns]) -> None:
        self.files.append(obj.row.file_name)

    @hookimpl
    def on_transition_scrub_verifying_to_verifying_end(
        self, actor: ActorType, obj: JobObject[ScrubColumns], won: bool
    ) -> None:
        self.chunks += won


@pytest.fixture
async def scrub_db(tmp_path: Path) -> AsyncIterator[JobsDB]:
    db = JobsDB(Layout(tmp_path / "archive").db_path, OBJECT_TYPES)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


class QuickRetryScrub(ScrubActor):
    """Retries a tick that overran its (tiny) limit at once, not after 10 s."""

    backoff_base_s = 0.05
    backoff_max_s = 0.05


async def _scrub(
    db: JobsDB,
    root: Path,
    *,
    max_tick_s: float = 10.0,
    plugins: list[object] | None = None,
    actor_type: type[ScrubActor] = QuickRetryScrub,
) -> None:
    """Run the scrub actor until no scrub object is in ``verifying`` or due."""
    hooks = Hooks(plugins or [])
    hooks.add_object_types(object_types_of([actor_type]))
    settings = JobsSettings(poll_s=0.1, scrub_max_tick_s=max_tick_s)
    ctx = JobContext(
        db=db, hooks=hooks, settings=settings, owner="test", app=StoreContext(root=root)
    )
    orchestrator = Orchestrator(ctx, [actor_type])
    task = asyncio.create_task(orchestrator.run())
    deadline = time.monotonic() + DONE_WITHIN_S
    try:
        while True:
            await asyncio.sleep(0.05)
            due = [
                s
                for s in _scrubs(root).values()
                if s["status"] == "verifying"
                or (s["retry_at"] and s["retry_at"] <= format_time(utcnow()))
            ]
            if not due and not any(orchestrator.running.values()):
                break
            assert time.monotonic() < deadline, _scrubs(root)
    finally:
        orchestrator.stop()
        await asyncio.wait_for(task, DONE_WITHIN_S)


async def test_closing_a_file_schedules_its_verification(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    files = await _fill(root)
    assert len(files) >= 3
    scrubs = _scrubs(root)
    assert set(scrubs) == {p.name for p in files}
    assert {s["status"] for s in scrubs.values()} == {"verifying"}


async def test_files_are_verified_least_recently_verified_first(
    tmp_path: Path, scrub_db: JobsDB
) -> None:
    root = tmp_path / "archive"
    files = await _fill(root)
    order = [p.name for p in reversed(files)]
    _make_due(root, order)
    ticks = Ticks()
    before = utcnow()
    await _scrub(scrub_db, root, plugins=[ticks])
    assert ticks.files == order
    for path in files:
        scrub = _scrubs(root)[path.name]
        records = len(verify_file(path).records)
        assert scrub["status"] == "good"
        assert scrub["records"] == records
        assert scrub["result"] == f"ok: {records} records"
        assert scrub["passes"] == 1
        assert format_time(before) <= scrub["verified_at"] <= format_time(utcnow())
        # Due again in scrub_interval_days (30 by default).
        assert scrub["retry_at"] > format_time(utcnow() + timedelta(days=29))


async def test_a_pass_is_cut_into_time_boxed_ticks_that_resume_where_they_stopped(
    tmp_path: Path, sample_dir: Path, scrub_db: JobsDB
) -> None:
    root = tmp_path / "archive"
    # 3 MB: the sample's iana.warc.gz four times over (a member per record, so
    # still a valid WARC file), too much to verify in one tick at any speed.
    source = tmp_path / "iana.warc.gz"
    source.write_bytes((sample_dir / "warcs" / "iana.warc.gz").read_bytes() * 4)
    report = await add_files(StoreSettings(root=str(root)), [source])
    assert [o.status for o in report.objects] == ["imported"]
    imported = _scrubs(root)["iana.warc.gz"]
    assert imported["status"] == "good"  # verified on import, due in 30 days
    assert imported["result"].endswith("(verified on import)")
    _make_due(root)
    ticks = Ticks()
    # A 0.05 s limit: each tick verifies for about 0.025 s, a part of the file
    # (a tick that overruns on a busy machine is retried at once).
    await _scrub(scrub_db, root, max_tick_s=0.05, plugins=[ticks])
    scrub = _scrubs(root)["iana.warc.gz"]
    assert scrub["status"] == "good", scrub
    assert scrub["records"] == len(verify_file(source).records)
    assert scrub["passes"] == 1
    assert ticks.chunks >= 3


def _flip_byte_in_a_response(path: Path) -> int:
    """Damage the second response record's gzip member; return the record's offset."""
    victim = [r for r in read_all_records(path) if r.rec_type == "response"][1]
    data = bytearray(path.read_bytes())
    data[victim.offset + victim.length // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return victim.offset


async def test_a_damaged_file_is_reported_with_the_record_and_offset_then_repaired(
    tmp_path: Path, scrub_db: JobsDB, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "archive"
    settings = StoreSettings(root=str(root), rollover_bytes=60_000, fsync="never")
    async with await Store.open(settings) as store:
        for i in range(6):
            await store.record(make_capture(f"http://example.com/{i}", _body(i)))
    [path] = [p for p in warc_files(Layout(root).warcs) if p.name.endswith(".warc.gz")]
    offset = _flip_byte_in_a_response(path)
    with caplog.at_level(logging.WARNING, logger="gateway.store.integrity.scrub"):
        await _scrub(scrub_db, root)
    scrub = _scrubs(root)[path.name]
    assert scrub["status"] == "damaged"
    problems = json.loads(scrub["problems"])
    assert problems[0]["kind"] == "damaged"
    assert problems[0]["offset"] == offset
    assert f"offset {offset}: damaged record" in scrub["result"]
    # A damaged file is looked at again within a day.
    assert scrub["retry_at"] < format_time(utcnow() + timedelta(days=1, minutes=1))
    warning = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(warning) == 1
    assert path.name in warning[0]
    assert f"offset {offset}" in warning[0]
    # store repair salvages the good records into a new file; the old object
    # ends "missing", the new file is scheduled (at the next orchestrator start) and good.
    repair = await asyncio.to_thread(repair_store, Layout(root))
    assert repair.final.ok
    _make_due(root)
    await _scrub(scrub_db, root)
    scrubs = _scrubs(root)
    assert scrubs[path.name]["status"] == "missing"
    assert scrubs[path.name]["retry_at"] is None
    [salvaged] = [name for name in scrubs if "salvaged" in name]
    assert scrubs[salvaged]["status"] == "good"


async def test_index_rows_that_disagree_and_a_missing_file_are_damage(
    tmp_path: Path, scrub_db: JobsDB
) -> None:
    root = tmp_path / "archive"
    files = await _fill(root)
    conn = connect(Layout(root).db_path)
    conn.execute(
        "UPDATE captures SET length = length + 1 WHERE id ="
        " (SELECT MIN(c.id) FROM captures c JOIN files f ON f.id = c.file_id WHERE f.name = ?)",
        (files[0].name,),
    )
    conn.close()
    os.unlink(files[1])
    await _scrub(scrub_db, root)
    scrubs = _scrubs(root)
    first = json.loads(scrubs[files[0].name]["problems"])
    assert scrubs[files[0].name]["status"] == "damaged"
    assert [p["kind"] for p in first] == ["index_mismatch"]
    second = json.loads(scrubs[files[1].name]["problems"])
    assert [p["kind"] for p in second] == ["missing_file"]
    assert {scrubs[p.name]["status"] for p in files[2:]} == {"good"}


async def test_verification_stops_when_its_tick_is_cancelled(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    files = await _fill(root)
    index = IndexDB(Layout(root).db_path, access="read")
    try:
        file = index.file_by_name(files[0].name)
        assert file is not None
        cancel = threading.Event()
        cancel.set()
        with pytest.raises(WorkCancelled):
            verify_chunk(Layout(root), index, file, 0, 60.0, cancel)
        whole = verify_chunk(Layout(root), index, file, 0, 60.0, threading.Event())
    finally:
        index.close()
    assert whole.done
    assert whole.records == len(verify_file(files[0]).records)
    assert whole.problems == []


def test_a_worker_scrubs_and_gateway_jobs_shows_the_damage(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    files = asyncio.run(_fill(root, captures=6))
    offset = _flip_byte_in_a_response(files[0])
    config = tmp_path / "collections.yaml"
    config.write_text(jobs_config(root, plugins=()))
    worker = start_worker(config, tmp_path)
    try:
        deadline = time.monotonic() + DONE_WITHIN_S
        expected = {p.name: "good" for p in files} | {files[0].name: "damaged"}
        while {name: s["status"] for name, s in _scrubs(root).items()} != expected:
            assert time.monotonic() < deadline, _scrubs(root)
            time.sleep(0.1)
    finally:
        worker.stop()
    assert worker.proc.returncode == 0, worker.describe()
    assert f"offset {offset}" in worker.logs()
    run = run_gateway("jobs", "--config", str(config), "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    scrub = json.loads(run.stdout)["types"]["scrub"]
    assert scrub["states"]["damaged"] == 1
    assert scrub["attention"][0]["label"] == files[0].name
    assert f"offset {offset}" in scrub["attention"][0]["detail"]
    conn = connect(Layout(root).db_path, read_only=True)
    try:
        assert read_counts(conn, [SCRUB])["scrub"]["good"] == len(files) - 1
    finally:
        conn.close()
