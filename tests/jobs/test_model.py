"""Object types as data: validation, every declared transition walked, diagrams, names."""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import typing
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.jobs.actors import ActorType, object_types_of
from gateway.jobs.db import read_object, utcnow, write_object, write_transition
from gateway.jobs.model import NoColumns, ObjectType, Transition
from gateway.jobs.schema import connect, create_schema
from gateway.store import object_types
from gateway.store.actor_types import ACTOR_TYPES
from tests.jobs.probe_plugin import ProbeActor

README = Path(__file__).resolve().parents[2] / "docs" / "background-work.md"

#: Every actor type the tests know: the built-in ones and the probe plugin's.
ALL_ACTOR_TYPES: list[type[ActorType]] = [*ACTOR_TYPES.values(), ProbeActor]
ALL_OBJECT_TYPES = object_types_of(ALL_ACTOR_TYPES)
ACTOR_OBJECTS = [t.object_type for t in ACTOR_TYPES.values()]


_serial = iter(range(1, 1 << 30))


def _unique(object_type: ObjectType[Any]) -> Any:
    """A row of the type: its fields without a default set, distinct on every call
    (a number, a text, or an empty tuple for a structured column)."""
    number = next(_serial)
    hints = typing.get_type_hints(object_type.row)
    samples: dict[type, object] = {int: number, float: float(number), str: f"walk-{number}"}
    return object_type.row(
        **{
            field.name: samples.get(hints[field.name], ())
            for field in dataclasses.fields(object_type.row)
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        }
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusColumns:
    status: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyColumns:
    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ListColumns:
    names: list[str]


def _declare(**overrides: object) -> ObjectType[Any]:
    fields: dict[str, object] = {
        "name": "thing",
        "description": "a test",
        "states": ("new", "done"),
        "initial": "new",
        "final": ("done",),
        "transitions": (("new", "done"),),
        "row": NoColumns,
    }
    fields.update(overrides)
    return ObjectType(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"name": "Thing"}, "'Thing' is not a snake_case name"),
        ({"states": ("new", "done", "new")}, "a state is listed twice"),
        ({"initial": "old"}, "'old' is not one of its states"),
        ({"transitions": (("new", "gone"),)}, "names an unknown state"),
        ({"transitions": (("new", "done"), ("done", "new"))}, "leaves a final state"),
        ({"transitions": (("new", "done"), ("new", "done"))}, "declared twice"),
        ({"states": ("new", "done", "lost")}, "no transition reaches ['lost']"),
        ({"row": StatusColumns}, "are common columns"),
        ({"row": ListColumns}, "is not str, int, float, bool or a json_column"),
        ({"unique": (("file",),)}, "'file' is not one of its columns"),
    ],
)
def test_an_inconsistent_declaration_is_refused(overrides: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        _declare(**overrides)


def test_an_undeclared_transition_is_refused_by_name() -> None:
    thing = _declare()
    with pytest.raises(ValueError, match="has no transition done -> new"):
        thing.transition("done", "new")


@pytest.mark.parametrize("object_type", ALL_OBJECT_TYPES, ids=lambda t: t.name)
def test_every_declared_transition_is_one_compare_and_swap(
    object_type: ObjectType[Any], tmp_path: Path
) -> None:
    """Walk the table: each transition wins once, loses when repeated, sets retry_at rightly."""
    conn = connect(tmp_path / "walk.sqlite3")
    create_schema(conn, [object_type])
    now = utcnow()
    for transition in object_type.all_transitions():
        object_id = write_object(
            conn, object_type, now, _unique(object_type), status=transition.source
        )
        obj = read_object(conn, object_type, object_id)
        retry_at = None if transition.final else now + timedelta(seconds=5)
        assert write_transition(conn, obj, transition, now, retry_at=retry_at)
        moved = read_object(conn, object_type, object_id)
        assert moved.status == transition.target
        assert (moved.retry_at is None) == (transition.target in object_type.final)
        # The same write again compares against the old status and retry_at: it loses.
        assert not write_transition(conn, obj, transition, now, retry_at=retry_at)
        # A transition from the wrong state is a bug, refused before any write.
        if transition.source != transition.target:
            with pytest.raises(ValueError, match="cannot make transition"):
                write_transition(conn, moved, transition, now, retry_at=retry_at)
    # Every pair of states the table does not declare is refused, whatever the object.
    declared = {(t.source, t.target) for t in object_type.all_transitions()}
    for source in object_type.active_states:
        new = write_object(conn, object_type, now, _unique(object_type), status=source)
        obj = read_object(conn, object_type, new)
        for target in object_type.states:
            if (source, target) in declared:
                continue
            undeclared = Transition(object_type.name, source, target, target in object_type.final)
            with pytest.raises(ValueError, match="has no transition"):
                write_transition(conn, obj, undeclared, now, retry_at=None)
    conn.close()


@pytest.mark.parametrize("object_type", ALL_OBJECT_TYPES, ids=lambda t: t.name)
def test_final_states_need_retry_at_none_and_others_a_time(
    object_type: ObjectType[Any], tmp_path: Path
) -> None:
    conn = connect(tmp_path / "rules.sqlite3")
    create_schema(conn, [object_type])
    now = utcnow()
    for transition in object_type.all_transitions():
        obj = read_object(
            conn,
            object_type,
            write_object(conn, object_type, now, _unique(object_type), status=transition.source),
        )
        wrong = now if transition.final else None
        with pytest.raises(ValueError, match="needs retry_at"):
            write_transition(conn, obj, transition, now, retry_at=wrong)
    conn.close()


def test_every_store_transition_has_its_constant_and_no_other() -> None:
    """``<TYPE>_<FROM>_TO_<TO>`` constants are exactly the declared transitions, each
    named after its pair of states; no actor type keeps a ``transition_*`` method."""
    prefixes = {t.name: name for name, t in vars(object_types).items() if t in ACTOR_OBJECTS}
    constants = {
        name: value for name, value in vars(object_types).items() if isinstance(value, Transition)
    }
    declared = [t for o in object_types.OBJECT_TYPES for t in o.all_transitions()]
    assert sorted(constants.values(), key=lambda t: t.name) == sorted(
        declared, key=lambda t: t.name
    )
    for name, transition in constants.items():
        prefix = prefixes[transition.object_type]
        assert name == f"{prefix}_{transition.source}_to_{transition.target}".upper()
    for actor_type in ALL_ACTOR_TYPES:
        assert not [m for m in dir(actor_type) if m.startswith("transition_")]


@pytest.mark.parametrize("actor_type", list(ACTOR_TYPES.values()), ids=lambda t: t.name)
def test_the_readme_draws_every_built_in_type(actor_type: type[ActorType]) -> None:
    diagram = actor_type.object_type.mermaid()
    assert f"```mermaid\n{diagram}\n```" in README.read_text(encoding="utf-8")


def test_registry_names_match_their_actor_types() -> None:
    for name, actor_type in ACTOR_TYPES.items():
        assert actor_type.name == name == actor_type.object_type.name


def test_an_actor_type_is_named_as_its_object_type() -> None:
    with pytest.raises(TypeError, match="not its object type's name"):

        class Misnamed(ProbeActor):
            name = "prober"


def test_create_schema_is_idempotent_and_records_the_types(tmp_path: Path) -> None:
    conn = connect(tmp_path / "twice.sqlite3")
    create_schema(conn, ALL_OBJECT_TYPES)
    create_schema(conn, ALL_OBJECT_TYPES)
    names = {row[0] for row in conn.execute("SELECT name FROM jobs_object_types")}
    assert names == {t.name for t in ALL_OBJECT_TYPES}
    conn.close()


def test_a_unique_column_refuses_a_second_object(tmp_path: Path) -> None:
    keyed = _declare(row=KeyColumns, unique=(("key",),))
    conn = connect(tmp_path / "unique.sqlite3")
    create_schema(conn, [keyed])
    write_object(conn, keyed, utcnow(), KeyColumns(key="a"))
    with pytest.raises(sqlite3.IntegrityError):
        write_object(conn, keyed, utcnow(), KeyColumns(key="a"))
    conn.close()


def _jobs_schema(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE name LIKE 'jobs_%' ORDER BY name"
    ).fetchall()
    return [(name, " ".join(str(sql).split())) for name, sql in rows]


def test_the_store_schema_step_makes_the_built_in_tables_as_declared(tmp_path: Path) -> None:
    """Step 3 of the store's chain writes the DDL out; it must be what the declarations make."""
    from gateway.store.schema import migrate

    chain = sqlite3.connect(tmp_path / "chain.sqlite3", isolation_level=None)
    migrate(chain)
    declared = connect(tmp_path / "declared.sqlite3")
    create_schema(declared, [t.object_type for t in ACTOR_TYPES.values()])
    assert _jobs_schema(chain) == _jobs_schema(declared)
    registered = "SELECT name, table_name, states, final FROM jobs_object_types ORDER BY name"
    assert chain.execute(registered).fetchall() == declared.execute(registered).fetchall()
    chain.close()
    declared.close()
