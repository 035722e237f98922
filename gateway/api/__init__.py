"""HTTP handlers, one module per API; nothing outside this package sees aiohttp requests."""
