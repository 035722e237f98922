"""Object types: the states and transitions of each kind of background work, as data.

An *object* is one row of its type's table (ArchiveBox "States & Lifecycles",
A. Object): a ``status`` from the type's finite set of states and a
``retry_at`` (UTC) that is both its schedule and its lease. It is *due* when
``retry_at <= now``; ``retry_at`` NULL means it is in a final state, where it
stays as history (the machinery never deletes objects).

Each type is declared once, as an :class:`ObjectType` literal: its states,
the initial one, the final ones, the allowed transitions ``(from, to)`` and
its own columns, a frozen dataclass (``row``; :mod:`gateway.jobs.columns`).
Everything else is derived from that declaration: the table
(:func:`gateway.jobs.schema.create_schema`), which writes are allowed
(:func:`gateway.jobs.db.write_transition` refuses an undeclared one), the
names of the hooks, and the diagrams of ``docs/background-work.md``
(:meth:`ObjectType.mermaid`). An application names each transition by a
constant taken from the table once (``BATCH_COPYING_TO_DONE: Final =
BATCH.transition("copying", "done")``), which
:meth:`~gateway.jobs.actors.ActorType.transition` takes.

>>> PROBE = ObjectType(
...     name="probe",
...     description="an example",
...     states=("queued", "done"),
...     initial="queued",
...     final=("done",),
...     transitions=(("queued", "done"),),
...     row=NoColumns,
... )
>>> PROBE.table, PROBE.transition("queued", "done").name
('jobs_probe', 'probe_queued_to_done')
>>> print(PROBE.mermaid())
stateDiagram-v2
    [*] --> queued
    queued --> done
    done --> [*]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from gateway.jobs.columns import Column, NoColumns, Value, columns_of

__all__ = ["COMMON_COLUMNS", "NoColumns", "ObjectType", "Transition"]

#: The row of an object type: the frozen dataclass of its own columns.
R = TypeVar("R")

_NAME: Final = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")

#: Columns every object table has, in this order, before the type's own.
#: ``retry_at``: when the object is due (TEXT, ISO 8601 UTC with
#: microseconds; NULL in a final state); ``lease_owner``: who claimed it
#: last (the lease is active while ``retry_at`` is in the future);
#: ``attempts``: failed ticks since the last transition (drives backoff);
#: ``last_error`` / ``last_error_at``: the last failure, kept as history.
COMMON_COLUMNS: Final = (
    ("id", "INTEGER PRIMARY KEY"),
    ("status", "TEXT NOT NULL"),
    ("retry_at", "TEXT"),
    ("created_at", "TEXT NOT NULL"),
    ("updated_at", "TEXT NOT NULL"),
    ("attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("last_error", "TEXT"),
    ("last_error_at", "TEXT"),
    ("lease_owner", "TEXT"),
)


@dataclass(frozen=True, slots=True)
class Transition:
    """One declared move of an object type, ``source`` -> ``target``.

    ``name`` (``<type>_<from>_to_<to>``) names the hooks
    ``on_transition_<name>_start`` and ``on_transition_<name>_end``.
    """

    object_type: str
    source: str
    target: str
    #: True when ``target`` is final (the write sets ``retry_at`` NULL).
    final: bool

    @property
    def name(self) -> str:
        return f"{self.object_type}_{self.source}_to_{self.target}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectType(Generic[R]):
    """The declaration of one kind of object (see the module docstring).

    ``row``: the frozen dataclass of the type's own columns (their SQL
    derived from it by :func:`~gateway.jobs.columns.columns_of`), after
    :data:`COMMON_COLUMNS`; ``unique``: column tuples with a UNIQUE index
    (e.g. one scrub object per file); ``indexes``: column tuples with a
    plain index (what the type's own reads select by); ``label_column``/``detail_column``:
    what ``gateway jobs`` shows of an object in one of ``attention_states``
    (a refused import and its reason, a damaged file and its problems).

    Raises :class:`ValueError` when the declaration is inconsistent: an
    unknown state in a transition, a transition out of a final state, a
    state no transition reaches, a name that is not ``snake_case``, a
    ``row`` that is not a frozen dataclass of column types.
    """

    name: str
    description: str
    states: tuple[str, ...]
    initial: str
    final: tuple[str, ...]
    transitions: tuple[tuple[str, str], ...]
    row: type[R]
    unique: tuple[tuple[str, ...], ...] = ()
    indexes: tuple[tuple[str, ...], ...] = ()
    attention_states: tuple[str, ...] = ()
    label_column: str = "id"
    detail_column: str = "last_error"
    _by_pair: dict[tuple[str, str], Transition] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    #: The type's own columns, in table order.
    own: tuple[Column, ...] = field(init=False, repr=False, compare=False)
    #: The type's own columns ``(name, SQL declaration)``, in table order.
    columns: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)
    #: Every column, common ones first, in table order.
    column_names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"object type {self.name!r}"
        try:
            declared = columns_of(self.row)
        except TypeError as exc:
            raise ValueError(f"{where}: {exc}") from None
        object.__setattr__(self, "own", declared)
        object.__setattr__(self, "columns", tuple((c.name, c.declaration) for c in declared))
        names = [self.name, *self.states, *(c for c, _ in self.columns)]
        for name in names:
            if not _NAME.fullmatch(name):
                raise ValueError(f"{where}: {name!r} is not a snake_case name")
        if len(set(self.states)) != len(self.states):
            raise ValueError(f"{where}: a state is listed twice")
        known = set(self.states)
        for state in (self.initial, *self.final, *self.attention_states):
            if state not in known:
                raise ValueError(f"{where}: {state!r} is not one of its states")
        common = {c for c, _ in COMMON_COLUMNS}
        own = {c for c, _ in self.columns}
        if own & common:
            raise ValueError(f"{where}: columns {sorted(own & common)} are common columns")
        keyed = (c for u in (*self.unique, *self.indexes) for c in u)
        for column in (self.label_column, self.detail_column, *keyed):
            if column not in own | common:
                raise ValueError(f"{where}: {column!r} is not one of its columns")
        reached = {self.initial}
        for source, target in self.transitions:
            if source not in known or target not in known:
                raise ValueError(f"{where}: transition {source} -> {target} names an unknown state")
            if source in self.final:
                raise ValueError(f"{where}: transition {source} -> {target} leaves a final state")
            if (source, target) in self._by_pair:
                raise ValueError(f"{where}: transition {source} -> {target} is declared twice")
            self._by_pair[(source, target)] = Transition(
                self.name, source, target, target in self.final
            )
            reached.add(target)
        if known - reached:
            raise ValueError(f"{where}: no transition reaches {sorted(known - reached)}")
        object.__setattr__(
            self, "column_names", tuple(c for c, _ in (*COMMON_COLUMNS, *self.columns))
        )

    @property
    def table(self) -> str:
        """The SQLite table holding the objects: ``jobs_<name>``."""
        return f"jobs_{self.name}"

    @property
    def active_states(self) -> tuple[str, ...]:
        """The states that are not final, in declaration order."""
        return tuple(s for s in self.states if s not in self.final)

    def all_transitions(self) -> tuple[Transition, ...]:
        """Every declared transition, in declaration order."""
        return tuple(self._by_pair.values())

    def transition(self, source: str, target: str) -> Transition:
        """The declared transition ``source -> target``; :class:`ValueError` if undeclared."""
        try:
            return self._by_pair[(source, target)]
        except KeyError:
            raise ValueError(
                f"object type {self.name!r} has no transition {source} -> {target}"
            ) from None

    def decode(self, values: Sequence[Value]) -> R:
        """The row of stored own-column ``values`` (in table order)."""
        return self.row(**{c.name: c.decode(v) for c, v in zip(self.own, values, strict=True)})

    def encode(self, row: R) -> dict[str, Value]:
        """``{column: stored value}`` of every own column of ``row``."""
        return {c.name: c.encode(getattr(row, c.name)) for c in self.own}

    def changes(self, old: R, new: R) -> dict[str, Value]:
        """``{column: stored value}`` of the own columns ``new`` changes from ``old``."""
        changed: dict[str, Value] = {}
        for column in self.own:
            value: Any = getattr(new, column.name)
            if value != getattr(old, column.name):
                changed[column.name] = column.encode(value)
        return changed

    def mermaid(self) -> str:
        """The state diagram in mermaid's ``stateDiagram-v2`` syntax (for the README)."""
        lines = ["stateDiagram-v2", f"    [*] --> {self.initial}"]
        lines += [f"    {t.source} --> {t.target}" for t in self.all_transitions()]
        lines += [f"    {state} --> [*]" for state in self.final]
        return "\n".join(lines)
