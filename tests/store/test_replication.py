"""Replication under a retention policy (issue 13 §3, §6, §7): a store records, then
``gateway store replicate --once`` makes every closed file present wherever the
policy needs it, with the file's SHA-256, over local directories and SeaweedFS.
``store copies`` reports it; files still ``.open`` are never copied."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gateway.config import load_config
from gateway.storage.pool import StoragePool
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.storage.seaweedfs import SeaweedFS
from tests.store.replication_support import (
    Place,
    closed_files,
    copies_json,
    copy_rows,
    gateway_store,
    local_place,
    record_files,
    s3_place,
    write_config,
)
from tests.store.store_support import make_capture, store_path


async def _digests(config: Path, names: list[str]) -> dict[str, dict[str, str]]:
    """Each storage's copies of ``names``, read back: storage -> name -> SHA-256."""
    settings = load_config(config).store
    pool = StoragePool(settings.storages)
    try:
        found: dict[str, dict[str, str]] = {}
        for storage_name in pool.names:
            storage = await pool.get(storage_name)
            found[storage_name] = {name: await storage.digest(name) for name in names}
        return found
    finally:
        await pool.close()


def _places(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[Place]:
    places = []
    if "local" in kind:
        places.append(local_place(tmp_path, "backup"))
    if "s3" in kind:
        s3: SeaweedFS = request.getfixturevalue("s3_env")
        request.getfixturevalue("replication_bucket")
        places.append(s3_place(s3.endpoint))
    return places


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("kind", "copies"),
    [("local", 2), ("s3", 2), ("local+s3", 3)],
    ids=["copies-2-local", "copies-2-s3", "copies-3-local-s3"],
)
def test_replicate_once_makes_every_closed_file_safe(
    kind: str, copies: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = tmp_path / "store"
    record_files(root, captures=12, body_bytes=40_000, rollover_bytes=100_000)
    files = closed_files(root)
    assert len(files) >= 4
    places = _places(kind, tmp_path, request)
    config = write_config(tmp_path / "c.yaml", root, places, copies=copies, batch_size=3)
    before = copies_json(config)
    assert before["summary"]["under_replicated"] == len(files)
    done = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert done.returncode == 0, done.stderr
    assert f"{len(files)} copied" in done.stdout or "copied" in done.stdout
    rows = copy_rows(root)
    for name, sha256 in files.items():
        for place in places:
            assert rows[(name, place.name)] == ("present", sha256)
    digests = asyncio.run(_digests(config, sorted(files)))
    for place in places:
        assert digests[place.name] == files, place.name
    after = copies_json(config)
    assert after["summary"] == {
        "files": len(files),
        "safe": len(files),
        "ongoing": 0,
        "under_replicated": 0,
        "corrupted": 0,
        "no_sha256": 0,
    }
    assert all(entry["state"] == "safe" for entry in after["files"])
    again = gateway_store(["replicate", "--once", "--no-progress", "--config", str(config)])
    assert again.returncode == 0, again.stderr
    assert "nothing to copy" in again.stdout


def test_an_open_file_is_never_copied(tmp_path: Path) -> None:
    root = tmp_path / "store"
    backup = local_place(tmp_path, "backup")
    config = write_config(tmp_path / "c.yaml", root, [backup], copies=2)

    async def record_and_replicate() -> tuple[str, int]:
        # The recording store stays open: its WARC file is still .open while replicate runs.
        settings = StoreSettings(root=str(root), fsync="never")
        async with await Store.open(settings) as store:
            ack = await store.record(make_capture("http://example.com/open", b"x" * 5000))
            done = await asyncio.to_thread(
                gateway_store, ["replicate", "--once", "--no-progress", "--config", str(config)]
            )
            return ack.capture.filename, done.returncode

    filename, status = asyncio.run(record_and_replicate())
    assert filename.endswith(".open")
    assert status == 1  # nothing to copy, but a capture waits in an unclosed file: not safe
    assert list(Path(str(backup.spec["path"])).iterdir()) == []
    assert copy_rows(root) == {}
    # closed now: the next pass copies it
    assert gateway_store(["replicate", "--once", "--config", str(config)]).returncode == 0
    name = filename.removesuffix(".open")
    assert (Path(str(backup.spec["path"])) / name).read_bytes() == store_path(
        root / "warcs", name
    ).read_bytes()


def test_copies_lists_files_and_storages(tmp_path: Path) -> None:
    root = tmp_path / "store"
    record_files(root, captures=3, body_bytes=30_000, rollover_bytes=40_000)
    files = closed_files(root)
    config = write_config(tmp_path / "c.yaml", root, [local_place(tmp_path, "backup")], copies=2)
    shown = gateway_store(["copies", "--config", str(config)])
    assert shown.returncode == 1  # under-replicated
    for name in files:
        assert f"{name}  under-replicated  primary:present backup:missing" in shown.stdout
    assert f"{len(files)} under-replicated" in shown.stdout
    one = sorted(files)[0]
    only = gateway_store(["copies", "--config", str(config), "--json", one])
    parsed = json.loads(only.stdout)
    assert [entry["name"] for entry in parsed["files"]] == [one]
    assert parsed["policy"] == {"copies": 2, "places": ["primary", "backup"]}
    unknown = gateway_store(["copies", "--config", str(config), "nothere.warc.gz"])
    assert unknown.returncode == 2
    assert "not closed files of the store: nothere.warc.gz" in unknown.stderr
