"""The block cache: a blocked client's further requests are refused in
process, never one that Redis would admit."""

from __future__ import annotations

import itertools

import pytest
import redis
from flask import Flask
from helpers import Clock, evalsha_calls, get, install
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flask_redis_throttle import Identity, limit, refusal_log
from flask_redis_throttle.core.engine.blocks import MAX_AGE, Block, BlockCache
from flask_redis_throttle.core.engine.rates import Layer
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.core.engine.throttle import Policy, Throttle
from flask_redis_throttle.core.storages.storage import Storage


def limited(app: Flask, spec: str = "1/m", path: str = "/", **options: object) -> None:
    @app.get(path, endpoint=path)
    @limit(spec, **options)  # type: ignore[arg-type]
    def view() -> str:
        return "ok"


@pytest.mark.redis
@pytest.mark.parametrize("storage_url", ["redis"], indirect=True)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_flood_costs_redis_one_call(app: Flask, redis_client: redis.Redis, strategy: str, clock: Clock) -> None:
    limited(app, "1/m;100/h")
    install(app, RATELIMIT_STRATEGY=strategy)
    client = app.test_client()
    first = get(client)
    refused = get(client)
    before = evalsha_calls(redis_client)
    clock.set(0.25)
    flood = [get(client) for _ in range(200)]
    assert evalsha_calls(redis_client) == before  # not one call for 200 refusals
    assert (first.status_code, refused.status_code) == (200, 429)
    assert {r.status_code for r in flood} == {429}
    # The same answer as Redis gave, a quarter of a second on.
    retry = float(refused.headers["Retry-After"])
    for response in flood[:3]:
        assert response.headers["RateLimit-Policy"] == refused.headers["RateLimit-Policy"]
        assert response.headers["RateLimit"].startswith('"1m";r=0;t=')
        assert int(response.headers["Retry-After"]) in (retry, retry - 1)
    with app.app_context():
        assert len(refusal_log().recent()) == 1  # the refusal that started the block
    clock.set(0.25 + MAX_AGE)  # the cache asks Redis again: one call, one more log entry
    assert get(client).status_code == 429
    assert evalsha_calls(redis_client) == before + 1
    with app.app_context():
        assert len(refusal_log().recent()) == 2


def test_an_entry_is_trusted_for_a_second_at_most(app: Flask, clock: Clock) -> None:
    limited(app, "1/h")
    state = install(app)
    client = app.test_client()
    assert [get(client).status_code for _ in range(2)] == [200, 429]
    state.throttle.storage.client.flushall()  # counters reset behind the cache's back
    clock.set(MAX_AGE - 0.000_001)
    assert get(client).status_code == 429  # still from the cache
    clock.set(MAX_AGE)
    assert get(client).status_code == 200  # Redis asked again


def test_a_block_ends_when_redis_would_admit(app: Flask, clock: Clock) -> None:
    limited(app, "2/s")
    install(app, RATELIMIT_STRATEGY="sliding-log")
    client = app.test_client()
    clock.set(0.3)
    assert [get(client).status_code for _ in range(3)] == [200, 200, 429]
    clock.set(1.299_999)
    assert get(client).status_code == 429
    clock.set(1.3)
    assert get(client).status_code == 200


def test_other_quotas_on_a_shared_scope_are_not_blocked(app: Flask) -> None:
    limited(app, "1/m", "/strict", scope="shared")
    limited(app, "5/m", "/loose", scope="shared")
    install(app)
    client = app.test_client()
    assert [get(client, "/strict").status_code for _ in range(2)] == [200, 429]
    # Same counter, but a quota of 5: it has room for 4 more, so Redis must decide.
    assert [get(client, "/loose").status_code for _ in range(5)] == [200, 200, 200, 200, 429]


def test_a_cheaper_request_asks_redis(storage: Storage) -> None:
    throttle = Throttle(storage, blocks=BlockCache(10))
    policy = Policy((Layer(3, 60),), "s")
    ip = [Identity("ip", "192.0.2.1")]
    assert throttle.hit([(policy, ip)], cost=2).admitted
    refused = throttle.hit([(policy, ip)], cost=2)
    assert not refused.admitted
    assert not refused.cached
    assert throttle.hit([(policy, ip)], cost=2).cached  # the same cost: from the cache
    dearer = throttle.hit([(policy, ip)], cost=3)  # Redis: its wait is longer
    assert not dearer.admitted
    assert not dearer.cached
    assert throttle.hit([(policy, ip)], cost=1).admitted  # cheaper: fits


def test_the_cache_is_bounded() -> None:
    cache = BlockCache(3)
    for i in range(10):
        cache.add(f"k{i}", Block(1, 1, 0, 5_000_000, 5_000_000, 1_000_000))
    assert len(cache) == 3
    assert cache.find([("k9", 1), ("k0", 1)], 1, 500_000) == (0, Block(1, 1, 0, 5_000_000, 5_000_000, 1_000_000))
    assert cache.find([("k0", 1)], 1, 500_000) is None  # evicted: Redis decides
    assert cache.find([("k9", 1)], 1, 1_000_000) is None  # past its age: dropped
    assert len(cache) == 2
    cache.clear()
    assert len(cache) == 0


