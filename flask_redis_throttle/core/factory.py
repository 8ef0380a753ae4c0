"""Building the core in one call, without Flask (see :doc:`/core`): a throttle with its block cache, breaker and
fallback, and the refusal log beside it."""

from __future__ import annotations

from .engine.blocks import BlockCache
from .engine.breaker import BreakerListener, CircuitBreaker
from .engine.throttle import Throttle
from .storages.clients import embedded_client
from .storages.storage import Storage
from .stores.refusals import CLUSTER_SHARDS, RefusalLog


def build_throttle(
    storage: Storage | str,
    prefix: str = "rl:",
    secret: bytes = b"",
    *,
    block_cache_size: int = 0,
    breaker_threshold: int = 0,
    breaker_backoff: float = 1.0,
    breaker_max_backoff: float = 30.0,
    fallback: bool = False,
    listener: BreakerListener | None = None,
) -> Throttle:
    """A :class:`~flask_redis_throttle.core.engine.throttle.Throttle` on ``storage``.

    :param storage: a storage, or its URL (see :doc:`/deployment`).
    :param prefix: put in front of every key.
    :param secret: keys the digest of identities in keys; empty for none.
    :param block_cache_size: how many refusals to remember in process; 0 for none (see :doc:`/blocks`).
    :param breaker_threshold: failures in a row that open the circuit breaker; 0 for no breaker.
    :param breaker_backoff: the first wait, in seconds, before an open breaker lets a probe through.
    :param breaker_max_backoff: the longest such wait, in seconds.
    :param fallback: decide in process memory while the storage is unavailable, not raise ``StorageUnavailable``.
    :param listener: told when a breaker opens and closes.
    """
    if isinstance(storage, str):
        storage = Storage.from_url(storage)
    return Throttle(
        storage,
        prefix,
        secret,
        BlockCache(block_cache_size) if block_cache_size else None,
        CircuitBreaker(breaker_threshold, breaker_backoff, breaker_max_backoff, name=storage.url, listener=listener)
        if breaker_threshold
        else None,
        Throttle(Storage(embedded_client(warn=False), "memory://"), prefix, secret) if fallback else None,
    )


def build_refusal_log(storage: Storage, key: str, size: int) -> RefusalLog:
    """The refusal log at ``key``, of about ``size`` entries; sharded on a cluster, to spread its writes."""
    return RefusalLog(storage.client, key, size, CLUSTER_SHARDS if storage.cluster else 1)
