"""The flat scripts: the fast form of a strategy for the usual request must
decide, and write, exactly as the general script does, on memory://, a real
Redis and a cluster, so that either may follow the other on a key.

Two copies of the same traffic run side by side, each in its own scope: one
always through the general script, the other through the flat script or
the general one as Hypothesis draws. Their replies must be equal, and so
must the records they leave. A second limit shares the scope, so the flat
script also meets records it must keep without reading them; refunds, which
only the general script makes, undo what the flat one counted.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from typing import Any
from unittest import mock

import pytest
from helpers import RECORD_FIELDS, SECOND, T0, layer_lists, request_steps
from helpers import STEP_IDENTITIES as IDENTITIES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from flask_redis_throttle.core import scripts
from flask_redis_throttle.core.codec import entry
from flask_redis_throttle.core.rates import Layer
from flask_redis_throttle.core.storage import Storage
from flask_redis_throttle.core.throttle import Policy, Throttle

FLAT = [name for name, strategy in scripts.STRATEGIES.items() if strategy.flat]
_scopes = itertools.count()


@contextmanager
def general_only() -> Iterator[None]:
    """Every call in the block goes through the general script."""
    with mock.patch.object(scripts.ScriptCache, "fits_flat", return_value=False):
        yield


@contextmanager
def counting_flat(storage: Storage) -> Iterator[list[bool]]:
    """Records, for each call in the block, whether it was flat. The storage
    keeps the script a cluster request's calls took with its fan-out: that is
    forgotten first, so that the call in the block picks its script anew."""
    storage._fanouts.clear()
    seen: list[bool] = []
    real = scripts.ScriptCache.fits_flat

    def fits(*args: Any) -> bool:
        seen.append(real(*args))
        return seen[-1]

    # The storage's own test, which keeps fits_flat's answers: the script it picks.
    with mock.patch.object(scripts.ScriptCache, "fits_flat", fits):
        yield seen


def records(storage: Storage, key: str) -> set[Any]:
    """The records of a packed key, in any order; a sliding log's entries."""
    client = storage.client
    if client.type(key) == b"zset":
        # Through a script, whose reply no client reshapes.
        entries = client.eval("return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')", 1, key)
        return {(entries[i], entries[i + 1]) for i in range(0, len(entries), 2)}
    value = client.get(key)
    if not value:
        return set()
    size = sum(RECORD_FIELDS[key.rsplit(":", 1)[1]])
    assert len(value) % size == 0, value
    return {value[at : at + size] for at in range(0, len(value), size)}


