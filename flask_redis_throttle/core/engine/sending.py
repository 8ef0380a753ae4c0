"""Sending the scripts: which script a call takes, and a cluster request's one call per hash
tag (see :ref:`client-path-cluster`). This module imports Redis (for its exceptions) but not Flask."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from ..bounded import remember
from ..storages.calls import Args
from ..storages.storage import KEY_CACHE_SIZE, STORAGE_ERRORS, Storage
from .codec import Fanout, Times, settle, split
from .scripts import ScriptCache

logger = logging.getLogger("flask_redis_throttle")


class Sender:
    """Runs the rate limit scripts on ``storage``: one call per request, or one per hash tag on a
    cluster. A throttle makes one for its storage."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.scripts = ScriptCache()
        #: A cluster request's calls, by its keys and arguments.
        self._fanouts: dict[tuple[Any, ...], Fanout] = {}
        # Kept here: the request's path reads no attribute more than when the storage sent alone.
        self._cluster = storage.cluster
        self._client = storage.client
        self._connections = storage.connections

    def evaluate(self, strategies: frozenset[str], keys: Sequence[str], args: Args, times: Times = ()) -> list[int]:
        """Run the script for ``strategies`` once: one EVALSHA, one round trip.

        On NOSCRIPT, it is made again with EVAL, which cannot meet it (see :ref:`noscript`).

        On a cluster, keys with different hash tags (different identities)
        may live on different nodes, so the script is run once per hash tag,
        on the node that holds it, and the replies merged into the one a single call would
        give (see :meth:`evaluate_split`). A refund of a request admitted
        that way is given its :class:`~flask_redis_throttle.core.engine.codec.SplitReply`'s
        ``times``.

        :raises KeyError: for an unknown strategy.
        :raises redis.RedisError: when Redis cannot answer (or a
            :class:`~redis.exceptions.RedisClusterException`: see
            :data:`~flask_redis_throttle.core.storages.storage.STORAGE_ERRORS`).
        """
        if self._cluster:
            return self.evaluate_split(strategies, keys, args, times)
        script = self.scripts.choose(strategies, ((keys, args),))
        connections = self._connections
        if connections is None:
            try:
                result: list[int] = self._client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:
                result = self._client.eval(script.text, len(keys), *keys, *args)
            return result
        reply = connections.call(("EVALSHA", script.sha, len(keys), *keys, *args))
        if isinstance(reply, NoScriptError):
            reply = connections.call(("EVAL", script.text, len(keys), *keys, *args))
        if isinstance(reply, Exception):
            raise reply
        return reply  # type: ignore[no-any-return]

    def evaluate_split(
        self, strategies: frozenset[str], keys: Sequence[str], args: Args, times: Times = ()
    ) -> list[int]:
        """Run the script once per hash tag: one round trip to each node
        involved, and reply as one call over all the keys would: admitted only if every call
        admitted. If another refused, the admitting ones are refunded at once, at the time each
        decided at. Each call is atomic on its own; the whole is not (see :ref:`cluster`)."""
        fanout = self._fanout(keys, args)
        parts, known = fanout.parts, fanout.scripts
        # The plain script fits the parts if and only if it fits the whole.
        script = known[strategies] = known.get(strategies) or self.scripts.choose(strategies, [(keys, args)])
        replies = self.storage.evaluate_many(fanout.given_back_at(times) if times else fanout.calls, script)
        if len(parts) == 1:
            return replies[0]
        reply, refunds = settle(parts, replies)
        if refunds:
            try:
                self.storage.evaluate_many(refunds, self.scripts.choose(strategies, refunds))
            except STORAGE_ERRORS as error:
                logger.warning("could not refund a request refused on another node (%s): %d lost", error, args[1])
        return reply

    def _fanout(self, keys: Sequence[str], args: Args) -> Fanout:
        """Kept by keys and plan, with the arguments after the plan put in afterwards. The types
        are in the key: ``1``, ``1.0`` and ``True`` are equal but not encoded alike."""
        head = args[:3]
        key = (tuple(keys), tuple(head), tuple(map(type, head)))
        fanout = self._fanouts.get(key)
        if fanout is None:
            fanout = remember(self._fanouts, key, Fanout.of(split(keys, head)), KEY_CACHE_SIZE)
        return fanout.sent_with(args[3:])
