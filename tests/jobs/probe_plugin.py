"""A jobs plugin of the tests' own: the ``probe`` object type and its actor.

Named in a config as ``jobs: {plugins: [tests.jobs.probe_plugin]}`` (a module
name, as pytest's ``-p``), it adds :class:`ProbeActor` through the
``get_actor_types`` hook. Each probe object says what its tick does:

- ``sleep_s``: how long the ``queued`` tick works (an asyncio sleep);
- ``fail_times``: the ``queued`` tick raises this many times first;
- ``hang_times``: the ``queued`` tick hangs (past any limit) this many times first;
- ``effects_dir``: where the work leaves its evidence, if not empty:
  ``<id>.work`` (made once, atomically: the idempotent effect), one line per time
  the work ran in ``performed.log``, and one line per transition won in
  ``transitions.log`` (``<id> <transition> <pid>``, written by the
  ``on_transition_*_end`` hooks after the compare-and-swap write won).

``queued -> working -> done``; ``failed`` after ``max_attempts`` failures.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final

from gateway.jobs.actors import ActorType
from gateway.jobs.db import JobObject
from gateway.jobs.hooks import hookimpl
from gateway.jobs.model import ObjectType


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeColumns:
    """A probe object's own columns (see the module docstring)."""

    effects_dir: str = ""
    sleep_s: float = 0.0
    fail_times: int = 0
    hang_times: int = 0


PROBE: Final = ObjectType(
    name="probe",
    description="a test object: work, then finish",
    states=("queued", "working", "done", "failed"),
    initial="queued",
    final=("done", "failed"),
    transitions=(
        ("queued", "working"),
        ("queued", "failed"),
        ("working", "done"),
        ("working", "failed"),
    ),
    row=ProbeColumns,
    attention_states=("failed",),
    label_column="effects_dir",
    detail_column="last_error",
)
PROBE_QUEUED_TO_WORKING: Final = PROBE.transition("queued", "working")
PROBE_WORKING_TO_DONE: Final = PROBE.transition("working", "done")


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("ascii"))
    finally:
        os.close(fd)


def do_work(obj: JobObject[ProbeColumns]) -> None:
    """The probe's effect: ``<id>.work`` made once (create-only), each run logged."""
    effects = obj.row.effects_dir
    if not effects:
        return
    directory = Path(effects)
    _append(directory / "performed.log", f"{obj.id} {os.getpid()}\n")
    # Written under a temporary name, then linked create-only: a kill at any
    # moment leaves either no marker or the whole one.
    marker = directory / f"{obj.id}.work"
    temp = directory / f".{obj.id}.{os.getpid()}.tmp"
    temp.write_text(f"{obj.id}\n")
    try:
        os.link(temp, marker)
    except FileExistsError:
        pass  # done before (a tick cut short after its work): nothing more to do
    finally:
        temp.unlink()


class ProbeActor(ActorType):
    name = "probe"
    object_type = PROBE
    queue_states: ClassVar[tuple[str, ...]] = ("queued", "working")
    max_concurrent = 4
    max_tick_s = 1.0
    backoff_base_s = 0.05
    backoff_max_s = 0.2
    max_attempts = 3
    give_up_state = "failed"

    async def tick(self, obj: JobObject[ProbeColumns]) -> None:
        if obj.status == "queued":
            await asyncio.sleep(obj.row.sleep_s)
            if obj.attempts < obj.row.hang_times:
                await asyncio.sleep(3600)
            if obj.attempts < obj.row.fail_times:
                raise RuntimeError(f"probe {obj.id} fails on purpose (attempt {obj.attempts + 1})")
            await asyncio.to_thread(do_work, obj)
            await self.transition(obj, PROBE_QUEUED_TO_WORKING, retry_at=self.due_in(0))
        else:
            await self.transition(obj, PROBE_WORKING_TO_DONE, retry_at=None)


def _log_transition(obj: JobObject[ProbeColumns], name: str, won: bool) -> None:
    effects = obj.row.effects_dir
    if won and effects:
        _append(Path(effects) / "transitions.log", f"{obj.id} {name} {os.getpid()}\n")


@hookimpl
def get_actor_types() -> Sequence[type[ActorType]]:
    return [ProbeActor]


@hookimpl
def on_transition_probe_queued_to_working_end(
    actor: ActorType, obj: JobObject[ProbeColumns], won: bool
) -> None:
    _log_transition(obj, "queued_to_working", won)


@hookimpl
def on_transition_probe_working_to_done_end(
    actor: ActorType, obj: JobObject[ProbeColumns], won: bool
) -> None:
    _log_transition(obj, "working_to_done", won)
