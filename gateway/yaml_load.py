"""YAML as the gateway reads it: ``yaml.safe_load``, and a duplicate key is an error.

PyYAML's ``safe_load`` keeps the last of two equal keys in a mapping and
says nothing, so a collection written twice silently loses its first
definition. :func:`safe_load` refuses it, naming the key and both lines.
Used for collections.yaml (:mod:`gateway.config`) and fuzzy rules files
(:mod:`gateway.index.fuzzy`).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

__all__ = ["safe_load"]


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
