"""The operators' tools: the ``flask ratelimit`` commands and their reports, the override admin,
the console formatting, the Prometheus metrics and the log notices. Private: the public entry
points are ``flask_redis_throttle.cli`` and ``flask_redis_throttle.dashboard``."""
