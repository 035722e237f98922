"""``gateway store replicate | copies | scrub`` (issue 13 §6).

::

    gateway store replicate [--config FILE] [--once] [--progress | --no-progress]
    gateway store copies [--config FILE] [--json] [FILE...]
    gateway store scrub [--config FILE] [--max-duration SECONDS] [--progress | --no-progress]

Each opens the store *shared*, beside a gateway serving or recording into
it, and takes the storages and the retention policy from the config's
``store:`` section (``--root`` alone has no storages).

- ``replicate`` makes the director's pass
  (:func:`gateway.store.replication.passes.enqueue_pass`: one
  ``replication_batch`` object per ``batch_size`` files that need copies)
  and runs batch and copy actors over those objects and their
  ``replication_copy`` objects in this process, as the orchestrator of
  ``gateway serve`` or ``gateway worker`` does (theirs may take some of
  them too: the command waits for every batch of its pass to be final).
  Copies that failed for a transient reason (a storage down) are tried
  again by their copy object after a backoff (5, 10, 20, 40, 80 s); with
  ``--once`` they are not. When the run ends, whether it exits or fails,
  its claims are released (``missing``), and a pass first releases the
  claims of runs of this host that are gone, so a killed run's copies are
  made by the next one at once. Both first remove what killed copies left
  on the storages (temporary files, staging keys older than
  ``archival_max_age_s``), publish safe files when ``store.publish`` is set,
  then print the store's safety (:mod:`gateway.store.integrity.safety`),
  naming each file that is not safe and why, and exit 0 only when every
  capture of the store is safe.
- ``copies`` prints each file's copies (status and, where it is not a
  verified copy, what it is) and the store's safety: files safe, with
  copies under way, not safe; the captures not yet safe, those in unclosed
  files, and how long the oldest has waited. ``--json`` as one JSON object
  (``safety`` holds the report :meth:`StoreSafety.to_json
  <gateway.store.integrity.safety.StoreSafety.to_json>` writes). Exit 0
  only when every capture of the store is safe: a claim (``ongoing``) is a
  copy under way, never a copy.
- ``scrub`` makes every file's ``scrub`` object due in the order of its
  last verification (least recently verified first) and runs the scrub
  actor (:class:`gateway.store.integrity.scrub.ScrubActor`: the records at the
  primary, then every copy's SHA-256) over them in this process, for at most
  ``--max-duration`` seconds; exit 1 when a file is damaged, a copy is
  corrupted or missing, or a storage is down.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from gateway.jobs.settings import JobsSettings
    from gateway.store.integrity.safety import FileSafety
    from gateway.store.replication.copy_status import FileCopies
    from gateway.store.replication.director import ReplicationReport
    from gateway.store.replication.replicas import Replicas
    from gateway.store.settings import StoreSettings
    from gateway.store.store import Store

__all__ = ["cmd_copies", "cmd_replace_copies", "cmd_replicate", "cmd_scrub"]

#: Rounds of a batch (tries of copies that failed transiently) without ``--once``.
ROUNDS: Final = 6


def _say(command: str, message: object, *, err: bool = False) -> None:
    print(f"gateway store {command}: {message}", file=sys.stderr if err else sys.stdout)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _open(settings: StoreSettings) -> Store:
    from gateway.store.store import Store

    return await Store.open(settings, mode="shared")


# ------------------------------------------------------------------ replicate
def cmd_replicate(
    args: argparse.Namespace, settings: StoreSettings, jobs: JobsSettings | None = None
) -> int:
    """``gateway store replicate``; returns the exit status."""
    import asyncio

    return asyncio.run(_replicate(args, settings, jobs))


def cmd_replace_copies(args: argparse.Namespace, settings: StoreSettings) -> int:
    """``gateway store repair --replace-copies``: one replication pass that also
    replaces objects of other bytes found under a file's name (``corrupted``
    copies the archiver did not write); returns the exit status."""
    import asyncio

    return asyncio.run(_replicate(args, settings, None, command="repair", replace=True))


async def _replicate(
    args: argparse.Namespace,
    settings: StoreSettings,
    jobs: JobsSettings | None,
    *,
    command: str = "replicate",
    replace: bool = False,
) -> int:
    from gateway.progress import progress_bar
    from gateway.store.object_types import BATCH, COPY
    from gateway.store.replication.director import release_own_claims
    from gateway.store.replication.pass_effects import remove_leftovers
    from gateway.store.replication.passes import enqueue_pass, open_jobs, report_of, work_pass

    store = await _open(settings)
    try:
        db, ctx = await open_jobs(store.layout.root, settings, jobs, [BATCH, COPY], "store")
        try:
            replicas = store.replicas
            for line in await remove_leftovers(replicas):
                _say(command, line)
            await _publish(replicas, command)
            before = await replicas.index.call(_published_totals, replicas.settings)
            once = bool(getattr(args, "once", False)) or replace
            with progress_bar(f"store {command}", None, enabled=args.progress) as bar:
                pass_id = await enqueue_pass(
                    replicas, ctx, max_rounds=1 if once else ROUNDS, replace_conflicts=replace
                )
                objects = await work_pass(ctx, pass_id, progress=bar.update)
            await release_own_claims(replicas, "the run that claimed it ended")
            failure = await _publish(replicas, command)
            _say_published(
                replicas,
                before,
                await replicas.index.call(_published_totals, replicas.settings),
                command,
            )
            return await _verdict(replicas, report_of(objects), failure, jobs, command=command)
        finally:
            try:  # a run that fails or is stopped leaves no claim behind either
                await release_own_claims(store.replicas, "the run that claimed it stopped")
            finally:
                await db.close()
    finally:
        await store.close()


def _published_totals(conn: sqlite3.Connection, settings: StoreSettings) -> tuple[int, int]:
    """``(files, captures)`` published so far to the store's publish target."""
    if settings.publish is None:
        return 0, 0
    files, captures = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(captures), 0) FROM publications WHERE target = ?",
        (settings.publish.target,),
    ).fetchone()
    return int(files), int(captures)


