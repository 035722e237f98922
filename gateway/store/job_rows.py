"""The own columns of the store's object types, typed: one frozen dataclass per type.

Each class is the ``row`` of its :class:`~gateway.jobs.model.ObjectType` in
:mod:`gateway.store.object_types`; its fields are the table's columns (their
SQL derived by :func:`gateway.jobs.columns.columns_of`), and an object as
read carries one (``obj.row``). A transition writes the row it ends with,
``dataclasses.replace(obj.row, ...)``; only the columns that changed are
written.

Structured columns are JSON text, each by one codec below, writing what
earlier releases wrote byte for byte (``json.dumps`` with its default
separators): a store written by them reads as before, and one written
now reads in them.

==========================  ======================================================
column                      JSON
==========================  ======================================================
scrub ``problems``,         ``[{"kind": k, "offset": n or null, "message": m}, ...]``
``pass_problems``
import ``notes``            ``["note", ...]``
batch ``file_ids``          ``[id, ...]``
batch ``pending``           ``[[source, destination, mtime, [[name, replace], ...]], ...]``
copy ``files``              ``["name", ...]``
copy ``todo``, ``retry``    ``[[name, replace, claimed mtime], ...]``
``outcomes``                ``{"outcome": count, ...}``, keys sorted
``problems`` (batch, copy)  ``{"name": ["reason", ...], ...}``, in the order met
==========================  ======================================================

>>> TODO.decode('[["a.warc.gz", false, 1.5]]')
(CopyTodo(name='a.warc.gz', replace=False, claimed=1.5),)
>>> TODO.encode(TODO.decode('[["a.warc.gz", false, 1.5]]'))
'[["a.warc.gz", false, 1.5]]'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gateway.jobs.columns import STRINGS, Codec, json_column

__all__ = [
    "FILE_IDS",
    "GROUPS",
    "OUTCOMES",
    "REASONS",
    "SCRUB_PROBLEMS",
    "TODO",
    "BatchColumns",
    "CopyColumns",
    "CopyGroup",
    "CopyTodo",
    "DirectorColumns",
    "GroupFile",
    "ImportColumns",
    "MigrateColumns",
    "ScrubColumns",
    "ScrubProblem",
]


# ------------------------------------------------------------------ structured values
@dataclass(frozen=True, slots=True)
class ScrubProblem:
    """One problem a scrub pass found: its kind, the record's offset (None: the
    file as a whole), and the message."""

    kind: str
    offset: int | None
    message: str


@dataclass(frozen=True, slots=True)
class GroupFile:
    """A file of a batch's group: its name, and whether its copy replaces other bytes
    found under that name (``store repair --replace-copies``)."""

    name: str
    replace: bool


@dataclass(frozen=True, slots=True)
class CopyGroup:
    """The files a batch hands to one copy object: copied from ``source`` to
    ``destination``, each claimed ``ongoing`` since ``mtime`` (seconds since the epoch)."""

    source: str
    destination: str
    mtime: float
    files: tuple[GroupFile, ...]


@dataclass(frozen=True, slots=True)
class CopyTodo:
    """A file a copy object has yet to copy: its name, whether it replaces other bytes,
    and the mtime of its ``ongoing`` claim (which the copy checks, or renews)."""

    name: str
    replace: bool
    claimed: float


def _scrub_problems_decode(text: str) -> tuple[ScrubProblem, ...]:
    return tuple(
        ScrubProblem(str(p["kind"]), p["offset"], str(p["message"])) for p in json.loads(text)
    )


SCRUB_PROBLEMS: Final[Codec[tuple[ScrubProblem, ...]]] = Codec(
    lambda problems: json.dumps(
        [{"kind": p.kind, "offset": p.offset, "message": p.message} for p in problems]
    ),
    _scrub_problems_decode,
)

FILE_IDS: Final[Codec[tuple[int, ...]]] = Codec(
    lambda ids: json.dumps(list(ids)), lambda text: tuple(int(i) for i in json.loads(text))
)


def _groups_decode(text: str) -> tuple[CopyGroup, ...]:
    return tuple(
        CopyGroup(
            str(source),
            str(destination),
            float(mtime),
            tuple(GroupFile(str(name), bool(replace)) for name, replace in files),
        )
        for source, destination, mtime, files in json.loads(text)
    )


GROUPS: Final[Codec[tuple[CopyGroup, ...]]] = Codec(
    lambda groups: json.dumps(
        [[g.source, g.destination, g.mtime, [[f.name, f.replace] for f in g.files]] for g in groups]
    ),
    _groups_decode,
)

TODO: Final[Codec[tuple[CopyTodo, ...]]] = Codec(
    lambda todo: json.dumps([[t.name, t.replace, t.claimed] for t in todo]),
    lambda text: tuple(
        CopyTodo(str(name), bool(replace), float(claimed))
        for name, replace, claimed in json.loads(text)
    ),
)

OUTCOMES: Final[Codec[Mapping[str, int]]] = Codec(
    lambda outcomes: json.dumps(dict(outcomes), sort_keys=True),
    lambda text: {str(k): int(n) for k, n in json.loads(text).items()},
)


def _reasons_decode(text: str) -> Mapping[str, tuple[str, ...]]:
    loaded: dict[str, Any] = json.loads(text)
    return {str(name): tuple(str(w) for w in whys) for name, whys in loaded.items()}


#: ``{file name: (reason, ...)}``: why files were not made safe.
REASONS: Final[Codec[Mapping[str, tuple[str, ...]]]] = Codec(
    lambda reasons: json.dumps({name: list(whys) for name, whys in reasons.items()}),
    _reasons_decode,
)


# ------------------------------------------------------------------------------ rows
@dataclass(frozen=True, slots=True, kw_only=True)
class ScrubColumns:
    """A file verified again and again: the pass under way (``resume_offset``,
    ``pass_*``) and the last one's outcome (``verified_at``, ``records``,
    ``problems``, ``result``); times are ISO 8601 UTC text."""

    file_name: str
    resume_offset: int = 0
    pass_started_at: str | None = None
    pass_records: int = 0
    pass_problems: tuple[ScrubProblem, ...] = json_column(SCRUB_PROBLEMS, default=())
    verified_at: str | None = None
    records: int = 0
    problems: tuple[ScrubProblem, ...] = json_column(SCRUB_PROBLEMS, default=())
    result: str = ""
    passes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportColumns:
    """A file handed to the store: its ``batch`` (one ``store add``), the path, what
    verifying it found (``name`` to ``notes``), and its outcome (``stored_as``,
    ``captures``, or the ``reason`` it was refused)."""

    batch: str = ""
    source_path: str
    name: str = ""
    size: int = 0
    sha256: str = ""
    date: str | None = None
    records: int = 0
    notes: tuple[str, ...] = json_column(STRINGS, default=())
    stored_as: str = ""
    captures: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectorColumns:
    """The replication director of one ``policy``, and its last pass."""

    policy: str
    passes: int = 0
    last_pass_at: str | None = None
    last_batches: int = 0
    last_files: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchColumns:
    """A batch of files to copy: made by a pass (``pass_id``), handed to copy objects
    (``pending``), and the sums gathered from them (``rounds``: the most one took;
    ``deferred``: files left to a later tick)."""

    pass_id: str
    file_ids: tuple[int, ...] = json_column(FILE_IDS)
    max_rounds: int = 6
    replace_conflicts: bool = False
    rounds: int = 0
    deferred: int = 0
    files: int = 0
    outcomes: Mapping[str, int] = json_column(OUTCOMES, default_factory=dict)
    bytes_copied: int = 0
    problems: Mapping[str, tuple[str, ...]] = json_column(REASONS, default_factory=dict)
    pending: tuple[CopyGroup, ...] = json_column(GROUPS, default=())
    result: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyColumns:
    """One group of a batch copied from ``source`` to ``destination``: the group's
    ``files``, what is left of this round (``todo``) and what failed transiently in
    it (``retry``), and the sums so far."""

    batch_id: int
    source: str
    destination: str
    mtime: float
    max_rounds: int = 6
    files: tuple[str, ...] = json_column(STRINGS)
    todo: tuple[CopyTodo, ...] = json_column(TODO)
    retry: tuple[CopyTodo, ...] = json_column(TODO, default=())
    rounds: int = 0
    outcomes: Mapping[str, int] = json_column(OUTCOMES, default_factory=dict)
    bytes_copied: int = 0
    problems: Mapping[str, tuple[str, ...]] = json_column(REASONS, default_factory=dict)
    result: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class MigrateColumns:
    """The store's files moved to layout ``fs_version``: the pass under way (the next
    file below ``cursor_id``), its counts, and the last pass's ``result``."""

    fs_version: int
    cursor_id: int | None = None
    pass_started_at: str | None = None
    processed: int = 0
    migrated: int = 0
    merged: int = 0
    left_behind: int = 0
    passes: int = 0
    result: str = ""