def test_no_cache_when_its_size_is_zero(app: Flask) -> None:
    limited(app)
    state = install(app, RATELIMIT_BLOCK_CACHE_SIZE=0)
    assert state.throttle.blocks is None
    client = app.test_client()
    assert [get(client).status_code for _ in range(3)] == [200, 429, 429]
    with app.app_context():
        assert len(refusal_log().recent()) == 2  # every refusal asked Redis


_scopes = itertools.count()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    strategy=st.sampled_from(list(STRATEGIES)),
    layers=st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 60])), min_size=1, max_size=2, unique_by=lambda r: r[1]
    ),
    steps=st.lists(
        st.tuples(st.integers(0, 700_000), st.sampled_from([(0,), (1,), (0, 1)]), st.sampled_from([1, 1, 2])),
        max_size=40,
    ),
)
def test_the_cache_never_changes_a_decision(
    storage: Storage,
    clock: Clock,
    strategy: str,
    layers: list[tuple[int, int]],
    steps: list[tuple[int, tuple[int, ...], int]],
) -> None:
    """The same random traffic, with and without the cache: the same requests
    are admitted, and a cached refusal never names a later time than Redis."""
    scope = f"c{next(_scopes)}"
    plain = Throttle(storage, prefix="plain:")
    cached = Throttle(storage, prefix="cached:", blocks=BlockCache(100))
    policy = Policy(tuple(Layer(q, p) for q, p in layers), scope, strategy)
    people = (Identity("ip", "192.0.2.1"), Identity("user", "ann"))
    at = 0
    for gap, who, cost in steps:
        at += gap
        clock.set(at / 1_000_000)
        check = [(policy, [people[w] for w in who])]
        expected, got = plain.hit(check, cost), cached.hit(check, cost)
        assert got.admitted == expected.admitted
        if got.cached:
            assert 0 < got.retry_after <= expected.retry_after


def test_a_cache_needs_room_for_one_entry() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        BlockCache(0)


def test_the_entries_are_the_cache_s_own_blocks_through_adding_and_clearing() -> None:
    """The hot path asks ``entries`` whether any block is held: it must be
    the live dict, whatever is added, evicted or cleared."""
    cache = BlockCache(2)
    entries = cache.entries
    assert not entries
    for key in ("a=1", "b=1", "c=1"):
        cache.add(key, Block(5, 1, 0, 10, 10, 10))
    assert cache.entries is entries
    assert sorted(entries) == ["b=1", "c=1"]
    cache.clear()
    assert cache.entries is entries
    assert not entries


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 4),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["add", "find", "clear"]),
            st.sampled_from(["a=1", "a=60", "b=1", "b:x=60", "c"]),
            st.integers(0, 3),
        ),
        max_size=30,
    ),
)
def test_blocked_keys_are_the_counters_of_the_entries(size: int, steps: list[tuple[str, str, int]]) -> None:
    """The hot path asks ``blocked_keys`` whether any of a request's keys
    has an entry before it names the request's layers: through adding,
    replacing, evicting, expiring and clearing, it holds each entry's
    counter (its name up to the last ``=``), and no other."""
    cache = BlockCache(size)
    view = cache.blocked_keys
    for action, name, at in steps:
        if action == "add":
            cache.add(name, Block(1, 1, 0, 2, 2, at + 1))  # trusted until at + 1
        elif action == "find":
            cache.find([(name, 1)], 1, at)  # drops the entry if it expired
        else:
            cache.clear()
        assert cache.blocked_keys is view
        assert set(view) == {key.rpartition("=")[0] or key for key in cache.entries}


def test_a_request_with_one_blocked_key_among_others_is_refused_from_the_cache(storage: Storage) -> None:
    """While another client is blocked too, the request whose user is
    blocked and whose address is not is still refused in process."""
    throttle = Throttle(storage, blocks=BlockCache(10))
    policy = Policy((Layer(1, 60),), "s1")
    other = [Identity("ip", "198.51.100.9")]
    assert throttle.hit([(policy, other)]).admitted
    assert not throttle.hit([(policy, other)]).admitted  # blocks the other client
    ann = [Identity("user", "ann")]
    assert throttle.hit([(policy, ann)]).admitted
    assert not throttle.hit([(policy, ann)]).admitted  # blocks ann
    fresh = throttle.hit([(policy, [Identity("ip", "192.0.2.7"), *ann])])
    assert not fresh.admitted
    assert fresh.cached
    assert fresh.identity == ann[0]
    assert throttle.hit([(policy, [Identity("ip", "192.0.2.8")])]).admitted  # not blocked: Redis admits
