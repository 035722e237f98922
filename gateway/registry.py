"""Registries whose classes are imported when first looked up.

``SOURCE_TYPES``, ``RESOLVER_TYPES`` and ``STORAGE_TYPES`` name a class per
type, one literal line each, as ``"package.module:Class"``: reading a
config asks for the types it names and imports only their modules, so
``gateway check-config`` on a config of local files does not import the
HTTP client, Redis or S3 libraries the other types need (``importlib``, as
``importlib.metadata`` entry points load their objects).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["LazyRegistry"]

T = TypeVar("T")


class LazyRegistry(Mapping[str, T], Generic[T]):
    """A read-only mapping of type names to ``"module:attribute"``, imported on lookup.

    Names, ``in`` and ``len`` import nothing; ``registry[name]`` imports the
    module once and returns the attribute; an unknown name raises
    :class:`KeyError`, as a dict does. Iterating ``values()`` or
    ``items()`` imports every module.

    >>> registry = LazyRegistry[type]({"ordered": "collections:OrderedDict"})
    >>> "ordered" in registry, list(registry)
    (True, ['ordered'])
    >>> registry["ordered"].__name__
    'OrderedDict'
    """

    __slots__ = ("_loaded", "_paths")

    def __init__(self, paths: Mapping[str, str]) -> None:
        self._paths = dict(paths)
        self._loaded: dict[str, T] = {}

    def __getitem__(self, name: str) -> T:
        try:
            return self._loaded[name]
        except KeyError:
            pass
        module, _, attribute = self._paths[name].partition(":")
        value: T = getattr(importlib.import_module(module), attribute)
        self._loaded[name] = value
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._paths

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)
