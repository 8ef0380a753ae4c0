"""Where counters live: a Redis client, and the rate limit scripts on it.

``memory://`` is the embedded default: a keyspace in this process, running
the same Lua scripts through lupa (Lua 5.1, as in Redis); see
:mod:`flask_redis_throttle.core.embedded`. Its counts
are per process, so every worker of a multi-process server counts on its own.
How clients are built from URLs is in :mod:`flask_redis_throttle.core.clients`.

This module imports Redis, and needs no Flask app.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ClusterError, NoScriptError, SlotNotCoveredError, TryAgainError

from .bounded import remember
from .clients import DEFAULT_CLIENT_OPTIONS, client_from_url, redact
from .codec import Args, Call, hash_tag, settle, split
from .local import folder_of
from .scripts import Script, ScriptCache
from .wire import KEY_CACHE_SIZE, STORAGE_ERRORS, LeanClient, LeanCluster, Replay, lean_client, pack_around, pack_time
from .wire.cluster import Fanout

__all__ = ["DEFAULT_CLIENT_OPTIONS", "STORAGE_ERRORS", "Call", "NodeFailure", "Storage"]

logger = logging.getLogger("flask_redis_throttle")

#: A call packed but for its time: the bytes before it and after it.
Packed = tuple[bytes, bytes]

#: The node, in :meth:`Storage.nodes`, of keys whose slot no node serves.
UNCOVERED = "uncovered slots"

#: How long, in seconds, a cluster script call whose keys a slot migration
#: has split between two nodes is sent again (see :func:`_split_by_migration`),
#: and the pause before each new try.
MIGRATION_PATIENCE = 1.0
MIGRATION_PAUSE = 0.05


class NodeFailure(redis.RedisError):
    """Some of the pipelined calls of a cluster request failed, and others
    were answered: what those counted stays counted.

    :param error: the first failed call's error, also the ``__cause__``.
    :param nodes: the nodes (``host:port``) of the calls that failed, so
        that only their circuit breakers count the failure; none when the
        failure cannot be put down to any of the calls' nodes.
    :param answered: the nodes that answered their calls; empty when nothing
        was sent.
    """

    def __init__(self, error: Exception, nodes: frozenset[str], answered: frozenset[str] = frozenset()) -> None:
        super().__init__(str(error))
        self.nodes = nodes
        self.answered = answered
        self.__cause__ = error


class Storage:
    """A Redis client and the rate limit scripts registered on it.

    :param client: a :class:`redis.Redis`, a :class:`redis.cluster.RedisCluster`,
        or the embedded ``memory://`` one; the one an app already has will do (see
        ``RateLimit(app, redis=client)``).
    :param url: where it points, for messages and logs; without its password.
    :param cluster: whether it is a Redis Cluster client; by default, whether
        it is a :class:`~redis.cluster.RedisCluster`.
    """

    def __init__(self, client: Any, url: str = "", cluster: bool | None = None) -> None:
        self.client = client
        self.url = url or _describe(client)
        #: Whether keys with different hash tags may live on different nodes,
        #: so that one script cannot touch them all.
        self.cluster = isinstance(client, RedisCluster) if cluster is None else cluster
        #: The scripts sent, and which one each call takes.
        self.scripts = ScriptCache()
        #: A cluster request's calls, by its keys and arguments (see :meth:`_fanout`).
        self._fanouts: dict[tuple[Any, ...], Fanout] = {}
        #: A single node's calls on the lean path, by strategies, cost, plan
        #: and keys: the script each takes, and its bytes (see :meth:`_prepared`).
        self._calls: dict[tuple[Any, ...], tuple[Script, Packed]] = {}
        #: The lean path of the calls (see :mod:`flask_redis_throttle.core.wire`):
        #: a single node's, or a cluster's (which checks on first use whether
        #: it fits the nodes' clients); None for clients it does not fit.
        self.lean: LeanClient | LeanCluster | None = LeanCluster(client) if self.cluster else lean_client(client)

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, Any] | None = None, instance_path: str | None = None) -> Storage:
        """Build a storage from ``RATELIMIT_STORAGE_URL`` and ``RATELIMIT_STORAGE_OPTIONS``
        (see :func:`~flask_redis_throttle.core.clients.client_from_url`); ``local://``
        keeps its server in ``instance_path`` unless the URL names a folder.

        Nothing is sent to Redis here: a Redis that is down at start-up must
        not stop the app from starting.

        :raises ConfigurationError: for an unknown scheme, a malformed URL or
            an unknown client option.
        """
        client = client_from_url(url, options, instance_path)
        where = redact(url)
        if url.startswith("local:") and folder_of(client) is None:
            where = f"memory:// (the fallback of {where}: no server binary)"
        return cls(client, where, cluster=url.startswith("redis+cluster:"))

    def close(self) -> None:
        """Close the client's connections (a cluster client's to every node,
        a Sentinel client's to the sentinels too).

        Apps need not call this; it is for tests and scripts that make many
        storages. A cluster client that was never used is not built for it.
        """
        # Only a built redis.Redis is asked for its pool: a cluster client
        # that was never used would be built by the question.
        if isinstance(self.client, redis.Redis):
            manager = getattr(self.client.connection_pool, "sentinel_manager", None)
            for sentinel in getattr(manager, "sentinels", ()):
                sentinel.close()
        close = getattr(self.client, "close", None)
        if close is not None:
            close()

    def nodes(self, keys: Sequence[str]) -> list[str]:
        """The cluster nodes (``host:port``) that hold ``keys``, from the
        client's slot map: nothing is sent, one lookup per hash tag. Keys
        whose slot no node serves (its master failed, and no replica took
        over yet) are on :data:`UNCOVERED`.

        :raises redis.RedisError: when the cluster client cannot be built
            (no start-up node answers).
        """
        lean = self.lean
        if isinstance(lean, LeanCluster) and lean.fits():
            return lean.nodes_of(keys, UNCOVERED)
        return list(dict.fromkeys(self._node_of(key) for key in {hash_tag(key): key for key in keys}.values()))

    def _node_of(self, key: str) -> str:
        try:
            node = self.client.get_node_from_key(key)
        except SlotNotCoveredError:
            return UNCOVERED
        return f"{node.host}:{node.port}"

    def evaluate(self, strategies: frozenset[str], keys: Sequence[str], args: Args) -> list[int]:
        """Run the script for ``strategies`` once: one EVALSHA, one round trip.

        When Redis answers NOSCRIPT (after ``SCRIPT FLUSH``, a restart or a
        failover), the call is made again with EVAL and the script's source,
        which cannot meet NOSCRIPT and caches the script for the next calls
        (rather than loading it and calling EVALSHA again, which would race
        with any further flush and leave the request undecided).

        On a cluster, keys with different hash tags (different identities)
        may live on different nodes, so the script is run once per hash tag,
        pipelined, and the replies merged into the one a single call would
        give (see :meth:`evaluate_split`).

        :raises KeyError: for an unknown strategy.
        :raises redis.RedisError: when Redis cannot answer (or a
            :class:`~redis.exceptions.RedisClusterException`: see
            :data:`STORAGE_ERRORS`).
        """
        if self.cluster:
            return self.evaluate_split(strategies, keys, args)
        return self._evaluate_one(strategies, keys, args)

    def _evaluate_one(self, strategies: frozenset[str], keys: Sequence[str], args: Args) -> list[int]:
        script, packed = self._prepared(strategies, keys, args)
        result: list[int]
        try:
            lean = self.lean
            if lean is not None:
                try:
                    if packed is None:  # a cluster's call to one node, or a cost that is not an int
                        return lean.evalsha(script.sha, keys, args)  # type: ignore[no-any-return]
                    return lean.send(packed[0] + pack_time(args[0]) + packed[1])  # type: ignore[union-attr,no-any-return]
                except Replay:
                    # The connection failed where redis-py would retry: its
                    # normal path reconnects (and finds a new Sentinel master).
                    pass
            # EVALSHA straight on the client, rather than through a Script
            # object, which imports, type-checks and copies its arguments on
            # every call.
            result = self.client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            result = self.client.eval(script.text, len(keys), *keys, *args)
        except STORAGE_ERRORS as error:
            if not (self.cluster and _split_by_migration(error)):
                raise
            # The script did not run: wait for the keys to be together again.
            [result] = self.evaluate_many(strategies, [(keys, args)])
        return result

    def _prepared(self, strategies: frozenset[str], keys: Sequence[str], args: Args) -> tuple[Script, Packed | None]:
        """The script a call takes and, on a single node's lean path, the call packed but for its
        time (see :func:`~flask_redis_throttle.core.wire.pack_around`): kept by strategies, cost,
        plan and keys, which each request of the same identities to an endpoint brings again."""
        lean, cost = self.lean, args[1]
        if not isinstance(lean, LeanClient) or type(cost) is not int:  # 1.0 equals 1, and would share its bytes
            return self.scripts.choose(strategies, ((keys, args),)), None
        found = (strategies, cost, args[2], *keys)
        known = self._calls.get(found)
        if known is None:
            script = self.scripts.choose(strategies, ((keys, args),))
            known = remember(self._calls, found, (script, pack_around(script.sha, keys, args)), KEY_CACHE_SIZE)
        return known

    def evaluate_split(self, strategies: frozenset[str], keys: Sequence[str], args: Args) -> list[int]:
        """Run the script once per hash tag, pipelined: one round trip to
        each node involved. Then reply as one call over all the keys would:
        admitted only if every call admitted, with the same deciding layer.
        If some calls admitted the request and another refused it, the
        admitting ones are refunded at once, at the time each decided at.

        Each call is atomic on its own; the whole is not (see :ref:`cluster`).
        """
        fanout = self._fanout(keys, args)
        parts, known = fanout.parts, fanout.scripts
        if len(parts) == 1:
            return self._evaluate_one(strategies, keys, args)
        # The flat script fits the parts if and only if it fits the whole; kept with the fan-out.
        script = known[strategies] = known.get(strategies) or self.scripts.choose(strategies, [(keys, args)])
        replies = self.evaluate_many(strategies, fanout.calls, (script, fanout))
        reply, refunds = settle(parts, replies)
        if refunds:
            try:
                self.evaluate_many(strategies, refunds)
            except STORAGE_ERRORS as error:
                logger.warning("could not refund a request refused on another node (%s): %d lost", error, args[1])
        return reply

    def _fanout(self, keys: Sequence[str], args: Args) -> Fanout:
        """The :class:`~flask_redis_throttle.core.wire.cluster.Fanout` of a
        cluster request: worked out on its keys' first request under its
        plan, and kept (the time is ``""`` outside tests). The arguments'
        types are in the key: ``1``, ``1.0`` and ``True`` are equal but not
        encoded alike. Past :data:`~flask_redis_throttle.core.wire.KEY_CACHE_SIZE`,
        all are forgotten at once: a flood of identities cannot grow the process."""
        key = (tuple(keys), tuple(args), tuple(map(type, args)))
        fanout = self._fanouts.get(key)
        if fanout is None:
            fanout = remember(self._fanouts, key, Fanout.of(split(keys, args)), KEY_CACHE_SIZE)
        return fanout

    def evaluate_many(
        self, strategies: frozenset[str], calls: Sequence[Call], known: tuple[Script, Fanout] | None = None
    ) -> list[list[int]]:
        """Run the script once per call, pipelined: on a cluster, one round
        trip to each node that holds some of the keys.

        The calls are independent: each is atomic on its own node, not with
        the others. The calls that met NOSCRIPT are made again with EVAL and
        the script's source, pipelined (see :meth:`evaluate`); the others are
        not repeated, so no identity is counted twice.

        :raises NodeFailure: when some calls were answered and others not
            (those that were answered took effect).
        :raises redis.RedisError: when no call was answered.

        ``known``, when given, is the script and the fan-out of ``calls`` (see :meth:`_fanout`).
        """
        script, fanout = (self.scripts.choose(strategies, calls), None) if known is None else known
        try:
            results, nodes = self._send(calls, "EVALSHA", script.sha, fanout)
        except (redis.ConnectionError, redis.TimeoutError) as error:
            # A cluster pipeline that cannot connect to one of its nodes
            # fails as a whole, before sending anything.
            if not self.cluster or len(calls) < 2:
                raise
            raise self._blame(error, calls) from error
        for result in results:
            if isinstance(result, Exception):
                break
        else:
            # Every call answered: nothing to make again or to wait for.
            return results
        missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if missing:
            again, _ = self._send([calls[i] for i in missing], "EVAL", script.text)
            for i, result in zip(missing, again, strict=True):
                results[i] = result
        if self.cluster:
            self._wait_for_migrations(calls, results, script)
        failed = [i for i, result in enumerate(results) if isinstance(result, Exception)]
        if failed:
            first: Exception = results[failed[0]]
            if len(failed) == len(calls) or not self.cluster:
                raise first
            nodes = nodes or [self._node_of(call[0][0]) for call in calls]
            failing = frozenset(nodes[i] for i in failed)
            raise NodeFailure(first, failing, frozenset(nodes) - failing)
        return results

    def _send(
        self, calls: Sequence[Call], command: str, script: str, fanout: Fanout | None = None
    ) -> tuple[list[Any], list[str] | None]:
        """Each call's reply or error: on a cluster's lean path when it fits,
        with the node each call was sent to; else in one redis-py pipeline.
        ``fanout``, given with ``EVALSHA`` only, holds the calls' slots and
        their ``EVALSHA`` of ``script``, encoded once."""
        lean = self.lean
        if isinstance(lean, LeanCluster) and lean.fits():
            packed, slots = (None, None) if fanout is None else (fanout.packed_for(script), fanout.slots)
            return lean.run(command, script, calls, packed, slots, UNCOVERED)
        return self._pipelined(calls, command, script), None

    def _wait_for_migrations(self, calls: Sequence[Call], results: list[Any], script: Script) -> None:
        """Send again the calls whose keys a slot migration split (see
        :func:`_split_by_migration`), putting their new replies or errors in
        ``results``: after :data:`MIGRATION_PAUSE`, again and again for up
        to :data:`MIGRATION_PATIENCE` seconds. The script did not run, so
        nothing is counted twice; the keys are together again once the
        migration has moved them all. A request waits that long at most,
        then fails as after any other error.

        The calls go through redis-py's pipeline, with the script's source
        (``EVAL``): the node that imports the slot may never have run it.
        """
        deadline = time.monotonic() + MIGRATION_PATIENCE
        waiting = [i for i, result in enumerate(results) if _split_by_migration(result)]
        while waiting and time.monotonic() < deadline:
            time.sleep(MIGRATION_PAUSE)
            again = self._pipelined([calls[i] for i in waiting], "EVAL", script.text)
            for i, result in zip(waiting, again, strict=True):
                results[i] = result
            waiting = [i for i in waiting if _split_by_migration(results[i])]

    def _blame(self, error: Exception, calls: Sequence[Call]) -> Exception:
        """The error to raise for a cluster pipeline that could not connect
        to some node, so nothing was sent: a :class:`NodeFailure` naming the
        nodes that cannot be connected to now, so that only their breakers
        count it. A node with an idle pooled connection costs nothing to
        check; only the failing ones cost a connection attempt, bounded by
        the connect timeout, and only until their breakers open."""
        failed: set[str] = set()
        nodes = self.nodes([keys[0] for keys, _ in calls])
        for name in nodes:
            node = self.client.get_node(node_name=name)
            try:
                if node is None:
                    raise redis.ConnectionError(f"no node serves {name}")
                pool = self.client.get_redis_connection(node).connection_pool
                pool.release(pool.get_connection())
            except STORAGE_ERRORS:
                failed.add(name)
        if len(failed) == len(nodes):
            return error
        # None at all: the node that failed is no longer among the calls'
        # (another thread refreshed the slot map during a failover), so
        # none of their breakers should count it.
        return NodeFailure(error, frozenset(failed))

    def _pipelined(self, calls: Sequence[Call], command: str, script: str) -> list[Any]:
        """Send ``command`` (EVALSHA or EVAL) once per call in one pipeline;
        return each call's reply or error."""
        pipe = self.client.pipeline(transaction=False)
        for keys, args in calls:
            pipe.execute_command(command, script, len(keys), *keys, *args, **self._route(keys[0]))
        return pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    def _route(self, key: str) -> dict[str, Any]:
        """For a cluster pipeline, the node to send a script call on ``key``
        to. Without it, redis-py 8 asks the cluster's default node for the
        call's keys (``COMMAND GETKEYS``) before routing each call: a round
        trip more per call, to a node that may be down. A MOVED reply
        still reroutes the call."""
        if not self.cluster:
            return {}
        try:
            return {"target_nodes": self.client.get_node_from_key(key)}
        except SlotNotCoveredError:
            return {}


def _split_by_migration(error: object) -> bool:
    """Whether a cluster call failed because a slot migration has split its
    keys between two nodes. Each node then runs a script on keys of that
    slot only if it holds all of them, and answers ``TRYAGAIN`` (or ``ASK``
    to the other node, which answers ``TRYAGAIN``); redis-py tries again for
    about a tenth of a second, then gives up with ``TTL exhausted``. Either
    way the script did not run."""
    return isinstance(error, TryAgainError) or type(error) is ClusterError


def _describe(client: Any) -> str:
    """Where a client handed over by the app points, for messages."""
    try:
        kwargs = client.connection_pool.connection_kwargs
        return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"
    except AttributeError:
        return type(client).__name__
