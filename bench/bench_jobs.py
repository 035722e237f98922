"""Benchmark: background jobs, claimed-ticked-finished objects per second, and idle CPU.

    python -m bench.bench_jobs [--objects 5000] [--actors 1 2 4] [--repeat 3]
        [--idle-s 30] [--callgrind]

Rows, side by side in one run (each throughput run on a fresh SQLite
database in a temporary directory, WAL mode, as the store's):

- **floor**: the same SQL the machinery issues per object, in a plain loop
  in one thread, nothing around it: :func:`~gateway.jobs.db.write_claim`
  (one ``UPDATE ... RETURNING``) then
  :func:`~gateway.jobs.db.write_transition` (one compare-and-swap
  ``UPDATE``). What SQLite and the two statements cost.
- **machinery, N actors**: an :class:`~gateway.jobs.orchestrator.Orchestrator`
  with one no-op actor type (``max_concurrent`` N) on the event loop the
  gateway uses (uvloop when installed): each object is claimed (lease),
  ticked under ``asyncio.timeout_at`` (the tick makes its one transition
  ``queued -> done``, shielded, hooks called), and finished. The clock runs
  from the orchestrator's start until the last transition's end hook.
  Objects/s; each object is two writes (the claim and the transition).
  Each row also gives objects per second of the process's CPU time: what
  one full core does, whatever share of the cores the run got.
- **idle CPU**: a real ``gateway worker`` process (built-in actor types, an
  empty store), its CPU time over ``--idle-s`` seconds after it settled
  (``/proc/PID/stat``), at the default ``poll_s`` 1.0 and at 0.1.
- with ``--callgrind``: instructions per object of the floor and of the
  machinery with one actor, under ``valgrind --tool=callgrind``, from two
  runs of 200 and 1,200 objects (the difference / 1,000, so start-up and
  imports cancel out): the repeatable measure on a noisy VM.

Target (issue 12): at least 2,000 objects/s with no-op ticks; idle CPU well
under 1%. There is no peer run: ArchiveBox's actors are Django processes
polling its database, not a library this can drive; the floor stands in as
the comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.harness import REPO_ROOT, Server, machine, markdown_table, print_machine, wait_quiet
from gateway.jobs.actors import ActorType, JobContext
from gateway.jobs.db import JobObject, utcnow, write_claim, write_objects, write_transition
from gateway.jobs.hooks import Hooks, hookimpl
from gateway.jobs.jobs_db import JobsDB
from gateway.jobs.model import NoColumns, ObjectType
from gateway.jobs.orchestrator import Orchestrator
from gateway.jobs.schema import connect, create_schema
from gateway.jobs.settings import JobsSettings

NOOP: Final = ObjectType(
    name="noop",
    description="a no-op object (benchmark)",
    states=("queued", "done"),
    initial="queued",
    final=("done",),
    transitions=(("queued", "done"),),
    row=NoColumns,
)
NOOP_QUEUED_TO_DONE: Final = NOOP.transition("queued", "done")
_TOTALS: Final = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)
READY_LINE: Final = "jobs: orchestrator running"


class NoopActor(ActorType):
    name = "noop"
    object_type = NOOP
    queue_states = ("queued",)
    max_tick_s = 60.0

    async def tick(self, obj: JobObject[NoColumns]) -> None:
        await self.transition(obj, NOOP_QUEUED_TO_DONE, retry_at=None)


def _noop_actor(actors: int) -> type[ActorType]:
    class Noop(NoopActor):
        max_concurrent = actors

    return Noop


class Finish:
    """A plugin that sets ``done`` once ``total`` transitions have ended (won)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0
        self.done = asyncio.Event()

    @hookimpl
    def on_transition_noop_queued_to_done_end(
        self, actor: ActorType, obj: JobObject[NoColumns], won: bool
    ) -> None:
        self.count += won
        if self.count >= self.total:
            self.done.set()


def _new_db(directory: Path, objects: int) -> Path:
    path = directory / "jobs.sqlite3"
    conn = connect(path)
    create_schema(conn, [NOOP])
    write_objects(conn, NOOP, utcnow(), [NoColumns()] * objects)
    conn.close()
    return path


# --------------------------------------------------------------------------- floor
@dataclass(frozen=True, slots=True)
class Rate:
    """Objects per second of wall-clock time, and per second of the process's CPU time.

    The second says what one full core does: on this shared VM, other
    processes take the cores away from the run at times, which the first
    counts and the second does not.
    """

    wall: float
    cpu: float


def _rate(objects: int, wall_s: float, cpu_s: float) -> Rate:
    return Rate(objects / wall_s, objects / cpu_s)


def run_floor(objects: int) -> Rate:
    """The bare claim + transition loop (one thread, no event loop)."""
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        conn = connect(_new_db(Path(tmp), objects))
        start, cpu = time.perf_counter(), time.process_time()
        done = 0
        while (obj := write_claim(conn, NOOP, ("queued",), utcnow(), 60.0, "floor")) is not None:
            done += write_transition(conn, obj, NOOP_QUEUED_TO_DONE, utcnow(), retry_at=None)
        rate = _rate(objects, time.perf_counter() - start, time.process_time() - cpu)
        conn.close()
    assert done == objects, (done, objects)
    return rate


