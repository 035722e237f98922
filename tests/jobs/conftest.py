"""Fixtures for the jobs machinery: a jobs database and an in-process runner."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.jobs.actors import ActorType, JobContext, object_types_of
from gateway.jobs.db import read_counts
from gateway.jobs.hooks import Hooks
from gateway.jobs.jobs_db import JobsDB
from gateway.jobs.model import ObjectType
from gateway.jobs.orchestrator import Orchestrator
from gateway.jobs.settings import JobsSettings
from tests.jobs.probe_plugin import PROBE

#: Generous bound for "the work finished" (never a speed assertion).
DONE_WITHIN_S = 60.0


@pytest.fixture
async def probe_db(tmp_path: Path) -> AsyncIterator[JobsDB]:
    """An open jobs database with the probe type's table."""
    db = JobsDB(tmp_path / "jobs.sqlite3", [PROBE])
    await db.open()
    try:
        yield db
    finally:
        await db.close()


def make_context(
    db: JobsDB,
    actor_types: Sequence[type[ActorType]],
    *,
    plugins: Sequence[object] = (),
    settings: JobsSettings | None = None,
    owner: str = "test",
    app: object = None,
) -> JobContext[object]:
    """A context whose hooks know the types of ``actor_types``."""
    hooks = Hooks(plugins)
    hooks.add_object_types(object_types_of(actor_types))
    hooks.check()
    return JobContext(
        db=db,
        hooks=hooks,
        settings=settings or JobsSettings(poll_s=0.2),
        owner=owner,
        app=app,
    )


async def run_until(
    orchestrator: Orchestrator,
    done: Callable[[], Awaitable[bool]],
    *,
    within_s: float = DONE_WITHIN_S,
    check_every_s: float = 0.05,
) -> None:
    """Run ``orchestrator`` until ``done()``; fail (after stopping it) past ``within_s``."""
    task = asyncio.create_task(orchestrator.run())
    deadline = time.monotonic() + within_s
    try:
        while not await done():
            assert not task.done(), "the orchestrator stopped by itself"
            assert time.monotonic() < deadline, f"not done within {within_s} s"
            await asyncio.sleep(check_every_s)
    finally:
        orchestrator.stop()
        await asyncio.wait_for(task, within_s)


async def counts(db: JobsDB, object_type: ObjectType[Any]) -> dict[str, int]:
    """``{state: count}`` of ``object_type``."""
    return (await db.call(read_counts, [object_type]))[object_type.name]
