"""Damage and loss, shown (issue 13 §4, §7): a byte flipped in a replica (scrub marks it
corrupted, replicate replaces it), the primary file deleted (its captures are served
from a replica meanwhile, and reported; replicate restores it), the primary damaged
(restored from a replica, the damaged bytes kept under ``invalid/``)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import tarfile
from pathlib import Path
from typing import Final

import pytest
import yaml

from gateway.config import load_config
from gateway.storage.copier import RetryPolicy
from gateway.storage.pool import StoragePool
from gateway.storage.settings import PRIMARY
from gateway.store.layout import Layout, layout_for
from gateway.store.replication.copy_status import read_file_copies
from gateway.store.replication.director import CopyPlan, _copy, adopt_sha256
from gateway.store.replication.replicas import Replicas
from tests.conftest import MakeClient
from tests.storage.seaweedfs import SeaweedFS
from tests.store.replication_support import (
    Place,
    body_for,
    closed_files,
    copies_json,
    gateway_store,
    local_place,
    record_files,
    s3_place,
    write_config,
)
from tests.store.store_support import store_path, warc_files

#: A store written by the release at af8b42d (see tests/store/test_store_legacy.py).
LEGACY_STORE: Final = Path(__file__).resolve().parents[1] / "data" / "legacy-store-af8b42d.tar.gz"


def _flip(data: bytes, at: int) -> bytes:
    damaged = bytearray(data)
    damaged[at] ^= 0x20
    return bytes(damaged)


async def _damage_copy(config: Path, place: Place, name: str) -> None:
    """Flip one byte of the copy of ``name`` on ``place``, behind the archiver's back."""
    if place.spec["type"] == "local":
        path = Path(str(place.spec["path"])) / name
        path.write_bytes(_flip(path.read_bytes(), path.stat().st_size // 2))
        return
    pool = StoragePool(load_config(config).store.storages)
    try:
        storage = await pool.get(place.name)
        data = b"".join([chunk async for chunk in storage.get_range(name)])
        client = storage.client  # type: ignore[attr-defined]
        await client.put_object(
            Bucket=place.spec["bucket"],
            Key=f"{place.spec['prefix']}{name}",
            Body=_flip(data, len(data) // 2),
        )
    finally:
        await pool.close()


def _replicate(config: Path) -> str:
    done = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_flipped_byte_in_a_replica_is_found_and_replaced(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = tmp_path / "store"
    record_files(root, captures=4, body_bytes=30_000, rollover_bytes=60_000)
    files = closed_files(root)
    if kind == "local":
        place = local_place(tmp_path, "backup")
    else:
        s3: SeaweedFS = request.getfixturevalue("s3_env")
        request.getfixturevalue("replication_bucket")
        place = s3_place(s3.endpoint, "backup")
    config = write_config(tmp_path / "c.yaml", root, [place], copies=2)
    _replicate(config)
    clean = gateway_store(["scrub", "--no-progress", "--config", str(config)])
    assert clean.returncode == 0, clean.stderr
    assert f"{2 * len(files)} copy(ies) verified" in clean.stdout
    victim = sorted(files)[1]
    asyncio.run(_damage_copy(config, place, victim))
    found = gateway_store(["scrub", "--no-progress", "--config", str(config)])
    assert found.returncode == 1
    assert f"corrupted: {victim} on backup: scrub: read back as sha256" in found.stderr
    assert "1 corrupted, 0 missing" in found.stdout
    listing = copies_json(config)
    entry = next(e for e in listing["files"] if e["name"] == victim)
    assert entry["state"] == "under-replicated"
    assert entry["copies"]["backup"]["status"] == "corrupted"
    assert listing["summary"]["corrupted"] == 1
    repaired = _replicate(config)
    assert "1 replaced" in repaired
    again = gateway_store(["scrub", "--no-progress", "--config", str(config)])
    assert again.returncode == 0, again.stderr
    assert copies_json(config)["summary"]["safe"] == len(files)


def _stored_config(config: Path) -> str:
    """The YAML of ``config`` as a gateway serving ``$store`` reads it."""
    return config.read_text("utf-8")


@pytest.mark.timeout(180)
async def test_a_deleted_primary_is_served_from_a_replica_then_restored(
    tmp_path: Path,
    make_client: MakeClient,
    s3_env: SeaweedFS,
    replication_bucket: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = tmp_path / "store"
    await asyncio.to_thread(
        record_files, root, captures=4, body_bytes=30_000, rollover_bytes=60_000
    )
    files = closed_files(root)
    # The gateway's own background work would restore the primary by itself
    # (tests/store/test_replication_jobs.py); here it is off, to see the
    # replica serve and `store replicate` restore.
    config = write_config(
        tmp_path / "c.yaml",
        root,
        [s3_place(s3_env.endpoint)],
        copies=2,
        jobs={"enabled": False},
    )
    await asyncio.to_thread(_replicate, config)
    lost = sorted(files)[0]
    primary = store_path(root / "warcs", lost)
    original = primary.read_bytes()
    primary.unlink()
    client = await make_client(_stored_config(config))
    with caplog.at_level(logging.WARNING, "gateway.store.replication.replicas"):
        for i in range(4):
            answer = await client.get(
                "/stored/resource", params={"url": f"http://example.com/replicated/{i}"}
            )
            assert answer.status == 200, await answer.text()
            assert body_for(i, 30_000) in await answer.read()
    assert f"warcs/{lost} is missing at the primary" in caplog.text
    metrics = await (await client.get("/metrics")).text()
    assert "gateway_store_primary_failures_total 2.0" in metrics  # two captures in that file
    assert 'gateway_store_replica_reads_total{outcome="served",storage="s3"} 2.0' in metrics
    status = await (await client.get("/_status")).json()
    assert status["store"]["replica_reads"]["primary_failures"] == 2
    assert lost in status["store"]["replica_reads"]["last_primary_failure"]
    listing = await asyncio.to_thread(copies_json, config)
    entry = next(e for e in listing["files"] if e["name"] == lost)
    assert entry["copies"]["primary"]["status"] == "missing"
    restored = await asyncio.to_thread(_replicate, config)
    assert "1 copied" in restored
    assert primary.read_bytes() == original
    assert not (root / "incoming").exists() or not list((root / "incoming").iterdir())
    after = await client.get("/stored/resource", params={"url": "http://example.com/replicated/0"})
    assert after.status == 200
    metrics = await (await client.get("/metrics")).text()
    assert "gateway_store_primary_failures_total 2.0" in metrics  # served by the primary again


@pytest.mark.timeout(180)
def test_a_damaged_primary_is_restored_and_its_bytes_kept(tmp_path: Path) -> None:
    root = tmp_path / "store"
    record_files(root, captures=4, body_bytes=30_000, rollover_bytes=60_000)
    files = closed_files(root)
    config = write_config(tmp_path / "c.yaml", root, [local_place(tmp_path, "backup")], copies=2)
    _replicate(config)
    victim = sorted(files)[-1]
    path = store_path(root / "warcs", victim)
    original = path.read_bytes()
    path.write_bytes(_flip(original, 100))
    found = gateway_store(["scrub", "--no-progress", "--config", str(config)])
    assert found.returncode == 1
    assert f"corrupted: {victim} on primary" in found.stderr
    out = _replicate(config)
    assert "1 copied" in out
    assert path.read_bytes() == original
    kept = list((root / "invalid").glob(f"*/{victim}"))
    assert len(kept) == 1
    assert kept[0].read_bytes() == _flip(original, 100)
    assert gateway_store(["scrub", "--config", str(config)]).returncode == 0
    assert gateway_store(["check", "--root", str(root), "--no-progress"]).returncode == 0


def test_a_file_with_no_good_copy_left_is_reported(tmp_path: Path) -> None:
    root = tmp_path / "store"
    record_files(root, captures=2, body_bytes=30_000, rollover_bytes=40_000)
    files = closed_files(root)
    backup = local_place(tmp_path, "backup")
    config = write_config(tmp_path / "c.yaml", root, [backup], copies=2)
    victim = sorted(files)[0]
    store_path(root / "warcs", victim).write_bytes(b"not the file")
    done = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert done.returncode == 1
    assert f"not safe: {victim} (0 of 2 copies): primary -> backup: source_corrupt" in done.stderr
    assert "the gzip member at byte 0 does not inflate" in done.stderr
    again = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert again.returncode == 1
    assert f"not safe: {victim} (0 of 2 copies): no good copy left to copy from" in again.stderr
    assert "(primary corrupted, backup missing)" in again.stderr
    assert not (Path(str(backup.spec["path"])) / victim).exists()
    assert yaml.safe_load(config.read_text())["store"]["retention"]["copies"] == 2


def test_another_object_under_the_name_is_left_alone_unless_repair_replaces_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    record_files(root, captures=2, body_bytes=30_000, rollover_bytes=40_000)
    files = closed_files(root)
    backup = local_place(tmp_path, "backup")
    config = write_config(tmp_path / "c.yaml", root, [backup], copies=2)
    victim = sorted(files)[0]
    theirs = Path(str(backup.spec["path"])) / victim
    theirs.write_bytes(b"someone else's file, under the same name")
    done = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert done.returncode == 1
    assert f"not safe: {victim} (1 of 2 copies): primary -> backup: corrupted" in done.stderr
    assert theirs.read_bytes() == b"someone else's file, under the same name"  # append-only
    again = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert again.returncode == 1
    assert "`gateway store repair --replace-copies` replaces it" in again.stderr
    assert theirs.read_bytes() == b"someone else's file, under the same name"
    entry = next(e for e in copies_json(config)["files"] if e["name"] == victim)
    assert entry["copies"]["backup"]["status"] == "corrupted"
    repaired = gateway_store(["repair", "--config", str(config), "--replace-copies"])
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "1 replaced" in repaired.stdout
    assert theirs.read_bytes() == store_path(root / "warcs", victim).read_bytes()
    assert copies_json(config)["summary"]["safe"] == len(files)


def test_files_of_the_previous_release_are_verified_then_replicated(tmp_path: Path) -> None:
    """A store written by the release at af8b42d has no SHA-256 for its files: replicate
    verifies each (every record, its digests), records its SHA-256, moves it to the
    current layout (its copy status is about to be written: migrate on write), then
    copies it."""
    with tarfile.open(LEGACY_STORE) as tar:
        tar.extractall(tmp_path, filter="data")
    root = tmp_path / "clean"
    assert {path.parent for path in warc_files(root / "warcs")} == {root / "warcs"}  # flat
    backup = local_place(tmp_path, "backup")
    config = write_config(tmp_path / "c.yaml", root, [backup], copies=2)
    before = copies_json(config)
    assert before["summary"]["no_sha256"] == before["summary"]["files"] > 0
    done = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert done.returncode == 0, done.stdout + done.stderr
    files = closed_files(root)
    assert len(files) == before["summary"]["files"]
    for name, sha256 in files.items():
        assert hashlib.sha256(store_path(root / "warcs", name).read_bytes()).hexdigest() == sha256
        copy = Path(str(backup.spec["path"])) / name
        assert copy.read_bytes() == store_path(root / "warcs", name).read_bytes()
    rows = _layout_rows(root)
    current = layout_for(str(root)).current
    for name, (origin, fs_version) in rows.items():
        flat = store_path(root / "warcs", name).parent == root / "warcs"
        if origin == "found":  # not the store's: never moved
            assert (fs_version, flat) == (1, True), name
        else:  # moved to warcs/YYYY/MM/DD/ before its copy status was written
            assert (fs_version, flat) == (current, False), name
    assert {origin for origin, _ in rows.values()} == {"written", "imported", "found"}
    assert copies_json(config)["summary"]["safe"] == len(files)
    assert gateway_store(["check", "--root", str(root), "--no-progress"]).returncode == 0


def _layout_rows(root: Path) -> dict[str, tuple[str, int]]:
    """Each closed file's ``origin`` and ``fs_version``, by name."""
    with sqlite3.connect(root / "index.sqlite3") as conn:
        rows = conn.execute("SELECT name, origin, fs_version FROM files WHERE state = 'closed'")
        return {name: (origin, fs_version) for name, origin, fs_version in rows}


async def test_a_file_moved_after_its_row_was_read_is_copied_from_its_new_place(
    tmp_path: Path,
) -> None:
    """A worker read a file's row, then a layout migration moved the file: the copy
    reads the row again and takes the file from its new place (not "missing")."""
    with tarfile.open(LEGACY_STORE) as tar:
        tar.extractall(tmp_path, filter="data")
    root = tmp_path / "clean"
    backup = local_place(tmp_path, "backup")
    config = write_config(tmp_path / "c.yaml", root, [backup], copies=2, jobs={"enabled": False})
    assert copies_json(config)["summary"]["files"] > 0  # the schema brought up to date
    replicas = Replicas(load_config(config).store, Layout(root))
    try:
        [read] = await replicas.index.call(
            read_file_copies, replicas.places, names=["example.warc.gz"]
        )
        stale = await adopt_sha256(replicas, read)  # its SHA-256 recorded, layout 1
        assert stale.sha256 is not None
        assert stale.fs_version == 1
        replicas.rows[stale.name] = stale
        moved = await asyncio.to_thread(
            gateway_store, ["migrate", "--root", str(root), "--no-progress"]
        )
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert store_path(root / "warcs", stale.name).parent != root / "warcs"
        plan = CopyPlan(file=stale, source=PRIMARY, destination="backup", seen=None)
        done = await _copy(replicas, plan, stale.sha256, RetryPolicy(attempts=1))
    finally:
        await replicas.close()
    assert done.outcome == "copied", done
    copy = Path(str(backup.spec["path"])) / stale.name
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == stale.sha256
