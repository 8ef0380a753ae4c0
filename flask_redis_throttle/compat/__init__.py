"""Modules shaped like other rate limiters' public modules, each a thin
layer over :class:`~flask_redis_throttle.RateLimit`, so that an app moves
over by changing its imports. See :doc:`/flask-limiter`.
"""
