"""Actors and the orchestrator in one process, on a real SQLite database.

Ticks that overrun, raise, or make no transition; backoff and giving up;
hook order; stopping; orphans; idling without a busy wait.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.jobs.actors import ActorType
from gateway.jobs.db import JobObject, read_object, utcnow, write_object, write_objects
from gateway.jobs.hooks import hookimpl
from gateway.jobs.jobs_db import JobsDB
from gateway.jobs.model import NoColumns, ObjectType
from gateway.jobs.orchestrator import Orchestrator
from gateway.jobs.settings import JobsSettings
from tests.jobs import probe_plugin
from tests.jobs.conftest import counts, make_context, run_until
from tests.jobs.probe_plugin import PROBE, ProbeActor, ProbeColumns


def _all_final(db: JobsDB, total: int) -> Any:
    async def done() -> bool:
        states = await counts(db, PROBE)
        return states["done"] + states["failed"] == total

    return done


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_every_object_reaches_its_final_state_with_each_transition_once(
    probe_db: JobsDB, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    effects.mkdir()
    await probe_db.call(
        write_objects, PROBE, utcnow(), [ProbeColumns(effects_dir=str(effects))] * 200
    )
    ctx = make_context(probe_db, [ProbeActor], plugins=[probe_plugin])
    orchestrator = Orchestrator(ctx, [ProbeActor])
    await run_until(orchestrator, _all_final(probe_db, 200))
    assert await counts(probe_db, PROBE) == {"queued": 0, "working": 0, "done": 200, "failed": 0}
    assert sorted(int(p.stem) for p in effects.glob("*.work")) == list(range(1, 201))
    transitions = Counter(tuple(line.split()[:2]) for line in _lines(effects / "transitions.log"))
    assert len(transitions) == 400
    assert set(transitions.values()) == {1}
    assert len(_lines(effects / "performed.log")) == 200
    # Four actors were allowed; more than one ran.
    assert orchestrator._numbers["probe"] > 1


class Recorder:
    """A plugin recording every hook call as ``(hook, object id or None)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def _add(self, hook: str, obj: JobObject[Any] | None = None) -> None:
        self.calls.append((hook, obj.id if obj is not None else None))

    @hookimpl
    def on_orchestrator_startup(self, orchestrator: Orchestrator) -> None:
        self._add("on_orchestrator_startup")

    @hookimpl
    def on_orchestrator_tick_started(self, orchestrator: Orchestrator, queues: Any) -> None:
        self._add("on_orchestrator_tick_started")

    @hookimpl
    def on_orchestrator_idle(self, orchestrator: Orchestrator) -> None:
        self._add("on_orchestrator_idle")

    @hookimpl
    def on_orchestrator_shutdown(self, orchestrator: Orchestrator) -> None:
        self._add("on_orchestrator_shutdown")

    @hookimpl
    def on_actor_startup(self, actor: ActorType) -> None:
        self._add("on_actor_startup")

    @hookimpl
    def on_actor_tick_start(self, actor: ActorType, obj: JobObject[Any]) -> None:
        self._add("on_actor_tick_start", obj)

    @hookimpl
    def on_actor_tick_end(self, actor: ActorType, obj: JobObject[Any]) -> None:
        self._add("on_actor_tick_end", obj)

    @hookimpl
    def on_actor_tick_exception(
        self, actor: ActorType, obj: JobObject[Any], error: BaseException
    ) -> None:
        self._add("on_actor_tick_exception", obj)

    @hookimpl
    def on_actor_shutdown(self, actor: ActorType) -> None:
        self._add("on_actor_shutdown")

    @hookimpl
    def on_transition_probe_queued_to_working_start(
        self, actor: ActorType, obj: JobObject[Any]
    ) -> None:
        self._add("queued_to_working_start", obj)

    @hookimpl
    def on_transition_probe_queued_to_working_end(
        self, actor: ActorType, obj: JobObject[Any], won: bool
    ) -> None:
        self._add("queued_to_working_end", obj)

    @hookimpl
    def on_transition_probe_working_to_done_start(
        self, actor: ActorType, obj: JobObject[Any]
    ) -> None:
        self._add("working_to_done_start", obj)

    @hookimpl
    def on_transition_probe_working_to_done_end(
        self, actor: ActorType, obj: JobObject[Any], won: bool
    ) -> None:
        self._add("working_to_done_end", obj)


