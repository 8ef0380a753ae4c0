"""The Lua scripts, one file per strategy.

Each strategy is a file under ``lua/`` that defines a table of functions,
``load``, ``check``, ``refund`` and ``store`` (see ``lua/main.lua`` for
their contract). A script is ``lua/prelude.lua`` (the clock, the cost and
the reply) and ``lua/layers.lua`` (the tables every layer's verdict goes
in), ``lua/records.lua`` and ``lua/packed.lua`` (the one string per key in
which most strategies keep their layers), then the strategy files a request
needs, each registered under its code, then ``lua/penalty.lua`` and
``lua/main.lua``, which hold what every strategy shares: reading the plan,
checking every layer before writing any, penalties and the reply. A request
whose limits all use one strategy runs a script made of that strategy's
file and the shared parts only. Production Redis and the embedded
``memory://`` store run the very same text.

The usual request also has a faster form: a strategy with a file under
``lua/flat/`` decides, in one pass and with the same arguments, reply and
records, every call that :func:`fits_flat` admits (one strategy, no penalty,
no key twice, counting or inspecting). Building the tables and functions the
general script composes costs Redis more than the decision itself. A flat
script is ``lua/prelude.lua``, ``lua/records.lua`` for a packed strategy, and
its own file.

A storage sends them through a :class:`ScriptCache`, which makes each script
once and picks the flat or the general one for each call.

A line ``-- include: <file>`` in a script's file stands for that file's
text: the general and the flat scripts include ``lua/decide.lua`` where they
decide each layer, so the choice is written once and costs no call; the
fixed-window and GCRA flat scripts include ``lua/read.lua`` where they read
a layer's record, for the same reason.

What the scripts are sent and what they reply is written and read in one
place, :mod:`flask_redis_throttle.core.codec`.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TypeGuard

from .bounded import remember
from .codec import Arg, Args, penalized

__all__ = [
    "STRATEGIES",
    "STRATEGY_NAMES",
    "Script",
    "ScriptCache",
    "Strategy",
    "fits_flat",
    "is_strategy",
    "script_source",
]


@dataclass(frozen=True, slots=True)
class Strategy:
    """An algorithm: its name in settings, its Lua file, and its code.

    :param name: the value of ``RATELIMIT_STRATEGY`` and ``@limit(strategy=...)``.
    :param filename: its file under ``lua/``.
    :param code: two letters that name it in Redis keys and in the script's
        plan; codes never change, or counters would be lost.
    :param flat: whether it has a flat script, ``lua/flat/<filename>``.
    :param packed: whether it keeps its layers in one string per key, with
        ``lua/packed.lua``.
    """

    name: str
    filename: str
    code: str
    flat: bool = False
    packed: bool = True


#: Every strategy, by name.
STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        Strategy("fixed-window", "fixed_window.lua", "fw", flat=True),
        Strategy("sliding-window", "sliding_window.lua", "sw", flat=True),
        Strategy("sliding-log", "sliding_log.lua", "sl", flat=True, packed=False),
        Strategy("gcra", "gcra.lua", "gc", flat=True),
    )
}

#: The strategies' names, quoted, for messages: ``'fixed-window', ...``.
STRATEGY_NAMES = ", ".join(map(repr, STRATEGIES))


def is_strategy(value: object) -> TypeGuard[str]:
    """Whether ``value`` names a strategy: the one check of
    ``RATELIMIT_STRATEGY``, ``@limit(strategy=...)`` and a policy's."""
    return isinstance(value, str) and value in STRATEGIES


def script_source(names: Iterable[str], flat: bool = False) -> str:
    """The full Lua text for a request that uses the strategies ``names``;
    with ``flat``, the flat script of the one strategy ``names`` holds.

    :raises KeyError: for an unknown strategy, or with ``flat``, for one with
        no flat script.
    """
    if flat:
        return _flat_source(*names)
    return _source(frozenset(names))


