"""The process: the app factory, the HTTP server, workers, recording and logs.

- :mod:`~gateway.server.app`                 ``create_app``: routes, shared clients, cleanup
- :mod:`~gateway.server.http_server`         the HTTP server: timeouts, raw UTF-8 targets
- :mod:`~gateway.server.connection_limits`   client connection limits: options, the cap
- :mod:`~gateway.server.workers`             ``gateway serve --workers N``
- :mod:`~gateway.server.recorder_link`       one worker records, the others forward to it
- :mod:`~gateway.server.recording`           ``Recorder``: served captures tee'd into the store
- :mod:`~gateway.server.collection_builder`  collections built from their config
- :mod:`~gateway.server.jobs_service`        ``JobsService``: the background work of one process
- :mod:`~gateway.commands.jobs`            ``gateway worker`` and ``gateway jobs``
- :mod:`~gateway.server.logs`, :mod:`~gateway.server.logfilter`,
  :mod:`~gateway.server.logrepeat`  logging (identical lines rate-limited)
"""