class OneAtATime(ProbeActor):
    max_concurrent = 1


async def test_hook_calls_arrive_in_the_specs_order(probe_db: JobsDB) -> None:
    recorder = Recorder()
    await probe_db.call(write_object, PROBE, utcnow(), ProbeColumns(fail_times=1))
    ctx = make_context(probe_db, [OneAtATime], plugins=[recorder])
    orchestrator = Orchestrator(ctx, [OneAtATime])

    async def done() -> bool:
        return (await counts(probe_db, PROBE))["done"] == 1 and any(
            hook == "on_orchestrator_idle" for hook, _ in recorder.calls
        )

    await run_until(orchestrator, done)
    # Consecutive repeats of the orchestrator's own loop hooks are folded into one.
    calls = [c for i, c in enumerate(recorder.calls) if i == 0 or c != recorder.calls[i - 1]]
    work = [
        c for c in calls if c[0] not in ("on_orchestrator_tick_started", "on_orchestrator_idle")
    ]
    # After the backoff the object is due again: a new actor takes it, or
    # (on a slow machine) the same one, still looking for work.
    restart = [("on_actor_shutdown", None), ("on_actor_startup", None)]
    restarted = work[5:7] == restart
    assert work == [
        ("on_orchestrator_startup", None),
        ("on_actor_startup", None),
        # First tick: raises (fail_times=1), no transition.
        ("on_actor_tick_start", 1),
        ("on_actor_tick_exception", 1),
        ("on_actor_tick_end", 1),
        *(restart if restarted else []),
        ("on_actor_tick_start", 1),
        ("queued_to_working_start", 1),
        ("queued_to_working_end", 1),
        ("on_actor_tick_end", 1),
        ("on_actor_tick_start", 1),
        ("working_to_done_start", 1),
        ("working_to_done_end", 1),
        ("on_actor_tick_end", 1),
        ("on_actor_shutdown", None),
        ("on_orchestrator_shutdown", None),
    ]
    assert calls[1][0] == "on_orchestrator_tick_started"
    assert ("on_orchestrator_idle", None) in calls[-3:]


class ShortProbe(ProbeActor):
    max_tick_s = 0.3


