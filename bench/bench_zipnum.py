"""Benchmark: ZipNum clusters at scale, built by ``gateway zipnum build`` and looked up.

::

    python -m bench.bench_zipnum --lines 1000000 --work /var/tmp/zipnum-1m
    python -m bench.bench_zipnum --lines 10000000 --work /var/tmp/zipnum-10m --s3 --http --callgrind

For a cluster of ``--lines`` synthetic captures it

1. generates the CDXJ (never committed; kept in ``--work`` and reused): SURT
   urlkeys of made-up hosts under 12 TLDs, 1-4 path segments, a sorted
   query string on 10% of URLs, 1-12 captures per URL at random times
   1996-2025, cdxj-indexer's JSON fields. The lines are written in
   generation order (unsorted: the build sorts them), and every
   ``lines / 2000``-th URL is kept in ``captures.urls`` for the lookups;
2. runs ``gateway zipnum build`` on it (3,000 lines per block, 1 GiB shards)
   and records its wall time and peak RSS (``getrusage`` of the child);
3. looks up 1,000 of the kept URLs with :class:`~gateway.sources.zipnum.ZipNumSource`
   in this process: one URL (``exact``), its host (``prefix``), and
   ``closest`` (the exact range; the aggregator orders it), each kind with a
   new source (nothing remembered or kept from the kind before), giving
   p50/p99 latency and the range reads (``pread`` or range request) per
   lookup, from local disk and, with ``--s3``, from a SeaweedFS started
   here (``gateway zipnum build --s3``; with ``--s3-upload``, the local
   cluster's shards are uploaded instead of building a second time, which
   serves the same blocks and saves the second build at 100M lines);
4. with ``--http``, serves the local cluster with ``gateway serve`` and
   pywb 2.10 (and, with ``--s3``, the cluster on SeaweedFS with ``gateway
   serve``) and times a first lookup of each of the 1,000 URLs over HTTP,
   one request at a time (:func:`latencies`);
5. with ``--callgrind``, the same servers under ``valgrind
   --tool=callgrind``: instructions per request of ``--requests`` first
   lookups per kind (as :mod:`bench.bench_instructions` counts them:
   warm-up, zero, N requests, dump; :func:`instructions`).

Figures are printed as a Markdown table; docs/zipnum.md records them.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Final

from bench.harness import Server, machine, print_machine, start_gateway, start_pywb
from bench.workloads import Row, quote

_TLDS: Final = ("com",) * 8 + ("org", "net", "de", "uk", "fr", "jp", "br", "it", "nl", "au", "ru")
_SYLLABLES: Final = tuple(c + v for c in "bklmnrst" for v in "aeiou")
_EXTENSIONS: Final = ("", "", "", ".html", ".htm", ".php", ".jpg", ".png", ".css", ".js", ".pdf")
_MIMES: Final = {".jpg": "image/jpeg", ".png": "image/png", ".css": "text/css"}
_LOOKUPS: Final = 1000
_KEPT_URLS: Final = 2000
_START: Final = 820454400  # 1996-01-01
_END: Final = 1767225600  # 2026-01-01


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))


def generate(lines: int, out: Path, seed: int = 24) -> None:
    """Write about ``lines`` CDXJ lines to ``out`` and the kept URLs to ``out.urls``."""
    rng = random.Random(seed)
    hosts = [
        (rng.choice(_TLDS), _word(rng), rng.choice(("", "", "", "blog", "shop", "news")))
        for _ in range(max(10, lines // 400))
    ]
    keep_every = max(1, lines // (3 * _KEPT_URLS))  # about 3 captures per URL
    written = kept = urls = 0
    with out.open("w", encoding="ascii") as cdxj, out.with_suffix(".urls").open("w") as keep:
        while written < lines:
            tld, domain, sub = rng.choice(hosts)
            host = f"{sub}.{domain}.{tld}" if sub else f"{domain}.{tld}"
            surt_host = f"{tld},{domain},{sub}" if sub else f"{tld},{domain}"
            ext = rng.choice(_EXTENSIONS)
            path = "/".join(_word(rng) for _ in range(rng.randint(1, 4))) + ext
            query = ""
            if rng.random() < 0.1:
                args = sorted(f"{_word(rng)}={rng.randint(1, 999)}" for _ in range(2))
                query = "?" + "&".join(args)
            url = f"http://{host}/{path}{query}"
            urlkey = f"{surt_host})/{path}{query}"
            urls += 1
            captures = min(12, int(rng.expovariate(0.4)) + 1)
            for _ in range(captures):
                when = time.strftime("%Y%m%d%H%M%S", time.gmtime(rng.randint(_START, _END)))
                digest = hashlib.sha1(f"{url}{when}".encode()).hexdigest()[:32].upper()
                fields = {
                    "url": url,
                    "mime": _MIMES.get(ext, "text/html"),
                    "status": "200",
                    "digest": f"sha1:{digest}",
                    "length": str(rng.randint(500, 90000)),
                    "offset": str(rng.randint(0, 1 << 30)),
                    "filename": f"crawl-{when[:6]}-{rng.randint(0, 999):05d}.warc.gz",
                }
                cdxj.write(f"{urlkey} {when} {json.dumps(fields)}\n")
                written += 1
            if urls % keep_every == 0:
                keep.write(f"{url}\t{when}\t{host}\n")
                kept += 1
    print(f"# generated {written:,} lines ({out.stat().st_size / 1e9:.2f} GB), {kept} URLs kept")


def build(cdxj: Path, out_dir: Path, s3: str | None = None) -> tuple[float, float]:
    """``gateway zipnum build``: wall seconds and the child's peak RSS in MB."""
    argv = [sys.executable, "-m", "gateway.cli", "zipnum", "build", str(cdxj), "-o", str(out_dir)]
    if s3:
        argv += ["--s3", s3]
    started = time.monotonic()
    process = subprocess.Popen(argv)
    _, status, usage = os.wait4(process.pid, 0)  # this child's own peak, not the max of all
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, argv)
    return wall, usage.ru_maxrss / 1024


