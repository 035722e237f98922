"""archive gateway: pywb's distributed archive schema served over aiohttp."""

__version__ = "0.1.0"
