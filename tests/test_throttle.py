"""The core and its Lua script, driven without Flask, with time pinned."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest
import redis
from helpers import T0, Clock

from flask_redis_throttle import Identity, parse_limits
from flask_redis_throttle.core.engine import keys as keys_module
from flask_redis_throttle.core.engine.keys import CACHED_VALUE_LENGTH, identity_tag
from flask_redis_throttle.core.engine.penalties import Penalty
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.core.engine.throttle import Decision, Policy, Throttle
from flask_redis_throttle.core.storages.storage import Storage

IP = Identity("ip", "192.0.2.1")
USER = Identity("user", "42")


Hit = Callable[..., Decision]


@pytest.fixture
def throttle(storage: Storage) -> Throttle:
    return Throttle(storage)


@pytest.fixture
def hit(throttle: Throttle, clock: Clock) -> Hit:
    """``hit(spec, *identities, at=seconds, cost=1, scope="s")``: one request, at a pinned time."""

    def run(spec: str, *identities: Identity, at: float, cost: int = 1, scope: str = "s") -> Decision:
        clock.set(at)
        return throttle.hit([(Policy(parse_limits(spec), scope), identities or (IP,))], cost=cost)

    return run


def counters(throttle: Throttle) -> dict[bytes, bytes]:
    client = throttle.storage.client
    return {key: client.get(key) for key in client.scan_iter()}


def test_admits_quota_per_window_then_refuses(throttle: Throttle, hit: Hit) -> None:
    results = [hit("3/s", at=0.1 * i).admitted for i in range(5)]
    assert results == [True, True, True, False, False]
    # The window is aligned to the clock: a new one starts on the second.
    assert hit("3/s", at=1.0).admitted


def test_window_boundary_is_exact(throttle: Throttle, hit: Hit) -> None:
    hit("1/s", at=0.0)
    assert not hit("1/s", at=0.999_999).admitted
    assert hit("1/s", at=1.0).admitted


def test_refusal_consumes_nothing_in_any_layer(throttle: Throttle, hit: Hit) -> None:
    for i in range(2):
        assert hit("2/s;5/m", IP, USER, at=0.01 * i).admitted
    before = counters(throttle)
    for i in range(10):
        decision = hit("2/s;5/m", IP, USER, at=0.5 + 0.01 * i)
        assert not decision.admitted
    assert counters(throttle) == before
    # The minute layer still has its 3 requests left for the next seconds.
    assert [hit("2/s;5/m", IP, USER, at=1.0 + 0.1 * i).admitted for i in range(3)] == [True, True, False]
    assert hit("2/s;5/m", IP, USER, at=2.0).admitted


def test_one_full_identity_refuses_and_the_other_is_not_charged(throttle: Throttle, hit: Hit) -> None:
    other_ip = Identity("ip", "198.51.100.7")
    assert hit("2/m", other_ip, USER, at=0).admitted
    assert hit("2/m", other_ip, USER, at=1).admitted
    # USER is now full; IP is fresh but must not be charged for the refusal.
    decision = hit("2/m", IP, USER, at=2)
    assert not decision.admitted
    assert decision.identity == USER
    assert hit("2/m", IP, at=3).remaining == 1


def test_layers_report_the_most_constrained(throttle: Throttle, hit: Hit) -> None:
    decision = hit("10/s;3/m", at=0.25)
    assert decision.admitted
    assert (decision.layer.name, decision.remaining) == ("1m", 2)
    assert decision.reset == pytest.approx(59.75)


def test_refusal_names_the_longest_wait(throttle: Throttle, hit: Hit) -> None:
    hit("1/s;1/m", at=10.5)
    decision = hit("1/s;1/m", at=10.75)
    assert not decision.admitted
    assert decision.layer.name == "1m"
    assert decision.retry_after == pytest.approx(49.25)


def test_retry_after_is_never_early(throttle: Throttle, hit: Hit) -> None:
    rng = random.Random(7)
    for round_ in range(40):
        scope = f"r{round_}"
        start = rng.uniform(0, 1000)
        assert hit("1/s;2/5s", at=start, scope=scope).admitted
        at = start + rng.uniform(0, 0.999)
        decision = hit("1/s;2/5s", at=at, scope=scope)
        if decision.admitted:  # the second crossed into a new window
            continue
        wait = math.ceil(decision.retry_after)
        assert not hit("1/s;2/5s", at=at + decision.retry_after - 1e-6, scope=scope, cost=1).admitted
        assert hit("1/s;2/5s", at=at + wait, scope=scope).admitted


def test_one_key_per_identity_holds_every_layer_until_the_longest_ends(throttle: Throttle, hit: Hit) -> None:
    hit("10/s;10/m;10/h;10/d", IP, USER, at=0.25)
    client = throttle.storage.client
    keys = list(client.scan_iter())
    assert len(keys) == 2
    # The day's window is aligned to the clock; then a second's margin.
    day_left_ms = 86_400_000 - (T0 // 1000 + 250) % 86_400_000
    for key in keys:
        assert day_left_ms <= client.pttl(key) <= day_left_ms + 1_000


def test_a_key_lives_as_long_as_its_longest_live_layer(throttle: Throttle, hit: Hit) -> None:
    hit("10/s;10/h", at=0.5)
    hit("10/s", at=1.5)  # only the second's layer is written; the hour's lives on
    client = throttle.storage.client
    [key] = client.scan_iter()
    assert 3_600_000 - 1_500 < client.pttl(key) <= 3_600_000 - 1_500 + 1_000


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_layers_of_other_limits_sharing_the_scope_are_kept(throttle: Throttle, clock: Clock, strategy: str) -> None:
    hourly = Policy(parse_limits("3/h"), "shared", strategy)
    secondly = Policy(parse_limits("5/s"), "shared", strategy)
    for at in (0, 1):
        clock.set(at)
        assert throttle.hit([(hourly, [IP])]).admitted
    clock.set(2)
    assert throttle.hit([(secondly, [IP])]).admitted  # rewrites the shared key
    clock.set(3)
    assert throttle.hit([(hourly, [IP])]).remaining == 0
    clock.set(4)
    assert not throttle.hit([(hourly, [IP])]).admitted


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_limits_that_share_a_key_in_one_request_count_it_once(throttle: Throttle, clock: Clock, strategy: str) -> None:
    """Two limits of one request with the same scope and strategy keep their
    layers in the same key: a layer both have is counted once, and neither
    limit's write undoes the other's."""
    both = [
        (Policy(parse_limits("3/s;10/m"), "same", strategy), [IP]),
        (Policy(parse_limits("3/s"), "same", strategy), [IP]),
    ]
    clock.set(10)
    admitted = [throttle.hit(both).admitted for _ in range(5)]
    assert admitted == [True, True, True, False, False]
    clock.set(11)
    minute = Policy(parse_limits("10/m"), "same", strategy)
    assert throttle.hit([(minute, [IP])], cost=0).remaining == 7


def test_cost_zero_inspects_without_writing(throttle: Throttle, hit: Hit) -> None:
    hit("5/m", at=0)
    before = counters(throttle)
    decision = hit("5/m", at=1, cost=0)
    assert decision.admitted
    assert decision.remaining == 4
    assert counters(throttle) == before


def test_cost_takes_that_much_quota(throttle: Throttle, hit: Hit) -> None:
    assert hit("5/m", at=0, cost=3).remaining == 2
    decision = hit("5/m", at=1, cost=3)
    assert not decision.admitted
    assert decision.remaining == 2


def test_counts_from_an_old_window_never_leak(throttle: Throttle, hit: Hit) -> None:
    """A counter key read after its window ended (expiry is lazy) is ignored."""
    for _ in range(3):
        hit("3/h", at=0)
    client = throttle.storage.client
    for key in client.keys("*"):
        client.persist(key)  # as if expiry had not happened yet
    assert hit("3/h", at=3_600).remaining == 2


def test_storage_errors_become_storage_unavailable() -> None:
    from flask_redis_throttle.core.engine.throttle import StorageUnavailable
    from flask_redis_throttle.testing import free_port

    throttle = Throttle(Storage.from_url(f"redis://127.0.0.1:{free_port()}/0"))
    with pytest.raises(StorageUnavailable) as info:
        throttle.hit([(Policy(parse_limits("1/s"), "s"), [IP])])
    assert isinstance(info.value.__cause__, redis.ConnectionError)


def test_prefix_with_braces_is_refused() -> None:
    with pytest.raises(ValueError, match="braces"):
        Throttle(Storage.from_url("memory://"), prefix="app{1}:")


def test_counters_of_the_old_layout_are_not_read(throttle: Throttle, hit: Hit, clock: Clock) -> None:
    """0.2 kept a key per layer, ``...:<scope>:fw:1m``; 0.3 neither reads
    nor writes it, and a reset of the scope deletes it too."""
    from flask_redis_throttle.core.engine.keys import identity_tag
    from flask_redis_throttle.core.stores.reset import reset_identity

    old = f"rl:{{{identity_tag('ip', IP.value)}}}:s:fw:1m"
    client = throttle.storage.client
    client.set(old, f"{T0 // 60_000_000}:5", px=60_000)  # a full 5/m counter, in 0.2's form
    assert [hit("5/m", at=0).admitted for _ in range(6)] == [True] * 5 + [False]
    assert client.get(old) == f"{T0 // 60_000_000}:5".encode()
    assert reset_identity(throttle, IP, ["s"]) == 2


def test_request_keys_are_kept_in_a_bounded_cache(
    storage: Storage, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's keys (penalty keys too) are made once per identity and
    policy and kept; a flood of new identities does not grow that cache
    past its bound, and a value too long for the tag cache is not kept
    here either."""
    throttle = Throttle(storage, prefix="bounded:", secret=b"s3cret")
    policy = Policy(parse_limits("5/s"), "s", penalty=Penalty(60))
    sent: list[list[str]] = []
    evaluate = throttle.sender.evaluate

    def recording(strategies: frozenset[str], keys: list[str], args: list[int | str]) -> list[int]:
        sent.append(list(keys))
        return evaluate(strategies, keys, args)

    monkeypatch.setattr(throttle.sender, "evaluate", recording)
    cache = keys_module.cached_counter_key
    cache.cache_clear()
    clock.set(0)
    for who in [Identity("user", "0"), Identity("user", "1"), Identity("user", "0")]:
        assert throttle.hit([(policy, [who])]).admitted
        head = "bounded:{" + identity_tag(who.kind, who.value, b"s3cret")
        assert sent[-1] == [head + policy.suffix, head + policy.penalty_suffix]
        assert sent[-1][0] == throttle.key(policy, who)
    assert cache.cache_info().currsize == 4
    long_value = Identity("user", "x" * (CACHED_VALUE_LENGTH + 1))
    assert throttle.hit([(policy, [long_value])]).admitted
    assert sent[-1][0] == throttle.key(policy, long_value)
    assert cache.cache_info().currsize == 4
    # A flood, sent to a stand-in for the storage: many thousand script
    # calls would only make the test slow.
    monkeypatch.setattr(throttle.sender, "evaluate", lambda strategies, keys, args: [1, 1, 4, 1_000_000, 0, T0])
    size = cache.cache_info().maxsize
    assert size is not None
    for number in range(size):
        throttle.hit([(policy, [Identity("user", str(number))])])
    assert cache.cache_info().currsize == size


