"""Benchmark: what one stored capture costs, this release against the one before, under callgrind.

    python -m bench.bench_store_write [--captures 200] [--size 20000] [--old-commit af8b42d]

The store now keeps each file's SHA-256 current with its committed bytes
(read back after each index commit) and commits a file's row before the
file, so a capture costs more instructions than it did. This counts how
many: a process opens a fresh store (``fsync: never``, so that only CPU
work is compared), records ``--captures`` captures of ``--size`` distinct
bytes one after the other (full records, no dedup hits), and closes it,
under ``valgrind --tool=callgrind``; the same process with no capture is
subtracted, and the difference divided by the number of captures. The
release before runs from a ``git archive`` of ``--old-commit``, with the
same code (``Store.open``, ``record``, ``close`` are the same API).
Instruction counts leave out the kernel (the writes, the ``pread`` of the
read-back); ``bench_store.py`` measures recording through the gateway in
wall time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
_TOTALS: Final = re.compile(r"^(?:summary|totals): (\d+)", re.MULTILINE)

#: ``python -c CODE ROOT CAPTURES SIZE``, run from the tree whose gateway is measured.
_RECORD: Final = """
import asyncio, random, sys
from gateway.store.capture import CaptureInput, HttpResponse
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
root, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(1)
bodies = [rng.randbytes(size) for _ in range(count)]
response = HttpResponse(status=200, reason="OK", headers=(("Content-Type", "text/html"),))
async def main():
    store = await Store.open(StoreSettings(root=root, fsync="never"))
    for i, body in enumerate(bodies):
        url = f"http://example.com/page{i}"
        await store.record(CaptureInput(url=url, response=response, payload=body))
    await store.close()
asyncio.run(main())
"""


def _instructions(tree: Path, root: Path, captures: int, size: int, out: Path) -> int:
    done = subprocess.run(
        [
            *("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"),
            *(sys.executable, "-c", _RECORD, str(root), str(captures), str(size)),
        ],
        cwd=tree,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"recording from {tree} failed:\n{done.stderr[-2000:]}")
    match = _TOTALS.search(out.read_text())
    if match is None:
        raise SystemExit(f"no totals in {out}")
    return int(match.group(1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_store_write", description=__doc__.split("\n")[0])
    parser.add_argument("--captures", type=int, default=200)
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--old-commit", default="af8b42d")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-store-write-"))
    try:
        archive = subprocess.run(
            ["git", "archive", args.old_commit, "gateway"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
        (workdir / "old.tar").write_bytes(archive)
        old_tree = workdir / "old"
        with tarfile.open(workdir / "old.tar") as tar:
            tar.extractall(old_tree, filter="data")
        per_capture: dict[str, float] = {}
        for label, tree in (("this release", REPO), (f"release {args.old_commit}", old_tree)):
            counts = []
            for captures in (0, args.captures):
                root = workdir / f"store-{len(per_capture)}-{captures}"
                out = workdir / f"cg-{len(per_capture)}-{captures}.out"
                counts.append(_instructions(tree, root, captures, args.size, out))
            per_capture[label] = (counts[1] - counts[0]) / args.captures
            print(f"{label:<24} {per_capture[label] / 1000:10.1f} k instructions per capture")
        new, old = per_capture.values()
        print(f"this release / the one before: {new / old:.3f}x ({args.size:,}-byte payloads)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
