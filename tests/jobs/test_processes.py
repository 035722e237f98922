"""Real processes sharing one store's jobs: competition, kill -9, reports, plugins.

- 1,000 probe objects, two ``gateway worker`` processes and a ``gateway
  serve`` competing: every object reaches its final state, each of its
  transitions is won exactly once (the plugin logs each won transition),
  its work ran exactly once, every process took part, and no ``database is
  locked`` (or any error) surfaced.
- A worker killed with SIGKILL at 20 random moments while its ticks run:
  the objects it held are claimed again once their leases expire, and
  finish; no transition is won twice; the work (idempotent: one file per
  object, created once) may have run again, never with another result.

The seed of the random moments is printed (``JOBS_KILL_SEED=... pytest``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Final

import pytest

from gateway.jobs.db import format_time, read_counts, utcnow, write_objects
from gateway.jobs.hooks import load_plugins
from gateway.jobs.schema import connect, create_schema
from tests.conftest import REPO_ROOT
from tests.jobs import probe_plugin
from tests.jobs.probe_plugin import PROBE, ProbeColumns
from tests.jobs.process_support import (
    Process,
    get_json,
    jobs_config,
    run_env,
    run_gateway,
    start_serve,
    start_worker,
)

DONE_WITHIN_S: Final = 120.0
KILLS: Final = 20


def _store(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``(config path, store root, effects dir)``; the probe table exists."""
    root = tmp_path / "archive"
    root.mkdir()
    effects = tmp_path / "effects"
    effects.mkdir()
    config = tmp_path / "collections.yaml"
    config.write_text(jobs_config(root))
    conn = connect(root / "index.sqlite3")
    create_schema(conn, [PROBE])
    conn.close()
    return config, root, effects


def _counts(root: Path) -> dict[str, int]:
    conn = connect(root / "index.sqlite3", read_only=True)
    try:
        return read_counts(conn, [PROBE])["probe"]
    finally:
        conn.close()


def _wait_all_done(root: Path, total: int, processes: list[Process]) -> None:
    deadline = time.monotonic() + DONE_WITHIN_S
    while (states := _counts(root))["done"] != total:
        for process in processes:
            assert process.proc.poll() is None, process.describe()
        assert time.monotonic() < deadline, f"not done in time: {states}"
        time.sleep(0.1)


def _stop_cleanly(processes: list[Process]) -> None:
    for process in processes:
        process.stop()
    for process in processes:
        assert process.proc.returncode == 0, process.describe()
        logs = process.logs()
        assert "database is locked" not in logs, process.describe()
        assert "Traceback" not in logs, process.describe()
        assert " ERROR " not in logs, process.describe()


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_two_workers_and_the_server_tick_each_object_to_its_end_exactly_once(
    tmp_path: Path,
) -> None:
    config, root, effects = _store(tmp_path)
    processes: list[Process] = []
    try:
        serve, port = start_serve(config, tmp_path)
        processes.append(serve)
        processes.append(start_worker(config, tmp_path, "worker1"))
        processes.append(start_worker(config, tmp_path, "worker2"))
        conn = connect(root / "index.sqlite3")
        rows: list[ProbeColumns] = [ProbeColumns(effects_dir=str(effects), sleep_s=0.01)] * 1000
        write_objects(conn, PROBE, utcnow(), rows)
        conn.close()
        _wait_all_done(root, 1000, processes)
        status, report = get_json(port, "/_jobs")
        assert status == 200
        assert report["types"]["probe"]["states"]["done"] == 1000
        assert report["orchestrator"]["active"] is True
        assert report["orchestrator"]["role"] == "serve"
    finally:
        _stop_cleanly(processes)
    won = Counter((fields[0], fields[1]) for fields in _lines(effects / "transitions.log"))
    assert len(won) == 2000
    assert set(won.values()) == {1}, [pair for pair, n in won.items() if n > 1]
    performed = Counter(fields[0] for fields in _lines(effects / "performed.log"))
    assert len(performed) == 1000
    assert set(performed.values()) == {1}
    assert len(list(effects.glob("*.work"))) == 1000
    pids = {fields[2] for fields in _lines(effects / "transitions.log")}
    assert pids == {str(p.proc.pid) for p in processes}


def _leased_by(root: Path, pid: int) -> set[int]:
    """Objects whose lease the worker ``pid`` held (its ticks in hand)."""
    conn = connect(root / "index.sqlite3", read_only=True)
    try:
        rows = conn.execute(
            "SELECT id FROM jobs_probe WHERE lease_owner = ? AND retry_at > ?",
            (f"worker {pid}", format_time(utcnow())),
        ).fetchall()
    finally:
        conn.close()
    return {int(r[0]) for r in rows}


