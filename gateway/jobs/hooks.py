"""Plugin hooks (pluggy) with the names of ArchiveBox's "States & Lifecycles" spec.

A plugin is a module (or any object) with functions marked
``@gateway.jobs.hooks.hookimpl`` and named after a hook below. It is named in
``jobs.plugins`` of collections.yaml, as an entry point of the group
``archive_gateway.jobs`` (``[project.entry-points."archive_gateway.jobs"]``
in its pyproject.toml) or as an importable module name (as pytest's ``-p``).

Hooks are called synchronously on the event loop, in this order::

    on_orchestrator_startup(orchestrator)
      on_orchestrator_tick_started(orchestrator, queues)     every loop
        on_actor_startup(actor)                              per actor task
          on_actor_tick_start(actor, obj)                    per claimed object
            on_transition_<type>_<from>_to_<to>_start(actor, obj)
            on_transition_<type>_<from>_to_<to>_end(actor, obj, won)
            on_actor_tick_exception(actor, obj, error)       a failed tick
          on_actor_tick_end(actor, obj)
        on_actor_shutdown(actor)                             the queue is empty
      on_orchestrator_idle(orchestrator)                     no queue has due objects
    on_orchestrator_shutdown(orchestrator)

``queues`` is ``{actor type name: due objects (counted up to 1000)}``. The
per-transition hooks exist for every declared transition of every object
type (:meth:`ObjectType.all_transitions <gateway.jobs.model.ObjectType.all_transitions>`).
``get_actor_types()`` lets a plugin add actor types (each a subclass of
:class:`~gateway.jobs.actors.ActorType`).

A hook must return quickly (it runs on the loop that serves requests). An
exception raised by a hook implementation is logged (ERROR, with the plugin
and hook) and does not stop the work it reports on.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

import pluggy

from gateway.errors import ConfigError
from gateway.jobs.model import ObjectType

if TYPE_CHECKING:
    from gateway.jobs.actors import ActorType
    from gateway.jobs.db import JobObject
    from gateway.jobs.orchestrator import Orchestrator

__all__ = [
    "ENTRY_POINT_GROUP",
    "PROJECT",
    "Hooks",
    "JobsHookSpecs",
    "hookimpl",
    "hookspec",
    "load_plugins",
]

logger = logging.getLogger(__name__)

#: pluggy's project name, the marker of our hooks.
PROJECT: Final = "archive_gateway"
#: The entry-point group plugins are found in.
ENTRY_POINT_GROUP: Final = "archive_gateway.jobs"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class JobsHookSpecs:
    """The lifecycle hooks (the per-transition ones are made by :meth:`Hooks.add_object_types`)."""

    @hookspec
    def get_actor_types(self) -> Sequence[type[ActorType]]:  # type: ignore[empty-body]
        """Actor types this plugin adds (their object types get tables and hooks)."""

    @hookspec
    def on_orchestrator_startup(self, orchestrator: Orchestrator) -> None:
        """The orchestrator starts (before its first loop)."""

    @hookspec
    def on_orchestrator_tick_started(
        self, orchestrator: Orchestrator, queues: dict[str, int]
    ) -> None:
        """A loop starts: ``queues`` maps each actor type to its due objects."""

    @hookspec
    def on_orchestrator_idle(self, orchestrator: Orchestrator) -> None:
        """No queue has due objects and no actor runs; the orchestrator sleeps."""

    @hookspec
    def on_orchestrator_shutdown(self, orchestrator: Orchestrator) -> None:
        """The orchestrator stopped; every actor has finished."""

    @hookspec
    def on_actor_startup(self, actor: ActorType) -> None:
        """An actor task starts."""

    @hookspec
    def on_actor_tick_start(self, actor: ActorType, obj: JobObject[Any]) -> None:
        """``actor`` claimed ``obj`` and starts its tick."""

    @hookspec
    def on_actor_tick_end(self, actor: ActorType, obj: JobObject[Any]) -> None:
        """The tick of ``obj`` ended (whatever its outcome)."""

    @hookspec
    def on_actor_tick_exception(
        self, actor: ActorType, obj: JobObject[Any], error: BaseException
    ) -> None:
        """The tick of ``obj`` raised ``error`` or overran its limit (``TimeoutError``)."""

    @hookspec
    def on_actor_shutdown(self, actor: ActorType) -> None:
        """An actor task ends (its queue is empty, or the orchestrator stops)."""


def _transition_spec(name: str, doc: str) -> Any:
    def spec(actor: ActorType, obj: JobObject[Any]) -> None:
        """Placeholder; pluggy reads the name, arguments and docstring."""

    spec.__name__ = name
    spec.__qualname__ = name
    spec.__doc__ = doc
    return spec


def _end_spec(name: str, doc: str) -> Any:
    def spec(actor: ActorType, obj: JobObject[Any], won: bool) -> None:
        """Placeholder; pluggy reads the name, arguments and docstring."""

    spec.__name__ = name
    spec.__qualname__ = name
    spec.__doc__ = doc
    return spec


class Hooks:
    """The plugin manager and safe calls to it.

    :meth:`call` runs one hook and logs (instead of raising) what an
    implementation raises; :meth:`transition_start`/:meth:`transition_end`
    call the per-transition hooks by name.
    """

    def __init__(self, plugins: Iterable[object] = ()) -> None:
        self.manager = pluggy.PluginManager(PROJECT)
        self.manager.add_hookspecs(JobsHookSpecs)
        self._known: set[str] = set()
        #: Hook name -> its caller, or None when no plugin implements it
        #: (plugins are registered here only, so the answer does not change).
        self._callers: dict[str, Any] = {}
        for plugin in plugins:
            self.manager.register(plugin)

    def add_object_types(self, object_types: Iterable[ObjectType[Any]]) -> None:
        """Declare ``on_transition_<name>_start``/``_end`` for every transition of these types."""
        specs: dict[str, Any] = {}
        for object_type in object_types:
            for transition in object_type.all_transitions():
                if transition.name in self._known:
                    continue
                self._known.add(transition.name)
                what = f"{object_type.name} {transition.source} -> {transition.target}"
                start = f"on_transition_{transition.name}_start"
                end = f"on_transition_{transition.name}_end"
                specs[start] = hookspec(_transition_spec(start, f"Before the write of {what}."))
                specs[end] = hookspec(
                    _end_spec(end, f"After the write of {what}; ``won``: it took effect.")
                )
        if specs:
            self.manager.add_hookspecs(type("TransitionHookSpecs", (), specs))

    def check(self) -> None:
        """Raise :class:`ValueError` naming any hook implementation that matches no hook."""
        try:
            self.manager.check_pending()
        except pluggy.PluginValidationError as exc:
            raise ValueError(str(exc)) from exc

    def actor_types(self) -> list[type[ActorType]]:
        """Every actor type the plugins add, in registration order."""
        found: list[type[ActorType]] = []
        for batch in reversed(self.manager.hook.get_actor_types()):
            found.extend(batch)
        return found

    def call(self, hook: str, **kwargs: Any) -> None:
        """Call the hook ``hook``; an implementation's exception is logged, not raised."""
        caller = self._callers.get(hook)
        if caller is None:
            if hook in self._callers:
                return  # known to have no implementation
            found = getattr(self.manager.hook, hook)
            caller = self._callers[hook] = found if found.get_hookimpls() else None
            if caller is None:
                return
        try:
            caller(**kwargs)
        except Exception:
            logger.exception("jobs: a plugin's %s hook failed", hook)

    def transition_start(self, name: str, **kwargs: Any) -> None:
        self.call(f"on_transition_{name}_start", **kwargs)

    def transition_end(self, name: str, **kwargs: Any) -> None:
        self.call(f"on_transition_{name}_end", **kwargs)


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def load_plugins(names: Sequence[str], *, path: str = "jobs.plugins") -> list[object]:
    """Resolve plugin names: an entry point of :data:`ENTRY_POINT_GROUP`, else a module.

    Raises :class:`~gateway.errors.ConfigError` at ``path[i]`` for a name
    that is neither, or whose import fails.
    """
    entry_points = _entry_points()
    plugins: list[object] = []
    for index, name in enumerate(names):
        where = f"{path}[{index}]"
        try:
            if name in entry_points:
                plugins.append(entry_points[name].load())
                continue
            plugins.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name is not None and not name.startswith(exc.name):
                raise ConfigError(where, f"plugin {name!r} failed to import: {exc}") from exc
            known = ", ".join(sorted(entry_points)) or "none installed"
            raise ConfigError(
                where,
                f"no plugin {name!r}: expected an entry point of group {ENTRY_POINT_GROUP}"
                f" ({known}) or an importable module",
            ) from exc
        except Exception as exc:
            raise ConfigError(
                where, f"plugin {name!r} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
    return plugins
