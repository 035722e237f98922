"""``gateway store replicate | copies | scrub`` (issue 13 §6).

::

    gateway store replicate [--config FILE] [--once] [--progress | --no-progress]
    gateway store copies [--config FILE] [--json] [FILE...]
    gateway store scrub [--config FILE] [--max-duration SECONDS] [--progress | --no-progress]

Each opens the store *shared*, beside a gateway serving or recording into
it, and takes the storages and the retention policy from the config's
``store:`` section (``--root`` alone has no storages).

- ``replicate`` makes the director's pass
  (:func:`gateway.store.replication.jobs.enqueue_pass`: one
  ``replication_batch`` object per ``batch_size`` files that need copies)
  and runs a replication worker and copiers over those objects and their
  ``replication_copy`` objects in this process, as the orchestrator of
  ``gateway serve`` or ``gateway worker`` does (theirs may take some of
  them too: the command waits for every batch of its pass to be final).
  Copies that failed for a transient reason (a storage down) are tried
  again by their copy object after a backoff (5, 10, 20, 40, 80 s); with
  ``--once`` they are not, and stay ``ongoing`` until
  ``archival_max_age_s``, when a later pass makes them. Both first remove
  what killed copies left on the storages (temporary files, staging keys
  older than ``archival_max_age_s``), publish safe files when
  ``store.publish`` is set, and exit 1 naming each file this run could not
  make safe and why.
- ``copies`` prints each file's copies (status per place) and a summary
  (safe, under way, under-replicated, corrupted); ``--json`` as one JSON
  object. Exit 1 when a file is under-replicated or has a corrupted copy.
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
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from gateway.jobs.settings import JobsSettings
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
    from gateway.store.replication.jobs import (
        BATCH,
        COPY,
        enqueue_pass,
        open_jobs,
        remove_leftovers,
        report_of,
        work_pass,
    )

    store = await _open(settings)
    try:
        db, ctx = await open_jobs(store.layout.root, settings, jobs, [BATCH, COPY], "store")
        try:
            replicas = store.replicas
            for line in await remove_leftovers(replicas):
                _say(command, line)
            await _publish(replicas, command)
            once = bool(getattr(args, "once", False)) or replace
            with progress_bar(f"store {command}", None, enabled=args.progress) as bar:
                pass_id = await enqueue_pass(
                    replicas, ctx, max_rounds=1 if once else ROUNDS, replace_conflicts=replace
                )
                objects = await work_pass(ctx, pass_id, progress=bar.update)
            failure = await _publish(replicas, command)
            return await _verdict(replicas, report_of(objects), failure, command=command)
        finally:
            await db.close()
    finally:
        await store.close()


async def _publish(replicas: Replicas, command: str) -> str | None:
    """Publish what is safe (``store.publish``), saying so; returns the failure, if any."""
    from gateway.store.replication.jobs import publish, published

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
    *,
    command: str = "replicate",
) -> int:
    """Print what the run did; 1 when a file it had a problem with is still not safe."""
    from gateway.store.replication.copy_status import read_file_copies

    copied = {k: v for k, v in sorted(total.outcomes.items())}
    done = ", ".join(f"{n} {outcome}" for outcome, n in copied.items()) or "nothing to copy"
    mib = total.bytes_copied / (1 << 20)
    _say(command, f"{total.files} file(s) examined: {done}; {mib:.1f} MiB copied")
    names = sorted(total.unsafe)
    files = await replicas.index.call(read_file_copies, replicas.places, names=names)
    cutoff, wanted = replicas.cutoff(), replicas.policy.copies
    still = [f for f in files if len(f.present_places(replicas.places, cutoff)) < wanted]
    for file in still:
        present = len(file.present_places(replicas.places, cutoff))
        why = "; ".join(dict.fromkeys(total.unsafe[file.name]))
        _say(command, f"not safe: {file.name} ({present} of {wanted} copies): {why}", err=True)
    if publish_failure is not None:
        _say(command, publish_failure, err=True)
    if still or publish_failure is not None:
        return 1
    _say(command, f"the policy holds for every file this run looked at ({wanted} copies)")
    return 0


# --------------------------------------------------------------------- copies
def cmd_copies(args: argparse.Namespace, settings: StoreSettings) -> int:
    """``gateway store copies``; returns the exit status."""
    import asyncio

    return asyncio.run(_copies(args, settings))


async def _copies(args: argparse.Namespace, settings: StoreSettings) -> int:
    from gateway.store.replication.copy_status import (
        iter_file_copies,
        read_copy_summary,
        read_file_copies,
    )

    store = await _open(settings)
    try:
        replicas = store.replicas
        places, wanted, cutoff = replicas.places, replicas.policy.copies, replicas.cutoff()
        if args.files:
            names = [name.rsplit("/", 1)[-1] for name in args.files]
            files = await replicas.index.call(read_file_copies, places, names=names)
            unknown = sorted(set(names) - {f.name for f in files})
            if unknown:
                _say("copies", f"not closed files of the store: {', '.join(unknown)}", err=True)
                return 2
        else:
            files = await replicas.index.call(lambda conn: list(iter_file_copies(conn, places)))
        summary = await replicas.index.call(read_copy_summary, places, wanted, cutoff)
    finally:
        await store.close()
    entries = [_entry(file, places, wanted, cutoff) for file in files]
    counts = {
        "files": summary.files,
        "safe": summary.safe,
        "ongoing": summary.pending,
        "under_replicated": summary.under_replicated,
        "corrupted": summary.corrupted,
        "no_sha256": summary.no_sha256,
    }
    if args.json:
        policy = {"copies": wanted, "places": list(places)}
        json.dump({"policy": policy, "files": entries, "summary": counts}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for entry in entries:
            shown = " ".join(f"{p}:{c['status']}" for p, c in entry["copies"].items())
            print(f"{entry['name']}  {entry['state']}  {shown}")
            for place, copy in entry["copies"].items():
                if copy["status"] in ("corrupted", "missing") and copy["detail"]:
                    print(f"  {place}: {copy['detail']}")
        print(
            f"store copies: {summary.files} file(s), {wanted} copies each: {summary.safe} safe, "
            f"{summary.pending} with copies under way, {summary.under_replicated} "
            f"under-replicated, {summary.corrupted} with a corrupted copy"
            + (f", {summary.no_sha256} without a SHA-256" if summary.no_sha256 else "")
        )
    bad = [e for e in entries if e["state"] in ("under-replicated", "no-sha256")]
    corrupted = [
        e for e in entries if any(c["status"] == "corrupted" for c in e["copies"].values())
    ]
    return 1 if bad or corrupted else 0


def _entry(file: FileCopies, places: tuple[str, ...], wanted: int, cutoff: float) -> dict[str, Any]:
    present = len(file.present_places(places, cutoff))
    safe = len(file.safe_places(places, cutoff))
    if file.sha256 is None:
        state = "no-sha256"
    elif present >= wanted:
        state = "safe"
    elif safe >= wanted:
        state = "ongoing"
    else:
        state = "under-replicated"
    copies = {}
    for place in places:
        row = file.copies.get(place)
        copies[place] = {
            "status": file.status(place, cutoff),
            "mtime": _when(row.mtime) if row else None,
            "verified_at": _when(row.verified_at) if row else None,
            "detail": row.detail if row else "",
        }
    return {"name": file.name, "sha256": file.sha256, "state": state, "copies": copies}


# ---------------------------------------------------------------------- scrub
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
    from gateway.store.replication.jobs import open_jobs

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
        finally:
            await db.close()
    finally:
        await store.close()
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
    if report.corrupted or report.missing:
        _say("scrub", "`gateway store replicate` makes new copies from good ones")
    if report.damaged:
        _say(
            "scrub",
            "`gateway store replicate` restores a damaged primary from a good copy; "
            "`gateway store repair` salvages one that has none",
        )
    return 0 if report.ok else 1