def upload(local: Path, target: Path, location_base: str) -> None:
    """Copy the cluster in ``local`` to ``target`` with its shards on S3:
    the same summary, each shard uploaded under ``location_base`` (an
    ``s3+http://HOST:PORT/BUCKET/PREFIX/`` as ``gateway zipnum build --s3``
    takes), and a location file naming the uploads."""
    target.mkdir(parents=True, exist_ok=True)
    (target / "cluster.idx").write_bytes((local / "cluster.idx").read_bytes())
    shards = []
    for line in (local / "cluster.loc").read_text().splitlines():
        part, where = line.split("\t")
        digest = hashlib.sha256()
        with (local / where).open("rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        shards.append((part, where, local / where, digest.hexdigest()))
    asyncio.run(_put_shards(shards, location_base))
    loc = "".join(f"{part}\t{location_base}{where}\n" for part, where, _, _ in shards)
    (target / "cluster.loc").write_text(loc)


async def _put_shards(shards: Sequence[tuple[str, str, Path, str]], location_base: str) -> None:
    from gateway.storage.s3 import S3Storage
    from gateway.storage.s3_config import S3StorageConfig

    host, _, path = location_base.partition("://")[2].partition("/")
    bucket, _, prefix = path.partition("/")
    config = S3StorageConfig(bucket=bucket, prefix=prefix, endpoint=f"http://{host}")
    storage = await S3Storage.open("zipnum-bench", config)
    try:
        for _, where, shard, digest in shards:

            async def chunks(shard: Path = shard) -> AsyncIterator[bytes]:
                with shard.open("rb") as fh:
                    while chunk := fh.read(1 << 20):
                        yield chunk

            size = shard.stat().st_size
            await storage.put(where, chunks(), size=size, sha256=digest)
    finally:
        await storage.close()


async def lookups(summary: Path, urls: Sequence[tuple[str, str, str]]) -> dict[str, str]:
    """p50/p99 ms and range reads per lookup for each kind of lookup (module docstring)."""
    from gateway.cdx.query import CaptureQuery
    from gateway.clients import SharedClients
    from gateway.sources.zipnum import ZipNumSource, ZipNumSourceConfig

    clients = SharedClients()
    await clients.start()
    results: dict[str, str] = {}
    hits = misses = 0
    try:
        for kind in ("exact", "prefix", "closest"):
            # A new source per kind: no answer remembered, no block kept from the kind before.
            config = ZipNumSourceConfig(path=str(summary))
            source = ZipNumSource(config, name="bench", clients=clients)
            times, reads, found = [], 0, 0
            try:
                for url, when, host in urls:
                    if kind == "prefix":
                        query = CaptureQuery.for_url(f"http://{host}/", match_type="prefix")
                    else:
                        closest = when if kind == "closest" else None
                        query = CaptureQuery.for_url(url, closest=closest)
                    before = sum(source.stats.requests.values())
                    started = time.perf_counter()
                    records = [r async for r in source.lookup(query)]
                    times.append(time.perf_counter() - started)
                    reads += sum(source.stats.requests.values()) - before
                    found += bool(records)
                hits += source.stats.cache_hits
                misses += source.stats.cache_misses
            finally:
                await source.aclose()
            times.sort()
            p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
            results[kind] = (
                f"{p50 * 1000:.2f} / {p99 * 1000:.2f} ms, "
                f"{reads / len(urls):.2f} reads, {found}/{len(urls)} found"
            )
        if hits + misses:
            results["block cache"] = f"{hits / (hits + misses):.0%} hits"
    finally:
        await clients.close()
    return results


#: Starts one server on the cluster: ``(prefix, workdir, name) -> Server`` (``prefix``:
#: valgrind's; ``name``: the server's, which names its files and callgrind's dumps).
Starter = Callable[[Sequence[str], Path, str], Server]
_KINDS: Final = ("exact", "prefix", "closest")
_SERVERS: Final = ("gateway", "gateway on S3", "pywb")
#: Warm-up lookups: URLs of a made-up top-level domain (``zz``, after every key of the
#: index): the same code as a real lookup, and nothing of the index but its last block.
_WARM: Final = tuple(
    (f"http://warm{n}.zz/{n}", "20200101000000", f"warm{n}.zz") for n in range(200)
)


def gateway_on(summary: Path) -> Starter:
    """``gateway serve`` with one collection ``web`` whose index is ``summary``
    (the lookup deadline 120 s under valgrind)."""

    def start(prefix: Sequence[str], workdir: Path, name: str) -> Server:
        from bench.bench_instructions import _STARTUP_S

        yaml = f"collections:\n  web:\n    index: {summary}\n"
        if prefix:  # under valgrind a first S3 request takes longer than the 5 s default
            yaml += "    timeout: 120\n"
        return start_gateway(yaml, workdir, name, prefix=prefix, startup_timeout_s=_STARTUP_S)

    return start


def pywb_on(summary: Path) -> Starter:
    """pywb 2.10 with one collection ``web`` whose index is ``summary``."""

    def start(prefix: Sequence[str], workdir: Path, name: str) -> Server:
        from bench.bench_instructions import _STARTUP_S

        config: dict[str, object] = {"collections": {"web": {"index": str(summary)}}}
        return start_pywb(config, workdir, name=name, prefix=prefix, startup_timeout_s=_STARTUP_S)

    return start


def _row(kind: str, picked: Sequence[tuple[str, str, str]]) -> Row:
    """The Index API paths of a kind of lookup for ``picked`` (url, timestamp, host)."""
    if kind == "prefix":
        return Row(kind, tuple(f"/web/index?url={quote(h)}/&matchType=prefix" for *_, h in picked))
    if kind == "closest":
        return Row(
            kind, tuple(f"/web/index?url={quote(u)}&closest={w}&limit=1" for u, w, _ in picked)
        )
    return Row(kind, tuple(f"/web/index?url={quote(u)}" for u, _, _ in picked))


def instructions(
    work: Path, starters: dict[str, Starter], urls: Sequence[tuple[str, str, str]], requests: int
) -> dict[str, dict[str, float]]:
    """k instructions per request of each server: ``requests`` first lookups of
    distinct URLs per kind, each kind on a server of its own (nothing
    remembered or kept from another kind) after 200 warm-up lookups
    (:data:`_WARM`)."""
    from bench.bench_instructions import _instructions_per_request

    found: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-zipnum-", dir=work) as tmp:
        out_dir = Path(tmp)
        for name, start in starters.items():
            found[name] = {}
            slug = name.replace(" ", "-")
            for kind in _KINDS:
                prefix = [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={out_dir}/{slug}.%p.out",
                ]
                server = start(prefix, out_dir, slug)
                try:
                    warmup = _row(kind, _WARM).paths
                    found[name][kind] = _instructions_per_request(
                        server, _row(kind, urls[:requests]), out_dir, requests, 4, warmup=warmup
                    )
                finally:
                    server.stop()
            print(f"# {name}: {found[name]}", flush=True)
    return found


def latencies(
    work: Path, starters: dict[str, Starter], urls: Sequence[tuple[str, str, str]]
) -> dict[str, dict[str, str]]:
    """p50 / p99 of each server's answers over HTTP: one request at a time on one
    keep-alive connection, a first lookup of each URL of ``urls`` per kind, each
    kind on a server of its own after 200 warm-up lookups (:data:`_WARM`)."""
    import http.client

    from bench.harness import HOST

    found: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-zipnum-", dir=work) as tmp:
        for name, start in starters.items():
            found[name] = {}
            for kind in _KINDS:
                server = start((), Path(tmp), name.replace(" ", "-"))
                conn = http.client.HTTPConnection(HOST, server.port, timeout=60)
                try:
                    for path in _row(kind, _WARM).paths:
                        conn.request("GET", path)
                        conn.getresponse().read()
                    times = []
                    for path in _row(kind, urls).paths:
                        started = time.perf_counter()
                        conn.request("GET", path)
                        response = conn.getresponse()
                        response.read()
                        times.append(time.perf_counter() - started)
                        if response.status != 200:
                            raise RuntimeError(f"{name}: GET {path}: {response.status}")
                finally:
                    conn.close()
                    server.stop()
                times.sort()
                p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
                found[name][kind] = f"{p50 * 1000:.2f} / {p99 * 1000:.2f} ms"
            print(f"# {name}: {found[name]}", flush=True)
    return found


def _report(
    starters: dict[str, Starter], args: argparse.Namespace, urls: Sequence[tuple[str, str, str]]
) -> None:
    """The HTTP latencies and callgrind counts ``args`` asks for, as table rows."""
    if args.http:
        for server, per_kind in latencies(args.work, starters, urls).items():
            for kind, text in per_kind.items():
                print(f"| {server} over HTTP, {kind} | {text} |", flush=True)
    if args.callgrind:
        for server, counts in instructions(args.work, starters, urls, args.requests).items():
            for kind, k in counts.items():
                print(f"| {server} {kind} | {k:,.1f}k instructions per request |", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, required=True, help="kept between runs")
    parser.add_argument("--s3", action="store_true", help="also build onto and read from S3")
    parser.add_argument(
        "--s3-upload", action="store_true", help="with --s3: upload the local shards, no rebuild"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="serve the cluster already in --work, no rebuild"
    )
    parser.add_argument("--http", action="store_true", help="p50/p99 over HTTP, pywb too")
    parser.add_argument(
        "--servers",
        nargs="+",
        choices=_SERVERS,
        default=list(_SERVERS),
        help="the servers --http and --callgrind measure (default: all)",
    )
    parser.add_argument("--callgrind", action="store_true", help="instructions per request")
    parser.add_argument("--requests", type=int, default=300, help="callgrind requests per row")
    args = parser.parse_args(argv)
    print_machine(machine())
    args.work.mkdir(parents=True, exist_ok=True)
    cdxj = args.work / "captures.cdxj"
    if not cdxj.exists():
        generate(args.lines, cdxj)
    rows = [line.split("\t") for line in cdxj.with_suffix(".urls").read_text().splitlines()]
    urls = [(u, w, h) for u, w, h in rows][:_LOOKUPS]
    local = args.work / "cluster"
    summary = local / "cluster.idx"
    if not (args.reuse and summary.exists()):
        wall, peak = build(cdxj, local)
        print(f"| build | {wall:,.0f} s wall, peak RSS {peak:,.0f} MB |", flush=True)
    named = [line.split("\t")[1] for line in (local / "cluster.loc").read_text().splitlines()]
    size = sum((local / where).stat().st_size for where in named)  # this generation's
    print(f"| cluster | {size / 1e9:.2f} GB of shards, summary {summary.stat().st_size:,} bytes |")
    for kind, text in asyncio.run(lookups(summary, urls)).items():
        print(f"| local {kind} | {text} |", flush=True)
    if args.s3:
        from tests.storage.seaweedfs import SeaweedFS

        shutil.rmtree(args.work / "seaweedfs", ignore_errors=True)  # a run before this one's
        with SeaweedFS(args.work / "seaweedfs") as s3:
            os.environ.update(s3.environ())
            asyncio.run(s3.create_bucket("zipnum-bench"))
            on_s3 = args.work / "cluster-s3"
            location_base = f"s3+{s3.endpoint}/zipnum-bench/c/"
            if args.s3_upload:
                started = time.monotonic()
                upload(local, on_s3, location_base)
                print(f"| upload to S3 | {time.monotonic() - started:,.0f} s wall |", flush=True)
            else:
                wall, peak = build(cdxj, on_s3, location_base)
                print(f"| build to S3 | {wall:,.0f} s wall, peak RSS {peak:,.0f} MB |")
            for kind, text in asyncio.run(lookups(on_s3 / "cluster.idx", urls)).items():
                print(f"| S3 {kind} | {text} |", flush=True)
            if "gateway on S3" in args.servers:
                _report({"gateway on S3": gateway_on(on_s3 / "cluster.idx")}, args, urls)
    local_servers = {"gateway": gateway_on(summary), "pywb": pywb_on(summary)}
    chosen = {name: start for name, start in local_servers.items() if name in args.servers}
    _report(chosen, args, urls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