def _say_published(
    replicas: Replicas, before: tuple[int, int], after: tuple[int, int], command: str
) -> None:
    """What the run's batches published as they ended (each batch publishes what it
    made safe at once: :mod:`gateway.store.replication.batch`)."""
    files, captures = after[0] - before[0], after[1] - before[1]
    target = replicas.settings.publish
    if files > 0 and target is not None:
        _say(command, f"published {captures} capture(s) of {files} file(s) to {target.target}")


async def _publish(replicas: Replicas, command: str) -> str | None:
    """Publish what is safe (``store.publish``), saying so; returns the failure, if any."""
    from gateway.store.replication.pass_effects import publish, published

    report = await publish(replicas)
    if report is None or report.failure is not None:
        return None if report is None else report.failure
    if report.files and replicas.settings.publish is not None:
        _say(command, published(report, replicas.settings.publish.target))
    return None


async def _verdict(
    replicas: Replicas,
    total: ReplicationReport,
    publish_failure: str | None,
    jobs: JobsSettings | None,
    *,
    command: str = "replicate",
) -> int:
    """Print what the run did and the store's safety now; 0 only when every capture
    of the store is safe (:mod:`gateway.store.integrity.safety`)."""
    from gateway.store.integrity.safety import store_safety

    copied = {k: v for k, v in sorted(total.outcomes.items())}
    done = ", ".join(f"{n} {outcome}" for outcome, n in copied.items()) or "nothing to copy"
    mib = total.bytes_copied / (1 << 20)
    _say(command, f"{total.files} file(s) examined: {done}; {mib:.1f} MiB copied")
    safety = await store_safety(replicas, _scrub_days(jobs), list_files=True)
    wanted = replicas.policy.copies
    for verdict in safety.files_listed:
        if verdict.state == "safe":
            continue
        why = "; ".join(dict.fromkeys(total.unsafe.get(verdict.name, ()))) or _places_said(
            verdict.places
        )
        _say(
            command,
            f"not safe: {verdict.name} ({verdict.verified} of {wanted} copies): {why}",
            err=True,
        )
    if publish_failure is not None:
        _say(command, publish_failure, err=True)
    _say(command, safety.summary_line(), err=not safety.all_safe)
    if not safety.all_safe or publish_failure is not None:
        return 1
    _say(command, f"the policy holds for every capture of the store ({wanted} verified copies)")
    return 0


