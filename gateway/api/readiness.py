"""Readiness: whether this process should be sent traffic (``GET /_ready``).

``/_health`` says the process answers (liveness); ``/_ready`` says it can do
its work, in the sense of Kubernetes readiness probes and load balancers'
health checks. The app is not ready:

- while it starts (until the snapshot store is open, its recovery done) and
  once it stops;
- while a subsystem says so with :meth:`Readiness.block` (a store recovering
  in the background, a migration holding the files; cleared with
  :meth:`Readiness.clear`);
- while some collection has **every** source down, i.e. skipped by its
  circuit breaker (three failures in a row, or an upstream ``Retry-After``):
  such a collection cannot answer anything but 503; likewise while **every**
  resource loader that has loaded for a collection is skipped by its breaker
  (the storages, replicas or HTTP prefixes it reads records from unreachable:
  :attr:`gateway.index.collection.Step.load_breakers`). A group that still has
  one member answering is degraded, not down (its failures are reported per
  request in ``ResErrors``), and keeps the process ready: taking every
  gateway out of rotation because one remote archive is down would turn a
  partial answer into none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from gateway.index.breaker import Breaker
    from gateway.index.collection import Collection

__all__ = ["READINESS", "Readiness", "collections_down"]


class Readiness:
    """Named reasons that keep the app from being ready; none left means ready."""

    __slots__ = ("_reasons",)

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {"startup": "the app is starting"}

    def block(self, name: str, reason: str) -> None:
        """Not ready because of ``name`` (``"store"``, ``"migration"``...): ``reason`` says why."""
        self._reasons[name] = reason

    def clear(self, name: str) -> None:
        """``name`` no longer keeps the app from being ready (a no-op when it did not)."""
        self._reasons.pop(name, None)

    def reasons(self) -> dict[str, str]:
        """``{name: reason}`` of what keeps the app from being ready, in the order set."""
        return dict(self._reasons)


#: What keeps ``/_ready`` from answering 200.
READINESS = web.AppKey("readiness", Readiness)


def collections_down(collections: Mapping[str, Collection]) -> dict[str, str]:
    """``{"collection NAME": reason}`` for each collection whose every source, or every
    resource loader that has loaded, is skipped.

    A source or loader is down while its circuit breaker is open
    (:meth:`gateway.index.breaker.Breaker.is_open`).
    """
    down: dict[str, str] = {}
    for name, collection in collections.items():
        breakers = [
            (member, breaker)
            for step in collection.steps
            for member, breaker in step.index.breakers.items()
        ]
        if breakers and all(breaker.is_open() for _, breaker in breakers):
            down[f"collection {name}"] = "every source is down: " + _reasons(breakers)
            continue
        loaders = [
            (loader, breaker)
            for step in collection.steps
            for loader, breaker in step.load_breakers.items()
        ]
        if loaders and all(breaker.is_open() for _, breaker in loaders):
            down[f"collection {name}"] = "every resource loader is down: " + _reasons(loaders)
    return down


def _reasons(breakers: Iterable[tuple[str, Breaker]]) -> str:
    return "; ".join(f"{name}: {breaker.last_reason or 'failing'}" for name, breaker in breakers)
