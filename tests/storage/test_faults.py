"""Failure modes of puts and copies, shown rather than argued:

- SIGKILL of the process uploading, at random moments, into a local directory
  and into SeaweedFS: the final name never holds an incomplete object (it is
  absent or whole), and :meth:`~gateway.storage.base.Storage.remove_leftovers`
  clears what the killed puts left (temporary files, staging keys,
  multipart uploads);
- the S3 server killed in the middle of a multipart upload (its own
  SeaweedFS, restarted on the same data): the copy ends as ``retry`` after
  its attempts, nothing is under the final name, and the copy succeeds once
  the server is back.

The seed is printed so that a failing run can be repeated
(``STORAGE_CRASH_SEED=... pytest ...``).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Final

import pytest

from gateway.storage import Storage
from gateway.storage.copier import RetryPolicy, copy_file
from gateway.storage.errors import ObjectNotFound
from gateway.storage.local import LocalStorage, LocalStorageConfig
from tests.conftest import run_seaweedfs
from tests.storage.conftest import PART_BYTES, blob, chunks, open_s3, sha256_hex
from tests.storage.seaweedfs import SeaweedFS
from tests.storage.test_contract import leftovers

REPO: Final = Path(__file__).resolve().parents[2]
ROUNDS: Final = 8
SIZE: Final = 2 * PART_BYTES + 300_000  # three parts on S3
#: Sizes the crash rounds alternate between: a multipart upload and a spooled PUT on S3.
ROUND_SIZES: Final = (SIZE, PART_BYTES + 1_000_003)
READY_TIMEOUT_S: Final = 30.0
#: Kills land at a random moment within this many seconds of the driver's ``ready``:
#: about the time a put takes there (the driver pauses 5 ms per 256 KiB).
KILL_WITHIN_S: Final = {"local": 0.3, "s3": 0.8}


def _run_driver(args: list[str], delay_s: float, env: dict[str, str]) -> str:
    """Start the driver, wait for ``ready``, sleep ``delay_s``, SIGKILL; return its output."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.put_driver", *args],
        cwd=REPO,
        env=dict(env, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    head = b""
    while b"ready\n" not in head:
        chunk = os.read(proc.stdout.fileno(), 4096)
        assert chunk, "the driver exited before it was ready"
        head += chunk
        assert time.monotonic() < deadline, "the driver was not ready in time"
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    rest, _ = proc.communicate(timeout=30)
    return (head + rest).decode()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["local", "s3"])
async def test_sigkill_of_the_uploader_never_leaves_an_incomplete_object(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    seed = int(os.environ.get("STORAGE_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"storage crash test seed: {seed}")
    storage: Storage
    if kind == "local":
        root = tmp_path / "backup"
        root.mkdir()
        storage = await LocalStorage.open("backup", LocalStorageConfig(path=str(root)))
        where = str(root)
    else:
        s3: SeaweedFS = request.getfixturevalue("s3_env")
        prefix = f"crash-{uuid.uuid4().hex}"
        bucket = request.getfixturevalue("s3_bucket")
        storage = await open_s3(s3, bucket, prefix + "/")
        where = f"{s3.endpoint}/{bucket}/{prefix}"
    env = dict(os.environ)
    killed_mid_put = rounds = 0
    # The window kills land in follows how long puts take here now: it
    # shrinks after a put that finished and grows after a kill mid-put.
    # ROUNDS kills, and more (up to three times as many) until two landed mid-put.
    window_s = KILL_WITHIN_S[kind]
    try:
        while rounds < ROUNDS or (killed_mid_put < 2 and rounds < 3 * ROUNDS):
            round_no = rounds
            rounds += 1
            name = f"round-{round_no:02d}.warc.gz"
            size = ROUND_SIZES[round_no % 2]
            data = blob(size, seed=round_no)
            output = await asyncio.to_thread(
                _run_driver,
                [kind, where, name, str(size), str(round_no)],
                rng.uniform(0.0, window_s),
                env,
            )
            finished = output.strip().endswith("created")
            try:
                info = await storage.stat(name)
            except ObjectNotFound:
                assert not finished, f"seed {seed}: a put said created, and nothing is there"
                killed_mid_put += 1
                window_s *= 1.2
                continue
            window_s *= 0.7
            assert info.size == size, f"seed {seed}, round {round_no}: incomplete object"
            assert await storage.digest(name) == sha256_hex(data), f"seed {seed}: corrupt"
        print(f"{kind}: {killed_mid_put} of {rounds} kills landed before the put was done")
        assert killed_mid_put >= 2, f"seed {seed}: too few kills landed during a put"
        # a listing shows whole objects only, never what a killed put left
        names = {f"round-{n:02d}.warc.gz": ROUND_SIZES[n % 2] for n in range(rounds)}
        async for info in storage.iter():
            assert names.get(info.name) == info.size, f"seed {seed}: listed {info}"
        await storage.remove_leftovers(0)
        assert await leftovers(storage) == []
        # every name can still be completed afterwards
        for round_no in range(ROUNDS):
            size = ROUND_SIZES[round_no % 2]
            data = blob(size, seed=round_no)
            name = f"round-{round_no:02d}.warc.gz"
            done = await storage.put(name, chunks(data), size=size, sha256=sha256_hex(data))
            assert done.outcome in ("created", "already_present")
    finally:
        await storage.close()


@pytest.fixture(scope="module")
def own_seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A SeaweedFS of this module's own, which its tests stop and restart."""
    yield from run_seaweedfs(tmp_path_factory.mktemp("seaweedfs-faults"), ["faults"])


@pytest.mark.timeout(180)
async def test_s3_server_stopped_in_the_middle_of_a_copy(
    own_seaweedfs: SeaweedFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in own_seaweedfs.environ().items():
        monkeypatch.setenv(key, value)
    data = blob(SIZE, seed=9)
    name = "stopped.warc.gz"
    root = tmp_path / "primary"
    root.mkdir()
    primary = await LocalStorage.open("primary", LocalStorageConfig(path=str(root)))
    await primary.put(name, chunks(data), size=SIZE, sha256=sha256_hex(data))
    s3 = await open_s3(own_seaweedfs, "faults", "copies/")
    killed = asyncio.Event()
    original = primary.get_range

    async def killing_range(
        name: str, offset: int = 0, length: int | None = None
    ) -> AsyncIterator[bytes]:
        sent = 0
        async for chunk in original(name, offset, length):
            yield chunk
            sent += len(chunk)
            if sent > PART_BYTES + (1 << 20) and not killed.is_set():
                await asyncio.to_thread(own_seaweedfs.kill)  # the first part is up
                killed.set()

    primary.get_range = killing_range  # type: ignore[assignment,method-assign]
    try:
        policy = RetryPolicy(attempts=2, base_delay_s=0.05, max_delay_s=0.1)
        done = await copy_file(primary, s3, name, size=SIZE, sha256=sha256_hex(data), retry=policy)
        assert killed.is_set()
        assert done.outcome == "retry"
        assert done.attempts == 2
        assert done.destination_status is None
        assert done.retry_after_s is not None
        await asyncio.to_thread(own_seaweedfs.restart)
        with pytest.raises(ObjectNotFound):
            await s3.stat(name)
        assert await leftovers(s3), "the killed upload is left under the staging prefix"
        assert await s3.remove_leftovers(0)
        assert await leftovers(s3) == []
        again = await copy_file(primary, s3, name, size=SIZE, sha256=sha256_hex(data))
        assert again.outcome == "copied"
        assert await s3.digest(name) == sha256_hex(data)
    finally:
        primary.get_range = original  # type: ignore[method-assign]
        await s3.close()
        await primary.close()
