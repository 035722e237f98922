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
import shutil
import tempfile
from pathlib import Path
from typing import Final

from bench.bench_store_open import REPO, callgrind_instructions, old_tree

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_store_write", description=__doc__.split("\n")[0])
    parser.add_argument("--captures", type=int, default=200)
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--old-commit", default="af8b42d")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-store-write-"))
    try:
        old_code = old_tree(args.old_commit, workdir)
        per_capture: dict[str, float] = {}
        for label, tree in (("this release", REPO), (f"release {args.old_commit}", old_code)):
            counts = []
            for captures in (0, args.captures):
                root = workdir / f"store-{len(per_capture)}-{captures}"
                out = workdir / f"cg-{len(per_capture)}-{captures}.out"
                run = [str(root), str(captures), str(args.size)]
                counts.append(callgrind_instructions(tree, _RECORD, run, out))
            per_capture[label] = (counts[1] - counts[0]) / args.captures
            print(f"{label:<24} {per_capture[label] / 1000:10.1f} k instructions per capture")
        new, old = per_capture.values()
        print(f"this release / the one before: {new / old:.3f}x ({args.size:,}-byte payloads)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
