"""The embedded ``memory://`` store: a small keyspace in this process, and
the rate limit scripts run on it by Lua 5.1, the Lua Redis runs, so that
what a test or a development server sees is what production does; each
``redis.call`` goes straight to a Python function on the keyspace. What it
implements, and how it is held to Redis, is in :ref:`embedded-store`.

This package imports Redis (for its exceptions) but not Flask.

The package's modules, bottom up: ``values`` (replies, errors, parsing, the
sorted set and stream types), ``keyspace`` (keys, expiry and the commands),
``lua`` (the Lua host) and ``client`` (:class:`EmbeddedRedis`).
"""

from __future__ import annotations

from .client import EmbeddedPipeline, EmbeddedRedis, encode
from .keyspace import COMMANDS, CURSORS, SWEEP, Keyspace
from .lua import LUAS, LuaHost, lua_host
from .values import CommandError, Status

__all__ = [
    "COMMANDS",
    "CURSORS",
    "LUAS",
    "SWEEP",
    "CommandError",
    "EmbeddedPipeline",
    "EmbeddedRedis",
    "Keyspace",
    "LuaHost",
    "Status",
    "encode",
    "lua_host",
]
