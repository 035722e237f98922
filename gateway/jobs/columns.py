"""An object type's own columns, typed: one frozen dataclass per type, its SQL derived from it.

An :class:`~gateway.jobs.model.ObjectType` names a frozen, slotted dataclass
as its ``row``; each field is one column of its table, in field order, after
the common ones. The column's SQL declaration comes from the field:

- ``str``, ``int``, ``float``, ``bool``: ``TEXT``, ``INTEGER``, ``REAL``,
  ``INTEGER`` (0 or 1), ``NOT NULL``; ``X | None``: the same, nullable;
- a default (other than None) becomes the column's ``DEFAULT``;
- a structured value (a tuple of records, a mapping) is JSON text, by the
  :class:`Codec` the field names with :func:`json_column` (its encoding of
  the default is the ``DEFAULT``). One encode/decode pair per structured
  type; each keeps the JSON it writes byte for byte what earlier releases
  wrote, so existing stores read as before.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True, slots=True, kw_only=True)
... class Probe:
...     path: str
...     size: int = 0
...     seen_at: str | None = None
...     names: tuple[str, ...] = json_column(STRINGS, default=())
>>> [(c.name, c.declaration) for c in columns_of(Probe)]  # doctest: +NORMALIZE_WHITESPACE
[('path', 'TEXT NOT NULL'), ('size', 'INTEGER NOT NULL DEFAULT 0'), ('seen_at', 'TEXT'),
 ('names', "TEXT NOT NULL DEFAULT '[]'")]
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

__all__ = ["STRINGS", "Codec", "Column", "NoColumns", "Value", "columns_of", "json_column"]

#: A column value: what SQLite stores and gives back.
Value = str | int | float | None

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Codec(Generic[_T]):
    """How one structured type is stored: ``encode`` to JSON text, ``decode`` back."""

    encode: Callable[[_T], str]
    decode: Callable[[str], _T]


def _strings_decode(text: str) -> tuple[str, ...]:
    return tuple(str(s) for s in json.loads(text))


#: A tuple of strings as a JSON array (``["a", "b"]``).
STRINGS: Final[Codec[tuple[str, ...]]] = Codec(lambda v: json.dumps(list(v)), _strings_decode)


def json_column(
    codec: Codec[Any], *, default: Any = dataclasses.MISSING, default_factory: Any = None
) -> Any:
    """A field stored as JSON text by ``codec`` (see the module docstring)."""
    metadata = {"codec": codec}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True, slots=True, kw_only=True)
class NoColumns:
    """The row of a type with no columns of its own."""


@dataclass(frozen=True, slots=True)
class Column:
    """One own column: its name, SQL declaration, and how a field value is stored and read."""

    name: str
    declaration: str
    encode: Callable[[Any], Value]
    decode: Callable[[Value], Any]


_SQL_TYPES: Final[Mapping[type, str]] = {
    str: "TEXT",
    int: "INTEGER",
    float: "REAL",
    bool: "INTEGER",
}


def _same(value: Value) -> Any:
    return value


def _literal(value: object) -> str:
    """``value`` as an SQL literal (a ``DEFAULT``)."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bool):
        return str(int(value))
    return repr(value)


def _column(row: type, spec: dataclasses.Field[Any], hint: Any) -> Column:
    where = f"{row.__name__}.{spec.name}"
    if spec.default is not dataclasses.MISSING:
        default: Any = spec.default
    elif spec.default_factory is not dataclasses.MISSING:
        default = spec.default_factory()
    else:
        default = dataclasses.MISSING
    codec: Codec[Any] | None = spec.metadata.get("codec")
    if codec is not None:
        text = (
            "" if default is dataclasses.MISSING else f" DEFAULT {_literal(codec.encode(default))}"
        )
        decode: Callable[[Value], Any] = lambda value: codec.decode(str(value))  # noqa: E731
        return Column(spec.name, f"TEXT NOT NULL{text}", codec.encode, decode)
    nullable = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(hint))
        hint = args[0] if len(args) == 1 else hint
    sql = _SQL_TYPES.get(hint)
    if sql is None:
        raise TypeError(f"{where}: {hint!r} is not str, int, float, bool or a json_column")
    if nullable and default is not None:
        raise TypeError(f"{where}: a nullable column defaults to None")
    declaration = sql if nullable else f"{sql} NOT NULL"
    if default is not dataclasses.MISSING and default is not None:
        declaration += f" DEFAULT {_literal(default)}"
    if hint is bool:
        return Column(spec.name, declaration, lambda v: None if v is None else int(v), _to_bool)
    if hint is float:
        return Column(spec.name, declaration, _same, _to_float)
    return Column(spec.name, declaration, _same, _same)


def _to_bool(value: Value) -> bool | None:
    return None if value is None else bool(value)


def _to_float(value: Value) -> float | None:
    return None if value is None else float(value)


def columns_of(row: type) -> tuple[Column, ...]:
    """The columns of the dataclass ``row``, in field order.

    Raises :class:`TypeError` when ``row`` is not a frozen dataclass or a
    field's type has no column type (see the module docstring).
    """
    if not dataclasses.is_dataclass(row) or not row.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{row.__name__} is not a frozen dataclass")
    hints = typing.get_type_hints(row)
    return tuple(_column(row, spec, hints[spec.name]) for spec in dataclasses.fields(row))
