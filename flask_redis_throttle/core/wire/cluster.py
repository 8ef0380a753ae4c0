"""The lean path on a Redis Cluster: a request's script calls grouped by
node, one send to each node involved and one parse per reply, routed by
redis-py's own slot map; what the path cannot do is handed back to
redis-py, call by call.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import redis
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    TryAgainError,
)

from ..codec import Call, Part, hash_tag
from . import connection
from .connection import (
    KEY_CACHE_SIZE,
    STORAGE_ERRORS,
    LeanClient,
    Replay,
    _bulk,
    _bulks,
    _drop,
    _pool_fits,
    _read_reply,
    pack_evalsha,
)

__all__ = ["Fanout", "LeanCluster", "key_slot_of"]

#: Error replies that say the node did not run the command, and that
#: redis-py's cluster client knows how to follow: a redirect (ASK; MOVED is
#: an AskError too), a slot in the middle of a migration (TRYAGAIN), a
#: cluster or master that is down for now (CLUSTERDOWN, MASTERDOWN), a node
#: loading its data (LOADING).
_NOT_RUN = (AskError, TryAgainError, ClusterDownError, BusyLoadingError)


#: The attribute, on a node's pool, of its :class:`LeanClient`.
_LEAN = "_flask_redis_throttle_lean"
_MADE = threading.Lock()


def lean_of(pool: Any) -> LeanClient:
    """The :class:`LeanClient` that keeps the connections of one node's
    ``pool`` between calls (see :class:`LeanClient`): kept on the pool
    itself, since node pools come and go with the slot map."""
    lean: LeanClient | None = pool.__dict__.get(_LEAN)
    if lean is None:
        with _MADE:
            lean = pool.__dict__.get(_LEAN) or LeanClient(pool)
            setattr(pool, _LEAN, lean)
    return lean


@lru_cache(maxsize=KEY_CACHE_SIZE)
def _tag_slot(tag: str) -> int:
    return int(key_slot(tag.encode()))


@lru_cache(maxsize=KEY_CACHE_SIZE)
def key_slot_of(key: str) -> int:
    """The cluster slot of ``key``: worked out once per hash tag (an
    identity's keys all share one), and kept, like each key's, in a bounded
    LRU, so that a returning identity's keys cost one lookup each."""
    return _tag_slot(hash_tag(key))


@dataclass(frozen=True, slots=True)
class Fanout:
    """A cluster request's calls, one per hash tag, worked out once for its keys and
    arguments and kept by the storage: the same identities come back under
    the same plan request after request, and nothing here depends on more.
    Each call's node is not part of it: it is read from the slot map on
    every request (see :meth:`LeanCluster.run`).

    :param parts: the request split by hash tag (see :func:`~flask_redis_throttle.core.codec.split`).
    :param calls: each part's keys and arguments, as sent.
    :param slots: each call's cluster slot.
    :param packed: each call's ``EVALSHA``, pre-encoded, by script SHA
        (see :meth:`packed_for`).
    :param scripts: the script the calls take, by their strategies: the
        storage's to fill (see :meth:`~flask_redis_throttle.core.storage.Storage.evaluate_split`).
    """

    parts: list[Part]
    calls: list[Call]
    slots: list[int]
    packed: dict[str, list[bytes] | None]
    scripts: dict[frozenset[str], Any] = field(default_factory=dict)

    @classmethod
    def of(cls, parts: list[Part]) -> Fanout:
        """The fan-out of ``parts``."""
        calls: list[Call] = [(part.keys, part.args) for part in parts]
        return cls(parts, calls, [key_slot_of(part.keys[0]) for part in parts], {}, {})

    def packed_for(self, sha: str) -> list[bytes] | None:
        """Each call's ``EVALSHA`` of the script ``sha``, encoded on first use;
        None when some argument cannot be encoded (the calls then fail as
        they would unencoded)."""
        try:
            return self.packed[sha]
        except KeyError:
            pass
        packed: list[bytes] | None
        try:
            packed = [pack_evalsha(sha, *call) for call in self.calls]
        except redis.DataError:
            packed = None
        self.packed[sha] = packed
        return packed


class LeanCluster:
    """Script calls to a Redis Cluster as one send per node and one parse per
    call, on connections taken from redis-py's per-node pools.

    Each call's node comes from redis-py's own slot map
    (``client.nodes_manager.slots_cache``), read on every request, so a map
    that redis-py refreshes (after a MOVED it followed, a failed node, a
    failover) is the one the next request uses. The calls for every node
    involved are written before any reply is read, so that the round trips
    overlap, as in redis-py's cluster pipeline.

    A call is handed to redis-py's cluster client, aimed at the node it was
    meant for, only when that node certainly did not run it: no connection
    could be had, the send failed, or the node answered with an error that
    means it did not run the command (:data:`_NOT_RUN`: MOVED, ASK,
    TRYAGAIN, CLUSTERDOWN, LOADING). redis-py then reconnects, follows the
    redirect and refreshes its slot map. A timeout or a lost connection
    after the send is never replayed, since the script may have run: the
    call fails, and the slot map is refreshed as redis-py would.

    :param client: a :class:`redis.cluster.RedisCluster`, or a stand-in that
        builds one on first use (see :class:`~flask_redis_throttle.core.clients.LazyClient`).
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        #: Whether this path fits the cluster's node connections (see
        #: :func:`lean_client`); None until the cluster client exists.
        self._fits: bool | None = None
        #: The cluster client's ``nodes_manager``, which keeps the slot map.
        self._manager: Any = None

    def fits(self) -> bool:
        """Whether the node clients are ones this path can speak for: redis-py's
        own connection classes, RESP2, no client-side cache, and hiredis.

        :raises redis.RedisError: when the cluster client cannot be built.
        """
        if self._fits is None:
            manager = self._manager = getattr(self.client, "nodes_manager", None)
            nodes = list(getattr(manager, "nodes_cache", {}).values())
            self._fits = (
                connection.hiredis is not None
                and bool(nodes)
                and _pool_fits(self.client.get_redis_connection(nodes[0]).connection_pool)
            )
        return self._fits

    def nodes_of(self, keys: Sequence[str], uncovered: str = "") -> list[str]:
        """The nodes (``host:port``) that serve ``keys`` in redis-py's slot
        map, each once, in the keys' order; ``uncovered`` for keys no node
        serves. Nothing is sent. Call :meth:`fits` first."""
        owners_of = self._manager.slots_cache.get
        names: dict[str, None] = {}
        for key in keys:
            owners = owners_of(key_slot_of(key))
            names[owners[0].name if owners else uncovered] = None
        return list(names)

    def evalsha(self, sha: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run the script ``sha`` once on the node of ``keys``; return its
        reply or raise its error, as redis-py's ``evalsha`` would.

        :raises Replay: when this path does not fit the cluster's clients,
            so the call is to be made through redis-py's normal path.
        """
        if not self.fits():
            raise Replay("the lean path does not fit this cluster client")
        results, _ = self.run("EVALSHA", sha, [(keys, args)])
        if isinstance(results[0], Exception):
            raise results[0]
        return results[0]

    def run(
        self,
        command: str,
        script: str,
        calls: Sequence[Call],
        packed: Sequence[bytes] | None = None,
        slots: Sequence[int] | None = None,
        uncovered: str = "",
    ) -> tuple[list[Any], list[str]]:
        """Send ``command`` (EVALSHA with a script's SHA, or EVAL with its
        source) once per call; each call's keys must share one slot.

        ``packed`` and ``slots``, when given, are each call's bytes and slot,
        worked out once for a request's fan-out and kept (see
        :meth:`~flask_redis_throttle.core.storage.Storage._fanout`); the
        node of each slot is still read from the slot map on every call.

        :returns: each call's reply or exception, and the node (``host:port``)
            each call was sent to (``uncovered`` when its slot has no node
            in the map; redis-py was then asked to find one).
        """
        owners_of = self._manager.slots_cache.get
        count = len(calls)
        replies: list[Any] = [None] * count
        names = [uncovered] * count
        # Each node's name, node, calls and bytes.
        groups: dict[str, tuple[Any, list[int], list[bytes]]] = {}
        handover: list[tuple[int, Any]] = []
        for i in range(count):
            owners = owners_of(key_slot_of(calls[i][0][0]) if slots is None else slots[i])
            if not owners:
                handover.append((i, None))
                continue
            node = owners[0]
            name = names[i] = node.name
            # Everything is encoded before anything is sent: a value that
            # cannot be encoded fails the request before any node counts it.
            data = _pack(command, script, *calls[i]) if packed is None else packed[i]
            group = groups.get(name)
            if group is None:
                groups[name] = (node, [i], [data])
            else:
                group[1].append(i)
                group[2].append(data)
        taken: list[tuple[Any, list[int], list[bytes], LeanClient, Any]] = []
        sent: list[tuple[Any, LeanClient, Any, list[int]]] = []
        try:
            for node, indices, payload in groups.values():
                pool = lean_of((node.redis_connection or self.client.get_redis_connection(node)).connection_pool)
                conn = self._take(pool, False, node, indices, replies, handover)
                if conn is not None:
                    taken.append((node, indices, payload, pool, conn))
            self._poll(taken, replies, handover)
            while taken:
                node, indices, payload, pool, conn = taken.pop(0)
                if conn is None:
                    continue
                try:
                    # One write per node, whatever its count of calls.
                    conn.send_packed_command(payload if len(payload) == 1 else [b"".join(payload)])
                except (redis.ConnectionError, redis.TimeoutError):
                    pool.discard(conn)  # send_packed_command disconnected it
                    handover += [(i, node) for i in indices]
                    continue
                except BaseException:
                    pool.discard(conn)
                    raise
                sent.append((node, pool, conn, indices))
            while sent:
                node, pool, conn, indices = sent[0]
                read = self._read_node(node, conn, indices, replies, handover)
                del sent[0]
                # Kept for the next request only if every reply was read.
                pool.checkin(conn) if read else pool.discard(conn)
        finally:
            for _, pool, conn, _ in sent:
                # Written to but not read whole: its replies would be read
                # by the next command on it.
                _drop(conn)
                pool.discard(conn)
            for _, _, _, pool, conn in taken:
                if conn is not None:  # taken, never written to
                    pool.checkin(conn)
        for i, target in handover:
            replies[i] = self._redis_py(command, script, calls[i], target)
        return replies, names

    def _take(
        self, pool: LeanClient, poll: bool, node: Any, indices: list[int], replies: list[Any], handover: list[Any]
    ) -> Any:
        """A connection to ``node`` from its ``pool`` (see :meth:`LeanClient.checkout`),
        or None when none could be had: its calls, ``indices``, then fail
        or are handed to redis-py."""
        try:
            return pool.checkout(poll)
        except redis.TimeoutError as error:
            # A node that does not answer its handshake in time would make
            # redis-py wait as long again: it fails here.
            self._node_failed(node, refresh=False)
            for i in indices:
                replies[i] = error
        except redis.ConnectionError:
            handover += [(i, node) for i in indices]
        return None

    def _poll(self, taken: list[Any], replies: list[Any], handover: list[Any]) -> None:
        """Poll the kept connections in ``taken`` that their pools poll (see
        :meth:`LeanClient._polls`), all in one system call rather than one
        per node; one with something to read (the server closed it while
        it sat idle) goes back to its pool, and another is taken in its
        place (None when none can be had)."""
        socks = [conn._sock for _, _, _, pool, conn in taken if conn._sock is not None and pool._polls(conn)]
        if not socks:
            return
        ready = select.select(socks, (), (), 0)[0]
        if not ready:  # as on nearly every request
            return
        for n, (node, indices, payload, pool, conn) in enumerate(taken):
            if conn._sock in ready:
                pool.pool.release(conn)
                # No longer this call's, whatever the next checkout raises.
                taken[n] = (node, indices, payload, pool, None)
                taken[n] = (node, indices, payload, pool, self._take(pool, True, node, indices, replies, handover))

    def _read_node(self, node: Any, conn: Any, indices: list[int], replies: list[Any], handover: list[Any]) -> bool:
        """Read the replies of ``indices``' calls from ``conn``, in order;
        whether all were read."""
        for n, i in enumerate(indices):
            try:
                reply = _read_reply(conn)
            except (redis.ConnectionError, redis.TimeoutError) as error:
                # Sent, and perhaps run: never replayed.
                conn.disconnect()
                self._node_failed(node, refresh=not isinstance(error, redis.TimeoutError))
                for j in indices[n:]:
                    replies[j] = error
                return False
            if isinstance(reply, connection.hiredis.ReplyError):
                reply = conn._parser.parse_error(str(reply))
                if isinstance(reply, _NOT_RUN):
                    handover.append((i, node))
                    continue
            replies[i] = reply
        return True

    def _node_failed(self, node: Any, refresh: bool) -> None:
        """What redis-py's cluster client does when a node's connection fails
        or times out: drop the node's idle connections, try it last, and,
        with ``refresh``, refresh the slot map (which finds a promoted
        replica). A node that timed out is not refreshed from: the refresh
        may ask that very node, and the request would wait a second
        timeout for it (a dead node's next request refreshes the map)."""
        manager = self.client.nodes_manager
        pool = getattr(node.redis_connection, "connection_pool", None)
        if pool is not None:
            with pool._lock:
                pool.update_active_connections_for_reconnect()
                pool.disconnect_free_connections()
        manager.move_node_to_end_of_cached_nodes(node.name)
        if refresh:
            # When no node answers, the next request's call fails on its own.
            with suppress(*STORAGE_ERRORS):
                manager.initialize(last_failed_node_name=node.name)

    def _redis_py(self, command: str, script: str, call: Call, node: Any) -> Any:
        """Make a call that did not run through redis-py's cluster client:
        aimed at ``node``, so that redis-py follows a redirect from it but
        does not replay a timeout; or, when the slot has no node in the map,
        wherever redis-py finds one."""
        keys, args = call
        target = {} if node is None else {"target_nodes": node}
        try:
            return self.client.execute_command(command, script, len(keys), *keys, *args, **target)
        except STORAGE_ERRORS as error:
            return error


def _pack(command: str, script: str, keys: Sequence[str], args: Sequence[Any]) -> bytes:
    """The RESP bytes of ``command script len(keys) *keys *args``, for
    EVALSHA (pre-encoded: see :func:`pack_evalsha`) or EVAL (rare: only
    after NOSCRIPT)."""
    if command == "EVALSHA":
        return pack_evalsha(script, keys, args)
    keys, args = tuple(keys), tuple(args)
    head = b"*%d\r\n%b%b%b" % (3 + len(keys) + len(args), _bulk(command), _bulk(script), _bulk(len(keys)))
    return b"".join((head, _bulks(keys, ()), _bulks(args, tuple(map(type, args)))))
