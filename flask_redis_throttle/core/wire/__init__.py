"""The lean client path: one script call as one send and one parse, on a
connection taken from redis-py's own pool.

redis-py's command path spends more CPU per call than the loopback round
trip it waits for: it packs every argument anew, wraps the call in its
retry and metrics layers and parses the reply through its generic parser.
A rate limiter sends the same command shape on every request, so this
module sends it as pre-encoded bytes instead:

* the ``EVALSHA <sha> <numkeys>`` head is encoded once per script and arity;
* each key and argument is encoded once and kept in a bounded LRU, since the
  same identities' keys and the same plan's arguments come back request
  after request;
* the connection comes from the client's pool through ``get_connection``,
  so redis-py still connects, authenticates, speaks TLS, follows Sentinel
  and checks the connection before use; after a call that read its reply
  whole, it is kept for the next call rather than released, which skips the
  pool's lock, metrics and socket poll (see
  :class:`~flask_redis_throttle.core.wire.connection.LeanClient`), and
  forgotten in a forked child, whose pool starts afresh;
* the reply is parsed by a hiredis reader kept on the connection, or by
  redis-py's own parser when hiredis is not installed.

What cannot be done here is handed back to redis-py's normal path, which
keeps its reconnect and :class:`~redis.retry.Retry` handling: see
:class:`Replay`. A client this path does not fit (RESP3, a single-connection
client, a connection class of its own, the embedded ``memory://`` store) never takes it: see
:func:`lean_client`.

This package imports Redis but not Flask.

The package's modules: ``connection`` (one connection: packing, sending,
reading) and ``cluster`` (a cluster's calls, one send per node).
"""

from __future__ import annotations

from .cluster import LeanCluster, key_slot_of
from .connection import (
    CONNECTIONS,
    KEEP,
    KEY_CACHE_SIZE,
    STORAGE_ERRORS,
    LeanClient,
    Replay,
    lean_client,
    pack_around,
    pack_evalsha,
    pack_time,
)

__all__ = [
    "CONNECTIONS",
    "KEEP",
    "KEY_CACHE_SIZE",
    "STORAGE_ERRORS",
    "LeanClient",
    "LeanCluster",
    "Replay",
    "key_slot_of",
    "lean_client",
    "pack_around",
    "pack_evalsha",
    "pack_time",
]
