"""Quota leases: blocks of quota taken in one script call and spent in
process (flask_redis_throttle/core/engine/leases.py)."""

from __future__ import annotations

import http.client
import math
import multiprocessing
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from flask import Flask
from helpers import T0, Clock, get, install, wait_for_gunicorn
from prometheus_client import CollectorRegistry
from redis.crc import key_slot
from servers import RedisCluster, redis_command

from flask_redis_throttle import ConfigurationError, Identity, InvalidLimit, RateLimit, limit, parse_limits
from flask_redis_throttle._request.spec import make_spec
from flask_redis_throttle.core.engine import codec, sending
from flask_redis_throttle.core.engine.blocks import BlockCache
from flask_redis_throttle.core.engine.leases import SHARE, Leases
from flask_redis_throttle.core.engine.throttle import Check, Policy, StorageUnavailable, Throttle
from flask_redis_throttle.core.factory import build_throttle
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.extension import RateLimitState
from flask_redis_throttle.testing import RedisServer, free_port, redis_server

ALICE = Identity("ip", "10.0.0.1")
#: The repository, for the processes the tests start.
ROOT = str(pathlib.Path(__file__).resolve().parent.parent)


def checks_of(spec: str, strategy: str = "fixed-window", scope: str = "s") -> list[Check]:
    return [(Policy(tuple(parse_limits(spec)), scope, strategy), [ALICE])]


@pytest.fixture
def leases(storage: Storage) -> Iterator[Leases]:
    leases = Leases(Throttle(storage))
    yield leases
    leases.give_back()


def used(leases: Leases, checks: list[Check]) -> int:
    """What Redis has counted of the layer with the least left, read without counting."""
    decision = leases.throttle.hit(checks, 0)
    return decision.layer.quota - decision.remaining


# -- the core, on a pinned clock ------------------------------------------------


def test_a_busy_identity_takes_blocks_and_spends_them_without_a_call(leases: Leases, clock: Clock) -> None:
    checks = checks_of("10000/minute")
    for _ in range(1000):
        assert leases.hit(checks).admitted
        clock.advance(0.001)  # 1,000 requests a second
    assert leases.calls <= 0.05 * 1000
    # Redis counted every unit spent, and the units in hand: never fewer.
    assert 1000 <= used(leases, checks) <= 1000 + 150


def test_blocks_shrink_to_one_unit_near_the_limit_and_never_admit_past_it(leases: Leases, clock: Clock) -> None:
    checks = checks_of("100/minute")
    other = Leases(leases.throttle)  # a second worker on the same counters
    admitted = 0
    for i in range(300):
        admitted += (leases if i % 2 else other).hit(checks).admitted
        clock.advance(0.001)
    assert admitted == 100  # the quota, exactly: what was leased was all spent
    assert used(leases, checks) == 100


@pytest.mark.parametrize("spec", ["1000/second", "100000/hour;1000/second"])
def test_a_block_is_never_spent_after_its_window_ends(leases: Leases, clock: Clock, spec: str) -> None:
    # With several layers, the block ends with the first window to end.
    checks = checks_of(spec)
    clock.set(0.95)  # a block leased just before the window ends
    for _ in range(40):
        leases.hit(checks)
        clock.advance(0.001)
    held = sum(lease.units for lease in leases._leases.values())
    assert held > 0
    clock.set(1.0)  # the next window: the block is dropped, the request counted in Redis
    calls = leases.calls
    decision = leases.hit(checks)
    assert decision.admitted
    assert leases.calls == calls + 1
    # The new window counts this request and the new block in hand, nothing of the old one.
    assert used(leases, checks) == 1 + sum(lease.units for lease in leases._leases.values())


