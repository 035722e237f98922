"""Access control: pywb's ``.aclj`` rules, ``default_access`` and embargo, one decision.

- :mod:`~gateway.access.rules`     ``.aclj`` lines, ``RuleSet`` (longest prefix by binary search)
- :mod:`~gateway.access.policy`    ``AccessPolicy`` (a collection's rules, reloaded on change)
                                   and ``AccessGate`` (the decision for one lookup's captures)
- :mod:`~gateway.access.settings`  the config's keys (``acl_paths``, ``default_access``,
                                   ``embargo``; ``access.user_header``)
- :mod:`~gateway.access.aclfile`   editing a rule file (``gateway acl``)
- :mod:`~gateway.access.timeutil`  padded timestamps, periods, wall-clock windows

Every index group of a collection passes its members' captures through the
policy's gate (:mod:`gateway.index.group`): see docs/access-control.md.
"""
