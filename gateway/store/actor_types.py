"""The store's actor types, one line each, registered with the jobs engine as a plugin.

The engine (:mod:`gateway.jobs`) knows no actor type of its own: this module
is the store's plugin, handed to :class:`~gateway.jobs.hooks.Hooks` first,
and its ``get_actor_types`` hook names the built-in types. Other plugins add
theirs through the same hook.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from gateway.jobs.actors import ActorType
from gateway.jobs.hooks import hookimpl
from gateway.store.integrity.scrub import ScrubActor
from gateway.store.migration.actor import MigrateActor
from gateway.store.online_import import ImportActor
from gateway.store.replication.batch import BatchActor
from gateway.store.replication.copy import CopyActor
from gateway.store.replication.director_actor import DirectorActor

__all__ = ["ACTOR_TYPES", "get_actor_types"]

ACTOR_TYPES: Final[Mapping[str, type[ActorType]]] = {
    "import": ImportActor,
    "scrub": ScrubActor,
    "migrate": MigrateActor,
    "replication_director": DirectorActor,
    "replication_batch": BatchActor,
    "replication_copy": CopyActor,
}


@hookimpl
def get_actor_types() -> Sequence[type[ActorType]]:
    """The store's actor types (the ``get_actor_types`` hook of :mod:`gateway.jobs.hooks`)."""
    return list(ACTOR_TYPES.values())
