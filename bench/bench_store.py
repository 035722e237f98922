"""Benchmark: recording through the real gateway (``record: true`` into the store).

    python -m bench.bench_store [--fsync always close] [--rate 200] [--requests 3000]
        [--block 50] [--concurrency 16] [--duration 8] [--size 20000] [--profile DIR]

Three processes on 127.0.0.1, each with its own event loop:

- the **live web**: an aiohttp server in this process serving ``--size``-byte
  ``text/html`` pages, ``/same?n=N`` (the same body for every ``N``: repeated
  content) and ``/unique?n=N`` (``N`` in the body: every page differs);
- the **gateway**: ``python -m gateway.cli serve`` (uvloop when installed, as
  in production) on a config with a fresh store (``fsync`` as given) and the
  collections ``plain`` (``{type: live, allow_private_networks: true}``, no
  recording), ``keep`` and ``revisit`` (the same source with ``record: true``
  and collection ``dedup: keep`` / ``dedup: revisit``) and ``stored``
  (``$store``);
- the **load generator**: this script with ``--client``, in its own process
  so that it competes with neither server for a GIL. Every request is
  ``GET /{coll}/resource?url=http://127.0.0.1:P/{same|unique}?n=N`` (Resource
  API) with a new ``N``, so every request is a live fetch of a new URL.

Modes (collection, content): ``plain``, ``keep`` and ``revisit`` on repeated
content (``revisit``: one full record, then revisit records), ``plain`` and
``revisit`` on unique content (a dedup lookup that misses, then full
records). Per ``--fsync`` policy one gateway and one fresh store serve all
modes:

- warm-up: 200 requests per mode, then a check that a recorded capture is
  found through ``/stored/index``;
- latency: one open-loop run paced at ``--rate`` requests/s in all (a slow
  answer does not delay the next request), ``--requests`` per mode, the modes
  taking turns every ``--block`` requests (in reverse order every other
  cycle), so that drift of the machine over the run hits every mode alike;
  client p50 and p90 in ms, and the p50 increase over ``plain`` on the same
  content (also printed per third of the run, to show how stable it is);
- throughput: ``--concurrency`` clients back to back for ``--duration``
  seconds per mode; requests/s, and **captures/s**: captures in the store
  index (response + revisit rows of ``<store>/index.sqlite3``, opened
  read-only) per second from the first request until the last capture of the
  run is indexed, that is, acknowledged as durable under the fsync policy.

After every run the script waits (at most 60 s) until the store holds one
capture per 200 answer of a recording mode, so no run's writes spill into the
next, and reports any that never arrive. Before each gateway starts it waits
up to ``--quiet-wait`` seconds for other load on the machine to settle, and it
reports the CPU other processes used during each run. With ``--profile DIR``
it then runs ``--requests`` paced requests per mode under ``py-spy`` and
prints where the gateway's time went.

Target (issue): recording adds under 10% to the client's p50. Speed is
measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import quote

import aiohttp
from aiohttp import web

from bench.harness import (
    HOST,
    REPO_ROOT,
    Server,
    http_get,
    machine,
    markdown_table,
    print_machine,
    start_gateway,
    system_busy_s,
    wait_quiet,
)
from bench.profiling import Profile, summarize

WARMUP_REQUESTS: Final = 200
DRAIN_TIMEOUT_S: Final = 60.0
#: Index rows of one capture (request records are not indexed).
CAPTURE_TYPES: Final = ("response", "revisit")


@dataclass(frozen=True, slots=True)
class Mode:
    """One measured configuration: a collection and a kind of live content."""

    name: str
    coll: str
    content: str  # "same" (repeated body) or "unique"

    @property
    def records(self) -> bool:
        return self.coll != "plain"


MODES: Final = (
    Mode("plain", "plain", "same"),
    Mode("keep", "keep", "same"),
    Mode("revisit", "revisit", "same"),
    Mode("plain, unique", "plain", "unique"),
    Mode("revisit, unique", "revisit", "unique"),
)


@dataclass
class ModeResult:
    """What one mode measured under one fsync policy."""

    mode: Mode
    #: (request number in the latency run, latency s) of each 200 answer.
    samples: list[tuple[int, float]] = field(default_factory=list)
    requests_per_s: float = 0.0
    captures_per_s: float | None = None
    stored: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    gateway_cpu: float = 0.0
    other_cpu: float = 0.0

    @property
    def p50_ms(self) -> float:
        return statistics.median(s for _, s in self.samples) * 1000

    @property
    def p90_ms(self) -> float:
        return statistics.quantiles((s for _, s in self.samples), n=10)[8] * 1000

    def p50_by_part_ms(self, total: int, parts: int = 3) -> list[float]:
        """p50 (ms) over each of ``parts`` equal stretches of the latency run."""
        return [
            statistics.median(s for i, s in self.samples if i * parts // total == part) * 1000
            for part in range(parts)
        ]


# -- the live web ------------------------------------------------------------------


def live_app(size: int) -> web.Application:
    """``/same`` (one body for every request) and ``/unique?n=N`` (``N`` in the body)."""
    shared = b"<html><body>" + b"x" * (size - 26) + b"</body></html>"

    async def same(request: web.Request) -> web.Response:
        return web.Response(body=shared, content_type="text/html")

    async def unique(request: web.Request) -> web.Response:
        head = f"<!-- page {request.query.get('n', '')} -->".encode()
        return web.Response(body=head + shared[len(head) :], content_type="text/html")

    app = web.Application()
    app.router.add_get("/same", same)
    app.router.add_get("/unique", unique)
    return app


async def serve_live(size: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(live_app(size), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.Server)
    port: int = server.sockets[0].getsockname()[1]
    return runner, port


def gateway_yaml(root: Path, fsync: str) -> str:
    live = "{type: live, allow_private_networks: true}"
    return (
        f"store: {{root: {json.dumps(str(root))}, fsync: {fsync}}}\n"
        "collections:\n"
        f"  plain: {{index: {live}}}\n"
        f"  keep: {{dedup: keep, record: true, index: {live}}}\n"
        f"  revisit: {{dedup: revisit, record: true, index: {live}}}\n"
        "  stored: $store\n"
    )


def url_template(gateway: Server, live_port: int, mode: Mode) -> str:
    """The request path for ``mode``, ``{n}`` standing for the page number."""
    target = quote(f"http://{HOST}:{live_port}/{mode.content}?n=", safe=":/")
    return f"{gateway.base}/{mode.coll}/resource?url={target}{{n}}"


# -- the store index ---------------------------------------------------------------


def stored_counts(index: Path) -> Counter[str]:
    """Index rows by record type, read through a read-only SQLite connection."""
    if not index.exists():
        return Counter()
    conn = sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT rec_type, COUNT(*) FROM captures GROUP BY rec_type")
        return Counter({str(kind): int(n) for kind, n in rows})
    finally:
        conn.close()


def captures(counts: Counter[str]) -> int:
    return sum(counts[kind] for kind in CAPTURE_TYPES)


async def drain(index: Path, expected: int) -> tuple[int, float]:
    """Wait until the index holds ``expected`` captures (or stops growing for 5 s).

    Returns the capture count reached and the wall-clock time (``time.time()``)
    of the last increase seen, 0.0 when the count was already there on the
    first look. Gives up after DRAIN_TIMEOUT_S.
    """
    started = changed = time.monotonic()
    count, reached_at = captures(stored_counts(index)), 0.0
    while count < expected:
        now = time.monotonic()
        if now - changed > 5.0 or now - started > DRAIN_TIMEOUT_S:
            break
        await asyncio.sleep(0.02)
        new = captures(stored_counts(index))
        if new != count:
            count, changed, reached_at = new, time.monotonic(), time.time()
    return count, reached_at


# -- the load generator (its own process) ------------------------------------------


def slot(i: int, block: int, modes: int) -> int:
    """Which of ``modes`` templates request ``i`` uses: blocks of ``block`` requests
    cycle through them, in reverse order every other cycle.

    >>> [slot(i, 2, 3) for i in range(12)]
    [0, 0, 1, 1, 2, 2, 2, 2, 1, 1, 0, 0]
    """
    position, cycle = (i // block) % modes, i // (block * modes)
    return position if cycle % 2 == 0 else modes - 1 - position


async def client(
    templates: list[str],
    *,
    requests: int,
    concurrency: int,
    rate: float,
    duration: float,
    block: int,
    offset: int,
    linger: float,
) -> dict[str, object]:
    """Run one phase of at most ``requests`` requests, page numbers from ``offset``.

    Paced at ``rate`` per second when > 0 (request ``i`` uses the template
    :func:`slot` picks); else ``concurrency`` clients back to back on the
    first template, for ``duration`` seconds when > 0. The connections stay
    open for ``linger`` seconds after the last answer.

    Returns wall-clock start and end (``time.time()``), per template the
    ``[i, latency_s]`` of each 200 answer in completion order, and per
    template counts of the other answers by status or exception name.
    """
    latencies: list[list[tuple[int, float]]] = [[] for _ in templates]
    errors: list[Counter[str]] = [Counter() for _ in templates]
    numbers = itertools.count()
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(i: int, which: int) -> None:
            start = time.perf_counter()
            try:
                async with session.get(templates[which].format(n=offset + i)) as response:
                    await response.read()
                    if response.status == 200:
                        latencies[which].append((i, time.perf_counter() - start))
                    else:
                        errors[which][str(response.status)] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                errors[which][type(exc).__name__] += 1

        async def paced(i: int, due: float) -> None:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            await one(i, slot(i, block, len(templates)))

        async def worker(deadline: float) -> None:
            for i in numbers:
                if i >= requests or time.perf_counter() >= deadline:
                    return
                await one(i, 0)

        began, wall_began = time.perf_counter(), time.time()
        if rate > 0:
            await asyncio.gather(*(paced(i, began + i / rate) for i in range(requests)))
        else:
            deadline = began + duration if duration > 0 else float("inf")
            await asyncio.gather(*(worker(deadline) for _ in range(concurrency)))
        ended = time.time()
        await asyncio.sleep(linger)
        return {
            "began": wall_began,
            "ended": ended,
            "latencies": latencies,
            "errors": [dict(e) for e in errors],
        }


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase's client answers (per template) plus the CPU it cost."""

    began: float
    ended: float
    latencies: list[list[tuple[int, float]]]
    errors: list[Counter[str]]
    gateway_cpu: float
    other_cpu: float

    def answered(self, which: int) -> int:
        return len(self.latencies[which])


