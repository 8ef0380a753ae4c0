"""The decision engine: limits, keys, penalties, the Lua scripts (``lua/``),
their plan and reply codec, and the throttle that makes one script call
decide every layer of every identity, with its breaker and blocks.
"""