def test_a_block_ends_with_the_shortest_layers_window(leases: Leases, clock: Clock) -> None:
    checks = checks_of("50/second;100000/hour")
    other = Leases(leases.throttle)
    per_second: Counter[int] = Counter()
    for i in range(6000):  # two workers, each at 1,000 requests a second, for 3 s
        if (leases if i % 2 else other).hit(checks).admitted:
            per_second[(clock.micros() - T0) // 1_000_000] += 1
        clock.advance(0.0005)
    assert per_second == {0: 50, 1: 50, 2: 50}
    other.give_back()


def test_a_block_is_sized_to_the_time_left_in_the_window(leases: Leases, clock: Clock) -> None:
    checks = checks_of("100000/minute")
    clock.set(59.990)  # 10 ms left, at 1,000 requests a second
    for _ in range(5):
        leases.hit(checks)
        clock.advance(0.001)
    assert used(leases, checks) <= 5 + 10


def test_unspent_units_are_given_back(leases: Leases, clock: Clock) -> None:
    checks = checks_of("10000/minute")
    for _ in range(200):
        leases.hit(checks)
        clock.advance(0.0005)
    assert used(leases, checks) > 200
    assert leases.give_back() > 0
    assert used(leases, checks) == 200


def test_a_flood_of_identities_keeps_the_table_bounded_and_the_hot_block(storage: Storage, clock: Clock) -> None:
    leases = Leases(Throttle(storage), size=10)
    hot = checks_of("100000/minute")
    for i in range(500):
        leases.hit(hot)
        leases.hit([(hot[0][0], [Identity("ip", f"10.1.{i // 250}.{i % 250}")])])
        clock.advance(0.001)
    assert len(leases._leases) <= 10
    held = leases._leases[((hot[0][0], (ALICE,)),)].units
    assert held > 0  # the busy identity's block outlived the flood
    calls = leases.calls
    for _ in range(held):
        assert leases.hit(hot).admitted
    assert leases.calls == calls
    leases.give_back()


@pytest.mark.redis
def test_no_block_is_kept_from_the_fallback_once_redis_is_back(clock: Clock) -> None:
    port = free_port()
    options = {"socket_timeout": 0.2, "socket_connect_timeout": 0.2}
    throttle = build_throttle(Storage.from_url(f"redis://127.0.0.1:{port}/0", options), fallback=True)
    leases = Leases(throttle)
    checks = checks_of("100000/minute")
    for _ in range(100):  # Redis is down: the fallback decides
        decision = leases.hit(checks)
        assert decision.admitted
        assert decision.fallback
        clock.advance(0.001)
    server = RedisServer(port=port)
    server.start()
    try:
        for _ in range(50):  # Redis is back: every request is counted there
            assert leases.hit(checks).admitted
            clock.advance(0.001)
        leases.give_back()
        assert used(leases, checks) == 50
    finally:
        throttle.storage.close()
        server.close()


def _spend_in_child(leases: Leases, checks: list[Check], n: int, results: Any) -> None:
    results.put([leases.hit(checks).admitted for _ in range(n)])


@pytest.mark.redis
def test_a_forked_child_never_spends_its_parents_block(redis_client: Any, redis_server: Any, clock: Clock) -> None:
    leases = Leases(Throttle(Storage.from_url(redis_server.url)))
    checks = checks_of("100000/minute")
    for _ in range(100):
        leases.hit(checks)
        clock.advance(0.001)
    held = sum(lease.units for lease in leases._leases.values())
    assert held > 0
    before = used(leases, checks)
    context = multiprocessing.get_context("fork")  # as gunicorn --preload forks its workers
    results = context.Queue()
    child = context.Process(target=_spend_in_child, args=(leases, checks, held, results))
    child.start()
    assert all(results.get(timeout=30))
    child.join(timeout=30)
    # Every request of the child was counted in Redis: none spent the parent's units.
    assert used(leases, checks) >= before + held
    leases.give_back()


def test_a_burst_at_one_instant_does_not_pass_for_a_boundless_rate(leases: Leases, clock: Clock) -> None:
    checks = checks_of("1000000/minute")
    for _ in range(3):
        leases.hit(checks)  # three threads at the same microsecond
    assert used(leases, checks) <= 3 + 4  # not an eighth of the quota: 125,000 units no one else could use


def test_a_refusal_is_the_scripts_with_an_honest_retry_after(leases: Leases, clock: Clock) -> None:
    checks = checks_of("5/second")
    clock.set(0.2)
    decisions = [leases.hit(checks) for _ in range(6)]
    assert [d.admitted for d in decisions] == [True] * 5 + [False]
    assert decisions[-1].retry_after == pytest.approx(0.8)
    assert [d.remaining for d in decisions[:5]] == [4, 3, 2, 1, 0]


def test_absurd_costs_decide_exactly_and_never_lease_past_the_quota(leases: Leases, clock: Clock) -> None:
    checks = checks_of("10/second")
    assert not leases.hit(checks, 11).admitted
    assert leases.hit(checks, 10).admitted
    assert not leases.hit(checks, 1).admitted
    assert used(leases, checks) == 10


def test_demand_past_the_quota_is_refused_from_the_block_cache_not_by_redis(storage: Storage, clock: Clock) -> None:
    # Four workers asking twice the quota, with the block cache a worker
    # has: once the quota is spent, each request asks for its own cost,
    # whose refusal the cache remembers, not for a block of a size that
    # changes with every request, which Redis would refuse every time.
    throttle = Throttle(storage, blocks=BlockCache(100))
    workers = [Leases(throttle) for _ in range(4)]
    checks = checks_of("1000/second")
    admitted: Counter[int] = Counter()
    for i in range(6000):  # 2,000 requests a second for 3 seconds
        admitted[i // 2000] += workers[i % 4].hit(checks).admitted
        clock.advance(1 / 2000)
    assert list(admitted.values()) == [1000] * 3
    # Per request, a window costs 1,004 calls (each admission, and each
    # worker's first refusal); leased, about 46: the blocks, which shrink
    # near the limit, and one exact refusal a worker. Blocks whose size
    # changed with every refused request cost 1,623.
    assert sum(worker.calls for worker in workers) <= 3 * 60


def test_a_block_the_cache_refuses_still_decides_the_request_exactly(storage: Storage, clock: Clock) -> None:
    # Two workers' tables in step ask for blocks of the same size; another
    # worker leaves 2 units. The first block is refused by Redis and
    # remembered at its size by the block cache; the second is refused by
    # the cache: its request, of cost 1, must still be decided exactly.
    throttle = Throttle(storage, blocks=BlockCache(100))
    first, second = Leases(throttle), Leases(throttle)
    checks = checks_of("100/second")
    for _ in range(3):  # the same requests, 10 ms apart
        assert first.hit(checks).admitted
        assert second.hit(checks).admitted
        clock.advance(0.01)
    assert throttle.hit(checks, 100 - used(first, checks) - 2).admitted  # another worker
    assert first.hit(checks).admitted
    assert second.hit(checks).admitted  # the last unit, though a block was refused from the cache
    assert used(first, checks) == 100


@pytest.mark.parametrize("jump", [0.5, -1.0], ids=["forward", "back"])
def test_a_jump_of_redis_clock_admits_at_most_the_units_in_hand_once(
    leases: Leases, clock: Clock, monkeypatch: pytest.MonkeyPatch, jump: float
) -> None:
    # Redis's clock jumps (a failover to a server whose clock differs) into
    # another window, whose quota is whole; the worker's own clock, which
    # says when a block must be spent, does not jump. What the worker
    # holds is spent on top of that window's quota: at most once, then every
    # unit is counted in the window Redis is in.
    checks = checks_of("1000/second")
    clock.set(0.2)
    worker = [clock.micros()]
    monkeypatch.setattr(leases, "_clock", lambda: worker[0])
    for _ in range(500):  # 1,000 requests a second, on both clocks
        assert leases.hit(checks).admitted
        clock.advance(0.001)
        worker[0] += 1000
    held = sum(lease.units for lease in leases._leases.values())
    assert held > 0
    clock.advance(jump)
    admitted = 0
    for _ in range(3000):  # three times the quota, within Redis's window
        admitted += leases.hit(checks).admitted
        clock.advance(0.00005)
        worker[0] += 50
    assert 1000 <= admitted <= 1000 + held
    assert used(leases, checks) + held >= admitted


def masters_of(cluster: RedisCluster) -> dict[int, int]:
    """Each slot's master's port, by the first master's word."""
    served: dict[int, int] = {}
    for start, end, master, *_ in redis_command(cluster.masters()[0].port, "CLUSTER", "SLOTS"):
        served.update(dict.fromkeys(range(int(start), int(end) + 1), int(master[1])))
    return served


#: The limit the skewed cluster's tests count under.
SKEWED = Policy(tuple(parse_limits("1000/10 seconds")), "s", "fixed-window")


def skew_alice(monkeypatch: pytest.MonkeyPatch, cluster: RedisCluster, throttle: Throttle, skew: int) -> Identity:
    """Make the master of Alice's counters under :data:`SKEWED` decide
    ``skew`` microseconds ahead of the others, and return a user whose
    counters live on another master. Two nodes' clocks cannot differ on one
    host: the time the pinned clock sends with each call to her master is
    moved instead, as a skewed clock moves the time the script reads. A
    refund's time is the admission's, sent as it is: only the times of
    calls that count or inspect are moved."""
    served = masters_of(cluster)
    ahead = served[key_slot(throttle.key(SKEWED, ALICE).encode())]
    bob = next(
        who
        for who in (Identity("user", f"bob{i}") for i in range(200))
        if served[key_slot(throttle.key(SKEWED, who).encode())] != ahead
    )

    def skewed(keys: Any, args: Any) -> list[codec.Part]:
        return [
            replace(part, args=[part.args[0] + skew, *part.args[1:]])
            if served[key_slot(part.keys[0].encode())] == ahead and part.args[1] >= 0
            else part
            for part in codec.split(keys, args)
        ]

    monkeypatch.setattr(sending, "split", skewed)
    return bob


@pytest.mark.redis
def test_a_block_on_a_cluster_ends_with_the_window_of_the_node_whose_clock_is_ahead(
    redis_cluster: RedisCluster, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The request counts Alice on one master, whose clock is 3 s ahead (see
    # skew_alice), and Bob on another: Alice's windows end 3 s before Bob's.
    # A block taken before Alice's window ends and spent after it would be
    # spent in her next window, where nothing counted it, and her windows
    # would admit more than the quota. The windows are 10 s long: a
    # counter's expiry runs on the server's own clock, and the test takes a
    # few real seconds on a busy machine.
    redis_cluster.flushall()
    skew = 3_000_000
    storage = Storage.from_url(redis_cluster.url)
    leases = Leases(Throttle(storage))
    bob = skew_alice(monkeypatch, redis_cluster, leases.throttle, skew)
    checks: list[Check] = [(SKEWED, [ALICE, bob])]
    alice: Counter[int] = Counter()
    bobs: Counter[int] = Counter()
    while clock.at < 20.0:  # 100 requests a second until Alice's window ends, 500 after
        if leases.hit(checks).admitted:
            alice[(clock.micros() - T0 + skew) // 10_000_000] += 1
            bobs[(clock.micros() - T0) // 10_000_000] += 1
        clock.advance(0.01 if clock.at < 7.0 else 0.002)
    leases.give_back()
    storage.close()
    assert max(alice.values()) <= 1000
    assert max(bobs.values()) <= 1000


@pytest.mark.parametrize("value", ["true", 1, None])
def test_absurd_prefetch_values_on_the_app_wide_limit_are_refused_at_init(app: Flask, value: object) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"prefetch {value!r} must be True or False")):
        install(app, RATELIMIT_APPLICATION={"limit": "10/second", "prefetch": value, "identities": [everyone]})


@pytest.mark.parametrize("strategy", ["gcra", "sliding-window", "sliding-log"])
def test_other_strategies_are_decided_per_request(leases: Leases, clock: Clock, strategy: str) -> None:
    checks = checks_of("1000/second", strategy)
    for _ in range(50):
        leases.hit(checks)
        clock.advance(0.001)
    assert leases.calls == 0


@pytest.mark.redis
def test_redis_down_spends_the_block_then_the_failure_policy(clock: Clock) -> None:
    with redis_server() as server:
        storage = Storage.from_url(server.url, {"socket_timeout": 0.2})
        leases = Leases(Throttle(storage))
        checks = checks_of("100000/minute")
        for _ in range(100):
            leases.hit(checks)
            clock.advance(0.001)
        held = sum(lease.units for lease in leases._leases.values())
        assert held > 0
        os.kill(server.pid, signal.SIGSTOP)  # stalled: every call times out
        try:
            for _ in range(held):
                assert leases.hit(checks).admitted  # no call: the block in hand
            with pytest.raises(StorageUnavailable):
                leases.hit(checks)
            assert leases.give_back() == 0  # lost refund, not lost quota: the window ends
        finally:
            os.kill(server.pid, signal.SIGCONT)
        storage.close()


@pytest.mark.redis
def test_a_stalled_redis_costs_the_exit_one_refund_not_one_per_block(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker holding blocks of many identities exits while Redis is
    # stalled: each refund would wait out the socket timeout, 0.5 s by
    # default, and an exit holding a thousand blocks would outlast
    # gunicorn's graceful timeout. The first unanswered refund ends it.
    with redis_server() as server:
        storage = Storage.from_url(server.url, {"socket_timeout": 1.0})  # no timeout before the stall on a busy machine
        throttle = Throttle(storage)
        leases = Leases(throttle)
        shapes = [[(Policy(tuple(parse_limits("100000/minute")), "s"), [Identity("key", str(n))])] for n in range(5)]
        for _ in range(20):
            for checks in shapes:
                leases.hit(checks)
            clock.advance(0.001)
        assert all(lease.units for lease in leases._leases.values())
        sent = []
        unguarded = throttle.unguarded
        monkeypatch.setattr(throttle, "unguarded", lambda *args: sent.append(args) or unguarded(*args))
        os.kill(server.pid, signal.SIGSTOP)
        try:
            assert leases.give_back() == 0
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert len(sent) == 1
        storage.close()


# -- four worker processes on a real Redis ----------------------------------------


QUOTA = 400  # a second
WORKERS = 4
SECONDS = 3


def _worker(url: str, start: float, rate: float, spec: str, results: Any, die_at: float | None) -> None:
    """Send ``rate`` requests a second from ``start`` for SECONDS, each timed
    on the wall clock (which is Redis's, on this host) before and after."""
    leases = Leases(Throttle(Storage.from_url(url), blocks=BlockCache(100)))
    checks = checks_of(spec)
    times: list[tuple[float, float]] = []
    sent = 0
    while True:
        due = start + sent / rate
        if due >= start + SECONDS:
            break
        if die_at is not None and due >= die_at:
            results.put((times, sent, leases.calls))
            results.close()
            results.join_thread()  # sent before the kill
            os.kill(os.getpid(), signal.SIGKILL)  # units in hand, never given back
        pause = due - time.time()
        if pause > 0:
            time.sleep(pause)
        before = time.time()
        decision = leases.hit(checks)
        after = time.time()
        sent += 1
        if decision.admitted:
            times.append((before, after))
    results.put((times, sent, leases.calls))


def _run(url: str, rate: float, die_at_window: int | None = None) -> tuple[list[tuple[float, float]], int, int, float]:
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    start = math.ceil(time.time()) + 1.0
    die = None if die_at_window is None else start + die_at_window + 0.5
    processes = [
        context.Process(target=_worker, args=(url, start, rate, f"{QUOTA}/second", results, die if i == 0 else None))
        for i in range(WORKERS)
    ]
    for process in processes:
        process.start()
    admitted: list[tuple[float, float]] = []
    sent = calls = 0
    for _ in processes:
        times, n, c = results.get(timeout=30)
        admitted += times
        sent += n
        calls += c
    for process in processes:
        process.join(timeout=10)
    return admitted, sent, calls, start


def _per_window(admitted: list[tuple[float, float]]) -> dict[int, int]:
    """The admissions in each second, an admission timed across a boundary
    counted in the earlier second while it has room, else in the later:
    whether some assignment keeps every second within the quota."""
    certain = Counter(math.floor(a) for a, b in admitted if math.floor(a) == math.floor(b))
    straddling = Counter(math.floor(a) for a, b in admitted if math.floor(a) != math.floor(b))
    windows = sorted(set(certain) | {w + 1 for w in straddling} | set(straddling))
    counts: dict[int, int] = {}
    carry = 0
    for window in windows:
        count = certain[window] + carry
        room = max(QUOTA - count, 0)
        early = min(room, straddling[window])
        counts[window] = count + early
        carry = straddling[window] - early
    return counts


@pytest.mark.redis
@pytest.mark.real_clock
def test_four_processes_never_admit_more_than_the_quota_in_a_window(redis_client: Any, redis_server: Any) -> None:
    # Demand twice the quota: every window fills, from four processes at once.
    admitted, sent, calls, start = _run(redis_server.url, QUOTA * 2 / WORKERS)
    counts = _per_window(admitted)
    assert max(counts.values()) <= QUOTA, counts
    # Under-admission: each whole window admits at least 95 % of the quota.
    whole = [counts.get(int(start) + i, 0) for i in range(SECONDS)]
    assert min(whole) >= 0.95 * QUOTA, whole
    # Near the limit blocks shrink to one unit and every decision is exact
    # again, so this is no place for the 5 % target (see the pinned test):
    # about 0.13 measured, and more on a loaded machine, whose late workers
    # meet the end of the quota in smaller blocks.
    assert calls <= 0.4 * sent, (calls, sent)


@pytest.mark.redis
@pytest.mark.real_clock
def test_a_worker_killed_with_units_in_hand_loses_at_most_its_block(redis_client: Any, redis_server: Any) -> None:
    # The first worker is killed half way through the second window with a
    # block in hand: those units are lost to that window alone, and a block
    # is at most 1/SHARE of the quota left.
    admitted, _, _, start = _run(redis_server.url, QUOTA * 2 / WORKERS, die_at_window=1)
    counts = _per_window(admitted)
    assert max(counts.values()) <= QUOTA, counts
    killed = counts.get(int(start) + 1, 0)
    assert killed >= QUOTA - QUOTA // SHARE - 0.05 * QUOTA, counts
    assert counts.get(int(start) + 2, 0) >= 0.95 * QUOTA, counts


# -- the Flask option and the app-wide limit --------------------------------------


def prefetched(app: Flask, spec: str = "1000/minute", **config: Any) -> RateLimitState:
    """``/`` limited to ``spec`` per IP with ``prefetch=True``; ``/plain``
    by the same limit without it."""

    @app.get("/")
    @limit(spec, prefetch=True, scope="hot")
    def index() -> str:
        return "ok"

    @app.get("/plain")
    @limit(spec, scope="plain")
    def plain() -> str:
        return "ok"

    return install(app, **{"RATELIMIT_HEADERS_LEGACY": True, **config})


def counted(state: RateLimitState) -> list[int]:
    """A count of the script calls ``state``'s throttle makes, kept up to date."""
    assert state.throttle is not None
    sender, calls = state.throttle.sender, [0]
    evaluate = sender.evaluate

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return evaluate(*args, **kwargs)

    sender.evaluate = counting  # type: ignore[method-assign]
    return calls


def test_a_prefetched_view_is_decided_from_blocks(app: Flask, clock: Clock) -> None:
    state = prefetched(app, "100000/minute")
    client = app.test_client()
    calls = counted(state)
    remaining = []
    for _ in range(400):
        response = get(client)
        assert response.status_code == 200
        remaining.append(int(response.headers["X-RateLimit-Remaining"]))
        clock.advance(0.001)
    assert calls[0] <= 0.05 * 400
    # The headers count down one a request, as the per-request path's do.
    assert remaining == list(range(99_999, 99_999 - 400, -1))


def everyone(request: Any) -> str:
    """One identity for every request: the app's own budget."""
    return "everyone"


def test_the_app_wide_limit_leases_with_the_dict_form(app: Flask, clock: Clock) -> None:
    app.add_url_rule("/", "index", lambda: "ok")
    budget = {"limit": "5000/second", "prefetch": True, "identities": [everyone]}
    calls = counted(install(app, RATELIMIT_APPLICATION=budget))
    client = app.test_client()
    for i in range(1000):
        assert get(client, ip=f"192.0.2.{i % 200}").status_code == 200
        clock.advance(0.0002)  # 5,000 requests a second from many clients
    assert calls[0] <= 0.05 * 1000  # 250 calls a second at most


def test_a_prefetched_view_never_admits_past_the_quota_and_refuses_honestly(app: Flask, clock: Clock) -> None:
    prefetched(app, "50/minute")
    client = app.test_client()
    clock.set(15.0)
    codes = []
    for _ in range(80):
        response = get(client)
        codes.append(response.status_code)
        clock.advance(0.001)
    assert codes == [200] * 50 + [429] * 30
    assert int(response.headers["Retry-After"]) == 45 or response.headers["Retry-After"] == "45"
    assert response.headers["X-RateLimit-Remaining"] == "0"


def test_a_block_override_applies_before_the_lease(app: Flask, clock: Clock) -> None:
    state = prefetched(app)
    client = app.test_client()
    for _ in range(100):
        assert get(client).status_code == 200
        clock.advance(0.001)
    assert state.leases is not None
    assert sum(lease.units for lease in state.leases._leases.values()) > 0  # units in hand
    RateLimit().block("ip:192.0.2.1", duration="1h", app=app)
    assert state.overrides is not None
    state.overrides.follower.refresh(force=True)
    assert get(client).status_code == 429
    assert get(client, ip="192.0.2.2").status_code == 200


def test_refusals_of_a_prefetched_limit_are_logged(app: Flask, clock: Clock) -> None:
    state = prefetched(app, "5/minute")
    client = app.test_client()
    assert [get(client).status_code for _ in range(7)] == [200] * 5 + [429] * 2
    assert state.refusals is not None
    assert [refusal.scope for refusal in state.refusals.recent()] == ["hot"]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"strategy": "gcra"}, "GCRA has no window end"),
        ({"strategy": "sliding-window"}, "estimate weighted over two windows"),
        ({"strategy": "sliding-log"}, "stamps each request"),
        ({"delay": "250ms"}, "cannot go with delay="),
        ({"penalty": "1m"}, "would count as an offence"),
        ({"concurrent": 2}, "cannot go with concurrent="),
        ({"deduct_when": lambda response: True}, "cannot go with deduct_when="),
        ({"prefetch": "yes"}, "prefetch 'yes' must be True or False"),
    ],
)
def test_prefetch_is_refused_where_it_cannot_lease(options: dict[str, Any], said: str) -> None:
    with pytest.raises(InvalidLimit, match=re.escape(said)):
        limit("10/second", **{"prefetch": True, **options})


def test_prefetch_goes_with_the_options_it_cannot_go_with_when_they_are_off() -> None:
    """Only an option that is on rules prefetch out: a delay of 0, or None
    for the others, is the same as leaving it out."""
    made = make_spec("10/second", prefetch=True, delay=0, penalty=None, concurrent=None, deduct_when=None)
    assert made.prefetch
    assert made.delay == 0
    assert made.strategy is None


def test_prefetch_on_the_app_wide_limit_is_checked_at_init(app: Flask) -> None:
    with pytest.raises(ConfigurationError, match="GCRA has no window end"):
        install(app, RATELIMIT_APPLICATION={"limit": "10/second", "prefetch": True, "strategy": "gcra"})


def test_metrics_count_leased_decisions(storage_url: str, clock: Clock) -> None:
    registry = CollectorRegistry()
    app = Flask("tests")
    app.config.update(RATELIMIT_STORAGE_URL=storage_url)

    @app.get("/")
    @limit("3/minute", scope="hot", prefetch=True)
    def index() -> str:
        return "ok"

    RateLimit(app, metrics=registry)
    client = app.test_client()
    for _ in range(5):
        get(client)
    counts = {
        outcome: registry.get_sample_value(
            "ratelimit_decisions_total", {"endpoint": "index", "scope": "hot", "outcome": outcome}
        )
        for outcome in ("admitted", "refused", "blocked_in_process")
    }
    app.extensions["ratelimit"].throttle.storage.close()
    assert counts["admitted"] == 3
    assert (counts["refused"] or 0) + (counts["blocked_in_process"] or 0) == 2


# -- given back -------------------------------------------------------------------

_EXITING = """
import sys, time
from flask_redis_throttle import Identity, parse_limits
from flask_redis_throttle.core.engine.leases import Leases
from flask_redis_throttle.core.storages import storage as storage_module
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.core.engine.throttle import Policy, Throttle

leases = Leases(Throttle(Storage.from_url(sys.argv[1])))
checks = [(Policy(tuple(parse_limits("1000000/day")), "s"), [Identity("ip", "10.0.0.1")])]
for _ in range(300):
    assert leases.hit(checks).admitted
    time.sleep(0.0005)
print(sum(lease.units for lease in leases._leases.values()))
"""


@pytest.mark.redis
@pytest.mark.real_clock
def test_a_process_that_exits_cleanly_gives_its_units_back(redis_client: Any, redis_server: Any) -> None:
    day = time.time() // 86_400
    done = subprocess.run(
        [sys.executable, "-c", _EXITING, redis_server.url], capture_output=True, text=True, timeout=60, check=True
    )
    assert int(done.stdout) > 0  # it held units when it exited
    if time.time() // 86_400 != day:
        pytest.skip("the day's window ended during the test")
    checks = checks_of("1000000/day")
    decision = Throttle(Storage.from_url(redis_server.url)).hit(checks, 0)
    assert 1_000_000 - decision.remaining == 300  # what it spent, not what it leased


def test_threads_sharing_one_lease_table_admit_the_quota_exactly(storage: Storage, clock: Clock) -> None:
    leases = Leases(Throttle(storage))
    checks = checks_of("500/minute")
    admitted: list[bool] = []

    def send() -> None:
        for _ in range(100):
            admitted.append(leases.hit(checks).admitted)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert admitted.count(True) == 500
    leases.give_back()
    assert used(leases, checks) == 500


_SERVED = """
from flask import Flask

from flask_redis_throttle import RateLimit, limit

app = Flask(__name__)
app.config["RATELIMIT_STORAGE_URL"] = __import__("os").environ["FRT_TEST_REDIS"]


@app.route("/")
@limit("1000000/day", prefetch=True, scope="hot")
def index():
    return "ok"


@app.route("/held")
def held():
    state = app.extensions["ratelimit"]
    return str(sum(lease.units for lease in state.leases._leases.values()))


RateLimit(app)
"""


@pytest.mark.redis
@pytest.mark.real_clock
def test_a_gunicorn_worker_that_stops_gives_its_units_back(
    redis_client: Any, redis_server: Any, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "served.py").write_text(_SERVED)
    port = free_port()
    env = {**os.environ, "FRT_TEST_REDIS": redis_server.url, "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT])}
    options = ["--workers", "1", "--graceful-timeout", "5", "--bind", f"127.0.0.1:{port}"]
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", *options, "served:app"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    day = time.time() // 86_400
    try:
        wait_for_gunicorn(port, process, "/held")
        for _ in range(200):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", "/")
            assert connection.getresponse().status == 200
            connection.close()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/held")
        held = int(connection.getresponse().read())
        connection.close()
    finally:
        process.terminate()  # gunicorn stops its worker gracefully
        process.wait(timeout=30)
    assert held > 0
    if time.time() // 86_400 != day:
        pytest.skip("the day's window ended during the test")
    policy = Policy(tuple(parse_limits("1000000/day")), "hot")
    decision = Throttle(Storage.from_url(redis_server.url)).hit([(policy, [Identity("ip", "127.0.0.1")])], 0)
    assert 1_000_000 - decision.remaining == 200  # what it spent, not what it leased


def test_prefetch_under_a_strategy_setting_that_cannot_lease_is_one_call_per_request(app: Flask, clock: Clock) -> None:
    @app.get("/")
    @limit("1000/minute", prefetch=True)
    @limit("2000/minute", scope="other")
    def index() -> str:
        return "ok"

    calls = counted(install(app, RATELIMIT_STRATEGY="gcra"))
    client = app.test_client()
    for _ in range(20):
        assert get(client).status_code == 200
    assert calls[0] == 20  # both limits in one call, as without prefetch


def test_a_prefetched_limit_beside_others_with_a_cost_function(app: Flask, clock: Clock) -> None:
    # Not a simple plan: the leased limit is a batch of its own, beside a
    # per-request limit and a shadow one.
    @app.get("/")
    @limit("30/minute", prefetch=True, cost=lambda request: 3, scope="hot")
    @limit("1000/minute", scope="plain")
    @limit("5/minute", scope="watched", shadow=True)
    def index() -> str:
        return "ok"

    install(app)
    client = app.test_client()
    codes = []
    for _ in range(12):
        codes.append(get(client).status_code)
        clock.advance(0.001)
    assert codes == [200] * 10 + [429] * 2
    assert int(get(client).headers["Retry-After"]) == 60


def test_the_package_imports_and_limits_where_processes_do_not_fork() -> None:
    """Windows has no ``os.register_at_fork``: the fork hooks are installed
    only where it exists, and a prefetching app on memory:// still limits."""
    program = """
import os, random, flask, redis  # the standard library's own hooks check for it, as on Windows
del os.register_at_fork
from flask import Flask
from flask_redis_throttle import RateLimit, limit
app = Flask(__name__)
app.config["RATELIMIT_STORAGE_URL"] = "memory://"
RateLimit(app)
@app.get("/")
@limit("2/minute", prefetch=True)
def index():
    return "ok"
client = app.test_client()
print([client.get("/").status_code for _ in range(3)])
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[200, 200, 429]"


@pytest.mark.redis
def test_a_request_given_back_on_a_cluster_is_given_back_on_each_node_at_the_time_that_node_counted_it(
    redis_cluster: RedisCluster, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Alice's master runs 3 s ahead of Bob's, as in the test above: the
    # request is counted 8 s into Bob's 10 s window and 1 s into Alice's
    # next one. Its refund (a block given back, a deferred cost) must find
    # each count in the window it was made in: sent with one time for both
    # nodes, Alice's would look in the window before hers, find nothing,
    # and her 50 would stay counted until her window ends.
    redis_cluster.flushall()
    storage = Storage.from_url(redis_cluster.url)
    throttle = Throttle(storage)
    bob = skew_alice(monkeypatch, redis_cluster, throttle, 3_000_000)
    clock.set(8.0)
    decision = throttle.hit([(SKEWED, [ALICE, bob])], 50, returnable=True)
    assert decision.hold is not None  # admitted
    decision.hold.release()
    left = [throttle.hit([(SKEWED, [who])], 0).remaining for who in (ALICE, bob)]
    storage.close()
    assert left == [1000, 1000]
