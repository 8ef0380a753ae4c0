"""The embedded ``memory://`` store: a keyspace in this process, on which
our scripts run in Lua 5.1, the Lua Redis runs, so a test sees what
production does (see :ref:`embedded-store`). Modules, bottom up:
``values``, ``keyspace``, ``lua``, ``client``.

This package imports Redis (for its exceptions) but not Flask.
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
