"""Benchmark: layout migration throughput against a plain ``cp`` of the same tree (issue 14 §6).

    python -m bench.bench_migrate [--set small|large ...] [--repeat 3]

For each set of files, side by side in one run, ``--repeat`` times
interleaved, each on a fresh copy of the same layout-1 store (made once, the
copy not timed):

- **migrate**: :func:`gateway.store.migration.migrator.run_migration` in this process
  (what ``gateway store migrate`` runs, without the interpreter's start-up):
  the index pass moves every file from the flat ``warcs/`` to
  ``warcs/YYYY/MM/DD/`` (copy, fsync, read back from the disk and verify
  the SHA-256, link, fsync the directory, commit, remove the old copy),
  then the reconcile pass walks the tree;
- **the floor**: ``cp -a`` of the same ``warcs/`` tree to a new directory on
  the same file system, and the same followed by ``sync`` (``cp`` alone
  makes nothing durable; the migration fsyncs every file, directory and
  commit).

Sets: ``small`` is 2,000 files of 64 KiB (the per-file cost: three fsyncs
and a commit per move), ``large`` is 32 files of 16 MiB (the byte cost).
The payloads are random (nothing compresses, no two files alike). Prints
files/s and MB/s (MiB of files per second of wall time) for each and the
ratio of the medians, with the machine it ran on. The page cache holds the
store when the timing starts, for both; the migration's read-back drops
the copy's pages first (``POSIX_FADV_DONTNEED``), so it reads from the disk
where ``cp`` does not read at all.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from bench.harness import machine, print_machine
from gateway.store.layout import Layout
from gateway.store.migration.migrator import MigrationReport, open_shared, run_migration
from tests.store.migrate_support import written_store

#: name -> (files, payload bytes per file)
SETS: Final = {"small": (2_000, 64 << 10), "large": (32, 16 << 20)}


def _payloads(size: int) -> Callable[[int], bytes]:
    def payload(index: int) -> bytes:
        return random.Random(index).randbytes(size)

    return payload


def _tree_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in Layout(root).walk())


def _fresh(template: Path, workdir: Path, name: str) -> Path:
    target = workdir / name
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-a", str(template), str(target)], check=True)
    subprocess.run(["sync"], check=True)
    return target


def _time_cp(root: Path) -> tuple[float, float]:
    """Seconds of ``cp -a warcs warcs-copy``, and of the same followed by ``sync``."""
    start = time.perf_counter()
    subprocess.run(["cp", "-a", str(root / "warcs"), str(root / "warcs-copy")], check=True)
    copied = time.perf_counter()
    subprocess.run(["sync"], check=True)
    return copied - start, time.perf_counter() - start


def _time_migrate(root: Path) -> float:
    layout = Layout(root)
    start = time.perf_counter()
    with open_shared(layout) as db:
        report = run_migration(layout, db, MigrationReport(say=print))
    elapsed = time.perf_counter() - start
    if not report.clean or not report.migrated:
        raise SystemExit(f"bench_migrate: the migration went wrong: {report.summary()}")
    return elapsed


def _row(label: str, files: int, size_mib: float, times: list[float]) -> str:
    median = statistics.median(times)
    return (
        f"  {label:<16} {median:8.2f} s  (range {min(times):.2f}-{max(times):.2f})"
        f"  {files / median:9.1f} files/s  {size_mib / median:8.1f} MB/s"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_migrate", description=__doc__.split("\n")[0])
    parser.add_argument("--set", dest="sets", nargs="+", choices=sorted(SETS), default=list(SETS))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print_machine(machine())
    workdir = Path(tempfile.mkdtemp(prefix="bench-migrate-", dir="/var/tmp"))
    try:
        for name in args.sets:
            files, size = SETS[name]
            template = workdir / f"template-{name}"
            written_store(template, files, payload=_payloads(size))
            size_mib = _tree_bytes(template) / (1 << 20)
            cp: list[float] = []
            cp_sync: list[float] = []
            migrate: list[float] = []
            for _ in range(args.repeat):
                plain, durable = _time_cp(_fresh(template, workdir, "run"))
                cp.append(plain)
                cp_sync.append(durable)
                migrate.append(_time_migrate(_fresh(template, workdir, "run")))
            print(f"\n{name}: {files:,} files, {size_mib:,.1f} MiB, medians of {args.repeat}")
            print(_row("store migrate", files, size_mib, migrate))
            print(_row("cp -a", files, size_mib, cp))
            print(_row("cp -a + sync", files, size_mib, cp_sync))
            median = statistics.median(migrate)
            print(
                f"  migrate takes {median / statistics.median(cp):.1f}x the time of cp -a, "
                f"{median / statistics.median(cp_sync):.1f}x that of cp -a + sync",
                flush=True,
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
