"""Where counters live: a Redis client built from a URL, and the scripts on it.

``memory://`` is the embedded default: a fakeredis server in this process,
running the same Lua scripts through lupa (Lua 5.1, as in Redis). Its counts
are per process, so every worker of a multi-process server counts on its own.

This module imports Redis but not Flask.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.exceptions import NoScriptError
from redis.retry import Retry

from .errors import ConfigurationError
from .scripts import script_source

__all__ = ["DEFAULT_CLIENT_OPTIONS", "Storage"]

logger = logging.getLogger("flask_redis_throttle")

#: Client options we set unless ``RATELIMIT_STORAGE_OPTIONS`` overrides them.
#: redis-py's own defaults wait 5 seconds on a stalled server and retry a
#: refused connection ten times with back-off (about 4 seconds); a rate limiter
#: must not hold a request that long. One immediate retry on a broken
#: connection lets a request survive a Redis restart, which leaves every
#: pooled connection dead.
DEFAULT_CLIENT_OPTIONS: dict[str, Any] = {
    "socket_connect_timeout": 0.5,
    "socket_timeout": 0.5,
    "retry": Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
}

_SCHEMES = ("memory", "redis", "rediss", "unix")
_CLIENT_PARAMETERS = frozenset(inspect.signature(redis.Redis.__init__).parameters) - {"self"}


class Storage:
    """A Redis client and the rate limit scripts registered on it.

    :param client: a :class:`redis.Redis` (or a fakeredis client).
    :param url: where it points, for messages and logs.
    """

    def __init__(self, client: redis.Redis, url: str = "") -> None:
        self.client = client
        self.url = url
        #: One script per set of strategies that requests have used together.
        self._scripts: dict[frozenset[str], Script] = {}

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, Any] | None = None) -> Storage:
        """Build a storage from ``RATELIMIT_STORAGE_URL`` and ``RATELIMIT_STORAGE_OPTIONS``.

        Nothing is sent to Redis here: a Redis that is down at start-up must
        not stop the app from starting.

        :raises ConfigurationError: for an unknown scheme or client option.
        """
        scheme = urlsplit(url).scheme if isinstance(url, str) else ""
        if scheme not in _SCHEMES:
            raise ConfigurationError(
                "RATELIMIT_STORAGE_URL", url, "a URL starting memory://, redis://, rediss:// or unix://"
            )
        options = dict(options or {})
        unknown = sorted(set(options) - _CLIENT_PARAMETERS)
        if unknown:
            raise ConfigurationError(
                "RATELIMIT_STORAGE_OPTIONS", options, f"redis.Redis keyword arguments; unknown: {', '.join(unknown)}"
            )
        if scheme == "memory":
            return cls._embedded(url)
        try:
            client = redis.Redis.from_url(url, **{**DEFAULT_CLIENT_OPTIONS, **options})
        except (ValueError, TypeError) as error:
            raise ConfigurationError("RATELIMIT_STORAGE_URL", url, f"a valid Redis URL ({error})") from error
        return cls(client, url)

    @classmethod
    def _embedded(cls, url: str) -> Storage:
        import fakeredis

        logger.warning(
            "flask-redis-throttle is using the embedded memory:// store: counts are kept per "
            "process, so each worker process limits on its own. Set RATELIMIT_STORAGE_URL "
            "to a Redis URL in production."
        )
        return cls(fakeredis.FakeRedis(server=fakeredis.FakeServer()), url)

    def evaluate(self, strategies: frozenset[str], keys: Sequence[str], args: Sequence[int | str]) -> list[int]:
        """Run the script for ``strategies`` once: one EVALSHA, one round trip.

        When Redis answers NOSCRIPT (after ``SCRIPT FLUSH``, a restart or a
        failover), the script is loaded and the call made again.

        :raises KeyError: for an unknown strategy.
        :raises redis.RedisError: when Redis cannot answer.
        """
        script = self._scripts.get(strategies)
        if script is None:
            # register_script computes the SHA1 locally; it sends nothing.
            script = self._scripts[strategies] = self.client.register_script(script_source(strategies))
        # EVALSHA straight on the client, rather than through Script.__call__,
        # which imports, type-checks and copies its arguments on every call:
        # this is the hot path of every request.
        try:
            result: list[int] = self.client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            self.client.script_load(script.script)  # the SHA1 of a text never changes
            result = self.client.evalsha(script.sha, len(keys), *keys, *args)
        return result
