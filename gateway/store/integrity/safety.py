"""Whether the store's captures are safe: the one place that says so.

A closed WARC file is **safe** when at least the retention policy's number of
copies (``retention.copies``, the primary counting as one) are ``present``
and were verified, their SHA-256 read back, within the scrub period
(``jobs.scrub_interval_days``). Nothing else counts (DESIGN, "Safety"):

- a claim (``ongoing``) is a copy *under way*, never a copy;
- a copy whose last verification is older than the scrub period is
  *stale*: present as far as anyone knows, but not verified now;
- the primary counts with its last verification: a ``primary`` row of the
  ``copies`` table when something looked (a scrub, a failed read, a
  restore), else the file's scrub object: its last pass, or, before the
  first, the file's close, which computed the SHA-256 by reading the file
  back (the writer's close, recovery's, an import's verification); a file
  with no scrub object at all is *unverified*;
- captures in a file that is not closed yet (``.open``, or being imported)
  have one copy, the one being written, and are never safe: their file
  closes within ``rollover_s`` (or at ``rollover_bytes``) and is copied.

Each closed file gets one state: ``safe``; ``under_way`` (safe once the
copies under way are made); ``unsafe`` (fewer good copies than the policy
asks, whatever the reason: missing, corrupted, stale, unverified);
``no_sha256`` (a file of an older release whose SHA-256 was never computed:
it cannot be verified or replicated until ``store repair`` computes it).

:func:`read_store_safety` counts files by state and the captures not yet
safe (those in unclosed files and in closed files that are not safe), with
how long the oldest of them has waited. ``store copies``, ``store
replicate``, ``store check``, ``store scrub``, ``/_status``, ``/metrics`` and
the page read it, and nothing else decides what "safe" means.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from gateway.storage.settings import PRIMARY
from gateway.store.connection import BUSY_TIMEOUT_MS
from gateway.store.layout import date_of_name
from gateway.store.object_types import SCRUB
from gateway.store.replication.copy_status import CopyRow, FileCopies, iter_file_copies

if TYPE_CHECKING:
    from gateway.store.replication.replicas import Replicas
    from gateway.store.settings import StoreSettings

__all__ = [
    "DAY_S",
    "FileSafety",
    "FileState",
    "Policy",
    "StoreSafety",
    "file_safety",
    "policy_for",
    "policy_of",
    "read_safety_at",
    "read_store_safety",
    "store_safety",
]

DAY_S: Final = 86_400.0

FileState = Literal["safe", "under_way", "unsafe", "no_sha256"]
#: What a place holds for a file, as safety sees it.
PlaceState = Literal["verified", "stale", "unverified", "under_way", "missing", "corrupted"]


@dataclass(frozen=True, slots=True)
class Policy:
    """What safety is measured against: the places (``primary`` first, then the
    configured storages), how many good copies the policy asks, the scrub
    period (seconds) and the claim cutoff (Unix seconds: a claim made before it
    has expired, ``retention.archival_max_age_s``)."""

    places: tuple[str, ...]
    copies: int
    scrub_period_s: float
    claim_cutoff: float


@dataclass(frozen=True, slots=True)
class FileSafety:
    """One closed file: its ``state`` and what each place holds (``places``:
    place -> :data:`PlaceState`, in the policy's order)."""

    name: str
    state: FileState
    places: dict[str, PlaceState]

    @property
    def verified(self) -> int:
        """The copies that count: present and verified within the scrub period."""
        return sum(1 for what in self.places.values() if what == "verified")


def _place_state(
    row: CopyRow | None,
    primary: bool,
    scrub: tuple[str, float | None] | None,
    policy: Policy,
    now: float,
) -> PlaceState:
    if row is None and primary:
        status, verified_at = scrub if scrub is not None else ("", None)
        if status == "damaged":
            return "corrupted"
        if status == "missing":
            return "missing"
        if verified_at is None:
            return "unverified"
        return "verified" if verified_at > now - policy.scrub_period_s else "stale"
    if row is None:
        return "missing"
    if row.status == "ongoing":
        return "under_way" if row.mtime > policy.claim_cutoff else "missing"
    if row.status != "present":
        return row.status
    verified_at = max(row.verified_at or 0.0, row.mtime)
    return "verified" if verified_at > now - policy.scrub_period_s else "stale"


def file_safety(
    file: FileCopies,
    policy: Policy,
    now: float,
    scrub: tuple[str, float | None] | None = None,
) -> FileSafety:
    """The safety of one closed ``file`` at ``now`` (Unix seconds); ``scrub`` is its
    scrub object's ``(status, verified_at)``, when it has one (the primary's
    last verification when no ``primary`` row says more)."""
    places: dict[str, PlaceState] = {
        place: _place_state(file.copies.get(place), place == policy.places[0], scrub, policy, now)
        for place in policy.places
    }
    if file.sha256 is None:
        return FileSafety(file.name, "no_sha256", places)
    verified = sum(1 for what in places.values() if what == "verified")
    under_way = sum(1 for what in places.values() if what == "under_way")
    if verified >= policy.copies:
        state: FileState = "safe"
    elif verified + under_way >= policy.copies:
        state = "under_way"
    else:
        state = "unsafe"
    return FileSafety(file.name, state, places)


@dataclass(slots=True)
class StoreSafety:
    """The store's safety at ``computed_at`` (Unix seconds): closed files by state,
    copies by place and :data:`PlaceState`, and the captures not yet safe.

    ``unsafe_captures``: captures in unclosed files plus those in closed files
    that are not safe; ``open_captures``: the first kind alone;
    ``oldest_unsafe_age_s``: how long the oldest of them has waited, from its
    file's creation (an unclosed file) or close (a closed one), None when
    there is none; ``corrupted_files``: closed files with a corrupted copy
    somewhere. ``files_listed`` holds each closed file's
    :class:`FileSafety` when asked for (``store copies``).
    """

    policy: Policy
    computed_at: float
    files: int = 0
    by_state: dict[FileState, int] = field(
        default_factory=lambda: dict.fromkeys(("safe", "under_way", "unsafe", "no_sha256"), 0)
    )
    by_place: dict[str, dict[PlaceState, int]] = field(default_factory=dict)
    corrupted_files: int = 0
    open_files: int = 0
    open_captures: int = 0
    unsafe_captures: int = 0
    oldest_unsafe_age_s: float | None = None
    files_listed: list[FileSafety] = field(default_factory=list)

    @property
    def all_safe(self) -> bool:
        """True when every capture of the store is in a safe file (exit 0 of the reports)."""
        return self.unsafe_captures == 0 and self.by_state["safe"] == self.files

    def to_json(self) -> dict[str, Any]:
        """``{"safe", "policy", "files", "copies", "captures"}`` as ``store copies --json``,
        ``/_status`` and the page show it."""
        return {
            "safe": self.all_safe,
            "computed_at": datetime.fromtimestamp(self.computed_at).astimezone().isoformat(),
            "policy": {
                "copies": self.policy.copies,
                "places": list(self.policy.places),
                "scrub_period_days": self.policy.scrub_period_s / DAY_S,
            },
            "files": {"closed": self.files, "open": self.open_files, **self.by_state},
            "copies": self.by_place,
            "captures": {
                "not_safe": self.unsafe_captures,
                "in_open_files": self.open_captures,
                "oldest_not_safe_age_s": (
                    None if self.oldest_unsafe_age_s is None else round(self.oldest_unsafe_age_s, 1)
                ),
            },
        }

    def summary_line(self) -> str:
        """One line for the commands: what is safe, what is not, and the oldest wait."""
        states = self.by_state
        line = (
            f"{self.files} closed file(s), {self.policy.copies} verified copies each: "
            f"{states['safe']} safe, {states['under_way']} with copies under way, "
            f"{states['unsafe']} under-replicated"
        )
        if states["no_sha256"]:
            line += f", {states['no_sha256']} without a SHA-256"
        line += f"; {self.unsafe_captures} capture(s) not yet safe"
        if self.open_captures:
            line += f" ({self.open_captures} in {self.open_files} unclosed file(s))"
        if self.oldest_unsafe_age_s is not None:
            line += f", the oldest waiting {self.oldest_unsafe_age_s:.0f} s"
        return line


def _unix(iso: str | None) -> float | None:
    if not iso:
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _date_unix(date: str | None) -> float | None:
    """A 14-digit UTC date as Unix seconds (None when absent or malformed)."""
    if not date or len(date) < 14 or not date[:14].isdigit():
        return None
    return datetime.strptime(date[:14] + "+0000", "%Y%m%d%H%M%S%z").timestamp()


def read_store_safety(
    conn: sqlite3.Connection,
    policy: Policy,
    now: float,
    *,
    names: Sequence[str] | None = None,
    list_files: bool = False,
) -> StoreSafety:
    """The store's safety at ``now`` (Unix seconds), read on ``conn`` (blocking:
    run it in a worker thread). One pass over the closed files with their copy
    rows and scrub objects, one over capture counts by file: O(files).

    ``names``: only these closed files are listed (``store copies FILE...``);
    the counts always cover the whole store. ``list_files`` keeps each
    file's :class:`FileSafety` in :attr:`StoreSafety.files_listed`.
    """
    safety = StoreSafety(policy, now)
    for place in policy.places:
        safety.by_place[place] = {}
    scrubs = {
        name: (status, _unix(verified_at) or _unix(created_at), _unix(created_at))
        for name, status, verified_at, created_at in conn.execute(
            f"SELECT file_name, status, verified_at, created_at FROM {SCRUB.table}"
        )
    }
    captures = {
        file_id: count
        for file_id, count in conn.execute(
            "SELECT file_id, COUNT(*) FROM captures GROUP BY file_id"
        )
    }
    wanted = None if names is None else set(names)
    oldest: float | None = None
    for file in iter_file_copies(conn, policy.places):
        scrub = scrubs.get(file.name)
        verdict = file_safety(file, policy, now, None if scrub is None else scrub[:2])
        safety.files += 1
        safety.by_state[verdict.state] += 1
        for place, what in verdict.places.items():
            counts = safety.by_place[place]
            counts[what] = counts.get(what, 0) + 1
        if "corrupted" in verdict.places.values():
            safety.corrupted_files += 1
        if verdict.state != "safe":
            safety.unsafe_captures += captures.get(file.id, 0)
            # Waiting since the file closed (its scrub object's creation); a file of an
            # older release has none, and its record dates say nothing of the wait.
            since = scrub[2] if scrub is not None else None
            if captures.get(file.id) and since is not None:
                oldest = since if oldest is None else min(oldest, since)
        if list_files and (wanted is None or file.name in wanted):
            safety.files_listed.append(verdict)
    for file_id, name, date in conn.execute(
        "SELECT id, name, date FROM files WHERE state != 'closed'"
    ):
        safety.open_files += 1
        count = captures.get(file_id, 0)
        safety.open_captures += count
        safety.unsafe_captures += count
        since = _date_unix(date) or _date_unix(date_of_name(name))
        if count and since is not None:
            oldest = since if oldest is None else min(oldest, since)
    if oldest is not None:
        safety.oldest_unsafe_age_s = max(0.0, now - oldest)
    return safety


def policy_of(replicas: Replicas, scrub_interval_days: float, now: float) -> Policy:
    """The :class:`Policy` of a store's ``replicas`` and its ``jobs.scrub_interval_days``."""
    return policy_for(replicas.settings, scrub_interval_days, now)


def policy_for(settings: StoreSettings, scrub_interval_days: float, now: float) -> Policy:
    """The :class:`Policy` of the ``store:`` settings: the primary then the storages in
    config order, ``retention.copies``, the scrub period, and the claim cutoff
    (``now`` minus ``retention.archival_max_age_s``)."""
    return Policy(
        places=(PRIMARY, *settings.storages),
        copies=settings.retention.copies,
        scrub_period_s=scrub_interval_days * DAY_S,
        claim_cutoff=now - settings.retention.archival_max_age_s,
    )


def read_safety_at(db_path: Path, policy: Policy, now: float) -> StoreSafety:
    """:func:`read_store_safety` on a read-only connection of its own to the index at
    ``db_path`` (blocking; it waits for writers up to the index's busy timeout)."""
    conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
        return read_store_safety(conn, policy, now)
    finally:
        conn.close()


async def store_safety(
    replicas: Replicas,
    scrub_interval_days: float,
    *,
    names: Sequence[str] | None = None,
    list_files: bool = False,
) -> StoreSafety:
    """:func:`read_store_safety` now, on the store's index thread."""
    now = time.time()
    policy = policy_of(replicas, scrub_interval_days, now)
    return await replicas.index.call(
        read_store_safety, policy, now, names=names, list_files=list_files
    )