async def run_phase(
    gateway: Server,
    templates: list[str],
    args: argparse.Namespace,
    *,
    requests: int,
    rate: float = 0.0,
    duration: float = 0.0,
    offset: int,
) -> Phase:
    """Run the load generator once as a child process and collect its answers."""
    argv = [sys.executable, "-m", "bench.bench_store"]
    for template in templates:
        argv += ["--client", template]
    argv += ["--requests", str(requests), "--concurrency", str(args.concurrency)]
    argv += ["--rate", str(rate), "--duration", str(duration), "--block", str(args.block)]
    argv += ["--offset", str(offset), "--linger", str(args.linger)]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    cpu_before, busy_before, wall_before = gateway.cpu_s(), system_busy_s(), time.monotonic()
    own_before = _own_cpu_s()
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=REPO_ROOT, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"load generator failed ({proc.returncode}): {' '.join(argv)}")
    wall = time.monotonic() - wall_before
    gateway_cpu = (gateway.cpu_s() - cpu_before) / wall
    own_cpu = (_own_cpu_s() - own_before) / wall
    busy = (system_busy_s() - busy_before) / wall
    result = json.loads(out)
    return Phase(
        began=float(result["began"]),
        ended=float(result["ended"]),
        latencies=[[(int(i), float(s)) for i, s in per] for per in result["latencies"]],
        errors=[Counter({str(k): int(v) for k, v in e.items()}) for e in result["errors"]],
        gateway_cpu=gateway_cpu,
        other_cpu=max(0.0, busy - gateway_cpu - own_cpu),
    )