def test_a_request_shape_is_laid_out_once_and_the_layouts_are_bounded(
    storage: Storage, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan and reply layout of a request depend only on its policies'
    plan entries and how many identities each has: made once, kept by
    those values in a bounded cache, and equal policies share one."""
    from flask_redis_throttle.core.engine import throttle as throttle_module

    throttle = Throttle(storage, prefix="shapes:")
    clock.set(0)
    policy = Policy(parse_limits("100/s;1000/m"), "s")
    ids = [Identity("ip", "1.2.3.4"), Identity("user", "7")]
    layouts = throttle._layouts
    first = throttle.hit([(policy, ids)])
    assert len(layouts) == 1
    # Other identities, as many, and an equal policy made again: the same shape.
    twin = Policy(parse_limits("100/s;1000/m"), "s")
    again = throttle.hit([(twin, [Identity("ip", "1.2.3.4"), Identity("user", "7")])])
    assert len(layouts) == 1
    assert (first.remaining, again.remaining) == (99, 98)
    assert throttle.hit([(policy, ids[:1])]).remaining == 97
    assert len(layouts) == 2
    monkeypatch.setattr(throttle_module, "LAYOUT_CACHE_SIZE", 3)
    for quota in range(10):
        dynamic = Policy(parse_limits(f"{quota + 1}/s"), f"d{quota}")
        decision = throttle.hit([(dynamic, ids[:1]), (policy, ids[1:])])
        assert decision.admitted
        assert decision.policy is policy or decision.policy is dynamic
        assert len(layouts) <= 3


def test_a_request_with_a_penalty_sends_its_penalty_keys_after_its_counters(
    storage: Storage, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keys of a call: every counter's, then the penalty keys of the
    policies that have one, whether the identity's key is kept or too long
    for the key cache."""
    throttle = Throttle(storage, prefix="calls:")
    clock.set(0)
    policy = Policy(parse_limits("100/s"), "s", penalty=Penalty(60))
    plain = Policy(parse_limits("100/s"), "t")
    who = Identity("ip", "1.2.3.4")
    long_value = Identity("user", "x" * (CACHED_VALUE_LENGTH + 1))
    keys, layout, strategies = throttle._prepare([(policy, [who, long_value]), (plain, [who])])
    counters = [throttle.key(policy, who), throttle.key(policy, long_value), throttle.key(plain, who)]
    penalties = [key.replace(":fw", ":pn") for key in counters[:2]]
    assert keys == counters + penalties
    assert layout.penalized
    assert strategies == frozenset(["fixed-window"])
    assert [throttle.hit([(policy, [who])]).remaining for _ in range(2)] == [99, 98]
