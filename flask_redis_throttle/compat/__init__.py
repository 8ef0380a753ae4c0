"""Other rate limiters' public modules over :class:`~flask_redis_throttle.RateLimit`: an app moves by its imports."""
