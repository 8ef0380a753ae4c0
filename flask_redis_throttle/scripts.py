"""The Lua scripts, one per strategy, and the shape of their reply.

Each strategy is a file under ``lua/`` that defines ``check`` and ``record``;
``lua/driver.lua``, appended to it, holds what all strategies share: reading
the clock, checking every counter before writing any, and building the reply.
Production Redis and the embedded ``memory://`` store run the very same text.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files

__all__ = ["STRATEGIES", "Reply", "script_source"]

#: Strategy names, mapped to their Lua file and the short code in their keys.
STRATEGIES: dict[str, tuple[str, str]] = {
    "fixed-window": ("fixed_window.lua", "fw"),
}


@cache
def script_source(strategy: str) -> str:
    """The full Lua text of ``strategy``: its own file, then the shared driver.

    :raises KeyError: for an unknown strategy.
    """
    filename, _code = STRATEGIES[strategy]
    lua = files(__package__) / "lua"
    return lua.joinpath(filename).read_text("utf-8") + "\n" + lua.joinpath("driver.lua").read_text("utf-8")


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
    """

    admitted: bool
    index: int
    remaining: int
    reset: float
    retry_after: float

    @classmethod
    def decode(cls, raw: list[int]) -> Reply:
        """Build a :class:`Reply` from the script's five integers."""
        admitted, index, remaining, reset_us, retry_us = raw
        return cls(admitted == 1, index - 1, remaining, reset_us / 1e6, retry_us / 1e6)
