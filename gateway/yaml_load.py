"""YAML as the gateway reads it: ``yaml.safe_load``, and a duplicate key is an error.

PyYAML's ``safe_load`` keeps the last of two equal keys in a mapping and
says nothing, so a collection written twice silently loses its first
definition. :func:`safe_load` refuses it, naming the key and both lines.
Used for collections.yaml (:mod:`gateway.config`) and fuzzy rules files
(:mod:`gateway.index.fuzzy`). :func:`mapping`, :func:`reject_unknown` and
:func:`coerce` check the shapes of what was read, each error a
:class:`~gateway.errors.ConfigError` naming its YAML path.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

from gateway.errors import ConfigError

__all__ = ["coerce", "mapping", "reject_unknown", "safe_load"]


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose mappings refuse a key given twice."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[object, int] = {}
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                earlier = lines.get(key)
            except TypeError:  # an unhashable key: SafeLoader reports it itself
                continue
            if earlier is not None:
                raise ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} at lines {earlier} and {line}",
                    key_node.start_mark,
                )
            lines[key] = line
        return super().construct_mapping(node, deep=deep)


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)``, but a key given twice in one mapping raises
    :class:`yaml.YAMLError` (a ``ConstructorError`` naming the key and both lines).

    >>> safe_load("a: 1\\nb: 2\\n")
    {'a': 1, 'b': 2}
    >>> safe_load("a: 1\\nb: 2\\na: 3\\n")
    Traceback (most recent call last):
    yaml.constructor.ConstructorError: duplicate key 'a' at lines 1 and 3
      in "<unicode string>", line 3, column 1:
        a: 3
        ^
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)


def mapping(value: object, path: str, expected: str = "a mapping") -> dict[str, object]:
    """``value`` as a mapping with string keys; :class:`ConfigError` at ``path`` otherwise."""
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected {expected}, got {type(value).__name__} {value!r}")
    for key in value:
        if not isinstance(key, str):
            raise ConfigError(f"{path}.{key}", "keys must be strings")
    return value


def reject_unknown(
    data: Mapping[str, object], allowed: set[str] | frozenset[str], path: str
) -> None:
    """:class:`ConfigError` at ``path.key`` for the first key of ``data`` not in ``allowed``."""
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"{path}.{key}", f"unknown key; expected one of {', '.join(sorted(allowed))}"
            )


def coerce(value: object, hint: object, path: str) -> object:
    """``value`` checked against the type ``hint`` (str, int, float, bool, a Literal,
    a union with None, a tuple of one of these); :class:`ConfigError` at ``path``
    naming what was expected. Ints are taken for floats; bools are never numbers."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, path)
            except ConfigError as exc:
                errors.append(exc.problem)
        raise ConfigError(path, " or ".join(errors))
    if origin is Literal:
        if value not in args:
            raise ConfigError(path, f"{value!r} is not one of {', '.join(map(str, args))}")
        return value
    if origin is tuple:
        items = value if isinstance(value, list) else [value]
        return tuple(coerce(item, args[0], f"{path}[{i}]") for i, item in enumerate(items))
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(path, f"expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {value!r}")
        return value
    raise ConfigError(path, f"unsupported field type {hint!r}")  # pragma: no cover
