"""Crash test (issue section 6): SIGKILL a recording and importing process at random moments.

Each round starts ``record_driver.py`` in a real process on the same store,
lets it record (and import WARC files, one after the other, beside the
recording) for a random time after its first acknowledged capture (or kills
it during start-up recovery) and kills it with SIGKILL. Then:

1. ``store check`` on the crashed store (every third round) may report
   problems (an open file, a torn tail) but changes nothing;
2. the store is restarted (``Store.open`` runs recovery) and closed;
3. ``store check`` passes;
4. every capture acknowledged so far, in any round, is indexed where its ack
   said; the round's new ones (and at the end all of them) are read back:
   exactly one whole record with the acknowledged record ID and valid
   digests, whose payload (or, for a revisit, its original's) is the one
   that was recorded. ``check`` has verified every other index entry;
5. every import that returned is served whole, and no kill, in the middle
   of writing, closing or importing, left a file the index does not know
   (``check`` reports any: orphans in ``warcs/``, leftovers in ``incoming/``).

The seed is printed so that a failing run can be repeated
(``STORE_CRASH_SEED=... pytest ...``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import pytest

from gateway.commands.store import main as store_cli
from gateway.store.reader import StoreReader
from gateway.store.store import Store
from tests.store.record_driver import (
    body_for,
    import_body,
    import_url,
    settings_for,
    url_for,
    write_import,
)
from tests.store.store_support import read_record, tree_snapshot, warc_files

REPO: Final = Path(__file__).resolve().parents[2]
ROUNDS: Final = 22
#: Rounds allowed past ROUNDS until the kills below have landed (a loaded
#: machine may start the driver so slowly that a kill finds nothing to cut).
MAX_ROUNDS: Final = 40
MIN_KILLS_WHILE_RECORDING: Final = 15
MIN_KILLS_MID_IMPORT: Final = 2
IMPORT_FILES: Final = 200
READY_TIMEOUT_S: Final = 30.0


def _start(root: Path, first: int, imports: Path, stderr: Any) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    driver = [sys.executable, "-m", "tests.store.record_driver"]
    return subprocess.Popen(
        [*driver, str(root), str(first), "--imports", str(imports)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )


def _kill_after(proc: subprocess.Popen[bytes], delay_s: float, wait_ready: bool) -> bytes:
    """Wait for the first acknowledged capture (if asked), sleep ``delay_s``, SIGKILL.

    Returns all stdout. Waiting for an ack, not only the ready line, makes
    the kill land while recording however loaded the machine is.
    """
    assert proc.stdout is not None
    head = b""
    if wait_ready:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while b'"i": ' not in head.partition(b"\n")[2]:
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, "driver exited before it was ready"
            head += chunk
            assert time.monotonic() < deadline, "driver not ready in time"
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return head + rest


def _acks(output: bytes, key: str = "i") -> list[dict[str, Any]]:
    """The driver's lines that have ``key`` (``i``: a capture, ``imported``: an import)."""
    acks = []
    for line in output.split(b"\n")[:-1]:  # a line cut by the kill has no newline
        record = json.loads(line)
        if key in record:
            acks.append(record)
    return acks


def _mid_import(root: Path) -> bool:
    """True when the kill left an import unfinished (its row, or its staged copy)."""
    if (root / "incoming").is_dir() and any((root / "incoming").iterdir()):
        return True
    db = sqlite3.connect(f"{(root / 'index.sqlite3').as_uri()}?mode=ro", uri=True)
    try:
        (count,) = db.execute("SELECT COUNT(*) FROM files WHERE state = 'importing'").fetchone()
    finally:
        db.close()
    return bool(count)


async def _verify_imports(root: Path, names: set[str]) -> None:
    reader = StoreReader(root / "index.sqlite3")
    try:
        for name in sorted(names):
            [capture] = await reader.history(import_url(name))
            assert capture.filename == name
            assert read_record(root / "warcs", capture).payload == import_body(name)
    finally:
        reader.close()


async def _restart(root: Path) -> None:
    store = await Store.open(settings_for(str(root)))
    await store.close()