async def test_a_tick_that_overruns_is_cancelled_and_retried_with_backoff(
    probe_db: JobsDB, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    effects = tmp_path / "effects"
    effects.mkdir()
    object_id = await probe_db.call(
        write_object, PROBE, utcnow(), ProbeColumns(hang_times=2, effects_dir=str(effects))
    )
    orchestrator = Orchestrator(make_context(probe_db, [ShortProbe]), [ShortProbe])
    with caplog.at_level(logging.WARNING, logger="gateway.jobs"):
        await run_until(orchestrator, _all_final(probe_db, 1))
    obj = await probe_db.call(read_object, PROBE, object_id)
    assert obj.status == "done"
    assert obj.last_error is not None
    assert "TickTimeout: the tick ran past its limit of 0.3 s" in obj.last_error
    failures = [r.getMessage() for r in caplog.records if "tick failed" in r.getMessage()]
    assert len(failures) == 2
    assert "(attempt 1, retry in 0.05 s)" in failures[0]
    assert "(attempt 2, retry in 0.1 s)" in failures[1]
    # The hanging ticks were cancelled before their work: it ran once, on the third tick.
    assert len(_lines(effects / "performed.log")) == 1


async def test_a_tick_that_raises_is_logged_and_retried_until_it_succeeds(
    probe_db: JobsDB, caplog: pytest.LogCaptureFixture
) -> None:
    object_id = await probe_db.call(write_object, PROBE, utcnow(), ProbeColumns(fail_times=2))
    orchestrator = Orchestrator(make_context(probe_db, [ProbeActor]), [ProbeActor])
    with caplog.at_level(logging.WARNING, logger="gateway.jobs"):
        await run_until(orchestrator, _all_final(probe_db, 1))
    obj = await probe_db.call(read_object, PROBE, object_id)
    assert (obj.status, obj.attempts) == ("done", 0)
    assert obj.last_error == "RuntimeError: probe 1 fails on purpose (attempt 2)"
    failed = [r for r in caplog.records if "tick failed" in r.getMessage()]
    assert [r.levelno for r in failed] == [logging.WARNING, logging.WARNING]
    assert failed[0].exc_info is not None  # an unexpected exception keeps its traceback
    assert getattr(failed[0], "job_id", None) == object_id


async def test_after_max_attempts_the_object_gives_up(
    probe_db: JobsDB, caplog: pytest.LogCaptureFixture
) -> None:
    object_id = await probe_db.call(write_object, PROBE, utcnow(), ProbeColumns(fail_times=10))
    orchestrator = Orchestrator(make_context(probe_db, [ProbeActor]), [ProbeActor])
    with caplog.at_level(logging.WARNING, logger="gateway.jobs"):
        await run_until(orchestrator, _all_final(probe_db, 1))
    obj = await probe_db.call(read_object, PROBE, object_id)
    assert (obj.status, obj.retry_at) == ("failed", None)
    assert obj.last_error == "RuntimeError: probe 1 fails on purpose (attempt 3)"
    assert any("failed 3 times in a row, giving up" in r.getMessage() for r in caplog.records)


class Lazy(ProbeActor):
    async def tick(self, obj: JobObject[Any]) -> None:
        return None


async def test_a_tick_that_makes_no_transition_is_a_failure(probe_db: JobsDB) -> None:
    object_id = await probe_db.call(write_object, PROBE, utcnow())
    orchestrator = Orchestrator(make_context(probe_db, [Lazy]), [Lazy])
    await run_until(orchestrator, _all_final(probe_db, 1))
    obj = await probe_db.call(read_object, PROBE, object_id)
    assert obj.status == "failed"
    assert obj.last_error == "TickError: probe.tick made no transition of probe#1 (queued)"


async def test_stop_lets_the_ticks_in_hand_finish_and_claims_nothing_more(
    probe_db: JobsDB,
) -> None:
    await probe_db.call(write_objects, PROBE, utcnow(), [ProbeColumns(sleep_s=0.3)] * 20)
    recorder = Recorder()
    ctx = make_context(probe_db, [ProbeActor], plugins=[recorder])
    orchestrator = Orchestrator(ctx, [ProbeActor])
    task = asyncio.create_task(orchestrator.run())
    deadline = time.monotonic() + 30
    while not any(hook == "on_actor_tick_start" for hook, _ in recorder.calls):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    orchestrator.stop()
    await asyncio.wait_for(task, 30)
    started = {i for hook, i in recorder.calls if hook == "on_actor_tick_start"}
    ended = {i for hook, i in recorder.calls if hook == "on_actor_tick_end"}
    assert started == ended  # every tick in hand finished
    states = await counts(probe_db, PROBE)
    assert states["working"] == len(started)  # each made its transition
    assert states["queued"] == 20 - len(started)  # and nothing more was ticked
    # An object claimed along with the last transition was given back: no lease is left.
    leased = await probe_db.call(
        lambda conn: conn.execute(
            "SELECT COUNT(*) FROM jobs_probe WHERE lease_owner IS NOT NULL"
        ).fetchone()[0]
    )
    assert leased == 0


class QueuedOnly(ProbeActor):
    queue_states = ("queued",)


async def test_orphans_are_reported_once(
    probe_db: JobsDB, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ghost = ObjectType(
        name="ghost",
        description="a type whose plugin is gone",
        states=("new", "gone"),
        initial="new",
        final=("gone",),
        transitions=(("new", "gone"),),
        row=NoColumns,
    )
    other = JobsDB(probe_db.path, [ghost])
    await other.open()
    await other.call(write_objects, ghost, utcnow(), [NoColumns()] * 3)
    await other.close()
    now = utcnow()
    await probe_db.call(
        write_object, PROBE, now, status="working", retry_at=now - timedelta(seconds=1)
    )
    orchestrator = Orchestrator(make_context(probe_db, [QueuedOnly]), [QueuedOnly])
    with caplog.at_level(logging.WARNING, logger="gateway.jobs"):
        await run_until(
            orchestrator, _loops_at_least(orchestrator, 4), within_s=30, check_every_s=0.01
        )
    orphans = [r.getMessage() for r in caplog.records if "will never be ticked" in r.getMessage()]
    assert len(orphans) == 2
    assert any(
        "1 probe object(s) in state 'working'" in m and "in state 'working'" in m for m in orphans
    )
    assert any("3 ghost object(s)" in m and "is its plugin in jobs.plugins?" in m for m in orphans)


def _loops_at_least(orchestrator: Orchestrator, loops: int) -> Any:
    async def done() -> bool:
        return orchestrator.loops >= loops

    return done


async def test_an_idle_orchestrator_sleeps_and_wakes_when_asked(probe_db: JobsDB) -> None:
    ctx = make_context(probe_db, [ProbeActor], settings=JobsSettings(poll_s=0.25))
    orchestrator = Orchestrator(ctx, [ProbeActor])
    task = asyncio.create_task(orchestrator.run())
    try:
        await asyncio.sleep(1.0)
        # About four loops a second at poll_s 0.25; a busy wait would make thousands.
        assert orchestrator.loops <= 12
        await probe_db.call(write_object, PROBE, utcnow())
        orchestrator.wake()
        deadline = time.monotonic() + 30
        while (await counts(probe_db, PROBE))["done"] != 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
    finally:
        orchestrator.stop()
        await asyncio.wait_for(task, 30)


class Broken:
    @hookimpl
    def on_actor_tick_start(self, actor: ActorType, obj: JobObject[Any]) -> None:
        raise ValueError("a plugin bug")


async def test_a_failing_hook_is_logged_and_the_work_goes_on(
    probe_db: JobsDB, caplog: pytest.LogCaptureFixture
) -> None:
    await probe_db.call(write_objects, PROBE, utcnow(), [ProbeColumns()] * 3)
    ctx = make_context(probe_db, [ProbeActor], plugins=[Broken()])
    orchestrator = Orchestrator(ctx, [ProbeActor])
    with caplog.at_level(logging.ERROR, logger="gateway.jobs"):
        await run_until(orchestrator, _all_final(probe_db, 3))
    assert (await counts(probe_db, PROBE))["done"] == 3
    assert any("on_actor_tick_start hook failed" in r.getMessage() for r in caplog.records)


class CannotStart(ProbeActor):
    startups = 0

    async def on_startup(self) -> None:
        CannotStart.startups += 1
        raise OSError("no disk")


async def test_an_actor_that_cannot_start_is_retried_after_a_backoff(
    probe_db: JobsDB, caplog: pytest.LogCaptureFixture
) -> None:
    await probe_db.call(write_object, PROBE, utcnow())
    orchestrator = Orchestrator(make_context(probe_db, [CannotStart]), [CannotStart])
    with caplog.at_level(logging.ERROR, logger="gateway.jobs"):
        await run_until(
            orchestrator, _loops_at_least(orchestrator, 6), within_s=30, check_every_s=0.01
        )
    # Backoff 1 s, then 2 s: a few start-ups, not one per loop.
    assert 1 <= CannotStart.startups <= 3
    assert any("stopped on an error (next actor in 1 s)" in r.getMessage() for r in caplog.records)
    assert (await counts(probe_db, PROBE))["queued"] == 1