def _scrub_days(jobs: JobsSettings | None) -> float:
    from gateway.jobs.settings import JobsSettings

    return (jobs or JobsSettings()).scrub_interval_days


def _places_said(places: Mapping[str, str]) -> str:
    """What each place that is not a verified copy holds, in words."""
    return ", ".join(f"{place} {what}" for place, what in places.items() if what != "verified")


# --------------------------------------------------------------------- copies
def cmd_copies(
    args: argparse.Namespace, settings: StoreSettings, jobs: JobsSettings | None = None
) -> int:
    """``gateway store copies``; returns the exit status."""
    import asyncio

    return asyncio.run(_copies(args, settings, jobs))


#: ``store copies``' name of each file state (:data:`gateway.store.integrity.safety.FileState`).
_STATE_NAMES: Final = {
    "safe": "safe",
    "under_way": "under-way",
    "unsafe": "under-replicated",
    "no_sha256": "no-sha256",
}


async def _copies(
    args: argparse.Namespace, settings: StoreSettings, jobs: JobsSettings | None
) -> int:
    from gateway.store.integrity.safety import store_safety
    from gateway.store.replication.copy_status import iter_file_copies, read_file_copies

    store = await _open(settings)
    try:
        replicas = store.replicas
        places, cutoff = replicas.places, replicas.cutoff()
        names: list[str] | None = None
        if args.files:
            names = [name.rsplit("/", 1)[-1] for name in args.files]
            files = await replicas.index.call(read_file_copies, places, names=names)
            unknown = sorted(set(names) - {f.name for f in files})
            if unknown:
                _say("copies", f"not closed files of the store: {', '.join(unknown)}", err=True)
                return 2
        else:
            files = await replicas.index.call(lambda conn: list(iter_file_copies(conn, places)))
        safety = await store_safety(replicas, _scrub_days(jobs), names=names, list_files=True)
    finally:
        await store.close()
    verdicts = {verdict.name: verdict for verdict in safety.files_listed}
    entries = [
        _entry(file, verdicts[file.name], places, cutoff) for file in files if file.name in verdicts
    ]
    states = safety.by_state
    counts = {
        "files": safety.files,
        "safe": states["safe"],
        "ongoing": states["under_way"],
        "under_replicated": states["unsafe"],
        "corrupted": safety.corrupted_files,
        "no_sha256": states["no_sha256"],
    }
    if args.json:
        policy = {"copies": replicas.policy.copies, "places": list(places)}
        body = {"policy": policy, "files": entries, "summary": counts, "safety": safety.to_json()}
        json.dump(body, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for entry in entries:
            shown = " ".join(
                f"{p}:{c['status']}"
                + (f"({c['safety']})" if c["safety"] in ("stale", "unverified") else "")
                for p, c in entry["copies"].items()
            )
            print(f"{entry['name']}  {entry['state']}  {shown}")
            for place, copy in entry["copies"].items():
                if copy["status"] in ("corrupted", "missing") and copy["detail"]:
                    print(f"  {place}: {copy['detail']}")
        print(f"store copies: {safety.summary_line()}")
    return 0 if safety.all_safe else 1


def _entry(
    file: FileCopies, verdict: FileSafety, places: tuple[str, ...], cutoff: float
) -> dict[str, Any]:
    copies = {}
    for place in places:
        row = file.copies.get(place)
        copies[place] = {
            "status": file.status(place, cutoff),
            "safety": verdict.places[place],
            "mtime": _when(row.mtime) if row else None,
            "verified_at": _when(row.verified_at) if row else None,
            "detail": row.detail if row else "",
        }
    state = _STATE_NAMES[verdict.state]
    return {"name": file.name, "sha256": file.sha256, "state": state, "copies": copies}


# ---------------------------------------------------------------------- scrub
def _known_damage(
    conn: sqlite3.Connection,
) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """Files whose scrub object is ``damaged``, and copies ``corrupted``, as the index
    says now: ``([(name, result)], [(name, storage, detail)])``."""
    from gateway.store.object_types import SCRUB

    damaged = conn.execute(
        f"SELECT file_name, result FROM {SCRUB.table} WHERE status = 'damaged' ORDER BY file_name"
    ).fetchall()
    corrupted = conn.execute(
        "SELECT c.name, c.storage, c.detail FROM copies c JOIN files f"
        " ON f.name = c.name AND f.sha256 = c.sha256"
        " WHERE c.status = 'corrupted' AND f.state = 'closed' ORDER BY c.name, c.storage"
    ).fetchall()
    return [(str(n), str(r)) for n, r in damaged], [
        (str(n), str(s), str(d)) for n, s, d in corrupted
    ]


def cmd_scrub(
    args: argparse.Namespace, settings: StoreSettings, jobs: JobsSettings | None = None
) -> int:
    """``gateway store scrub``; returns the exit status."""
    import asyncio

    return asyncio.run(_scrub(args, settings, jobs))


async def _scrub(
    args: argparse.Namespace, settings: StoreSettings, jobs: JobsSettings | None
) -> int:
    import asyncio

    from gateway.jobs.db import utcnow
    from gateway.progress import progress_bar
    from gateway.store.integrity.copy_scrub import ScrubReport
    from gateway.store.integrity.scrub import (
        SCRUB,
        ScrubActor,
        write_scrub_backfill,
        write_scrub_due,
    )
    from gateway.store.replication.passes import open_jobs

    store = await _open(settings)
    started = time.monotonic()
    report = ScrubReport()
    try:
        db, ctx = await open_jobs(store.layout.root, settings, jobs, [SCRUB], "store")
        try:
            await db.call(write_scrub_backfill, utcnow())
            await db.call(write_scrub_due, utcnow())
            with progress_bar("store scrub", None, enabled=args.progress) as bar:
                actor = ScrubActor(ctx)
                actor.copy_report, actor.progress = report, bar.update
                task = asyncio.create_task(actor.run())
                done, _ = await asyncio.wait({task}, timeout=args.max_duration)
                if not done:
                    actor.stopping = True
                    report.complete = False
                await task
            # What is known damaged now, whoever found it: a serving gateway's or a
            # worker's scrub may have ticked a file this run did not get to claim.
            known_damaged, known_corrupted = await db.call(_known_damage)
        finally:
            await db.close()
    finally:
        await store.close()
    found = {name for name, _ in report.damaged}
    report.damaged += [
        (name, f"{result} (found by another scrub)")
        for name, result in known_damaged
        if name not in found
    ]
    seen = {(name, place) for name, place, _ in report.corrupted}
    report.corrupted += [
        (name, place, detail)
        for name, place, detail in known_corrupted
        if (name, place) not in seen
    ]
    for name, result in report.damaged:
        _say("scrub", f"damaged: {name}: {result}", err=True)
    for name, place, detail in report.corrupted:
        _say("scrub", f"corrupted: {name} on {place}: {detail}", err=True)
    for name, place, detail in report.missing:
        _say("scrub", f"missing: {name} on {place}: {detail}", err=True)
    for place, why in report.down.items():
        _say("scrub", f"down: {place}: {why}", err=True)
    end = "" if report.complete else " (stopped at --max-duration; the next run goes on)"
    _say(
        "scrub",
        f"{report.verified} copy(ies) verified, {report.bytes / (1 << 20):.1f} MiB read in "
        f"{time.monotonic() - started:.1f} s; {len(report.damaged)} damaged, "
        f"{len(report.corrupted)} corrupted, {len(report.missing)} missing{end}",
    )
    from gateway.store.integrity.safety import policy_for, read_safety_at

    now = time.time()
    policy = policy_for(settings, _scrub_days(jobs), now)
    _say("scrub", read_safety_at(store.layout.db_path, policy, now).summary_line())
    if report.corrupted or report.missing:
        _say("scrub", "`gateway store replicate` makes new copies from good ones")
    if report.damaged:
        _say(
            "scrub",
            "`gateway store repair` (or `gateway store replicate`) restores a damaged primary "
            "from a verified copy; repair salvages only what no copy holds",
        )
    return 0 if report.ok else 1
