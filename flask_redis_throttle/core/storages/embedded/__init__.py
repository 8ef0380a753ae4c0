"""The embedded ``memory://`` store: a small keyspace in this process, and
the rate limit scripts run on it by Lua 5.1, the Lua Redis runs.

A rate limiter on ``memory://`` runs the very scripts it runs on Redis, so
that what a test or a development server sees is what production does. It
needs neither a socket nor a command parser for that: each script is
compiled once per process (by its SHA1, as Redis caches it), and its
``redis.call`` goes straight to a Python function on the keyspace.

The keyspace implements exactly the commands the scripts and the package
send (strings with millisecond expiry, hashes, sorted sets, the stream of the
refusal log, ``TIME``, and ``SCAN``/``KEYS``/``DEL``/``TYPE`` for resets and
tests), with Redis's replies and errors, and Redis's conversions between Lua
and replies. ``tests/test_embedded.py`` holds each of them against a real
server.

* Atomic: one lock is held around every script and every command, as Redis
  runs one at a time.
* Expiry is lazy (a key past its deadline is gone the moment anything reads
  it) and swept: every call first deletes up to :data:`SWEEP` keys whose
  deadline has passed, oldest second first, so that a stream of identities
  that never come back cannot grow the process. No thread is started.

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
