"""The operators' tools: ``flask ratelimit`` and its reports, the override admin, the console text, the metrics
and the log notices; private, behind ``flask_redis_throttle.cli`` and ``flask_redis_throttle.dashboard``."""