def fits_flat(names: frozenset[str], keys: Sequence[str], args: Args) -> bool:
    """Whether the flat script decides the call ``keys``, ``args`` (as the
    scripts take them: now, cost, plan) of a request using the strategies
    ``names`` exactly as the general script would: one strategy that has a
    flat script, a cost of 0 or more, no penalty in the plan and no key
    twice (two limits sharing a scope, whose records the general script
    merges)."""
    if len(names) != 1 or not _FLAT.issuperset(names):
        return False
    cost, plan = args[1], args[2]
    counts = isinstance(cost, int) and cost >= 0
    return counts and isinstance(plan, bytes) and not penalized(plan) and len(set(keys)) == len(keys)


#: How many (strategies, cost, plan) a :class:`ScriptCache` remembers the
#: flat script's fit of.
FLAT_CACHE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class Script:
    """A script's text, and the SHA1 that ``EVALSHA`` names it by."""

    text: str
    sha: str


class ScriptCache:
    """The scripts one storage sends, each made once, and which one a call
    takes: the flat script when it fits (see :func:`fits_flat`), else the
    general one of the call's strategies."""

    def __init__(self) -> None:
        self._scripts: dict[tuple[frozenset[str], bool], Script] = {}
        #: Whether the flat script fits calls of some strategies, cost and
        #: plan whose keys do not repeat (see :meth:`fits_flat`).
        self._flat: dict[tuple[frozenset[str], int, Arg], bool] = {}

    def choose(self, strategies: frozenset[str], calls: Sequence[tuple[Sequence[str], Args]]) -> Script:
        """The script for ``calls`` (keys and arguments each) of a request
        using ``strategies``: the flat one when it fits them all."""
        flat = all(self.fits_flat(strategies, keys, args) for keys, args in calls)
        script = self._scripts.get((strategies, flat))
        if script is None:
            text = script_source(strategies, flat)
            script = self._scripts[strategies, flat] = Script(text, hashlib.sha1(text.encode()).hexdigest())
        return script

    def fits_flat(self, strategies: frozenset[str], keys: Sequence[str], args: Args) -> bool:
        """:func:`fits_flat`, kept: its answer depends on the keys only
        through whether one repeats, and else on the strategies, the cost
        and the plan, which a request shares with every other of its
        endpoint. Bounded, since costs and dynamic limits' plans are many."""
        cost, plan = args[1], args[2]
        if type(cost) is not int:  # 1.0 equals 1, and would share its answer
            return fits_flat(strategies, keys, args)
        fits = self._flat.get((strategies, cost, plan))
        if fits is None:
            fits = remember(self._flat, (strategies, cost, plan), fits_flat(strategies, (), args), FLAT_CACHE_SIZE)
        return fits and len(set(keys)) == len(keys)


#: The strategies that have a flat script.
_FLAT = frozenset(strategy.name for strategy in STRATEGIES.values() if strategy.flat)


@cache
def _flat_source(name: str) -> str:
    strategy = STRATEGIES[name]
    if not strategy.flat:
        raise KeyError(name)
    parts = ["prelude.lua"] + (["records.lua"] if strategy.packed else []) + [f"flat/{strategy.filename}"]
    return "\n".join(map(_text, parts))


@cache
def _source(names: frozenset[str]) -> str:
    parts = [_text(part) for part in ("prelude.lua", "layers.lua", "records.lua", "packed.lua")]
    for name in sorted(names):
        strategy = STRATEGIES[name]
        # Each file's locals stay in its own block; the table is registered.
        parts += ["do", _text(strategy.filename), f"strategies.{strategy.code} = strategy", "end"]
    parts += [_text("penalty.lua"), _text("main.lua")]
    return "\n".join(parts)


#: A line that stands for a file's text: "-- include: <file under lua/>".
_INCLUDE = re.compile(r"^[ \t]*-- include: (\S+)[ \t]*$", re.MULTILINE)


def _text(path: str) -> str:
    """The text of ``lua/<path>``, each include line replaced by its file's
    text (once: included files include nothing)."""
    lua = files(__package__) / "lua"
    return _INCLUDE.sub(lambda match: lua.joinpath(match[1]).read_text("utf-8"), lua.joinpath(path).read_text("utf-8"))
