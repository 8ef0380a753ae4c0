"""The request path: what runs on each request of a Flask app (see docs/architecture.rst).

Private: import from ``flask_redis_throttle``.
"""
