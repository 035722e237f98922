"""Benchmark: how long opening the store takes against the number of files in it (issue 14 §2).

    python -m bench.bench_store_open [--files 1000 100000] [--repeat 7] [--old-commit af8b42d]
        [--callgrind OPENS]

For each size N, side by side in one run:

- **this release**: ``Store.open`` + ``close`` as the writer (``mode="write"``:
  the recording gateway) and as a shared process (``mode="shared"``:
  ``store add``, a serving process);
- **the peer**: the release at ``--old-commit`` (``git archive`` of it,
  run from its own tree), whose open listed ``warcs/`` and looked at every
  file, on a store of the same N with that release's schema;
- **the floor**: opening the SQLite index and reading its ``user_version``.

A store of N files is made quickly and honestly for an open: one real WARC
file written by the store (a warcinfo record and one capture), hard-linked
N times under N store names in ``warcs/`` (from a copy per 50,000 links;
directory entries cost what files do to a listing and a ``stat``, and the
bytes are shared), and N file rows and N capture rows inserted in one
transaction, every file closed and fully indexed (``indexed_end`` = its
size), as a clean shutdown leaves them.
Each measurement runs in a fresh process (``python -c``, code tree chosen by
its working directory), opens and closes the store ``--repeat`` times, and
reports the median and the range in ms; the page cache is warm after the
first open, as on a machine that restarts its gateway.

Prints one row per (N, variant) and the ratio 100,000 / 1,000 per variant.

With ``--callgrind``, also the measure that does not vary with the load of
a shared VM: instructions per open + close under ``valgrind
--tool=callgrind``, from two runs of the same process that differ only in
the number of opens (``(total(K) - total(0)) / K``), for this release's two
modes and the floor (the release before is left out there: an open of its
100,000-file store runs for minutes under callgrind).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
_LINKS_PER_INODE: Final = 50_000

#: Run in a fresh process (``python -c CODE ROOT MODE REPEAT``) from the
#: tree whose ``gateway`` is measured. Only API both releases have.
_MEASURE: Final = """
import asyncio, json, sqlite3, sys, time
root, mode, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "floor":
    def once():
        conn = sqlite3.connect(f"{root}/index.sqlite3")
        conn.execute("PRAGMA user_version").fetchone()
        conn.close()
else:
    from gateway.store.settings import StoreSettings
    from gateway.store.store import Store
    settings = StoreSettings(root=root)
    kwargs = {} if mode == "old" else {"mode": mode}
    async def cycle():
        store = await Store.open(settings, **kwargs)
        await store.close()
    def once():
        asyncio.run(cycle())
once()  # imports, first open of the page cache
times = []
for _ in range(repeat):
    start = time.perf_counter()
    once()
    times.append((time.perf_counter() - start) * 1000)
