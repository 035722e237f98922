"""Access control: who may use what the gateway serves.

- :mod:`gateway.access.tokens`: bearer tokens and their scopes (``record``,
  ``admin``), the ``auth:`` section of collections.yaml, and which routes
  require which scope (RFC 6750; ``docs/access-tokens.md``).
"""
