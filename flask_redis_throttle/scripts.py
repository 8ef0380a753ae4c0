"""The Lua scripts, one file per strategy, and the shape of their reply.

Each strategy is a file under ``lua/`` that defines two local functions,
``check`` and ``record`` (see ``lua/driver.lua`` for their contract). A script
is built from the strategy files a request needs, each registered under its
code, followed by ``lua/driver.lua``, which holds what every strategy shares:
reading the clock, checking every counter before writing any, and building
the reply. A request whose limits all use one strategy (the usual case) runs
a script made of that strategy's file and the driver only. Production Redis
and the embedded ``memory://`` store run the very same text.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

__all__ = ["STRATEGIES", "Reply", "Strategy", "script_source"]


@dataclass(frozen=True, slots=True)
class Strategy:
    """An algorithm: its name in settings, its Lua file, and its code.

    :param name: the value of ``RATELIMIT_STRATEGY`` and ``@limit(strategy=...)``.
    :param filename: its file under ``lua/``.
    :param code: two letters that name it in Redis keys and in the script's
        per-counter argument; codes never change, or counters would be lost.
    """

    name: str
    filename: str
    code: str


#: Every strategy, by name.
STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        Strategy("fixed-window", "fixed_window.lua", "fw"),
        Strategy("sliding-window", "sliding_window.lua", "sw"),
        Strategy("sliding-log", "sliding_log.lua", "sl"),
        Strategy("gcra", "gcra.lua", "gc"),
    )
}


def script_source(names: Iterable[str]) -> str:
    """The full Lua text for a request that uses the strategies ``names``.

    :raises KeyError: for an unknown strategy.
    """
    return _source(frozenset(names))


@cache
def _source(names: frozenset[str]) -> str:
    lua = files(__package__) / "lua"
    parts = ["local strategies = {}"]
    for name in sorted(names):
        strategy = STRATEGIES[name]
        # Each file's locals stay in its own block; the table keeps its pair.
        parts += [
            "do",
            lua.joinpath(strategy.filename).read_text("utf-8"),
            f"strategies.{strategy.code} = {{check = check, record = record, refund = refund}}",
            "end",
        ]
    parts.append(lua.joinpath("penalty.lua").read_text("utf-8"))
    parts.append(lua.joinpath("driver.lua").read_text("utf-8"))
    return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class Reply:
    """A script's verdict on one request, decoded from its flat reply.

    :param admitted: whether every counter had room (and the hit was recorded).
    :param index: the deciding counter, 0-based, in the order of the keys sent:
        when refused, the full counter with the longest wait; when admitted,
        the counter with the least quota left.
    :param remaining: the quota the deciding counter has left.
    :param reset: seconds until the deciding counter is back to its full quota.
    :param retry_after: seconds until the request would pass; 0 when admitted.
    :param now: the time the script decided at, in microseconds; a refund of
        this request must be sent with it.
    :param penalized: whether the deciding counter refused because its
        identity is blocked by a penalty (see :mod:`flask_redis_throttle.penalties`).
    """

    admitted: bool
    index: int
    remaining: int
    reset: float
    retry_after: float
    now: int
    penalized: bool = False

    @classmethod
    def decode(cls, raw: list[int]) -> Reply:
        """Build a :class:`Reply` from the script's six integers, or seven
        when penalty keys were sent."""
        admitted, index, remaining, reset_us, retry_us, now = raw[:6]
        penalized = len(raw) > 6 and raw[6] == 1
        return cls(admitted == 1, index - 1, remaining, reset_us / 1e6, retry_us / 1e6, int(now), penalized)