def _own_cpu_s() -> float:
    """CPU seconds of this process (the live web) and its finished children (clients)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


# -- one gateway, every mode -------------------------------------------------------


class Bench:
    """Every mode against one gateway and store (one fsync policy)."""

    def __init__(self, args: argparse.Namespace, gateway: Server, live_port: int, store: Path):
        self.args = args
        self.gateway = gateway
        self.live_port = live_port
        self.index = store / "index.sqlite3"
        self.offset = 0
        self.results = {mode.name: ModeResult(mode) for mode in MODES}
        #: Captures answered 200 but not in the store once the phase drained, by phase.
        self.missing: Counter[str] = Counter()
        self.latency_other_cpu = 0.0
        self.latency_gateway_cpu = 0.0

    def template(self, mode: Mode) -> str:
        return url_template(self.gateway, self.live_port, mode)

    async def phase(
        self, name: str, modes: tuple[Mode, ...], *, requests: int, rate: float, duration: float
    ) -> Phase:
        """One load generator run over ``modes``; then wait for its captures."""
        before = captures(stored_counts(self.index))
        phase = await run_phase(
            self.gateway,
            [self.template(mode) for mode in modes],
            self.args,
            requests=requests,
            rate=rate,
            duration=duration,
            offset=self.offset,
        )
        self.offset += requests
        recorded = sum(phase.answered(k) for k, mode in enumerate(modes) if mode.records)
        count, reached_at = await drain(self.index, before + recorded)
        self.missing[name] += before + recorded - count
        if len(modes) == 1 and modes[0].records and rate == 0:
            done = max(phase.ended, reached_at)
            self.results[modes[0].name].captures_per_s = (count - before) / (done - phase.began)
        return phase

    async def measure(self) -> None:
        """Warm-up, the interleaved latency run, then throughput per mode."""
        args = self.args
        for mode in MODES:
            await self.phase("warm-up", (mode,), requests=WARMUP_REQUESTS, rate=0, duration=0)
        self.check_findable()
        phase = await self.phase(
            "latency", MODES, requests=args.requests * len(MODES), rate=args.rate, duration=0
        )
        self.latency_gateway_cpu, self.latency_other_cpu = phase.gateway_cpu, phase.other_cpu
        for k, mode in enumerate(MODES):
            result = self.results[mode.name]
            result.samples = phase.latencies[k]
            result.errors += phase.errors[k]
        for mode in MODES:
            before = stored_counts(self.index)
            phase = await self.phase(
                f"throughput {mode.name}",
                (mode,),
                requests=10_000_000,
                rate=0,
                duration=args.duration,
            )
            result = self.results[mode.name]
            result.requests_per_s = phase.answered(0) / (phase.ended - phase.began)
            result.gateway_cpu = phase.gateway_cpu
            result.other_cpu = phase.other_cpu
            result.errors += phase.errors[0]
            result.stored = stored_counts(self.index) - before

    def check_findable(self) -> None:
        """Raise RuntimeError unless a recorded warm-up capture is in ``/stored/index``."""
        url = f"http://{HOST}:{self.live_port}/same?n={WARMUP_REQUESTS}"  # keep's first
        answer = http_get(self.gateway.port, f"/stored/index?url={quote(url, safe=':/')}")
        if answer is None or answer[0] != 200 or url.encode() not in answer[1]:
            raise RuntimeError(f"recorded capture of {url} not in /stored/index: {answer!r}")

    async def profile(self, out: Path) -> dict[str, Profile]:
        """One paced run per mode (``--requests`` at ``--rate``) under ``py-spy record``."""
        spy = shutil.which("py-spy")
        if spy is None:
            raise RuntimeError("py-spy is not installed: pip install py-spy")
        await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
        profiles = {}
        seconds = max(1, int(self.args.requests / self.args.rate))  # py-spy: whole seconds
        for mode in MODES:
            raw = out / f"{mode.name.replace(', ', '-')}.txt"
            argv = [spy, "record", "-p", str(self.gateway.proc.pid), "-d", str(seconds)]
            argv += ["-r", "250", "-f", "raw", "-o", str(raw), "--nonblocking"]
            spying = await asyncio.create_subprocess_exec(
                *argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            await self.phase(
                "profile", (mode,), requests=self.args.requests, rate=self.args.rate, duration=0
            )
            _, err = await spying.communicate()
            if spying.returncode != 0:
                raise RuntimeError(f"py-spy failed ({spying.returncode}): {err[-2000:]!r}")
            profiles[mode.name] = summarize(raw)
        return profiles


# -- report ------------------------------------------------------------------------


def table(rows: list[tuple[str, ModeResult]], args: argparse.Namespace) -> str:
    base = {(fsync, r.mode.content): r.p50_ms for fsync, r in rows if not r.mode.records}
    header = (
        "fsync",
        "mode (content)",
        "p50 ms",
        "p90 ms",
        "p50 vs plain",
        f"req/s (c={args.concurrency})",
        "captures/s",
        "stored (resp/revisit)",
        "gateway CPU",
    )
    lines = []
    for fsync, r in rows:
        extra = (r.p50_ms / base[fsync, r.mode.content] - 1) * 100
        lines.append(
            (
                fsync,
                f"{r.mode.coll} ({'repeated' if r.mode.content == 'same' else 'unique'})",
                f"{r.p50_ms:.2f}",
                f"{r.p90_ms:.2f}",
                "-" if not r.mode.records else f"{extra:+.1f}%",
                f"{r.requests_per_s:.0f}",
                "-" if r.captures_per_s is None else f"{r.captures_per_s:.0f}",
                "-" if not r.mode.records else f"{r.stored['response']}/{r.stored['revisit']}",
                f"{r.gateway_cpu:.2f}",
            )
        )
    return markdown_table(header, lines)


def print_notes(fsync: str, bench: Bench) -> None:
    """Per mode: p50 over each third of the latency run (vs plain), errors, other load."""
    total = bench.args.requests * len(MODES)
    base = {
        r.mode.content: r.p50_by_part_ms(total)
        for r in bench.results.values()
        if not r.mode.records
    }
    print(
        f"# fsync={fsync} latency run: gateway CPU {bench.latency_gateway_cpu:.2f}, "
        f"other CPU {bench.latency_other_cpu:.2f}"
    )
    for r in bench.results.values():
        parts = r.p50_by_part_ms(total)
        thirds = " ".join(f"{p:.2f}" for p in parts)
        notes = [f"p50 by third {thirds} ms"]
        if r.mode.records:
            vs = zip(parts, base[r.mode.content], strict=True)
            notes.append("vs plain " + " ".join(f"{(a / b - 1) * 100:+.1f}%" for a, b in vs))
        notes.append(f"other CPU in throughput {r.other_cpu:.2f}")
        if r.errors:
            notes.append("errors " + ", ".join(f"{k}: {v}" for k, v in r.errors.items()))
        print(f"# fsync={fsync} {r.mode.name}: " + "; ".join(notes))
    missing = {name: n for name, n in bench.missing.items() if n}
    if missing:
        print(
            f"# fsync={fsync} answered 200 but not in the store: "
            + ", ".join(f"{name} {n}" for name, n in missing.items())
        )


def print_log_problems(fsync: str, log: Path, n: int = 5) -> None:
    """Print how many WARNING/ERROR lines the gateway logged, and the first ``n``."""
    lines = log.read_text("utf-8", errors="replace").splitlines()
    problems = [line for line in lines if " WARNING " in line or " ERROR " in line]
    print(f"# fsync={fsync} gateway log: {len(problems)} WARNING/ERROR lines")
    for line in problems[:n]:
        print(f"#   {line[:300]}")


def print_profiles(fsync: str, profiles: dict[str, Profile], n: int = 12) -> None:
    for name, profile in profiles.items():
        print(f"\n## profile fsync={fsync} {name} ({profile.samples} busy samples)")
        print("self %  | function")
        for share, func in profile.top(n):
            print(f"{share:6.1f} | {func}")
        print("incl %  | function (coroutines: lower bound)")
        for share, func in profile.top(n * 2, inclusive=True):
            print(f"{share:6.1f} | {func}")


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--fsync", nargs="+", choices=("always", "close", "never"))
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s, latency phase")
    parser.add_argument("--requests", type=int, default=3000, help="per mode, latency run")
    parser.add_argument("--block", type=int, default=50, help="requests per mode in turn")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=8.0, help="s, throughput phase")
    parser.add_argument("--size", type=int, default=20_000, help="page body bytes")
    parser.add_argument("--quiet-wait", type=float, default=60.0, help="s to wait for quiet")
    parser.add_argument("--profile", type=Path, help="directory for py-spy profiles")
    parser.add_argument(
        "--linger", type=float, default=0.0, help="s the clients keep connections open at the end"
    )
    parser.add_argument("--client", action="append", help=argparse.SUPPRESS)
    parser.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        result = await client(
            args.client,
            requests=args.requests,
            concurrency=args.concurrency,
            rate=args.rate,
            duration=args.duration,
            block=args.block,
            offset=args.offset,
            linger=args.linger,
        )
        print(json.dumps(result))
        return 0
    print_machine(machine())
    print(
        f"# latency: {args.requests} requests per mode at {args.rate:g} req/s in all, modes "
        f"in turn every {args.block} requests; throughput: {args.concurrency} clients x "
        f"{args.duration:g} s per mode; {args.size} B pages; linger {args.linger:g} s"
    )
    rows: list[tuple[str, ModeResult]] = []
    live_runner, live_port = await serve_live(args.size)
    try:
        for fsync in args.fsync or ("always",):
            busy = wait_quiet(args.quiet_wait)
            print(f"# fsync={fsync}: other load before start {busy:.2f} cores", flush=True)
            with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
                store = Path(tmp) / "store"
                gateway = start_gateway(gateway_yaml(store, fsync), Path(tmp))
                try:
                    bench = Bench(args, gateway, live_port, store)
                    await bench.measure()
                    print_notes(fsync, bench)
                    mine = [(fsync, r) for r in bench.results.values()]
                    print(table(mine, args), flush=True)
                    rows += mine
                    if args.profile:
                        print_profiles(fsync, await bench.profile(args.profile / fsync))
                finally:
                    gateway.stop()
                print_log_problems(fsync, gateway.log_path)
    finally:
        await live_runner.cleanup()
    if len(args.fsync or ()) > 1:
        print()
        print(table(rows, args))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
