"""Collections built from their config: each step's index sources, loaders and recorder.

:func:`build_collections` turns the ``collections:`` of a
:class:`~gateway.config.GatewayConfig` into :class:`~gateway.index.collection.Collection`
objects (pywb warcserver's ``init_sources``). It imports only the source,
resolver and loader types the config names (the registries are lazy) and no
web framework: ``gateway serve`` builds collections with it before creating
the app, ``gateway check-config`` to print them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.access.policy import AccessPolicy
from gateway.access.rules import AclFileError
from gateway.clients import SharedClients
from gateway.config import CollectionConfig, GatewayConfig
from gateway.errors import ConfigError
from gateway.index.collection import Collection, Step
from gateway.index.group import IndexGroup
from gateway.loaders.base import ResourceLoader
from gateway.loaders.resolvers import RESOLVER_TYPES
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig
from gateway.sources import SOURCE_TYPES
from gateway.sources.base import IndexSource

if TYPE_CHECKING:
    from gateway.server.recording import Recorder

__all__ = ["build_collection", "build_collections"]


def build_collection(config: CollectionConfig, clients: SharedClients) -> Collection:
    """Turn one collection's config into steps of sources and loaders.

    Raises :class:`ConfigError` (with the YAML path) when a source or
    resolver rejects its settings, e.g. an index path that does not exist,
    or when an access rule file does not parse (its path and line).
    """
    access: AccessPolicy | None = None
    if config.access.enabled:
        try:
            access = AccessPolicy.load(config.access)
        except AclFileError as exc:
            raise ConfigError(f"{config.access.path}.acl_paths", str(exc)) from exc
    steps = []
    for step_config in config.steps:
        members: list[IndexSource] = []
        for member_name, spec in step_config.members:
            factory = SOURCE_TYPES[spec.type]
            try:
                members.append(factory.from_config(spec.config, name=member_name, clients=clients))
            except ValueError as exc:
                raise ConfigError(spec.path, str(exc)) from exc
        resolvers = []
        for resolver_spec in step_config.resolvers:
            resolver_factory = RESOLVER_TYPES[resolver_spec.type]
            try:
                resolvers.append(
                    resolver_factory.from_config(resolver_spec.config, clients=clients)
                )
            except ValueError as exc:
                raise ConfigError(resolver_spec.path, str(exc)) from exc
        # Members' own loaders first: a remote CDX capture may carry the
        # archive's filename and offset, which the step's WARC prefixes lack.
        loaders: list[ResourceLoader] = [
            loader for member in members for loader in member.resource_loaders()
        ]
        if resolvers:
            warc_config = WarcLoaderConfig(
                resolvers=tuple(spec.config for spec in step_config.resolvers)
            )
            loaders.append(WarcLoader(warc_config, clients=clients, resolvers=resolvers))
        group = IndexGroup(members, timeout_s=step_config.timeout_s, access=access)
        recording = frozenset(
            name for name, spec in step_config.members if spec.record or step_config.record
        )
        recorder: Recorder | None = None
        if recording:
            from gateway.server.recording import Recorder

            recorder = Recorder(
                clients=clients,
                members=recording,
                dedup=config.dedup,
                skip_if_updated_days=step_config.skip_if_updated_days,
            )
        steps.append(Step(step_config.name, group, loaders, recorder, step_config.load_timeout_s))
    return Collection(
        config.name, steps, is_sequence=config.is_sequence, fuzzy=config.fuzzy, access=access
    )


def build_collections(config: GatewayConfig, clients: SharedClients) -> dict[str, Collection]:
    """Every collection of ``config``, in file order; raises :class:`ConfigError`."""
    return {name: build_collection(coll, clients) for name, coll in config.collections.items()}