def test_a_worker_killed_mid_tick_at_random_moments_loses_nothing_and_repeats_no_transition(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("JOBS_KILL_SEED", random.randrange(1 << 30)))
    print(f"JOBS_KILL_SEED={seed}")
    rng = random.Random(seed)
    config, root, effects = _store(tmp_path)
    conn = connect(root / "index.sqlite3")
    rows: list[ProbeColumns] = [
        ProbeColumns(effects_dir=str(effects), sleep_s=rng.uniform(0.02, 0.2)) for _ in range(300)
    ]
    write_objects(conn, PROBE, utcnow(), rows)
    conn.close()
    interrupted: set[int] = set()
    for round_ in range(KILLS):
        worker = start_worker(config, tmp_path, f"worker{round_}")
        time.sleep(rng.uniform(0.05, 0.4))
        held = _leased_by(root, worker.proc.pid)
        os.kill(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait(timeout=30)
        assert worker.proc.returncode == -signal.SIGKILL
        interrupted |= held - _finished(root, held)
    last = start_worker(config, tmp_path, "last")
    try:
        _wait_all_done(root, 300, [last])
    finally:
        _stop_cleanly([last])
    assert interrupted, "no kill landed while a tick was in hand"
    # Every transition was won at most once (a kill between the write and
    # the plugin's log line may lose a line, never add one).
    won = Counter((fields[0], fields[1]) for fields in _lines(effects / "transitions.log"))
    assert set(won.values()) <= {1}
    # The work of every object is there, once, with its own content.
    works = sorted(effects.glob("*.work"), key=lambda p: int(p.stem))
    assert [int(p.stem) for p in works] == list(range(1, 301))
    assert all(p.read_text() == f"{p.stem}\n" for p in works)


def _finished(root: Path, ids: set[int]) -> set[int]:
    """Those of ``ids`` whose tick in hand got its transition through before the kill."""
    if not ids:
        return set()
    conn = connect(root / "index.sqlite3", read_only=True)
    try:
        marks = ", ".join("?" * len(ids))
        rows = conn.execute(
            f"SELECT id FROM jobs_probe WHERE id IN ({marks}) AND lease_owner IS NULL",
            tuple(ids),
        ).fetchall()
    finally:
        conn.close()
    return {int(r[0]) for r in rows}


def test_gateway_jobs_reports_states_in_text_and_json(tmp_path: Path) -> None:
    config, root, _ = _store(tmp_path)
    conn = connect(root / "index.sqlite3")
    write_objects(conn, PROBE, utcnow(), [ProbeColumns()] * 3)
    write_objects(conn, PROBE, utcnow(), [ProbeColumns()], status="failed")
    conn.execute(
        "UPDATE jobs_probe SET last_error = 'RuntimeError: boom', last_error_at = ?",
        (format_time(utcnow()),),
    )
    conn.close()
    text = run_gateway("jobs", "--config", str(config), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "probe: a test object: work, then finish" in text.stdout
    assert "queued 3, working 0, done 0, failed 1" in text.stdout
    assert "due now: 3" in text.stdout
    assert "RuntimeError: boom" in text.stdout
    as_json = run_gateway("jobs", "--config", str(config), "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    probe = report["types"]["probe"]
    assert probe["states"] == {"queued": 3, "working": 0, "done": 0, "failed": 1}
    assert probe["due"] == 3
    assert probe["attention"][0]["status"] == "failed"


def test_a_missing_store_and_a_bad_plugin_are_clear_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    missing.write_text(jobs_config(tmp_path / "nowhere", plugins=()))
    run = run_gateway("jobs", "--config", str(missing), cwd=tmp_path)
    assert (run.returncode, run.stdout) == (2, "")
    assert f"gateway jobs: no store at {tmp_path / 'nowhere'}" in run.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(jobs_config(tmp_path / "archive", plugins=("tests.jobs.probe_plugin", "nope")))
    for command in ("worker", "jobs", "serve"):
        run = run_gateway(command, "--config", str(bad), cwd=tmp_path)
        assert run.returncode == 2, run.stderr
        assert "jobs.plugins[1]: no plugin 'nope'" in run.stderr
        assert "Traceback" not in run.stderr


def test_a_plugin_is_found_by_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    dist = site / "probe_jobs-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-jobs\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[archive_gateway.jobs]\nprobe = tests.jobs.probe_plugin\n"
    )
    monkeypatch.syspath_prepend(str(site))
    assert load_plugins(["probe"]) == [probe_plugin]
    assert str(REPO_ROOT) in run_env()["PYTHONPATH"]


def test_the_store_database_is_never_locked_for_the_reporting_reader(tmp_path: Path) -> None:
    """``gateway jobs`` reads with ``mode=ro``: it works while a writer holds a transaction."""
    _, root, _ = _store(tmp_path)
    writer = sqlite3.connect(root / "index.sqlite3", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO jobs_probe (status, retry_at, created_at, updated_at)"
        " VALUES ('queued', '2000-01-01T00:00:00.000000Z', 'x', 'x')"
    )
    try:
        assert _counts(root)["queued"] == 0  # the uncommitted row is not seen
    finally:
        writer.execute("ROLLBACK")
        writer.close()