print(json.dumps(times))
"""


def _sample_warc(workdir: Path) -> tuple[Path, list[tuple[object, ...]]]:
    """One WARC file written by this store: its path and its capture rows (new schema)."""
    from gateway.store.capture import CaptureInput, HttpResponse
    from gateway.store.settings import StoreSettings
    from gateway.store.store import Store

    root = workdir / "sample"

    async def write() -> None:
        async with await Store.open(StoreSettings(root=str(root))) as store:
            body = b"<html>one capture</html>"
            headers = (("Content-Type", "text/html"),)
            response = HttpResponse(status=200, reason="OK", headers=headers)
            await store.record(
                CaptureInput(url="http://example.com/", response=response, payload=body)
            )

    asyncio.run(write())
    [path] = [p for p in (root / "warcs").rglob("*") if p.is_file()]  # any layout
    db = sqlite3.connect(root / "index.sqlite3")
    rows = db.execute(
        "SELECT urlkey, timestamp, offset, length, rec_type, url, mime, status, digest,"
        " warc_date, record_id, extra FROM captures"
    ).fetchall()
    db.close()
    return path, rows


def _make_store(
    root: Path, sample: Path, rows: list[tuple[object, ...]], files: int, *, old: bool
) -> None:
    """N hard links of ``sample`` under store names, with their rows (module docstring)."""
    from gateway.store.schema import STEPS, migrate

    warcs = root / "warcs"
    warcs.mkdir(parents=True)
    size = sample.stat().st_size
    names = [f"gateway-20250101000000-{serial:06d}.warc.gz" for serial in range(1, files + 1)]
    source = sample
    for number, name in enumerate(names):
        if number % _LINKS_PER_INODE == 0:  # ext4 allows 65,000 links to one inode
            source = Path(shutil.copy(sample, root / f"source-{number}.warc.gz"))
        os.link(source, warcs / name)
    conn = sqlite3.connect(root / "index.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    migrate(conn, STEPS[:1] if old else STEPS)
    if old:  # the release at af8b42d kept no version: it created its tables each time
        conn.execute("PRAGMA user_version = 0")
    conn.execute("BEGIN")
    if old:
        conn.executemany(
            "INSERT INTO files (id, name, open, origin, indexed_end)"
            " VALUES (?, ?, 0, 'written', ?)",
            ((i, name, size) for i, name in enumerate(names, 1)),
        )
    else:
        conn.executemany(
            "INSERT INTO files (id, name, origin, indexed_end, state, sha256, date)"
            " VALUES (?, ?, 'written', ?, 'closed', 'x', '20250101000000')",
            ((i, name, size) for i, name in enumerate(names, 1)),
        )
    conn.executemany(
        "INSERT INTO captures (urlkey, timestamp, offset, length, rec_type, url, mime, status,"
        " digest, warc_date, record_id, extra, file_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        ((*row, i) for i in range(1, files + 1) for row in rows),
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def old_tree(commit: str, workdir: Path) -> Path:
    """The ``gateway`` package of ``commit`` (``git archive``), extracted under ``workdir``."""
    tree = workdir / f"gateway-{commit}"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", commit, "gateway"], cwd=REPO, capture_output=True, check=True
    ).stdout
    archive_path = workdir / "old.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(tree, filter="data")
    return tree


def run_code(tree: Path, code: str, args: list[str], prefix: list[str]) -> str:
    """Run ``python -c code *args`` from ``tree`` (so its ``gateway``), under ``prefix``.

    Returns its standard output; exits with its standard error when it fails.
    """
    done = subprocess.run(
        [*prefix, sys.executable, "-c", code, *args],
        cwd=tree,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"running {args} from {tree} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def _measure(tree: Path, root: Path, mode: str, repeat: int) -> list[float]:
    times: list[float] = json.loads(run_code(tree, _MEASURE, [str(root), mode, str(repeat)], []))
    return times


_TOTALS: Final = re.compile(r"^(?:summary|totals): (\d+)", re.MULTILINE)


def callgrind_instructions(tree: Path, code: str, args: list[str], out: Path) -> int:
    """Instructions of a whole ``python -c code *args`` process under callgrind."""
    run_code(tree, code, args, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"])
    match = _TOTALS.search(out.read_text())
    if match is None:
        raise SystemExit(f"no totals in {out}")
    return int(match.group(1))


def _instructions(root: Path, mode: str, opens: int, out: Path) -> int:
    return callgrind_instructions(REPO, _MEASURE, [str(root), mode, str(opens)], out)


def _callgrind(roots: dict[int, Path], opens: int, workdir: Path) -> None:
    print(f"\ninstructions per open + close (callgrind, {opens} opens less none):")
    per_open: dict[tuple[str, int], float] = {}
    for files, root in roots.items():
        for mode in ("write", "shared", "floor"):
            base = _instructions(root, mode, 0, workdir / f"cg-{mode}-{files}-0.out")
            more = _instructions(root, mode, opens, workdir / f"cg-{mode}-{files}-n.out")
            per_open[(mode, files)] = (more - base) / opens
            print(
                f"{files:>7} files  {mode:<8} {per_open[(mode, files)] / 1000:10.1f} k instr",
                flush=True,
            )
    small, large = min(roots), max(roots)
    if small != large:
        for mode in ("write", "shared", "floor"):
            ratio = per_open[(mode, large)] / per_open[(mode, small)]
            print(f"  {mode:<8} {large:,} / {small:,} files: {ratio:.3f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_store_open", description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--old-commit", default="af8b42d")
    parser.add_argument("--callgrind", type=int, metavar="OPENS", default=0)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-store-open-"))
    try:
        old = old_tree(args.old_commit, workdir)
        sample, rows = _sample_warc(workdir)
        results: dict[tuple[str, int], list[float]] = {}
        new_roots: dict[int, Path] = {}
        for files in args.files:
            new_root, old_root = workdir / f"new-{files}", workdir / f"old-{files}"
            _make_store(new_root, sample, rows, files, old=False)
            _make_store(old_root, sample, rows, files, old=True)
            new_roots[files] = new_root
            variants = (
                ("this release, writer", REPO, new_root, "write"),
                ("this release, shared", REPO, new_root, "shared"),
                (f"release {args.old_commit}", old, old_root, "old"),
                ("floor: sqlite open", REPO, new_root, "floor"),
            )
            for label, tree, root, mode in variants:
                times = _measure(tree, root, mode, args.repeat)
                results[(label, files)] = times
                print(
                    f"{files:>7} files  {label:<24} median {statistics.median(times):8.2f} ms"
                    f"  (range {min(times):.2f}-{max(times):.2f})",
                    flush=True,
                )
        if len(args.files) >= 2:
            small, large = min(args.files), max(args.files)
            print(f"\nratio of the medians, {large:,} files / {small:,} files:")
            for label in dict.fromkeys(label for label, _ in results):
                ratio = statistics.median(results[(label, large)]) / statistics.median(
                    results[(label, small)]
                )
                print(f"  {label:<24} {ratio:6.2f}x")
        if args.callgrind:
            _callgrind(new_roots, args.callgrind, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
