"""Shaping: a limit with a delay reserves a later turn for a request over
its rate, rather than refusing it; driven through the core, with time
pinned, on every storage. GCRA spreads the turns one every window /
quota; the sliding log lets the whole quota go at once, then gives a
request the moment the entry that blocks it leaves the window."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from helpers import Clock

from flask_redis_throttle import Identity, parse_limits
from flask_redis_throttle.core.engine.blocks import BlockCache
from flask_redis_throttle.core.engine.codec import entries, entry
from flask_redis_throttle.core.engine.rates import Layer
from flask_redis_throttle.core.engine.throttle import Decision, Policy, Throttle
from flask_redis_throttle.core.errors import InvalidLimit
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.core.stores.usage import usage

IP = Identity("ip", "192.0.2.1")
USER = Identity("user", "ann")  # on another cluster node than IP (see test_topologies.py)


@pytest.fixture
def throttle(storage: Storage) -> Throttle:
    return Throttle(storage)


def shaped(spec: str, delay: float, burst: int = 1, scope: str = "s") -> Policy:
    return Policy(parse_limits(spec), scope, "gcra", delay=delay, burst=burst)


def logged(spec: str, delay: float, scope: str = "s") -> Policy:
    """A shaped sliding log: it has no burst."""
    return Policy(parse_limits(spec), scope, "sliding-log", delay=delay)


#: Every strategy that has a delay, as a maker of shaped policies.
SHAPED = [pytest.param(shaped, id="gcra"), pytest.param(logged, id="sliding-log")]


def at(clock: Clock, throttle: Throttle, seconds: float, *policies: Policy, cost: int = 1) -> Decision:
    clock.set(seconds)
    return throttle.hit([(policy, (IP,)) for policy in policies], cost)


def test_a_burst_waits_its_turns_up_to_the_delay(throttle: Throttle, clock: Clock) -> None:
    policy = shaped("10/s", 0.25)
    decisions = [at(clock, throttle, 0.0, policy) for _ in range(5)]
    assert [d.admitted for d in decisions] == [True, True, True, False, False]
    assert [d.retry_after for d in decisions[:3]] == pytest.approx([0.0, 0.1, 0.2])
    # Refused: the next turn is 0.3 s away, past the delay; it was not taken.
    assert decisions[3].retry_after == pytest.approx(0.3)
    assert at(clock, throttle, 0.06, policy).retry_after == pytest.approx(0.24)


def test_a_refusal_takes_no_turn(throttle: Throttle, clock: Clock) -> None:
    policy = shaped("4/s", 0.3)
    waits = [at(clock, throttle, 0.0, policy) for _ in range(3)]
    assert [d.retry_after for d in waits] == pytest.approx([0.0, 0.25, 0.5])
    assert not waits[2].admitted
    # Had the refusal taken the turn at 0.5, this one would wait for 0.75.
    assert at(clock, throttle, 0.25, policy).retry_after == pytest.approx(0.25)


@pytest.mark.parametrize("make", SHAPED)
def test_turns_keep_the_quota_in_every_window(throttle: Throttle, clock: Clock, make: Callable[..., Policy]) -> None:
    # Random bursts; every admitted request runs at its arrival plus its
    # wait, within the delay, and no span of the window's length holds
    # more than the quota. A request is refused only when its turn is
    # further off than the delay.
    policy = make("5/s", 0.5)
    rng = random.Random(7)
    runs: list[float] = []
    t, delayed, refused = 0.0, 0, 0
    for _ in range(120):
        t += rng.choice([0.0, 0.0, 0.01, 0.05, 0.3])
        decision = at(clock, throttle, t, policy)
        if decision.admitted:
            assert 0 <= decision.retry_after <= 0.5
            runs.append(t + decision.retry_after)
            delayed += decision.retry_after > 0
        else:
            assert decision.retry_after > 0.5
            refused += 1
    runs.sort()
    assert len(runs) > 40
    assert delayed > 10
    assert refused > 10
    for i, start in enumerate(runs):
        assert sum(1 for run in runs[i:] if run < start + 1 - 1e-6) <= 5


def test_a_sliding_log_lets_the_quota_go_then_waits_for_the_oldest_entry(throttle: Throttle, clock: Clock) -> None:
    policy = logged("2/s", 0.5)
    assert [at(clock, throttle, 0.0, policy).retry_after for _ in range(2)] == [0.0, 0.0]
    # At 0.6 both entries of 0 are 0.4 s from leaving the window: two
    # requests wait for them, the next would wait for a reserved turn.
    decisions = [at(clock, throttle, 0.6, policy) for _ in range(3)]
    assert [d.admitted for d in decisions] == [True, True, False]
    assert [d.retry_after for d in decisions] == pytest.approx([0.4, 0.4, 1.4])
    # Refused, it took nothing: at 1.5 one of the turns of 1.0 leaves in 0.5 s.
    assert at(clock, throttle, 1.5, policy).retry_after == pytest.approx(0.5)


def test_sliding_log_reservations_are_counted_by_every_read(throttle: Throttle, clock: Clock) -> None:
    # The two turns reserved at 1.0 are counted from the moment they are
    # made: by an inspection and by usage() before they come, with the reset
    # one window after them; and they go with a reset.
    policy = logged("2/s", 0.5)
    for t in (0.0, 0.0, 0.6, 0.6):
        assert at(clock, throttle, t, policy).admitted
    for t, reset in ((0.7, 1.3), (1.0, 1.0), (1.9, 0.1)):
        inspected = at(clock, throttle, t, policy, cost=0)
        assert (inspected.remaining, inspected.reset) == (0, pytest.approx(reset))
        [used] = usage(throttle, Policy(parse_limits("2/s"), "s", "sliding-log"), IP)
        assert (used.remaining, used.reset) == (0, pytest.approx(reset))
    clock.set(0.7)
    assert throttle.reset(IP, ["s"]) == 1
    assert at(clock, throttle, 0.7, policy).retry_after == 0


def test_a_sliding_log_lives_until_its_last_turn_has_left_the_window(throttle: Throttle, clock: Clock) -> None:
    policy = logged("1/s", 5.0)
    assert [at(clock, throttle, 0.0, policy).retry_after for _ in range(4)] == [0.0, 1.0, 2.0, 3.0]
    [key] = throttle.storage.client.keys("*:sl")
    # The turn of 3 s, its window, and a second.
    assert 4_000 < throttle.storage.client.pttl(key) <= 5_000


def test_a_sliding_log_shared_with_a_limit_without_a_delay_keeps_the_turn(throttle: Throttle, clock: Clock) -> None:
    # Two limits of one scope count in one log: a request that the shaped
    # one gives a turn is written at the turn, in whichever order the view
    # lists them, and the other counts that entry too.
    for order in (1, -1):
        scope = f"shared{order}"
        policy, plain = logged("2/s", 1.0, scope), Policy(parse_limits("5/m"), scope, "sliding-log")
        at(clock, throttle, 0.0, policy)
        at(clock, throttle, 0.0, policy)
        assert at(clock, throttle, 0.5, *[policy, plain][::order]).retry_after == pytest.approx(0.5)
        # At 1.6 the two entries of 0 are out, the turn of 1.0 is not: a
        # second request must wait until it leaves, at 2.0.
        assert [at(clock, throttle, 1.6, policy).retry_after for _ in range(2)] == pytest.approx([0.0, 0.4])
        # The limit without a delay counts all five, the newest the turn of 2.0.
        inspected = at(clock, throttle, 1.6, plain, cost=0)
        assert (inspected.remaining, inspected.reset) == (0, pytest.approx(60.4))


def test_a_refused_request_leaves_no_reserved_turn(throttle: Throttle, clock: Clock) -> None:
    # The address's shaped log gives the request a turn, the user's full
    # limit refuses it. On a cluster each is on its own node, and the turn
    # the address's node reserved is given back; elsewhere it was never
    # written. Either way two requests may take the turns of 1.0.
    policy, plain = logged("2/s", 1.0), Policy(parse_limits("1/m"), "p")
    at(clock, throttle, 0.0, policy)
    at(clock, throttle, 0.0, policy)
    clock.set(0.0)
    assert throttle.hit([(plain, (USER,))]).admitted
    clock.set(0.5)
    refused = throttle.hit([(policy, (IP,)), (plain, (USER,))])
    assert not refused.admitted
    assert refused.policy is plain
    assert [at(clock, throttle, 0.5, policy).retry_after for _ in range(2)] == pytest.approx([0.5, 0.5])


def test_a_burst_lets_that_many_go_at_once(throttle: Throttle, clock: Clock) -> None:
    policy = shaped("4/s", 0.5, burst=2)
    waits = [at(clock, throttle, 0.0, policy).retry_after for _ in range(4)]
    assert waits == pytest.approx([0.0, 0.0, 0.25, 0.5])


def test_every_layer_is_reserved_at_the_same_turn(throttle: Throttle, clock: Clock) -> None:
    # The 2/s layer has room, the 3/10s one says wait: the request runs at
    # its turn, and the 2/s layer counts it then, not when it was decided.
    policy = shaped("2/s;3/10s", 5.0)
    assert [at(clock, throttle, 0.0, policy).retry_after for _ in range(2)] == pytest.approx([0.0, 3.3333333])
    third = at(clock, throttle, 0.0, policy)
    assert third.retry_after == pytest.approx(6.666667, abs=1e-5)
    assert not third.admitted
    # At 3.5 s the 2/s layer must still see the turn taken at 3.33 s.
    assert at(clock, throttle, 3.5, policy).retry_after == pytest.approx(3.166667, abs=1e-5)


def test_a_limit_without_a_delay_counts_the_request_when_decided(throttle: Throttle, clock: Clock) -> None:
    fixed = Policy(parse_limits("2/m"), "f")
    policy = shaped("1/s", 2.0)
    assert at(clock, throttle, 0.0, policy, fixed).retry_after == 0
    assert at(clock, throttle, 0.0, policy, fixed).retry_after == pytest.approx(1.0)
    refused = at(clock, throttle, 0.0, policy, fixed)
    assert not refused.admitted
    assert refused.policy is fixed


def test_the_wait_is_the_shortest_delay_of_the_request(throttle: Throttle, clock: Clock) -> None:
    short, long = shaped("2/s", 0.2, scope="a"), shaped("2/s", 2.0, scope="b")
    at(clock, throttle, 0.0, long)
    assert at(clock, throttle, 0.0, long).retry_after == pytest.approx(0.5)
    # Together: b's turn is 0.5 s away, past a's delay: refused, and a
    # is left untouched.
    assert not at(clock, throttle, 0.0, short, long).admitted
    assert at(clock, throttle, 0.0, short).retry_after == 0


def test_a_request_waits_for_its_turn_whichever_layer_decides(throttle: Throttle, clock: Clock) -> None:
    # The 1/m layer of the user decides (least left, latest reset); on a
    # cluster it lives on another node than the address's shaped layer,
    # whose turn the request must still wait for.
    policy, plain = shaped("2/s", 1.0), Policy(parse_limits("1/m"), "p")
    at(clock, throttle, 0.0, policy)
    clock.set(0.0)
    both = throttle.hit([(policy, (IP,)), (plain, (USER,))])
    assert both.admitted
    assert both.policy is plain
    assert both.retry_after == pytest.approx(0.5)


def test_a_refused_shaped_request_is_not_remembered_by_the_block_cache(storage: Storage, clock: Clock) -> None:
    # Refused at 0 (its turn 1 s away, the delay 0.5 s), the next request at
    # 0.6 s has its turn 0.4 s away: Redis must be asked, not the cache.
    throttle = Throttle(storage, blocks=BlockCache(100))
    policy = shaped("1/s", 0.5)
    assert at(clock, throttle, 0.0, policy).admitted
    assert not at(clock, throttle, 0.0, policy).admitted
    later = at(clock, throttle, 0.6, policy)
    assert later.admitted
    assert later.retry_after == pytest.approx(0.4)


def test_a_reserved_turn_can_be_refunded(throttle: Throttle, clock: Clock) -> None:
    policy = shaped("2/s", 1.0)
    at(clock, throttle, 0.0, policy)
    assert at(clock, throttle, 0.0, policy).retry_after == pytest.approx(0.5)
    at(clock, throttle, 0.0, policy, cost=-1)
    assert at(clock, throttle, 0.0, policy).retry_after == pytest.approx(0.5)


def test_an_inspection_reserves_nothing(throttle: Throttle, clock: Clock) -> None:
    policy = shaped("1/s", 1.0)
    at(clock, throttle, 0.0, policy)
    assert at(clock, throttle, 0.0, policy, cost=0).remaining == 0
    assert at(clock, throttle, 0.0, policy).retry_after == pytest.approx(1.0)


# The concurrency slots' record says why too: a KeyError, before records.
@pytest.mark.parametrize("strategy", ["fixed-window", "sliding-window", "concurrency"])
def test_other_strategies_have_no_delay(strategy: str) -> None:
    with pytest.raises(InvalidLimit, match=f"a delay needs the 'gcra' or 'sliding-log' strategy, not '{strategy}'"):
        Policy(parse_limits("1/s"), "s", strategy, delay=0.5)


def test_a_sliding_log_has_no_burst() -> None:
    with pytest.raises(InvalidLimit, match="burst 1 needs the 'gcra' strategy"):
        Policy(parse_limits("2/s"), "s", "sliding-log", delay=0.5, burst=1)


@pytest.mark.parametrize(
    ("delay", "burst", "message"),
    [(-1, 0, "delay -1 must be"), (True, 0, "delay True must be"), (0, 1, "burst 1 must be"), (1, 3, "burst 3")],
)
def test_bad_shaping_is_refused(delay: float, burst: int, message: str) -> None:
    with pytest.raises(InvalidLimit, match=message):
        Policy(parse_limits("2/s"), "s", "gcra", delay=delay, burst=burst)


def test_plans_without_a_delay_are_unchanged() -> None:
    layers = (Layer(3, 1),)
    assert entry("gc", layers) == b"gc\x01\x03\x00\x00\x00\x01\x00\x00\x00\x00"
    plain, penalized = entry("gc", layers, (60, 2, 3600)), entry("gc", layers, (60, 2, 3600), (250, 1))
    assert penalized[: len(plain)] == plain[:11] + b"\x03" + plain[12:]
    assert [(count, penalty) for _, count, penalty in entries(plain + penalized + plain)] == [(1, True)] * 3
