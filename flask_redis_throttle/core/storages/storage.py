"""Where counters live: a Redis client, and the rate limit scripts on it
(``memory://``: :mod:`flask_redis_throttle.core.storages.embedded`; clients
built from URLs: :mod:`flask_redis_throttle.core.storages.clients`).

This module imports Redis, and needs no Flask app.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

from ..bounded import remember
from .calls import Call, Script
from .clients import client_from_url, redact, scheme_of
from .local import folder_of

__all__ = ["STORAGE_ERRORS", "NodeFailure", "NotSent", "Storage"]

logger = logging.getLogger("flask_redis_throttle")

#: What a client raises when Redis cannot answer: redis-py's errors, and the cluster client's own.
STORAGE_ERRORS = (redis.RedisError, RedisClusterException)

#: How many cluster keys' nodes, and requests' fan-outs, are kept: bounded against a flood of identities.
KEY_CACHE_SIZE = 8192

#: The node, in :meth:`Storage.nodes`, of keys whose slot no node serves.
UNCOVERED = "uncovered slots"

#: A cluster node's replies to a command it did not run: sent again through the cluster client.
NOT_RUN = (MovedError, AskError, TryAgainError, ClusterDownError)

#: How long, in seconds, a call a slot migration split is sent again, and the pause before each try.
MIGRATION_PATIENCE = 1.0
MIGRATION_PAUSE = 0.05


class NodeFailure(redis.RedisError):
    """Some pipelined calls of a cluster request failed, others were answered (and stay counted).

    :param error: the first failed call's error, also the ``__cause__``.
    :param nodes: the failed calls' nodes (``host:port``), whose breakers
        alone count the failure; none when no node is to blame.
    :param answered: the nodes that answered; empty when nothing was sent.
    """

    def __init__(self, error: Exception, nodes: frozenset[str], answered: frozenset[str] = frozenset()) -> None:
        super().__init__(str(error))
        self.nodes = nodes
        self.answered = answered
        self.__cause__ = error


class NotSent(redis.ConnectionError):
    """A script call that failed before any of it was sent, so it cannot have run (``__cause__``: the error)."""

    @classmethod
    def of(cls, error: Exception) -> NotSent:
        not_sent = cls(str(error))
        not_sent.__cause__ = error
        return not_sent


class Storage:
    """A Redis client, and the script calls sent on it (which: :class:`~.sending.Sender`).

    :param client: a :class:`redis.Redis`, a :class:`redis.cluster.RedisCluster`
        or the embedded ``memory://`` one; an app's own will do (``RateLimit(app, redis=client)``).
    :param url: where it points, for messages and logs; without its password.
    :param cluster: whether it is a Redis Cluster client; by default, if a :class:`~redis.cluster.RedisCluster`.
    """

    def __init__(self, client: Any, url: str = "", cluster: bool | None = None) -> None:
        self.client = client
        self.url = url or _describe(client)
        #: Whether keys of different hash tags may be on different nodes.
        self.cluster = isinstance(client, RedisCluster) if cluster is None else cluster
        #: A single node's kept connections; None unless :meth:`Connections.fit`.
        self.connections = Connections(client) if not self.cluster and Connections.fit(client) else None
        #: A cluster node's kept connections, by its client (see :meth:`_connections_of`).
        self._node_connections: dict[str, tuple[Any, Connections]] = {}
        #: A cluster key's node, and the slot map it was read from (see :meth:`_nodes_of`).
        self._routes: dict[str, Any] = {}
        self._slots: object = None
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, Any] | None = None, instance_path: str | None = None) -> Storage:
        """Build a storage from ``RATELIMIT_STORAGE_URL`` and ``RATELIMIT_STORAGE_OPTIONS`` (see
        :func:`~flask_redis_throttle.core.storages.clients.client_from_url`); ``local://`` keeps its server in
        ``instance_path`` unless the URL names a folder. Nothing is sent: a Redis down does not stop the app.

        :raises ConfigurationError: for an unknown scheme, a malformed URL or an unknown client option.
        """
        client = client_from_url(url, options, instance_path)
        scheme, where = scheme_of(url), redact(url)
        if scheme.name == "local" and folder_of(client) is None:
            where = f"memory:// (the fallback of {where}: no server binary)"
        return cls(client, where, cluster=scheme.cluster)

    def close(self) -> None:
        """Close the client's connections (a cluster's to every node, a Sentinel's sentinels too), for tests
        and scripts that make many storages; a cluster client never used is not built for it."""
        # Only a redis.Redis is asked for its pool: asking a LazyClient would build it.
        nodes = list(self._node_connections.values())  # at once: another thread may add one
        for connections in [self.connections, *(kept for _, kept in nodes)]:
            if connections is not None:
                connections.close()
        if isinstance(self.client, redis.Redis):
            manager = getattr(self.client.connection_pool, "sentinel_manager", None)
            for sentinel in getattr(manager, "sentinels", ()):
                sentinel.close()
        close = getattr(self.client, "close", None)
        if close is not None:
            close()

    def nodes(self, keys: Sequence[str]) -> list[str]:
        """The cluster nodes (``host:port``) that hold ``keys``, from the client's
        slot map, nothing sent; :data:`UNCOVERED` for keys whose slot no node serves.

        :raises redis.RedisError: when no start-up node answers to build the client.
        """
        return list(dict.fromkeys(UNCOVERED if node is None else node.name for node in self._nodes_of(keys)))

    def _nodes_of(self, keys: Iterable[str]) -> list[Any]:
        """Each key's node (None where no node serves its slot), from a cache of
        redis-py's slot map: see docs/architecture.rst (client-path-cluster)."""
        client = self.client
        slots = client.nodes_manager.slots_cache
        if slots is not self._slots:
            self._routes, self._slots = {}, slots
        routes = self._routes
        found = []
        for key in keys:
            node = routes.get(key)
            if node is None:
                with suppress(SlotNotCoveredError):
                    node = remember(routes, key, client.get_node_from_key(key), KEY_CACHE_SIZE)
            found.append(node)
        return found

    def evaluate_many(self, calls: Sequence[Call], script: Script) -> list[list[int]]:
        """Run ``script`` once per call, pipelined: on a cluster, one round trip to each node that holds some
        of the keys. Each call is atomic on its own node, not with the others; only those that met NOSCRIPT
        are made again, with EVAL, so no identity is counted twice.

        :raises NodeFailure: when some calls were answered (and took effect) and others not.
        :raises redis.RedisError: when no call was answered.
        """
        results, nodes = self._send(calls, "EVALSHA", script.sha)
        for result in results:
            if isinstance(result, Exception):
                break
        else:
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
            failing = frozenset(nodes[i] for i in failed)
            raise NodeFailure(first, failing, frozenset(nodes) - failing)
        return results

    def _send(self, calls: Sequence[Call], command: str, script: str) -> tuple[list[Any], list[str]]:
        """Send ``command`` (EVALSHA or EVAL) once per call: each call's reply or
        error, and on a cluster each call's node (or :data:`UNCOVERED`)."""
        if self.cluster:
            return self._send_to_nodes(calls, command, script)
        commands = [(command, script, len(keys), *keys, *args) for keys, args in calls]
        if self.connections is not None:
            return self.connections.exchange(commands), []
        return _run_on_node(self.client, commands), []

    def _send_to_nodes(self, calls: Sequence[Call], command: str, script: str) -> tuple[list[Any], list[str]]:
        """A cluster's calls, one command or pipeline per node on a kept connection, all sent before any reply is
        read; not redis-py's cluster pipeline, which sends timed-out calls again (docs/architecture.rst)."""
        client = self.client
        results: list[Any] = [None] * len(calls)
        names = [UNCOVERED] * len(calls)
        groups: dict[str, tuple[Any, list[int]]] = {}
        again: list[int] = []
        for i, node in enumerate(self._nodes_of([keys[0] for keys, _ in calls])):
            if node is None:
                again.append(i)
                continue
            names[i] = node.name
            groups.setdefault(node.name, (node, []))[1].append(i)
        sent: list[tuple[Connections, Any, list[int]]] = []
        broken = False
        try:
            for node, indices in groups.values():
                connections = self._connections_of(node)
                commands = [(command, script, len(calls[i][0]), *calls[i][0], *calls[i][1]) for i in indices]
                sent.append((connections, connections.send(commands), indices))
            while sent:
                connections, connection, indices = sent.pop(0)
                if isinstance(connection, Exception):
                    replies = [connection] * len(indices)
                else:
                    replies = connections.receive(connection, len(indices))
                for i, reply in zip(indices, replies, strict=True):
                    if isinstance(reply, NOT_RUN):
                        again.append(i)
                    else:
                        results[i] = reply
                        # A timed-out node is not asked for the map: the request would wait twice.
                        broken = broken or isinstance(reply, redis.ConnectionError)
        finally:
            # Only after an interrupted read (a cancelled request): unread replies go with their connections.
            for connections, connection, _ in sent:
                if not isinstance(connection, Exception):
                    connections.drop(connection)
        if broken or again:
            # redis-py mends its slot map on this path (MOVED) or the next: forget its routes.
            self._routes = {}
        if broken:
            self._refresh()
        for i in again:
            keys, args = calls[i]
            try:
                results[i] = client.execute_command(command, script, len(keys), *keys, *args)
            except STORAGE_ERRORS as error:
                results[i] = error
        return results, names

    def _connections_of(self, node: Any) -> Connections:
        """A node client's kept connections, made under a lock so that no thread's are lost."""
        client = self.client.get_redis_connection(node)
        known = self._node_connections.get(node.name)
        if known is None or known[0] is not client:
            with self._lock:
                known = self._node_connections.get(node.name)
                if known is None or known[0] is not client:
                    known = self._node_connections[node.name] = (client, Connections(client))
        return known[1]

    def _refresh(self) -> None:
        """Have redis-py read the slot map again; if no node answers, the next request fails."""
        with suppress(*STORAGE_ERRORS):
            self.client.nodes_manager.initialize()

    def _wait_for_migrations(self, calls: Sequence[Call], results: list[Any], script: Script) -> None:
        """Send the calls a slot migration split (they did not run) again, with ``EVAL`` for
        the importing node, every :data:`MIGRATION_PAUSE` for :data:`MIGRATION_PATIENCE` s."""
        deadline = time.monotonic() + MIGRATION_PATIENCE
        waiting = [i for i, result in enumerate(results) if _split_by_migration(result)]
        while waiting and time.monotonic() < deadline:
            time.sleep(MIGRATION_PAUSE)
            again, _ = self._send([calls[i] for i in waiting], "EVAL", script.text)
            for i, result in zip(waiting, again, strict=True):
                results[i] = result
            waiting = [i for i in waiting if _split_by_migration(results[i])]


