"""The Lua script, made of the files in ``lua/`` that a request uses, and the strategies'
records; Redis and ``memory://`` run the same text. It imports neither Flask nor Redis."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import TypeGuard

from ..bounded import remember
from ..storages.calls import Args, Script
from .codec import SLOTS_CODE, penalized, shaped


@dataclass(frozen=True, slots=True)
class Strategy:
    """An algorithm's record: what it can do, and why not where it cannot. Every rule about
    strategies reads it, so that a new strategy is one record.

    :param name: the value of ``RATELIMIT_STRATEGY`` and ``@limit(strategy=...)``.
    :param filename: its file under ``lua/``.
    :param code: two letters that name it in Redis keys and plans; never changed, or counters are lost.

    Each ``no_...`` says why it cannot do a thing, empty when it can: ``no_pack``, keep its layers
    in one string per key; ``no_delay``, serve a limit with a delay (see :doc:`/shaping`);
    ``no_burst``, give a shaped limit a burst; ``no_lease``, lend a process a share of its quota.
    """

    name: str
    filename: str
    code: str
    no_pack: str = ""
    no_delay: str = ""
    no_burst: str = ""
    no_lease: str = ""

    @property
    def packed(self) -> bool:
        """Whether it keeps its layers in one string per key."""
        return not self.no_pack

    @property
    def delays(self) -> bool:
        """Whether a limit with a delay can use it."""
        return not self.no_delay

    @property
    def bursts(self) -> bool:
        """Whether a shaped limit on it has a burst (else it is sent with 1)."""
        return self.delays and not self.no_burst

    @property
    def leases(self) -> bool:
        """Whether a share of its quota can be leased."""
        return not self.no_lease


#: Every strategy, by name.
STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        Strategy(
            "fixed-window",
            "fixed_window.lua",
            "fw",
            no_delay="a request put off to the next window would be counted in a window that has not begun, "
            "and the waiting requests would all run at its start, the burst shaping is meant to smooth",
        ),
        Strategy(
            "sliding-window",
            "sliding_window.lua",
            "sw",
            no_delay="its count is an estimate from two windows, so it has no exact time at which a request fits",
            no_lease="its count is an estimate weighted over two windows, so a unit leased in one is still "
            "counted, in part, in the next, where it may be spent twice over",
        ),
        Strategy(
            "sliding-log",
            "sliding_log.lua",
            "sl",
            no_pack="it keeps the time of every request, in a sorted set of its own",
            no_burst="the sliding log lets the whole quota go at once",
            no_lease="it stamps each request with the time it runs, which a block taken in advance does not know",
        ),
        Strategy(
            "gcra",
            "gcra.lua",
            "gc",
            no_lease="GCRA has no window end by which a leased unit must be spent: a unit counted when leased and "
            "spent later lets another worker go that much sooner than the rate allows, unless it is spent before "
            "the identity's previous turns run out, which leaves nothing to lease below the rate",
        ),
    )
}

#: The strategy of a limit with a delay that names none: its burst of 1 spreads waiting requests.
SHAPING_STRATEGY = "gcra"

#: The concurrency slots of ``concurrent=``: a part of a script like a strategy, but no limit counts with it.
CONCURRENCY = Strategy(
    "concurrency",
    "concurrency.lua",
    SLOTS_CODE.decode(),
    no_pack="its slots are members of a sorted set, each given back by the request that holds it",
    no_delay="a slot is freed by the end of the request that holds it, at no time known in advance",
    no_lease="a slot is held while a request runs, and given back when it ends: it cannot be taken in advance",
)

#: Every part a script may have beside the shared ones, by name.
PARTS: dict[str, Strategy] = {**STRATEGIES, CONCURRENCY.name: CONCURRENCY}


def able(ability: str) -> str:
    """The strategies whose record has ``ability`` (``"delays"``), quoted, for messages:
    ``'gcra' or 'sliding-log'``."""
    return " or ".join(sorted(repr(name) for name, strategy in STRATEGIES.items() if getattr(strategy, ability)))


#: The strategies' names, quoted, for messages: ``'fixed-window', ...``.
STRATEGY_NAMES = ", ".join(map(repr, STRATEGIES))


def is_strategy(value: object) -> TypeGuard[str]:
    """The one check of every setting and option that names a strategy."""
    return isinstance(value, str) and value in STRATEGIES


def script_source(names: Iterable[str], plain: bool = False) -> str:
    """The full Lua text for a request that uses the strategies ``names``.

    :param plain: for plans with no penalty and no delay: leave out ``lua/penalty.lua`` and
        ``lua/shaping.lua``, so that Redis does not make their functions on every call.
    :raises KeyError: for an unknown strategy.
    """
    parts = [lua_text("records.lua")] if plain else [lua_text("records.lua"), lua_text("penalty.lua")]
    parts.append("local strategies = {")
    for name in sorted(names):
        strategy = PARTS[name]
        # Each file returns its table, and sees nothing after it.
        parts += [f"{strategy.code} = (function()", lua_text(strategy.filename), "end)(),"]
    parts.append("}")
    if not plain:
        parts.append(lua_text("shaping.lua"))
    parts.append(lua_text("main.lua"))
    return "\n".join(parts)


#: How many plans a :class:`ScriptCache` remembers whether they are plain.
PLAN_CACHE_SIZE = 1024


class ScriptCache:
    """A sender's scripts, each made once, by strategies and whether the plans are plain."""

    def __init__(self) -> None:
        self._scripts: dict[tuple[frozenset[str], bool], Script] = {}
        # Whether each plan is plain: a request's plan is the same bytes object, whose hash Python keeps.
        self._plain: dict[object, bool] = {}

    def choose(self, strategies: frozenset[str], calls: Sequence[tuple[Sequence[str], Args]]) -> Script:
        plain = True
        for _, args in calls:
            plan = args[2]
            known = self._plain.get(plan)
            if known is None:
                known = isinstance(plan, bytes) and not (penalized(plan) or shaped(plan))
                remember(self._plain, plan, known, PLAN_CACHE_SIZE)
            plain = plain and known
        script = self._scripts.get((strategies, plain))
        if script is None:
            text = script_source(strategies, plain)
            script = self._scripts[strategies, plain] = Script(text, hashlib.sha1(text.encode()).hexdigest())
        return script


def lua_text(path: str) -> str:
    """The text of ``lua/<path>``."""
    return (files(__package__) / "lua" / path).read_text("utf-8")
