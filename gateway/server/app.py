"""create_app(config) -> aiohttp Application.

The app owns the shared clients (one ``aiohttp.ClientSession``, Redis pools)
through ``cleanup_ctx``, the collections built from the config and the routes
of every API. Every handler is registered through :func:`api_route`, which
renders :class:`~gateway.errors.GatewayError` and HTTP errors as
``{"message": ..., "errors": {...}}`` and puts the CORS headers on every
answer; a last catch-all route answers unknown paths (404), methods a path
does not take (405) and CORS preflights (204), and the request targets no
path can match (``CONNECT host:443``: 405; ``OPTIONS *``: 204 with ``Allow``),
which aiohttp's router would answer with its plain-text 404 (:class:`_Router`).
This replaces aiohttp
middlewares and the ``on_response_prepare`` signal, which would wrap every
request in three more coroutines and a signal dispatch (about a tenth of the
CPU of a one-line lookup, measured with callgrind).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from time import perf_counter
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.web_urldispatcher import UrlMappingMatchInfo
from yarl import URL

from gateway.access.policy import ACL_USER
from gateway.api.common import ERRORS_HEADER, client_left, errors_header_value
from gateway.api.cors import add_cors_headers, preflight
from gateway.api.keys import CLIENTS, COLLECTIONS, CONFIG, JOBS, SHOW_PATHS, TIMEMAP_PAGE_SIZE
from gateway.api.metrics import CLIENT_LEFT_STATUS, METRICS, Metrics, RouteStats, register_collector
from gateway.api.readiness import READINESS, Readiness
from gateway.cdx.cdxj import canonical_urlkey
from gateway.clients import SharedClients
from gateway.config import GatewayConfig
from gateway.errors import GatewayError
from gateway.index.collection import Collection
from gateway.server.collection_builder import build_collection, build_collections
from gateway.server.logfilter import install as install_bad_request_log_filter

if TYPE_CHECKING:
    from gateway.access.tokens import AuthSettings
    from gateway.server.jobs_service import JobsService
    from gateway.server.recorder_link import RecorderLink

__all__ = ["SHOW_PATHS_ENV", "build_collection", "build_collections", "create_app"]

logger = logging.getLogger(__name__)

#: The environment variable that makes the HTML pages show filesystem paths.
SHOW_PATHS_ENV = "GATEWAY_SHOW_PATHS"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def api_route(handler: Handler, stats: RouteStats) -> Handler:
    """``handler`` with the API's error rendering, CORS headers and request counters.

    :class:`~gateway.errors.GatewayError` becomes its JSON answer (logged
    when it is a 5xx), an HTTP error (``web.HTTPException`` of status 400 or
    more) a JSON ``{"message": ...}`` keeping its ``Allow`` header: never a
    traceback. A client that left before the answer started (a
    ``ConnectionError`` on its own connection) is logged at DEBUG
    (:func:`~gateway.api.common.client_left`), never as an error. Every
    answer returned unsent gets the CORS headers (a handler that streams
    adds them before ``prepare``). Each answer is counted in ``stats``
    (:mod:`gateway.api.metrics`) with its status and the handler's time; a
    handler cancelled because its client left, or whose client left before
    the answer started, counts as 499.
    """

    @functools.wraps(handler)
    async def route(request: web.Request) -> web.StreamResponse:
        start = perf_counter()
        try:
            response = await handler(request)
        except ConnectionError:
            transport = request.transport
            if transport is not None and not transport.is_closing():
                raise  # not the client's connection: a bug, answered 500 and logged
            # The client left before the answer started (e.g. during the lookup).
            client_left(request)
            stats.observe(CLIENT_LEFT_STATUS, perf_counter() - start)
            return web.Response(status=CLIENT_LEFT_STATUS, reason="Client Closed Request")
        except GatewayError as exc:
            if exc.status >= 500:
                logger.error(
                    "%s %s -> %d: %s", request.method, _shown(request.path_qs), exc.status, exc
                )
            headers = {ERRORS_HEADER: errors_header_value(exc.errors)} if exc.errors else {}
            if exc.retry_after_s is not None:
                headers["Retry-After"] = str(math.ceil(exc.retry_after_s))
            response = web.json_response(
                exc.to_json(), status=exc.status, headers=headers, dumps=_dumps
            )
        except web.HTTPException as exc:
            if exc.status < 400:
                add_cors_headers(exc)
                stats.observe(exc.status, perf_counter() - start)
                raise
            target = request.path or request.raw_path  # CONNECT's is an authority
            response = web.json_response(
                {"message": f"{exc.reason}: {request.method} {_shown(target)}"},
                status=exc.status,
                headers={k: v for k, v in exc.headers.items() if k.lower() == "allow"},
            )
        except asyncio.CancelledError:
            stats.observe(CLIENT_LEFT_STATUS, perf_counter() - start)
            raise
        except Exception:
            stats.observe(500, perf_counter() - start)  # aiohttp answers 500 and logs it
            raise
        if not response.prepared:
            add_cors_headers(response)
        stats.observe(response.status, perf_counter() - start)
        return response

    return route


def acl_user_route(handler: Handler, header: str) -> Handler:
    """``handler`` with the user of per-user access rules taken from ``header``
    (the operator's ``access.user_header``, set by a proxy in front), in
    :data:`~gateway.access.policy.ACL_USER` for the request's task. Without
    that setting no route is wrapped: no client-sent header names a user."""

    @functools.wraps(handler)
    async def route(request: web.Request) -> web.StreamResponse:
        ACL_USER.set(request.headers.get(header) or None)
        return await handler(request)

    return route


class _Router(web.UrlDispatcher):
    """aiohttp's router, with two differences.

    A request whose target is not a path (``CONNECT host:443``, whose target
    aiohttp reads as an authority with an empty path, and ``OPTIONS *``)
    goes to the catch-all route (:attr:`unrouted`), whose wrapper answers in
    JSON with the CORS headers, instead of aiohttp's plain-text 404.

    A path of two segments ``/{coll}/NAME`` is looked up in a dict by
    ``(NAME, method)`` (:attr:`by_name`, made by :meth:`index_collection_routes`)
    instead of trying the routes' regular expressions in turn: aiohttp's
    router walks the path's prefixes and, under ``/``, tries every
    ``/{coll}/...`` route in registration order, one coroutine and one
    regular expression each, and ``/{coll}/resource`` is the fourth. The
    dict gives the route aiohttp would: the first route registered for
    ``/{coll}/NAME`` and the method (``tests/test_router.py`` checks every
    route against aiohttp's own resolution). What it does not take (a
    collection name with ``%``, ``{`` or ``}``, other paths, a method the
    route does not take: 405 or another route) goes to aiohttp's walk.
    """

    unrouted: web.AbstractRoute | None = None
    #: Every method some route takes, for ``Allow`` where no path is named.
    methods: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        #: ``/{coll}/NAME`` routes by ``(NAME, method)``.
        self.by_name: dict[tuple[str, str], web.AbstractRoute] = {}

    def resolve(self, request: web.Request) -> Coroutine[Any, Any, UrlMappingMatchInfo]:
        path = request.rel_url.path_safe
        if path[:1] != "/":
            if self.unrouted is not None:
                return _matched({"path": request.raw_path}, self.unrouted)
            return super().resolve(request)
        coll, slash, name = path[1:].partition("/")
        if slash:
            route = self.by_name.get((name, request.method))
            if route is not None and coll and _plain_name(coll):
                return _matched({"coll": coll}, route)
        return super().resolve(request)

    def index_collection_routes(self) -> None:
        """Fill :attr:`by_name` from the routes registered so far (call once, after them).

        Each route of a path ``/{coll}/NAME`` (NAME literal) is taken for its
        method when aiohttp's own resolution of ``/c/NAME`` gives that route.
        """
        table: dict[tuple[str, str], web.AbstractRoute] = {}
        for resource in self.resources():
            prefix, _slash, name = resource.canonical.rpartition("/")
            if prefix != "/{coll}" or not name or "{" in name or "}" in name:
                continue
            for route in resource:
                key = (name, route.method)
                if key not in table and self._aiohttp_route(f"/c/{name}", route.method) is route:
                    table[key] = route
        self.by_name = table

    def _aiohttp_route(self, path: str, method: str) -> web.AbstractRoute | None:
        """The route aiohttp's router gives ``method path`` (resolved at once, no I/O)."""
        probe = SimpleNamespace(rel_url=URL(path), method=method)
        resolving = super().resolve(probe)  # type: ignore[arg-type]
        try:
            resolving.send(None)
        except StopIteration as done:
            match_info = done.value
            return None if match_info.http_exception is not None else match_info.route
        resolving.close()
        return None


def _plain_name(coll: str) -> bool:
    """True when aiohttp would match ``coll`` as ``{coll}`` as it is (no
    unquoting: ``%``; no braces, which ``[^{}/]+`` refuses)."""
    return "%" not in coll and "{" not in coll and "}" not in coll


async def _matched(match: dict[str, str], route: web.AbstractRoute) -> UrlMappingMatchInfo:
    return UrlMappingMatchInfo(match, route)


def _new_app() -> web.Application:
    """An application on a :class:`_Router` (aiohttp deprecates passing a router,
    and still takes one: it is how a router is replaced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return web.Application(router=_Router())


async def _no_route(request: web.Request) -> web.StreamResponse:
    """The catch-all route: a preflight of a known path (204), a method the
    path does not take (405 with ``Allow``), or an unknown path (404).

    A target that is no path (:class:`_Router`): ``CONNECT`` is a 405 (the
    gateway is no proxy), ``OPTIONS *`` a 204 naming the server's methods in
    ``Allow`` (RFC 9110 §9.3.7), anything else a 404.
    """
    if not request.rel_url.path_safe.startswith("/"):
        router = request.app.router
        taken = router.methods if isinstance(router, _Router) else ("GET", "HEAD")
        if request.method == "CONNECT":
            raise web.HTTPMethodNotAllowed(request.method, taken)
        if request.method == "OPTIONS" and request.raw_path == "*":
            return web.Response(status=204, headers={"Allow": ",".join(taken)})
        raise web.HTTPNotFound()
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not request.match_info.route.resource:
            _match, methods = await resource.resolve(request)
            allowed |= methods
    if allowed and request.method == "OPTIONS":
        return preflight(request, allowed)
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, sorted(allowed))
    raise web.HTTPNotFound()


def _shown(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters: client input is never echoed at length."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _dumps(obj: object) -> str:
    return json.dumps(obj, indent=None)


def create_app(
    config: GatewayConfig,
    *,
    collections: dict[str, Collection] | None = None,
    clients: SharedClients | None = None,
    jobs: JobsService | None = None,
    recorder: RecorderLink | None = None,
    show_paths: bool | None = None,
) -> web.Application:
    """The gateway application for ``config``.

    ``collections``/``clients``/``jobs`` may be passed when already built
    (``gateway serve`` builds them before binding so config errors stop
    start-up). The jobs service starts after the store opens (its recovery
    done) and stops before it closes. ``recorder``: this process is one of
    ``gateway serve --workers N`` serving a config that records; only
    worker 0 opens the store as its writer, the others open it shared and
    forward the recording collections' requests to worker 0
    (:mod:`gateway.server.recorder_link`). ``show_paths``: the HTML pages show
    the server's filesystem paths (:data:`~gateway.api.keys.SHOW_PATHS`);
    None: when the environment has ``GATEWAY_SHOW_PATHS`` set to ``1``,
    ``true`` or ``yes``.
    """
    routes = _api_routes()
    install_bad_request_log_filter()  # aiohttp's own 400s: one INFO line, no traceback
    clients = clients or SharedClients(config.client)
    if collections is None:
        collections = build_collections(config, clients)
    canonical_urlkey("http://example.com/")  # imports surt now, not during the first request
    if jobs is None:
        from gateway.server.jobs_service import JobsService

        jobs = JobsService.from_config(config, role="serve")
    recording = frozenset(name for name, coll in config.collections.items() if coll.records)
    app = _shared_state(config, collections, clients, jobs)
    if show_paths is None:
        show_paths = os.environ.get(SHOW_PATHS_ENV, "").strip().lower() in ("1", "true", "yes")
    app[SHOW_PATHS] = show_paths
    app.cleanup_ctx.append(_lifecycle(config, jobs, recording, recorder))
    _add_routes(app, routes, recorder, recording)
    return app


def _api_routes() -> list[tuple[str, str, Handler]]:
    """Every API route as (method, path, handler), in the order they are matched."""
    # The API's handlers are imported here, not with this module: building
    # collections (gateway check-config) needs none of them.
    from gateway.api.client_replay import (
        replay_frame_handler,
        replay_page_handler,
        wabac_file_handler,
    )
    from gateway.api.export import export_handler
    from gateway.api.index import ia_cdx_handler, index_handler
    from gateway.api.jobs import jobs_handler
    from gateway.api.memento import (
        memento_handler,
        timegate_handler,
        timemap_handler,
        wayback_timegate_handler,
    )
    from gateway.api.modes import list_sources_handler, modes_handler
    from gateway.api.openapi import openapi_handler
    from gateway.api.pages import collection_page
    from gateway.api.resource import POST_ROUTES, resource_handler
    from gateway.api.status import (
        health_handler,
        metrics_handler,
        ready_handler,
        root_handler,
        status_handler,
    )

    return [
        ("GET", "/", root_handler),
        ("GET", "/_status", status_handler),
        ("GET", "/_health", health_handler),
        ("GET", "/_ready", ready_handler),
        ("GET", "/_jobs", jobs_handler),
        ("GET", "/metrics", metrics_handler),
        ("GET", "/openapi.json", openapi_handler),
        ("GET", r"/_wabac/{name:sw\.js|LICENSE\.md}", wabac_file_handler),  # docs/replay.md
        ("GET", "/{coll}/index", index_handler),
        ("GET", "/{coll}/cdx", ia_cdx_handler),  # IA CDX server dialect
        ("GET", "/{coll}/resource", resource_handler),  # GET also answers HEAD
        ("GET", "/{coll}/export.wacz", export_handler),  # a query's captures as a WACZ
        *POST_ROUTES,  # post-request API and direct POSTs
        # Memento (RFC 7089); GET also answers HEAD
        # ({url} takes any character, an encoded newline too: [\s\S], not .)
        ("GET", r"/{coll}/timegate/{url:[\s\S]*}", timegate_handler),
        ("GET", r"/{coll}/timemap/{format}/{url:[\s\S]*}", timemap_handler),
        ("GET", r"/{coll}/{timestamp:\d{1,14}}id_/{url:[\s\S]*}", memento_handler),
        # Replay in the browser (wabac.js; pywb's replay URLs)
        ("GET", r"/{coll}/{timestamp:\d{1,14}}mp_/{url:[\s\S]*}", replay_frame_handler),
        ("GET", r"/{coll}/{timestamp:\d{1,14}}/{url:[\s\S]*}", replay_page_handler),
        ("GET", r"/{coll}/{url:[hH][tT][tT][pP][sS]?:[\s\S]*}", wayback_timegate_handler),
        # pywb warcserver's mode listing and source list
        ("GET", "/{coll}", modes_handler),
        ("POST", "/{coll}/postreq", modes_handler),
        ("GET", "/{coll}/list_sources", list_sources_handler),
        # Last of the API (its requests come first): the page for people.
        ("GET", "/{coll}/", collection_page),
    ]


def _shared_state(
    config: GatewayConfig,
    collections: dict[str, Collection],
    clients: SharedClients,
    jobs: JobsService,
) -> web.Application:
    """A new app holding the shared state under its keys (config, clients, metrics...)."""
    app = _new_app()
    app[CONFIG] = config
    app[CLIENTS] = clients
    app[COLLECTIONS] = collections
    app[TIMEMAP_PAGE_SIZE] = config.memento.timemap_page_size
    app[METRICS] = Metrics()
    app[READINESS] = Readiness()
    app[JOBS] = jobs
    register_collector(app, jobs.collector())  # the jobs' families in /metrics
    return app


def _lifecycle(
    config: GatewayConfig,
    service: JobsService,
    recording: frozenset[str],
    recorder: RecorderLink | None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The app's cleanup context: clients, store and jobs started, then stopped in reverse."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        readiness = app[READINESS]
        shared = app[CLIENTS]
        await shared.start()
        if config.uses_store and shared.store is None:
            readiness.block("store", "the snapshot store is opening (recovery)")
            from gateway.store import Store

            writes = bool(recording) and (recorder is None or recorder.records)
            shared.store = await Store.open(config.store, mode="write" if writes else "shared")
            from gateway.store.integrity.status import CachedSafety, StoreCollector

            replicas = shared.store.replicas
            shared.store_safety = CachedSafety(replicas, config.jobs.scrub_interval_days)
            register_collector(app, StoreCollector(replicas, shared.store_safety))
            readiness.clear("store")
        readiness.clear("startup")
        try:
            await service.start()
            yield
        finally:
            readiness.block("shutdown", "the app is stopping")
            await service.stop()
            for collection in app[COLLECTIONS].values():
                await collection.aclose()
            if shared.store is not None:
                await shared.store.close()
                shared.store = None
            await shared.close()

    return lifecycle


def _guarded(handler: Handler, path: str, auth: AuthSettings, recording: frozenset[str]) -> Handler:
    """``handler`` of route ``path`` with the token check ``auth`` asks for
    (:mod:`gateway.api.auth`); applied outermost, before a lookup, a live
    fetch, a write or a forward to the recording worker.

    Every ``/{coll}/...`` route checks ``record`` for the collections that
    record; each operator route in ``auth.require_admin`` checks ``admin``.
    """
    from gateway.api.auth import require_scope

    if auth.require_record and recording and "{coll}" in path:
        return require_scope(handler, auth, "record", collections=recording)
    if path in auth.require_admin:
        return require_scope(handler, auth, "admin")
    return handler


def _add_routes(
    app: web.Application,
    routes: list[tuple[str, str, Handler]],
    recorder: RecorderLink | None,
    recording: frozenset[str],
) -> None:
    """Register ``routes`` through :func:`api_route` (forwarding if need be, behind the
    token checks of :func:`_guarded`), then the catch-all."""
    metrics = app[METRICS]
    if recorder is not None and not recorder.records and recording:
        from gateway.server.recorder_link import forwarding

        forward = forwarding(app, recorder, recording)
        routes = [(m, p, forward(h) if "{coll}" in p else h) for m, p, h in routes]
    user_header = app[CONFIG].access.user_header
    if user_header is not None:
        routes = [(m, p, acl_user_route(h, user_header)) for m, p, h in routes]
    for method, path, handler in routes:
        stats = metrics.route(method, path)
        handler = _guarded(handler, path, app[CONFIG].auth, recording)
        if method == "GET":
            added = app.router.add_get(path, api_route(handler, stats))  # and HEAD
        else:
            added = app.router.add_route(method, path, api_route(handler, stats))
        if added.resource is not None:
            stats.route = added.resource.canonical  # "/{coll}/{timestamp}id_/{url}"
    # Last: what no route takes (any character, an encoded newline too).
    unrouted = metrics.route("*", "unrouted")
    catch_all = app.router.add_route("*", r"/{path:[\s\S]*}", api_route(_no_route, unrouted))
    router = app.router
    if isinstance(router, _Router):
        router.unrouted = catch_all
        taken = {route.method for route in router.routes() if route.method != "*"}
        router.methods = tuple(sorted(taken | {"OPTIONS"}))
        router.index_collection_routes()
