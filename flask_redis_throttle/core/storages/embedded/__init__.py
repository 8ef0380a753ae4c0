"""The embedded ``memory://`` store: a keyspace in this process, on which our scripts run in Lua 5.1, as in
Redis (see :ref:`embedded-store`). Modules, bottom up: ``values``, ``keyspace``, ``lua``, ``client``.

This package imports Redis (for its exceptions) but not Flask.
"""

from __future__ import annotations

from .client import EmbeddedRedis
from .keyspace import CURSORS, SWEEP
from .lua import LUAS, lua_host

__all__ = ["CURSORS", "LUAS", "SWEEP", "EmbeddedRedis", "lua_host"]