@pytest.mark.parametrize("strategy", FLAT)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    layers=layer_lists,
    others=layer_lists,
    steps=request_steps(max_size=30),
    flat=st.lists(st.booleans(), min_size=30, max_size=30),
    start=st.integers(0, 2 * SECOND),
)
# One microsecond inside the window, then on its edge: what a log trims.
@example(
    layers=[(2, 1)],
    others=[(1, 60)],
    steps=[(0, 1, (0,), False), (SECOND - 1, 1, (0,), False), (1, 1, (0,), False), (0, 1, (0,), False)],
    flat=[True] * 30,
    start=0,
)
# A sub-bucket emptied by a refund, then the one before it aged out: the
# record left has trailing zeros to drop.
@example(
    layers=[(5, 1)],
    others=[(1, 60)],
    steps=[(0, 1, (0,), False), (SECOND // 10, 1, (0,), True), (SECOND + SECOND // 20, 1, (0,), False)],
    flat=[True] * 30,
    start=0,
)
# The clock goes back, by less than a window and by more, with a refund
# there: a sliding window's record then has sub-buckets after the current one.
@example(
    layers=[(3, 1), (5, 3)],
    others=[(1, 60)],
    steps=[
        (3 * SECOND, 1, (0,), False),
        (-SECOND // 2, 1, (0,), False),
        (-2 * SECOND, 1, (0,), True),
        (0, 1, (0,), False),
        (0, 2, (0,), False),
        (SECOND, 1, (0,), False),
        (SECOND + SECOND // 10, 1, (0,), False),
    ],
    flat=[True] * 30,
    start=0,
)
def test_the_flat_script_decides_and_writes_as_the_general_one(
    storage: Storage,
    strategy: str,
    layers: list[tuple[int, int]],
    others: list[tuple[int, int]],
    steps: list[tuple[int, int, tuple[int, ...], bool]],
    flat: list[bool],
    start: int,
) -> None:
    throttle = Throttle(storage)
    n = next(_scopes)
    copies = {}
    for copy in ("general", "mixed"):
        scope = f"flat{n}{copy}"
        # The other limit's layers share the key; its windows may clash.
        copies[copy] = (
            Policy(tuple(Layer(q, p) for q, p in layers), scope, strategy),
            Policy(tuple(Layer(q, p) for q, p in others), scope, strategy),
        )
    names = frozenset([strategy])
    now = T0 + start
    used_flat = 0
    for (gap, cost, who, refund), use_flat in zip(steps, flat, strict=False):
        now += gap
        replies = {}
        for copy, (policy, _) in copies.items():
            keys = [throttle.key(policy, IDENTITIES[w]) for w in who]
            args = [now, cost, policy.entry * len(keys)]
            if copy == "mixed" and use_flat:
                with counting_flat(storage) as seen:
                    replies[copy] = list(storage.evaluate(names, keys, args))
                # (On a cluster, a refund of the nodes that admitted a request
                # another refused follows: it is general.)
                assert seen, (keys, args)
                assert seen[0], (keys, args)
                used_flat += 1
            else:
                with general_only():
                    replies[copy] = list(storage.evaluate(names, keys, args))
            if refund and replies[copy][0] == 1 and cost > 0:
                # The general script gives back what either counted.
                assert list(storage.evaluate(names, keys, [now, -cost, args[2]])) == [1, 0, 0, 0, 0, now]
            if refund:
                # The other limit writes its own records into the same keys.
                other = copies[copy][1]
                with general_only():
                    storage.evaluate(names, keys, [now, 1, other.entry * len(keys)])
        assert replies["general"] == replies["mixed"], (now - T0, cost, who)
        for w in who:
            general, mixed = (throttle.key(copies[c][0], IDENTITIES[w]) for c in ("general", "mixed"))
            assert records(storage, general) == records(storage, mixed), (now - T0, cost, who)
    assert used_flat == sum(flat[: len(steps)])


@pytest.mark.parametrize("flat", [False, True], ids=["general", "flat"])
def test_a_sliding_window_drops_no_count_when_the_clock_goes_back(storage: Storage, flat: bool) -> None:
    """A record holds its newest sub-bucket and the ten before it. A request
    at a time more than ten sub-buckets before the newest is counted in the
    oldest of them, as late as it can be: so until that one leaves the
    window, both requests count, where counting it in its own sub-bucket
    would have let a third in at once."""
    names, keys, plan = frozenset(["sliding-window"]), [f"sw{next(_scopes)}:sw"], entry("sw", [Layer(2, 1)])

    def call(now: int) -> list[int]:
        with counting_flat(storage) as seen:
            reply = list(storage.evaluate(names, keys, [now, 1, plan]))
        assert seen[0] == flat
        return reply

    newest = T0 + 5 * SECOND
    with contextlib.nullcontext() if flat else general_only():
        assert call(newest)[0] == 1
        # Two seconds back: twenty sub-buckets before the newest.
        assert call(newest - 2 * SECOND)[0] == 1
        # Sub-bucket newest - 10 is counted until sub-bucket newest + 1 begins.
        assert call(newest) == [0, 1, 0, 11 * SECOND // 10, SECOND // 10, newest]
        assert call(newest + SECOND // 10 - 1)[0] == 0
        assert call(newest + SECOND // 10)[0] == 1


@pytest.mark.parametrize("strategy", FLAT)
def test_the_flat_script_takes_only_the_calls_it_decides_alike(strategy: str) -> None:
    """Two limits sharing a key, a penalty, a refund, a second strategy:
    each goes through the general script."""
    one = entry("fw", [Layer(1, 1)])
    names, keys, plan = frozenset([strategy]), ["a", "b"], one * 2
    assert scripts.fits_flat(names, keys, [T0, 1, plan])
    assert scripts.fits_flat(names, keys, [T0, 0, plan])
    assert not scripts.fits_flat(names, ["a", "a"], [T0, 1, plan])
    assert not scripts.fits_flat(names, keys, [T0, -1, plan])
    assert not scripts.fits_flat(names, keys, [T0, 1, entry("fw", [Layer(1, 1)], (60, 2, 3600)) + one])
    other = next(name for name in scripts.STRATEGIES if name != strategy)
    assert not scripts.fits_flat(names | {other}, keys, [T0, 1, plan])


@pytest.mark.parametrize("flat", [False, True], ids=["general", "flat"])
@pytest.mark.parametrize("name", FLAT)
def test_each_script_holds_the_deciding_layers_choice_once_as_text(name: str, flat: bool) -> None:
    """``-- include: decide.lua`` is replaced by the file's text: a line left
    as it is would be a comment, and no layer would ever refuse."""
    source = scripts.script_source([name], flat=flat)
    decide = (files(scripts.__package__) / "lua" / "decide.lua").read_text("utf-8")
    assert "-- include:" not in source
    assert source.count(decide) == 1


def test_the_storage_keeps_the_flat_fit_of_a_plan_but_not_of_its_keys(storage: Storage) -> None:
    """A request's strategies, cost and plan are its endpoint's, so the
    storage asks fits_flat once for them; whether its keys repeat is the
    request's own, and asked every time."""
    names, plan = frozenset(["fixed-window"]), entry("fw", [Layer(5, 1)]) * 2
    kept = storage.scripts
    with mock.patch.object(scripts, "fits_flat", wraps=scripts.fits_flat) as fits:
        assert kept.fits_flat(names, ["k1", "k2"], [T0, 1, plan])
        assert kept.fits_flat(names, ["k3", "k4"], [T0, 1, plan])
        assert not kept.fits_flat(names, ["k5", "k5"], [T0, 1, plan])
        assert fits.call_count == 1
        assert not kept.fits_flat(names, ["k1", "k2"], [T0, -1, plan])
        assert fits.call_count == 2
        # A cost of another type is never answered from the cache: 1.0 == 1.
        assert not kept.fits_flat(names, ["k1", "k2"], [T0, 1.0, plan])  # type: ignore[list-item]
        assert fits.call_count == 3