def _run_on_node(node: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Each command's reply or error reply, through a client whose connections are not
    kept (a lone command plainly: cheaper); raises when the node cannot answer."""
    if len(commands) == 1:
        try:
            return [node.execute_command(*commands[0])]
        except redis.ResponseError as error:
            return [error]
    pipe = node.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]


def _write(connection: Any, commands: Sequence[tuple[Any, ...]]) -> None:
    """A lone command sent as one, more as a pipeline."""
    if len(commands) == 1:
        connection.send_command(*commands[0])
    else:
        connection.send_packed_command(connection.pack_commands(commands))


def _checkout_arguments(pool: Any) -> tuple[str, ...]:
    """``get_connection``'s arguments: redis-py up to 5.2 requires a command name, later deprecate it."""
    try:
        parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    except (TypeError, ValueError):  # pragma: no cover - a pool method without a signature
        return ("EVALSHA",)
    required = parameter is not None and parameter.default is inspect.Parameter.empty
    return ("EVALSHA",) if required else ()


class Connections:
    """The connections a storage keeps for its script calls to one server, taken from its pool once and used
    by one thread at a time, and the one retry rule of script calls (:meth:`send`; docs/architecture.rst)."""

    __slots__ = ("_arguments", "_free", "_pid", "_pool")

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._arguments = _checkout_arguments(self._pool)
        self._free: list[Any] = []
        self._pid = os.getpid()

    @staticmethod
    def fit(client: Any) -> bool:
        """Whether ``client`` is a pooled :class:`redis.Redis` (not one with
        ``single_connection_client``, whose connection redis-py guards itself)."""
        return isinstance(client, redis.Redis) and getattr(client, "connection", None) is None

    def take(self) -> Any:
        """A connection of this process that no other thread uses."""
        if self._pid != os.getpid():
            # A forked child: its parent's sockets are not its own to use, nor to close.
            self._free, self._pid = [], os.getpid()
        try:
            return self._free.pop()
        except IndexError:
            return self._pool.get_connection(*self._arguments)

    def drop(self, connection: Any) -> None:
        """Close ``connection`` (a reply may be unread on it) and give it back to its pool."""
        connection.disconnect()
        self._pool.release(connection)

    def close(self) -> None:
        """Close the free connections (the pool's ``disconnect()`` closes them too)."""
        for connection in list(self._free):
            connection.disconnect()

    def send(self, commands: Sequence[tuple[Any, ...]]) -> Any:
        """Send ``commands`` (one, or a pipeline) on a connection taken for them; return it, to :meth:`receive`
        on, or the error that stopped the send. A kept connection found closed or failing to write is connected
        again and sent once more; a new one that cannot connect is a :class:`NotSent`; a send timing out is not."""
        connection, writing = None, False
        try:
            connection = self.take()  # a new one connects: the pool puts it back if that fails
            try:
                # Unfit to send on (``can_read`` raises when its end is closed, connects one the pool closed).
                if connection.can_read():
                    raise redis.ConnectionError("a reply was left unread on the connection")
                writing = True
                _write(connection, commands)
            except redis.ConnectionError:
                writing = False
                connection.disconnect()
                # connect() itself: a Sentinel connection asks for the master there (redis-py 8's send does not).
                connection.connect()
                writing = True
                _write(connection, commands)
        except (redis.ConnectionError, redis.TimeoutError) as error:
            if connection is not None:
                self.drop(connection)
            return error if writing else NotSent.of(error)
        except BaseException:
            if connection is not None:
                self.drop(connection)
            raise
        return connection

    def receive(self, connection: Any, count: int) -> list[Any]:
        """The ``count`` replies of :meth:`send`'s commands, error replies as :class:`redis.ResponseError`;
        a failed connection's error stands for every reply not read."""
        replies: list[Any] = []
        try:
            while len(replies) < count:
                try:
                    replies.append(connection.read_response())
                except redis.ResponseError as error:
                    replies.append(error)
        except (redis.ConnectionError, redis.TimeoutError) as error:
            self.drop(connection)
            return replies + [error] * (count - len(replies))
        except BaseException:
            self.drop(connection)
            raise
        self._free.append(connection)
        return replies

    def exchange(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Each of ``commands``' reply or error (see :meth:`send`)."""
        sent = self.send(commands)
        if isinstance(sent, Exception):
            return [sent] * len(commands)
        return self.receive(sent, len(commands))

    def call(self, command: tuple[Any, ...]) -> Any:
        """``command``'s reply, or its error reply.

        :raises redis.ConnectionError: when the server could not be reached, or the connection broke after.
        :raises redis.TimeoutError: when it did not answer in time.
        """
        [reply] = self.exchange((command,))
        if isinstance(reply, (redis.ConnectionError, redis.TimeoutError)):
            raise reply
        return reply


def _split_by_migration(error: object) -> bool:
    """Whether a slot migration split a cluster call's keys, so the script did not run:
    ``TRYAGAIN``, or redis-py's ``TTL exhausted`` after retrying it for about 0.1 s."""
    return isinstance(error, TryAgainError) or type(error) is ClusterError


def _describe(client: Any) -> str:
    """Where a client handed over by the app points, for messages."""
    try:
        kwargs = client.connection_pool.connection_kwargs
        return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"
    except AttributeError:
        return type(client).__name__
