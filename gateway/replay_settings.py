"""ReplaySettings: the ``replay:`` section of collections.yaml.

In-browser replay by wabac.js, a separate, optional component installed by
``scripts/install-wabac`` (docs/replay.md)::

    replay:
      client_side_replay: true      # pywb 2.9's key; default: on when wabac.js is installed
      wabac_dir: ./.wabac/          # where scripts/install-wabac put it (this default)

``config.py`` builds :class:`ReplaySettings` by field name (unknown keys are
rejected there); ``gateway serve`` and ``check-config`` turn the
:class:`ValueError` of :meth:`ReplaySettings.require_install` into a
:class:`~gateway.errors.ConfigError` naming ``replay``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from gateway.paths import absolute_path

__all__ = ["DEFAULT_WABAC_DIR", "SERVICE_WORKER", "ReplaySettings"]

#: The install directory when the config names none (relative to the working directory).
DEFAULT_WABAC_DIR: Final = "./.wabac/"
#: The file of an install that the gateway serves: wabac.js's service worker (its dist/sw.js).
SERVICE_WORKER: Final = "sw.js"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplaySettings:
    """Whether replay pages are served, and from which wabac.js install.

    - ``client_side_replay``: None (the default) turns replay on when
      ``wabac_dir`` holds an install (its ``sw.js``); true requires one, so a
      missing install stops ``gateway serve`` (:meth:`require_install`);
      false turns it off.
    - ``wabac_dir``: the install directory, made absolute at load
      (:func:`~gateway.paths.absolute_path`, pywb's rule: relative to the
      working directory).
    """

    client_side_replay: bool | None = None
    wabac_dir: str = DEFAULT_WABAC_DIR

    def __post_init__(self) -> None:
        object.__setattr__(self, "wabac_dir", absolute_path(self.wabac_dir))

    def require_install(self) -> None:
        """Raise :class:`ValueError` (naming ``wabac_dir`` and the command that
        installs wabac.js) when ``client_side_replay`` is true and there is no
        install. ``gateway serve`` and ``check-config`` call it: the commands
        that serve no pages (``export``, ``index``, ``store``...) run without one.
        """
        if self.client_side_replay and not self.installed:
            raise ValueError(
                f"wabac_dir {self.wabac_dir}: no wabac.js install there (no {SERVICE_WORKER}); "
                f"run scripts/install-wabac {self.wabac_dir}, or set client_side_replay: false"
            )

    @property
    def service_worker(self) -> str:
        """The absolute path of the installed service worker (it may not exist)."""
        return os.path.join(self.wabac_dir, SERVICE_WORKER)

    @property
    def installed(self) -> bool:
        """Whether the service worker is there (asks the filesystem on each call)."""
        return os.path.isfile(self.service_worker)

    @property
    def enabled(self) -> bool:
        """Whether replay pages are served: ``client_side_replay``, or when None,
        :attr:`installed` (asks the filesystem on each call)."""
        if self.client_side_replay is None:
            return self.installed
        return self.client_side_replay

    def describe(self) -> str:
        """One line for ``check-config`` and the start-up log: on or off, and why.

        >>> ReplaySettings(client_side_replay=False, wabac_dir="/srv/wabac").describe()
        'off (client_side_replay: false)'
        >>> ReplaySettings(wabac_dir="/nowhere/wabac").describe()
        'off: no wabac.js install in /nowhere/wabac (scripts/install-wabac installs one)'
        """
        if self.client_side_replay is False:
            return "off (client_side_replay: false)"
        if not self.installed:
            return (
                f"off: no wabac.js install in {self.wabac_dir} (scripts/install-wabac installs one)"
            )
        return f"on: wabac.js from {self.wabac_dir} (docs/replay.md)"
