"""The ``gateway`` command's sub-commands that are more than a few lines, one module per group.

- :mod:`~gateway.commands.store`        ``gateway store add | history | check | repair | migrate``
- :mod:`~gateway.commands.replication`  ``gateway store replicate | copies | scrub``
- :mod:`~gateway.commands.jobs`         ``gateway worker`` and ``gateway jobs``
- :mod:`~gateway.commands.args`         option value types shared by the commands
"""
