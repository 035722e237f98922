"""create_app(config) -> aiohttp Application.

The app owns the shared clients (one ``aiohttp.ClientSession``, Redis pools)
through ``cleanup_ctx``, the collections built from the config, the routes of
every API and the one error middleware that renders
:class:`~gateway.errors.GatewayError` as ``{"message": ..., "errors": {...}}``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from gateway.aggregate import Collection, IndexGroup, Step
from gateway.api.common import ERRORS_HEADER, errors_header_value
from gateway.api.cors import setup_cors
from gateway.api.index import ia_cdx_handler, index_handler
from gateway.api.memento import (
    memento_handler,
    timegate_handler,
    timemap_handler,
    wayback_timegate_handler,
)
from gateway.api.resource import add_post_routes, resource_handler
from gateway.api.status import health_handler, root_handler, status_handler
from gateway.clients import SharedClients
from gateway.config import CollectionConfig, GatewayConfig
from gateway.errors import ConfigError, GatewayError
from gateway.keys import CLIENTS, COLLECTIONS, CONFIG, TIMEMAP_PAGE_SIZE
from gateway.loaders.base import ResourceLoader
from gateway.loaders.resolvers import RESOLVER_TYPES
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig
from gateway.recording import Recorder
from gateway.sources import SOURCE_TYPES
from gateway.sources.base import IndexSource
from gateway.store import Store

__all__ = ["build_collection", "build_collections", "create_app"]

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_collection(config: CollectionConfig, clients: SharedClients) -> Collection:
    """Turn one collection's config into steps of sources and loaders.

    Raises :class:`ConfigError` (with the YAML path) when a source or
    resolver rejects its settings, e.g. an index path that does not exist.
    """
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
        group = IndexGroup(members, timeout_s=step_config.timeout_s)
        recording = frozenset(
            name for name, spec in step_config.members if spec.record or step_config.record
        )
        recorder = None
        if recording:
            recorder = Recorder(
                clients=clients,
                members=recording,
                dedup=config.dedup,
                skip_if_updated_days=step_config.skip_if_updated_days,
            )
        steps.append(Step(step_config.name, group, loaders, recorder, step_config.load_timeout_s))
    return Collection(config.name, steps, is_sequence=config.is_sequence)


def build_collections(config: GatewayConfig, clients: SharedClients) -> dict[str, Collection]:
    """Every collection of ``config``, in file order; raises :class:`ConfigError`."""
    return {name: build_collection(coll, clients) for name, coll in config.collections.items()}


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render GatewayError and HTTP errors as JSON; never leak a traceback."""
    try:
        return await handler(request)
    except GatewayError as exc:
        if exc.status >= 500:
            logger.error("%s %s -> %d: %s", request.method, request.path_qs, exc.status, exc)
        headers = {ERRORS_HEADER: errors_header_value(exc.errors)} if exc.errors else {}
        return web.json_response(exc.to_json(), status=exc.status, headers=headers, dumps=_dumps)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return web.json_response(
            {"message": f"{exc.reason}: {request.method} {request.path}"},
            status=exc.status,
            headers={k: v for k, v in exc.headers.items() if k.lower() == "allow"},
        )


def _dumps(obj: object) -> str:
    return json.dumps(obj, indent=None)


def create_app(
    config: GatewayConfig,
    *,
    collections: dict[str, Collection] | None = None,
    clients: SharedClients | None = None,
) -> web.Application:
    """The gateway application for ``config``.

    ``collections``/``clients`` may be passed when already built (``gateway
    serve`` builds them before binding so config errors stop start-up).
    """
    clients = clients or SharedClients(config.client)
    if collections is None:
        collections = build_collections(config, clients)
    app = web.Application(middlewares=[error_middleware])
    setup_cors(app)  # CORS headers on every response; OPTIONS preflights
    app[CONFIG] = config
    app[CLIENTS] = clients
    app[COLLECTIONS] = collections
    app[TIMEMAP_PAGE_SIZE] = config.memento.timemap_page_size

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        shared = app[CLIENTS]
        await shared.start()
        if config.uses_store and shared.store is None:
            shared.store = await Store.open(config.store)
        try:
            yield
        finally:
            for collection in app[COLLECTIONS].values():
                await collection.aclose()
            if shared.store is not None:
                await shared.store.close()
                shared.store = None
            await shared.close()

    app.cleanup_ctx.append(lifecycle)
    app.router.add_get("/", root_handler)
    app.router.add_get("/_status", status_handler)
    app.router.add_get("/_health", health_handler)
    app.router.add_get("/{coll}/index", index_handler)
    app.router.add_get("/{coll}/cdx", ia_cdx_handler)  # IA CDX server dialect
    app.router.add_get("/{coll}/resource", resource_handler)  # GET also answers HEAD
    add_post_routes(app.router)  # post-request API and direct POSTs
    # Memento (RFC 7089); GET also answers HEAD
    app.router.add_get("/{coll}/timegate/{url:.*}", timegate_handler)
    app.router.add_get("/{coll}/timemap/{format}/{url:.*}", timemap_handler)
    app.router.add_get(r"/{coll}/{timestamp:\d{1,14}}id_/{url:.*}", memento_handler)
    app.router.add_get("/{coll}/{url:[hH][tT][tT][pP][sS]?:.*}", wayback_timegate_handler)
    return app
