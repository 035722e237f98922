"""Benchmark: the snapshot store under recording load (issue section 7).

    PYTHONPATH=. python bench/bench_store.py [--requests 3000] [--rate 300] [--size 20000]

A local "live web" server (aiohttp on 127.0.0.1) serves pages; a minimal
recording front end fetches them with one shared ``ClientSession``, streams
each body to the client while spooling it to a ``SpooledTemporaryFile``, and
after the last byte hands the capture to :meth:`Store.submit` without waiting
for the ack, which is how a ``record: true`` step is meant to use the store.
(This stands in for the lead's live loader until it exists; then the same
measurement should run through the real app.) The load generator runs in its
own process so that it does not compete with the server for the GIL.

Two phases per mode:

- latency: requests paced at ``--rate`` per second (open loop); client p50
  and p90 in ms, and the p50 increase over ``off`` (no recording);
- throughput: ``--concurrency`` clients as fast as possible; requests/s and
  captures acknowledged per second (durable and indexed).

Modes: ``off``, ``keep`` (full records), ``revisit-repeated`` (every page has
the same body: one full record, then revisits), ``revisit-unique`` (every
body differs: full records after a dedup lookup). Target: recording adds
under 10% to the client's p50. Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from gateway.store.capture import CaptureAck, CaptureInput, HttpRequest, HttpResponse
from gateway.store.settings import DedupPolicy, FsyncPolicy, StoreSettings
from gateway.store.store import Store

_SPOOL_BYTES = 512 * 1024


@dataclass
class Result:
    mode: str
    requests_per_s: float
    p50_ms: float
    p90_ms: float
    acks_per_s: float | None = None
    outcomes: str = ""


def _live_app(size: int, repeated: bool) -> web.Application:
    shared = b"x" * size

    async def page(request: web.Request) -> web.Response:
        n = request.match_info["n"]
        body = shared if repeated else f"<!-- page {n} -->".encode() + shared[: size - 32]
        return web.Response(body=body, content_type="text/html")

    app = web.Application()
    app.router.add_get("/page/{n}", page)
    return app


def _front_app(
    upstream: str,
    store: Store | None,
    pending: list[asyncio.Future[CaptureAck]],
    dedup: DedupPolicy,
) -> web.Application:
    session_key = web.AppKey("session", aiohttp.ClientSession)

    async def session_ctx(app: web.Application):  # type: ignore[no-untyped-def]
        app[session_key] = aiohttp.ClientSession(auto_decompress=False)
        yield
        await app[session_key].close()

    async def live(request: web.Request) -> web.StreamResponse:
        url = f"{upstream}/page/{request.match_info['n']}"
        async with request.app[session_key].get(url) as upstream_response:
            response = web.StreamResponse(status=upstream_response.status)
            response.content_type = upstream_response.content_type
            await response.prepare(request)
            spool = tempfile.SpooledTemporaryFile(_SPOOL_BYTES) if store else None  # noqa: SIM115
            async for chunk in upstream_response.content.iter_chunked(64 * 1024):
                await response.write(chunk)
                if spool is not None:
                    spool.write(chunk)
            await response.write_eof()
            if store is not None and spool is not None:
                capture = CaptureInput(
                    url=url,
                    request=HttpRequest(method="GET", headers=(("Host", upstream[7:]),)),
                    response=HttpResponse(
                        status=upstream_response.status,
                        reason=upstream_response.reason or "",
                        headers=tuple(upstream_response.headers.items()),
                    ),
                    payload=spool,
                    dedup=dedup,
                )
                pending.append(await store.submit(capture))
        return response

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_get("/live/{n}", live)
    return app


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def _client(
    base: str, requests: int, concurrency: int, rate: float, offset: int
) -> dict[str, object]:
    """The load generator (run in its own process): paced when ``rate`` > 0."""
    latencies: list[float] = []
    limit = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(n: int, due: float) -> None:
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            async with limit:
                start = time.perf_counter()
                async with session.get(f"{base}/live/{n}") as response:
                    await response.read()
                latencies.append(time.perf_counter() - start)

        began = time.perf_counter()
        step = 1 / rate if rate > 0 else 0.0
        await asyncio.gather(
            *(one(n, began + (n - offset) * step) for n in range(offset, offset + requests))
        )
        return {"elapsed": time.perf_counter() - began, "latencies": latencies}


async def _load(
    base: str, requests: int, concurrency: int, rate: float, offset: int
) -> tuple[float, list[float]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--client",
        base,
        "--requests",
        str(requests),
        "--concurrency",
        str(concurrency),
        "--rate",
        str(rate),
        "--offset",
        str(offset),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    result = json.loads(out)
    return float(result["elapsed"]), [float(x) for x in result["latencies"]]


async def run_mode(mode: str, args: argparse.Namespace, root: Path) -> list[Result]:
    repeated = mode != "revisit-unique"
    live_runner, upstream = await _serve(_live_app(args.size, repeated))
    store = None
    if mode != "off":
        fsync: FsyncPolicy = args.fsync
        store = await Store.open(StoreSettings(root=str(root / mode), fsync=fsync))
    dedup: DedupPolicy = "keep" if mode == "keep" else "revisit"
    pending: list[asyncio.Future[CaptureAck]] = []
    front_runner, front = await _serve(_front_app(upstream, store, pending, dedup))
    results = []
    try:
        await _load(front, 200, args.concurrency, 0, 10_000_000)  # warm-up
        await asyncio.gather(*pending)
        offset = 0
        for phase, rate in (("latency", args.rate), ("throughput", 0.0)):
            pending.clear()
            elapsed, latencies = await _load(front, args.requests, args.concurrency, rate, offset)
            offset += args.requests
            acks_per_s = None
            outcomes = ""
            if store is not None:
                began = time.perf_counter() - elapsed
                acks = await asyncio.gather(*pending)
                acks_per_s = len(acks) / (time.perf_counter() - began)
                counts = Counter(a.outcome for a in acks)
                outcomes = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            quantiles = statistics.quantiles(latencies, n=10)
            results.append(
                Result(
                    mode=f"{mode} ({phase})",
                    requests_per_s=len(latencies) / elapsed,
                    p50_ms=statistics.median(latencies) * 1000,
                    p90_ms=quantiles[8] * 1000,
                    acks_per_s=acks_per_s,
                    outcomes=outcomes,
                )
            )
    finally:
        await front_runner.cleanup()
        await live_runner.cleanup()
        if store is not None:
            await store.close()
    return results


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=300.0, help="requests/s, latency phase")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--size", type=int, default=20_000, help="page body bytes")
    parser.add_argument("--fsync", choices=("always", "close", "never"), default="always")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        result = await _client(args.client, args.requests, args.concurrency, args.rate, args.offset)
        print(json.dumps(result))
        return 0
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        for mode in ("off", "keep", "revisit-repeated", "revisit-unique"):
            results.extend(await run_mode(mode, args, Path(tmp)))
    print(
        f"{args.requests} requests per phase, latency phase at {args.rate:g} req/s, "
        f"{args.concurrency} clients, {args.size} B pages, fsync={args.fsync}"
    )
    header = ("mode", "req/s", "p50 ms", "p90 ms", "p50 +%", "acks/s")
    print(
        f"{header[0]:30} {header[1]:>7} {header[2]:>7} {header[3]:>7} {header[4]:>7} "
        f"{header[5]:>7}  outcomes"
    )
    base = {r.mode.split(" ")[1]: r.p50_ms for r in results if r.mode.startswith("off")}
    for r in results:
        phase = r.mode.split(" ")[1]
        acks = f"{r.acks_per_s:7.0f}" if r.acks_per_s is not None else f"{'-':>7}"
        extra = (r.p50_ms / base[phase] - 1) * 100
        print(
            f"{r.mode:30} {r.requests_per_s:7.0f} {r.p50_ms:7.2f} {r.p90_ms:7.2f} "
            f"{extra:6.1f}% {acks}  {r.outcomes}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