async def _verify_served(root: Path, acked: dict[int, dict[str, Any]], read_back: set[int]) -> None:
    """Every acknowledged capture has its index entry; those in ``read_back`` are read whole."""
    reader = StoreReader(root / "index.sqlite3")
    warcs = root / "warcs"
    try:
        by_url = {url: await reader.history(url) for url in {url_for(i) for i in acked}}
        originals: dict[str, bytes] = {}
        for index, ack in acked.items():
            matches = [
                c
                for c in by_url[url_for(index)]
                if c.offset == ack["offset"]
                and c.filename.removesuffix(".open") == ack["filename"].removesuffix(".open")
            ]
            assert len(matches) == 1, f"acknowledged capture {index} is not served: {ack}"
            assert matches[0].timestamp == ack["timestamp"]
            if index not in read_back:
                continue
            record = read_record(warcs, matches[0])  # one whole record, digests pass
            assert record.record_id == ack["record_id"]
            if record.rec_type == "revisit":
                assert ack["outcome"] == "revisit"
                refers_to = record.headers["WARC-Refers-To"]
                if refers_to not in originals:
                    target = record.headers["WARC-Refers-To-Target-URI"]
                    for capture in by_url.get(target) or await reader.history(target):
                        if capture.mime != "warc/revisit":
                            found = read_record(warcs, capture)
                            originals[found.record_id] = found.payload
                assert originals[refers_to] == body_for(index)
            else:
                assert record.payload == body_for(index)
    finally:
        reader.close()


@pytest.mark.timeout(600)
def test_sigkill_at_random_moments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed = int(os.environ.get("STORE_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"store crash test seed: {seed}")
    root = tmp_path / "archive"
    imports = tmp_path / "imports"
    imports.mkdir()
    for number in range(IMPORT_FILES):
        write_import(imports / f"import-{number:03d}.warc.gz")
    acked: dict[int, dict[str, Any]] = {}
    imported: set[str] = set()
    kills_while_recording = kills_mid_import = 0
    with (tmp_path / "driver-stderr.log").open("wb") as stderr:
        for round_no in range(MAX_ROUNDS):
            if round_no >= ROUNDS and (
                kills_while_recording >= MIN_KILLS_WHILE_RECORDING
                and kills_mid_import >= MIN_KILLS_MID_IMPORT
            ):
                break
            during_startup = round_no > 0 and rng.random() < 0.15
            proc = _start(root, round_no * 1_000_000, imports, stderr)
            delay = rng.uniform(0.0, 0.4) if during_startup else rng.uniform(0.0, 0.25)
            output = _kill_after(proc, delay, wait_ready=not during_startup)
            new = _acks(output)
            kills_while_recording += bool(new)
            acked.update((ack["i"], ack) for ack in new)
            imported.update(line["imported"] for line in _acks(output, "imported"))
            kills_mid_import += _mid_import(root)

            if round_no % 3 == 0:
                # check on the crashed store: may fail, must not change anything
                before = tree_snapshot(root)
                assert store_cli(["check", "--root", str(root), "--no-progress"]) in (0, 1)
                assert tree_snapshot(root) == before, f"round {round_no}: check changed the store"

            asyncio.run(_restart(root))
            status = store_cli(["check", "--root", str(root), "--no-progress"])
            out = capsys.readouterr().out
            assert status == 0, f"seed {seed}, round {round_no}: check failed after restart\n{out}"
            # every ack so far is indexed; this round's are read back whole
            asyncio.run(_verify_served(root, acked, {ack["i"] for ack in new}))
            asyncio.run(_verify_imports(root, imported))
            assert not list((root / "incoming").iterdir()), f"round {round_no}"
    asyncio.run(_verify_served(root, acked, set(acked)))
    assert kills_while_recording >= MIN_KILLS_WHILE_RECORDING, (
        f"seed {seed}: only {kills_while_recording} kills landed while recording"
    )
    assert kills_mid_import >= MIN_KILLS_MID_IMPORT, (
        f"seed {seed}: only {kills_mid_import} kills landed mid-import"
    )
    assert imported, "no import finished"
    assert any(a["outcome"] == "revisit" for a in acked.values())
    assert len(list(warc_files(root / "warcs"))) > 1, "no rollover happened"
    size = sum(p.stat().st_size for p in warc_files(root / "warcs"))
    print(
        f"store crash test: {len(acked)} acknowledged captures, {len(imported)} imports, "
        f"{kills_mid_import} kills mid-import, {size / 1e6:.1f} MB"
    )
