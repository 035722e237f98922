"""``gateway store replicate | copies | scrub`` (issue 13 §6).

::

    gateway store replicate [--config FILE] [--once] [--progress | --no-progress]
    gateway store copies [--config FILE] [--json] [FILE...]
    gateway store scrub [--config FILE] [--max-duration SECONDS] [--progress | --no-progress]

Each opens the store *shared*, beside a gateway serving or recording into
it, and takes the storages and the retention policy from the config's
``store:`` section (``--root`` alone has no storages).

- ``replicate`` runs the director and the workers
  (:mod:`gateway.store.replication`) until the policy holds: a pass over every
  file that needs copies, then, while copies failed for a transient reason
  (a storage down), passes again after a backoff (1, 2, 4 ... 60 s), until
  they succeed or only lasting problems are left. ``--once`` makes one pass
  (the copies that failed stay ``ongoing`` until ``archival_max_age_s``, when
  a later run makes them). Both first remove what killed copies left on the
  storages (temporary files, staging keys older than
  ``archival_max_age_s``), publish safe files when ``store.publish`` is
  set, and exit 1 naming each file this run could not make safe and why.
- ``copies`` prints each file's copies (status per place) and a summary
  (safe, under way, under-replicated, corrupted); ``--json`` as one JSON
  object. Exit 1 when a file is under-replicated or has a corrupted copy.
- ``scrub`` verifies copies, least recently verified first, for at most
  ``--max-duration`` seconds (:mod:`gateway.store.copy_scrub`); exit 1 when
  a copy is corrupted or missing or a storage is down.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from gateway.store.copies import FileCopies
    from gateway.store.replicas import Replicas
    from gateway.store.replication import ReplicationReport
    from gateway.store.settings import StoreSettings
    from gateway.store.store import Store

__all__ = ["cmd_copies", "cmd_replace_copies", "cmd_replicate", "cmd_scrub"]

#: The longest wait between two passes over copies that failed transiently.
MAX_BACKOFF_S: Final = 60.0


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
def cmd_replicate(args: argparse.Namespace, settings: StoreSettings) -> int:
    """``gateway store replicate``; returns the exit status."""
    import asyncio

    return asyncio.run(_replicate(args, settings))


async def _remove_leftovers(replicas: Replicas) -> None:
    from gateway.storage.errors import StorageError

    for name in replicas.pool.names:
        try:
            storage = await replicas.pool.get(name)
            removed = await storage.remove_leftovers(replicas.policy.archival_max_age_s)
        except StorageError as exc:
            _say("replicate", f"{name}: {exc}", err=True)
            continue
        if removed:
            _say("replicate", f"{name}: removed {len(removed)} leftover(s) of interrupted copies")


def cmd_replace_copies(args: argparse.Namespace, settings: StoreSettings) -> int:
    """``gateway store repair --replace-copies``: one replication pass that also
    replaces objects of other bytes found under a file's name (``corrupted``
    copies the archiver did not write); returns the exit status."""
    import asyncio

    async def run() -> int:
        from gateway.store.replication import run_pass

        store = await _open(settings)
        try:
            report = await run_pass(store.replicas, replace_conflicts=True)
            return await _verdict(store.replicas, report, None, command="repair")
        finally:
            await store.close()

    return asyncio.run(run())


async def _replicate(args: argparse.Namespace, settings: StoreSettings) -> int:
    import asyncio

    from gateway.progress import progress_bar
    from gateway.store.replication import ReplicationReport, retry_copies, run_pass

    store = await _open(settings)
    publisher = _Publisher(store.replicas, settings)
    try:
        replicas = store.replicas
        await _remove_leftovers(replicas)
        await publisher.run()
        total = ReplicationReport()
        with progress_bar("store replicate", None, enabled=args.progress) as bar:

            async def after_batch(_: ReplicationReport) -> None:
                await publisher.run()

            report = await run_pass(replicas, progress=bar.update, after_batch=after_batch)
            total.add(report)
            pending, attempt = report.retry, 0
            while pending and not args.once:
                delay = min(MAX_BACKOFF_S, 2.0**attempt)
                attempt += 1
                bar.write(
                    f"gateway store replicate: {len(pending)} copy(ies) failed for a transient "
                    f"reason; trying again in {delay:g} s",
                    file=sys.stderr,
                )
                await asyncio.sleep(delay)
                again = await retry_copies(replicas, pending, progress=bar.update)
                more = await run_pass(replicas, progress=bar.update, after_batch=after_batch)
                again.add(more)
                total.add(again)
                pending = again.retry
        await publisher.run()
        return await _verdict(replicas, total, publisher.failure)
    finally:
        await publisher.close()
        await store.close()


async def _verdict(
    replicas: Replicas,
    total: ReplicationReport,
    publish_failure: str | None,
    *,
    command: str = "replicate",
) -> int:
    """Print what the run did; 1 when a file it had a problem with is still not safe."""
    from gateway.store.copies import read_file_copies

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


class _Publisher:
    """``store.publish``, when configured: publish files as they become safe."""

    def __init__(self, replicas: Replicas, settings: StoreSettings) -> None:
        self.replicas = replicas
        self.publish = settings.publish
        self.failure: str | None = None
        self._client: Any = None

    async def run(self) -> None:
        if self.publish is None:
            return
        from gateway.store.publish import publish_safe_files

        if self._client is None:
            import redis.asyncio as aioredis

            self._client = aioredis.Redis.from_url(self.publish.server_url)
        report = await publish_safe_files(self.replicas, self.publish, self._client)
        self.failure = report.failure
        if report.files:
            _say(
                "replicate",
                f"published {report.lines} capture(s) of {report.files} file(s) "
                f"to {self.publish.target}",
            )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


# --------------------------------------------------------------------- copies
def cmd_copies(args: argparse.Namespace, settings: StoreSettings) -> int:
    """``gateway store copies``; returns the exit status."""
    import asyncio

    return asyncio.run(_copies(args, settings))


async def _copies(args: argparse.Namespace, settings: StoreSettings) -> int:
    from gateway.store.copies import iter_file_copies, read_copy_summary, read_file_copies

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
def cmd_scrub(args: argparse.Namespace, settings: StoreSettings) -> int:
    """``gateway store scrub``; returns the exit status."""
    import asyncio

    return asyncio.run(_scrub(args, settings))


async def _scrub(args: argparse.Namespace, settings: StoreSettings) -> int:
    from gateway.progress import progress_bar
    from gateway.store.copy_scrub import scrub_copies

    store = await _open(settings)
    started = time.monotonic()
    try:
        with progress_bar("store scrub", None, enabled=args.progress) as bar:
            report = await scrub_copies(
                store.replicas, max_duration_s=args.max_duration, progress=bar.update
            )
    finally:
        await store.close()
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
        f"{time.monotonic() - started:.1f} s; {len(report.corrupted)} corrupted, "
        f"{len(report.missing)} missing{end}",
    )
    if report.corrupted or report.missing:
        _say("scrub", "`gateway store replicate` makes new copies from good ones")
    return 0 if report.ok else 1