# ----------------------------------------------------------------------- machinery
async def _machinery(objects: int, actors: int) -> Rate:
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        db = JobsDB(_new_db(Path(tmp), objects), [NOOP])
        await db.open()
        finish = Finish(objects)
        actor_type = _noop_actor(actors)
        hooks = Hooks([finish])
        hooks.add_object_types([NOOP])
        ctx: JobContext[None] = JobContext(
            db=db, hooks=hooks, settings=JobsSettings(), owner="bench", app=None
        )
        orchestrator = Orchestrator(ctx, [actor_type])
        start, cpu = time.perf_counter(), time.process_time()
        task = asyncio.get_running_loop().create_task(orchestrator.run())
        await finish.done.wait()
        rate = _rate(objects, time.perf_counter() - start, time.process_time() - cpu)
        orchestrator.stop()
        await task
        await db.close()
    return rate


def _run_loop(coro: Coroutine[Any, Any, Rate]) -> Rate:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    result: Rate = uvloop.run(coro)
    return result


def run_machinery(objects: int, actors: int) -> Rate:
    """Through the orchestrator and ``actors`` no-op actors."""
    return _run_loop(_machinery(objects, actors))


# ------------------------------------------------------------------------ idle CPU
def idle_cpu(idle_s: float, poll_s: float) -> float:
    """Per cent of one core a ``gateway worker`` with nothing to do uses."""
    with tempfile.TemporaryDirectory(prefix="bench-jobs-idle-") as tmp:
        workdir = Path(tmp)
        config = workdir / "collections.yaml"
        config.write_text(
            f"store: {{root: {workdir / 'archive'}}}\n"
            f"jobs: {{poll_s: {poll_s}}}\ncollections: {{}}\n"
        )
        argv = [sys.executable, "-m", "gateway.cli", "worker", "--config", str(config)]
        worker = Server("worker", argv, workdir, 0)
        try:
            worker.wait_ready(lambda _port: READY_LINE in worker.log_path.read_text())
            time.sleep(2.0)  # start-up work (imports, seeding) settles
            before, start = worker.cpu_s(), time.monotonic()
            time.sleep(idle_s)
            used, elapsed = worker.cpu_s() - before, time.monotonic() - start
        finally:
            worker.stop()
    return 100.0 * used / elapsed


# ----------------------------------------------------------------------- callgrind
def _child(kind: str, objects: int) -> None:
    if kind == "floor":
        run_floor(objects)
    else:
        run_machinery(objects, 1)


def instructions(kind: str, small: int = 200, large: int = 1200) -> float:
    """Instructions per object of ``kind`` (floor or machinery), from two callgrind runs."""
    totals = []
    with tempfile.TemporaryDirectory(prefix="bench-jobs-cg-") as tmp:
        for count in (small, large):
            out = Path(tmp) / f"{kind}-{count}.out"
            subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={out}",
                    sys.executable,
                    "-m",
                    "bench.bench_jobs",
                    "--child",
                    kind,
                    "--objects",
                    str(count),
                ],
                cwd=REPO_ROOT,
                check=True,
                capture_output=True,
                timeout=1800,
            )
            match = _TOTALS.search(out.read_bytes())
            assert match is not None, f"no totals in {out}"
            totals.append(int(match.group(1)))
    return (totals[1] - totals[0]) / (large - small)


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--quiet-wait", type=float, default=30.0)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--child", choices=("floor", "machinery"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.objects)
        return 0
    print_machine(machine())
    busy = wait_quiet(args.quiet_wait)
    print(f"# other load before the runs: {busy:.2f} core(s)")
    results: dict[str, list[Rate]] = {"floor": []}
    for actors in args.actors:
        results[f"machinery, {actors} actor(s)"] = []
    for _ in range(args.repeat):  # interleaved: drift of the machine hits every row alike
        results["floor"].append(run_floor(args.objects))
        for actors in args.actors:
            results[f"machinery, {actors} actor(s)"].append(run_machinery(args.objects, actors))
    floor_wall = statistics.median(r.wall for r in results["floor"])
    floor_cpu = statistics.median(r.cpu for r in results["floor"])
    rows = []
    for name, rates in results.items():
        wall = [r.wall for r in rates]
        cpu = statistics.median(r.cpu for r in rates)
        rows.append(
            [
                name,
                f"{statistics.median(wall):,.0f}",
                f"{min(wall):,.0f}-{max(wall):,.0f}",
                f"{statistics.median(wall) / floor_wall:.2f}",
                f"{cpu:,.0f}",
                f"{cpu / floor_cpu:.2f}",
            ]
        )
    print(f"\n{args.objects} no-op objects per run, median of {args.repeat} runs\n")
    header = ["row", "objects/s", "range", "/ floor", "objects per CPU-s", "/ floor"]
    print(markdown_table(header, rows))
    idle = [
        [f"gateway worker idle, poll_s {poll_s:g}", f"{idle_cpu(args.idle_s, poll_s):.3f}%"]
        for poll_s in (1.0, 0.1)
    ]
    print(f"\nidle CPU over {args.idle_s:g} s (per cent of one core)\n")
    print(markdown_table(["process", "CPU"], idle))
    if args.callgrind:
        floor_i = instructions("floor")
        machinery_i = instructions("machinery")
        print("\ninstructions per object (callgrind, 1,200 - 200 objects)\n")
        print(
            markdown_table(
                ["row", "k instructions / object", "/ floor"],
                [
                    ["floor", f"{floor_i / 1000:,.1f}", "1.00"],
                    [
                        "machinery, 1 actor",
                        f"{machinery_i / 1000:,.1f}",
                        f"{machinery_i / floor_i:.2f}",
                    ],
                ],
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
