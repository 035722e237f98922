"""The built-in actor types, one line each (``ACTOR_TYPES``).

Plugins add theirs through the ``get_actor_types`` hook
(:mod:`gateway.jobs.hooks`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from gateway.jobs.actors import ActorType
from gateway.jobs.model import ObjectType
from gateway.store.migrate_actor import MigrateActor
from gateway.store.online_import import ImportActor
from gateway.store.replication_jobs import CopierActor, DirectorActor, ReplicationWorker
from gateway.store.scrub import ScrubActor

__all__ = ["ACTOR_TYPES", "builtin_object_types", "object_types_of"]

ACTOR_TYPES: Final[Mapping[str, type[ActorType]]] = {
    "import": ImportActor,
    "scrub": ScrubActor,
    "migrate": MigrateActor,
    "replication_director": DirectorActor,
    "replication_worker": ReplicationWorker,
    "replication_copier": CopierActor,
}


def object_types_of(actor_types: Iterable[type[ActorType]]) -> list[ObjectType]:
    """The object types of ``actor_types``, each once, in first-seen order."""
    seen: dict[str, ObjectType] = {}
    for actor_type in actor_types:
        object_type = actor_type.object_type
        known = seen.setdefault(object_type.name, object_type)
        if known != object_type:
            raise ValueError(f"two different object types are named {object_type.name!r}")
    return list(seen.values())


def builtin_object_types() -> list[ObjectType]:
    """The object types of the built-in actor types (their tables are the store's)."""
    return object_types_of(ACTOR_TYPES.values())
