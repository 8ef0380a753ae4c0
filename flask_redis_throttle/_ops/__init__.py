"""The operators' tools: what an operator reads and runs.

The ``flask ratelimit`` commands and the reports they print, the override
admin, the console formatting, the Prometheus metrics and the log notices.
Private: the public entry points are ``flask_redis_throttle.cli`` and
``flask_redis_throttle.dashboard``.
"""
