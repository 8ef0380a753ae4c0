"""The decision engine: limits, keys, penalties, the Lua scripts and their codec, and the
throttle that decides every layer of every identity in one script call, with its breaker and blocks."""
