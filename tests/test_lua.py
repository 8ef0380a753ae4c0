"""The script's sources: each strategy's decision is written once, in its
file under ``core/engine/lua/``, as plain functions whose every value is a
parameter, and the one script every call runs is made of those files.

The strategies' behaviour itself is held by test_strategies.py (each
strategy's promise), test_properties.py (random traffic against a model,
with keys shared by two limits and refunds) and test_embedded.py.
"""

from __future__ import annotations

import itertools
from importlib.resources import files

import pytest
from helpers import SECOND, T0

from flask_redis_throttle.core.engine import scripts
from flask_redis_throttle.core.engine.codec import entry
from flask_redis_throttle.core.engine.rates import Layer
from flask_redis_throttle.core.engine.sending import Sender
from flask_redis_throttle.core.storages.storage import Storage

_scopes = itertools.count()


def source(path: str) -> str:
    return (files(scripts.__package__) / "lua" / path).read_text("utf-8")


@pytest.mark.parametrize("name", list(scripts.STRATEGIES))
def test_each_strategy_file_stands_alone(storage: Storage, name: str) -> None:
    """A strategy's file, run as a script on its own, returns its functions,
    and they decide from their parameters alone: a script reading a global
    that does not exist is an error on Redis and on memory://, so a file
    relying on a name of the script it is put in (the time, the cost, the
    plan...) would fail here. A fresh layer of 5 per minute, asked for 2 at
    T0: it fits, leaves 3, and asks to write one record, kept for about
    the window (a sliding window's sub-bucket more)."""
    strategy = scripts.STRATEGIES[name]
    key = f"alone{next(_scopes)}:{strategy.code}"
    script = (
        "local strategy = (function()\n"
        + source(strategy.filename)
        + "\nend)()\n"
        + "local fit, left, _, retry, record, life\n"
        + "fit, left, _, retry, record, life = strategy.check(tonumber(ARGV[1]), 2, 5, 60, KEYS[1], '', nil)\n"
        + "return {fit and 1 or 0, left, retry, record and 1 or 0, life}"
    )
    reply = storage.client.eval(script, 1, key, T0)
    assert reply[:4] == [1, 3, 0, 1]
    assert 0 < reply[4] <= 66 * SECOND
    # The check writes nothing: only main.lua does, once every layer fits.
    assert storage.client.exists(key) == 0


def test_every_script_is_the_files_of_its_strategies_and_the_shared_parts() -> None:
    """A request's script holds the files of the strategies it uses, once
    each, and no other strategy's; nothing is pasted into another file."""
    one = scripts.script_source(["gcra"])
    assert one.count(source("gcra.lua")) == 1
    assert source("fixed_window.lua") not in one
    every = scripts.script_source(scripts.STRATEGIES)
    for strategy in scripts.STRATEGIES.values():
        assert every.count(source(strategy.filename)) == 1
    for shared in ("records.lua", "penalty.lua", "shaping.lua", "main.lua"):
        assert every.count(source(shared)) == 1
    assert "-- include:" not in every


def test_the_cache_makes_one_script_per_set_of_strategies() -> None:
    cache = scripts.ScriptCache()
    call = (["k:fw"], [T0, 1, entry("fw", [Layer(1, 1)])])
    first = cache.choose(frozenset(["fixed-window"]), [call])
    assert cache.choose(frozenset(["fixed-window"]), [call, call]) is first
    mixed = cache.choose(frozenset(["fixed-window", "gcra"]), [call])
    assert mixed.sha != first.sha
    assert mixed.text == scripts.script_source(["gcra", "fixed-window"], plain=True)


def test_a_plain_plan_takes_a_script_without_penalties_or_shaping() -> None:
    """Redis makes every function of a script on every call: a plan none of
    whose entries has a penalty or a delay never calls those of
    penalty.lua and shaping.lua, so its script leaves them out; a plan with
    either, in any call of the request, takes the whole script."""
    cache = scripts.ScriptCache()
    names = frozenset(["gcra"])
    plain = (["k:gc"], [T0, 1, entry("gc", [Layer(1, 1)])])
    penalized = (["k:gc", "k:p"], [T0, 1, entry("gc", [Layer(1, 1)], penalty=(1, 2, 8))])
    delayed = (["k:gc"], [T0, 1, entry("gc", [Layer(1, 1)], shaping=(500, 0))])
    lean = cache.choose(names, [plain])
    for shared in ("penalty.lua", "shaping.lua"):
        assert source(shared) not in lean.text
    for other in (penalized, delayed):
        whole = cache.choose(names, [plain, other])
        assert whole.text == scripts.script_source(names)
        assert cache.choose(names, [other]) is whole
    assert cache.choose(names, [plain]) is lean


def test_a_sliding_window_drops_no_count_when_the_clock_goes_back(storage: Storage) -> None:
    """A record holds its newest sub-bucket and the ten before it. A request
    at a time more than ten sub-buckets before the newest is counted in the
    oldest of them, as late as it can be: so until that one leaves the
    window, both requests count, where counting it in its own sub-bucket
    would have let a third in at once."""
    names, keys, plan = frozenset(["sliding-window"]), [f"sw{next(_scopes)}:sw"], entry("sw", [Layer(2, 1)])
    sender = Sender(storage)

    def call(now: int) -> list[int]:
        return list(sender.evaluate(names, keys, [now, 1, plan]))

    newest = T0 + 5 * SECOND
    assert call(newest)[0] == 1
    # Two seconds back: twenty sub-buckets before the newest.
    assert call(newest - 2 * SECOND)[0] == 1
    # Sub-bucket newest - 10 is counted until sub-bucket newest + 1 begins.
    assert call(newest) == [0, 1, 0, 11 * SECOND // 10, SECOND // 10, newest]
    assert call(newest + SECOND // 10 - 1)[0] == 0
    assert call(newest + SECOND // 10)[0] == 1


def test_a_sliding_log_numbers_the_entries_of_an_instant_on(storage: Storage) -> None:
    """A sliding log's entries are "<time>:<number>". A request takes the
    numbers from 1 with ZADD NX, which says how many were free: at an
    instant already stamped, it goes on after the numbers there, so no
    entry is lost to another of the same name; a refund takes back the
    latest."""
    names, keys, plan = frozenset(["sliding-log"]), [f"sl{next(_scopes)}:sl"], entry("sl", [Layer(10, 60)])
    evaluate = Sender(storage).evaluate

    def stamped() -> list[str]:
        members = storage.client.execute_command("ZRANGEBYSCORE", keys[0], T0, T0)
        return sorted(m.decode() if isinstance(m, bytes) else m for m in members)

    assert evaluate(names, keys, [T0, 1, plan])[0] == 1
    assert evaluate(names, keys, [T0, 2, plan])[0] == 1
    assert stamped() == [f"{T0}:{n}" for n in (1, 2, 3)]
    assert evaluate(names, keys, [T0, 0, plan])[2] == 7
    evaluate(names, keys, [T0, -2, plan])
    assert stamped() == [f"{T0}:1"]
    assert evaluate(names, keys, [T0, 3, plan])[0] == 1
    assert stamped() == [f"{T0}:{n}" for n in (1, 2, 3, 4)]
    assert evaluate(names, keys, [T0, 1, plan])[0] == 1
    assert stamped() == [f"{T0}:{n}" for n in (1, 2, 3, 4, 5)]
    assert evaluate(names, keys, [T0, 0, plan])[2] == 5
