"""Helpers for the replication tests: a store with closed files, configs with storages,
the commands, and what the copies hold.

Not a test module: imported by ``test_replication*.py`` and the drivers.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.store_support import make_capture

REPO: Final = Path(__file__).resolve().parents[2]
BUCKET: Final = "replication"


def body_for(index: int, size: int) -> bytes:
    """A deterministic, incompressible payload of ``size`` bytes."""
    return random.Random(index).randbytes(size)


def live_page(number: int, noise_bytes: int = 0) -> str:
    """What ``/page/N`` of the ``live_web`` fixture answers: unique to N, with
    ``noise_bytes`` random bytes (hex: incompressible) when asked for
    ``?noise=BYTES``, else 2 kB of x."""
    filler = random.Random(number).randbytes(noise_bytes).hex() if noise_bytes else "x" * 2000
    return f"<html>live page {number} {filler}</html>"


def record_files(root: Path, *, captures: int, body_bytes: int, rollover_bytes: int) -> None:
    """Record ``captures`` captures of ``body_bytes`` each into the store at ``root``,
    in files rolled over past ``rollover_bytes``; every file ends closed."""
    settings = StoreSettings(root=str(root), rollover_bytes=rollover_bytes, fsync="never")

    async def run() -> None:
        async with await Store.open(settings) as store:
            for i in range(captures):
                body = body_for(i, body_bytes)
                await store.record(make_capture(f"http://example.com/replicated/{i}", body))

    asyncio.run(run())


@dataclass(frozen=True, slots=True)
class Place:
    """A storage of a test config: its name and the mapping under ``store.storages``."""

    name: str
    spec: Mapping[str, Any]


def local_place(tmp_path: Path, name: str) -> Place:
    path = tmp_path / name
    path.mkdir()
    return Place(name, {"type": "local", "path": str(path)})


def s3_place(endpoint: str, name: str = "s3", prefix: str | None = None) -> Place:
    spec = {
        "type": "s3",
        "endpoint": endpoint,
        "bucket": BUCKET,
        "prefix": prefix or f"t-{uuid.uuid4().hex}/",
        "part_size_bytes": 5 << 20,
        "single_put_max_bytes": 8 << 20,
    }
    return Place(name, spec)


def write_config(
    path: Path,
    root: Path,
    places: Sequence[Place],
    *,
    copies: int,
    archival_max_age_s: float = 3600.0,
    batch_size: int = 100,
    parallel_copies: int = 4,
    publish: Mapping[str, str] | None = None,
    collections: Mapping[str, Any] | None = None,
    jobs: Mapping[str, Any] | None = None,
) -> Path:
    """A collections.yaml whose ``store:`` section replicates to ``places``
    (and a ``jobs:`` section when given)."""
    store: dict[str, Any] = {
        "root": str(root),
        "fsync": "never",
        "storages": {place.name: dict(place.spec) for place in places},
        "retention": {
            "copies": copies,
            "archival_max_age_s": archival_max_age_s,
            "batch_size": batch_size,
            "parallel_copies": parallel_copies,
        },
    }
    if publish is not None:
        store["publish"] = dict(publish)
    document: dict[str, Any] = {
        "store": store,
        "collections": dict(collections or {"stored": "$store"}),
    }
    if jobs is not None:
        document["jobs"] = dict(jobs)
    path.write_text(yaml.safe_dump(document, sort_keys=False), "utf-8")
    return path


def gateway_store(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run ``gateway store ARGS...`` in a process of its own (as an operator would)."""
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "store", *args],
        cwd=REPO,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def closed_files(root: Path) -> dict[str, str]:
    """Closed files of the store at ``root``: name -> recorded SHA-256."""
    with sqlite3.connect(root / "index.sqlite3") as conn:
        rows = conn.execute("SELECT name, sha256 FROM files WHERE state = 'closed'").fetchall()
    return {str(name): str(sha256) for name, sha256 in rows}


def copy_rows(root: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """Every row of ``copies``: (name, storage) -> (status, sha256)."""
    with sqlite3.connect(root / "index.sqlite3") as conn:
        rows = conn.execute("SELECT name, storage, status, sha256 FROM copies").fetchall()
    return {(str(n), str(s)): (str(st), str(sha)) for n, s, st, sha in rows}


def copies_json(config: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``gateway store copies --json``, parsed."""
    done = gateway_store(["copies", "--config", str(config), "--json"], env=env)
    assert done.returncode in (0, 1), done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed
