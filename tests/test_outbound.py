"""The outbound limiter: calls wait for their turn under a quota shared by
every process that uses the same Redis, on Redis's own clock."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import itertools
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from flask import Flask
from helpers import Clock

from flask_redis_throttle import testing
from flask_redis_throttle.core.engine import outbound
from flask_redis_throttle.core.engine.outbound import QuotaTimeout, SharedQuota, acquire, reserve
from flask_redis_throttle.core.engine.throttle import Check, Decision, Throttle
from flask_redis_throttle.core.errors import InvalidLimit
from flask_redis_throttle.core.storages.storage import Storage
from flask_redis_throttle.testing import RedisServer


@pytest.fixture
def throttle(storage: Storage) -> Throttle:
    """A throttle on memory://, Redis and a cluster."""
    return Throttle(storage)


class _HostClock(Throttle):
    """Decides on this host's clock, Redis's too (it runs here), and keeps
    the time of the last decision: a turn is then exactly that plus the
    wait, whenever the process wakes up."""

    decided = 0

    def now(self) -> int:
        self.decided = time.time_ns() // 1000
        return self.decided


@pytest.mark.real_clock
def test_calls_are_spread_at_the_quotas_rate(storage: Storage) -> None:
    throttle = _HostClock(storage)
    quota = SharedQuota(throttle, "20/s", scope="api.example.com")
    turns, waits = [], []
    for _ in range(6):
        waits.append(quota.acquire())
        turns.append(throttle.decided + round(waits[-1] * 1_000_000))
    assert waits[0] == 0
    # One call every 50 ms: a call that asked before its turn waits for
    # exactly the turn after the last one; one that a busy machine ran
    # late goes at once.
    for wait, gap in zip(waits[1:], itertools.pairwise(turns), strict=True):
        assert gap[1] - gap[0] == 50_000 if wait > 0 else gap[1] - gap[0] >= 50_000


def test_a_turn_past_the_timeout_raises_at_once_and_takes_nothing(throttle: Throttle, clock: Clock) -> None:
    quota = SharedQuota(throttle, "2/s", scope="slow", timeout=0.2)
    assert quota.acquire() == 0
    started = time.monotonic()
    with pytest.raises(QuotaTimeout, match=r"no turn under the quota 'slow' within 0.2 s") as raised:
        quota.acquire()
    assert time.monotonic() - started < 0.2  # it did not wait for the timeout
    assert raised.value.retry_after == pytest.approx(0.5)
    # Nothing was taken: a longer timeout gets the turn at 0.5 s.
    assert quota.acquire(timeout=1) == pytest.approx(0.5)


def test_a_zero_timeout_takes_only_a_free_turn(throttle: Throttle, clock: Clock) -> None:
    quota = SharedQuota(throttle, "1/s", scope="now", timeout=0)
    assert quota.acquire() == 0
    with pytest.raises(QuotaTimeout):
        quota.acquire()
    with pytest.raises(QuotaTimeout):  # the refusal took no turn either
        quota.acquire()


def test_a_cost_that_never_gets_a_turn_is_refused(throttle: Throttle) -> None:
    quota = SharedQuota(throttle, "5/s", scope="big")
    with pytest.raises(ValueError, match="cost 2 is more than 'big' lets go at once"):
        quota.acquire(cost=2)


def test_the_context_managers_and_decorators_wait(throttle: Throttle, clock: Clock) -> None:
    # The pinned clock stands still: the four calls take the turns 0, 0.1,
    # 0.2 and 0.3 s away, and sleep that long, however busy the machine.
    quota = SharedQuota(throttle, "10/s", scope="wrapped")
    calls: list[str] = []

    @quota
    def call() -> None:
        calls.append("decorated")

    @quota
    async def call_async() -> None:
        calls.append("decorated async")

    async def run() -> None:
        async with quota:
            calls.append("async with")
        await call_async()

    started = time.monotonic()
    with quota:
        calls.append("with")
    call()
    asyncio.run(run())
    assert time.monotonic() - started >= 0.1 + 0.2 + 0.3
    assert calls == ["with", "decorated", "async with", "decorated async"]
    assert reserve(throttle, quota.policies, quota.identity) == pytest.approx(0.4)


def test_waiting_does_not_block_the_event_loop(
    throttle: Throttle, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Waits of 0.25 and 0.5 s (the pinned clock stands still, so they are
    # exact however late a worker thread runs): a loop blocked by either
    # would stop ticking for that long, and a blocking sleep in the loop's
    # thread is caught as it is made.
    quota = SharedQuota(throttle, "4/s", scope="loop")
    ticks: list[float] = []
    loop_thread = threading.get_ident()
    blocking: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if threading.get_ident() == loop_thread:
            blocking.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(outbound.time, "sleep", sleep)

    async def ticker() -> None:
        for _ in range(30):
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    async def run() -> list[float]:
        waits = asyncio.gather(*(quota.acquire_async() for _ in range(3)))
        _, got = await asyncio.gather(ticker(), waits)
        return list(got)

    waits = asyncio.run(run())
    assert sorted(waits) == pytest.approx([0.0, 0.25, 0.5])
    assert blocking == []
    assert max(b - a for a, b in itertools.pairwise(ticks)) < 0.25


def _worker(url: str, calls: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    storage = Storage.from_url(url)
    throttle = _HostClock(storage)
    quota = SharedQuota(throttle, "20/s", scope="shared")
    for _ in range(calls):
        wait = quota.acquire()
        out.put(throttle.decided + round(wait * 1_000_000))
    storage.close()


@pytest.mark.real_clock
@pytest.mark.redis
def test_processes_share_the_quota(redis_server: RedisServer, redis_client: Any) -> None:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [context.Process(target=_worker, args=(redis_server.url, 10, out)) for _ in range(3)]
    for worker in workers:
        worker.start()
    turns = sorted(out.get(timeout=60) for _ in range(30))
    for worker in workers:
        worker.join(10)
    # 30 turns at 20 a second: never two closer than 50 ms, so never more
    # than 20 in a second (later when a busy machine ran no worker at a
    # turn's time).
    assert min(b - a for a, b in itertools.pairwise(turns)) >= 50_000
    assert all(later - first >= 1_000_000 for first, later in zip(turns, turns[20:], strict=False))


def test_the_functions_take_a_policy_and_identity(throttle: Throttle, clock: Clock) -> None:
    quota = SharedQuota(throttle, "5/s", scope="plain")
    assert reserve(throttle, quota.policies, quota.identity) == 0
    assert acquire(throttle, quota.policies, quota.identity) == pytest.approx(0.2)


def test_a_wait_is_one_script_call_and_no_polling(throttle: Throttle, clock: Clock) -> None:
    calls: list[int] = []

    class Counting(Throttle):
        def hit(self, checks: Sequence[Check], cost: int = 1, returnable: bool = False) -> Decision:
            calls.append(cost)
            return super().hit(checks, cost, returnable)

    quota = SharedQuota(Counting(throttle.storage), "4/s", scope="counted")
    waits = [quota.acquire() for _ in range(3)]
    assert waits == pytest.approx([0, 0.25, 0.5])
    assert calls == [1, 1, 1]


# The docs' quota, "10/s;2000/d": calls go at the pace of its shortest
# layer, and the longer layers cap the total (issue 32, item 10).


def test_the_docs_weather_quota_goes_at_ten_a_second(storage_url: str, clock: Clock) -> None:
    # The Flask app of docs/shaping.rst, its view waiting 2 s at most: with
    # every layer paced, the second call's turn was the daily layer's,
    # 43.2 s away, and the view answered 503 at once.
    storage = Storage.from_url(storage_url)
    api_quota = SharedQuota(Throttle(storage), "10/s;2000/d", scope="api.weather.example", timeout=30)
    app = Flask("weather")

    @app.get("/forecast/<city>")
    def forecast(city: str) -> Any:
        try:
            waited = api_quota.acquire(timeout=2)
        except QuotaTimeout as error:
            return {"error": "busy, try again"}, 503, {"Retry-After": str(int(error.retry_after) + 1)}
        return {"city": city, "waited": waited}

    try:
        client = app.test_client()
        replies = [client.get(f"/forecast/city{n}") for n in range(3)]
        assert [reply.status_code for reply in replies] == [200, 200, 200]
        # The pinned clock stands still: each turn is the last one plus 100 ms.
        assert [reply.get_json()["waited"] for reply in replies] == pytest.approx([0.0, 0.1, 0.2])
        # And the quota's own timeout, 30 s, lets a call wait its turn too.
        assert api_quota.acquire() == pytest.approx(0.3)
    finally:
        storage.close()


def test_the_longer_layers_cap_the_total_exactly(throttle: Throttle, clock: Clock) -> None:
    # 2 a second and 5 a minute: five calls at the 2/s pace, then the sixth
    # waits for the first to be a minute old, never more than 5 in a minute.
    quota = SharedQuota(throttle, "2/s;5/m", scope="capped", timeout=30)
    turns = []
    for n in range(5):
        clock.set(n * 0.5)
        turns.append(n * 0.5 + quota.acquire())
    assert turns == pytest.approx([0, 0.5, 1, 1.5, 2])
    clock.set(2.5)
    with pytest.raises(QuotaTimeout) as raised:
        quota.acquire()
    assert raised.value.retry_after == pytest.approx(57.5)
    assert reserve(throttle, quota.policies, quota.identity, timeout=60) == pytest.approx(57.5)


def test_the_pace_is_the_shortest_windows_whatever_the_order(throttle: Throttle, clock: Clock) -> None:
    quota = SharedQuota(throttle, "100/h;4/s", scope="ordered", burst=2)
    pace, cap = quota.policies
    assert (pace.strategy, [layer.window for layer in pace.layers], pace.burst) == ("gcra", [1], 2)
    assert (cap.strategy, [layer.window for layer in cap.layers]) == ("sliding-log", [3600, 1])
    # A burst of 2 goes at once, then one every 250 ms.
    assert [reserve(throttle, quota.policies, quota.identity) for _ in range(4)] == pytest.approx([0, 0, 0.25, 0.5])


def test_a_quota_without_layers_or_with_a_burst_past_its_pace_fails_when_made(throttle: Throttle) -> None:
    with pytest.raises(InvalidLimit, match="at least one layer"):
        SharedQuota(throttle, [], scope="empty")
    with pytest.raises(InvalidLimit, match="burst 11 must be from 1 to 10"):
        SharedQuota(throttle, "10/s;2000/d", scope="bursty", burst=11)


# A wait given up on gives its turn back (issue 32, item 11). The pinned
# clock stands still, so every turn reserved is a fixed time away and a
# turn kept by an abandoned wait shows in the next caller's.


def test_cancelled_async_waits_give_their_turns_back(throttle: Throttle, clock: Clock) -> None:
    quota = SharedQuota(throttle, "2/s", scope="cancelled")

    async def run() -> None:
        assert await quota.acquire_async() == 0
        for _ in range(10):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(quota.acquire_async(), 0.1)

    asyncio.run(run())
    # Ten waits gave up on the turn at 0.5 s: it is still the next one (it
    # was 5.5 s away).
    assert reserve(throttle, quota.policies, quota.identity) == pytest.approx(0.5)


def test_interrupted_waits_give_their_turns_back(throttle: Throttle, clock: Clock) -> None:
    # Ctrl-C during acquire(): SIGINT, raised as KeyboardInterrupt in the
    # main thread, in the middle of the sleep.
    quota = SharedQuota(throttle, "2/s", scope="interrupted")
    assert quota.acquire() == 0
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for _ in range(6):
            timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                quota.acquire()
            timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert reserve(throttle, quota.policies, quota.identity) == pytest.approx(0.5)


def test_callers_with_deadlines_leave_the_turns_they_give_up_to_the_next(throttle: Throttle, clock: Clock) -> None:
    # 20 callers at once on 10/s, each giving up after 1 s: the turns
    # 0 to 0.9 s are taken, those from 1 s (and any a busy machine woke up
    # too late for) are given back, whichever order the refunds land in.
    quota = SharedQuota(throttle, "10/s", scope="deadlines")

    async def call() -> bool:
        try:
            await asyncio.wait_for(quota.acquire_async(), 1.0)
        except asyncio.TimeoutError:
            return False
        return True

    async def run() -> list[bool]:
        return list(await asyncio.gather(*(call() for _ in range(20))))

    got = asyncio.run(run())
    given_up = got.count(False)
    assert given_up >= 10, got  # more when a busy machine woke a caller late
    # The next turn is the first given up on: 2 s away if none had been.
    assert reserve(throttle, quota.policies, quota.identity) == pytest.approx(2.0 - 0.1 * given_up)


def test_a_turn_given_back_from_the_middle_keeps_every_window_to_the_quota(throttle: Throttle, clock: Clock) -> None:
    # Eight turns reserved on 4/s; the 2nd and 5th are given back while
    # the others wait. The next two calls take those turns, the soonest
    # first, and the calls after them go on from the end of the line: the
    # turns stay 0.25 s apart, and every second holds 4 calls.
    quota = SharedQuota(throttle, "4/s", scope="middle")
    taken = [outbound._take(throttle, quota.policies, quota.identity) for _ in range(8)]
    assert [decision.retry_after for decision in taken] == pytest.approx([n * 0.25 for n in range(8)])
    for given in (taken[4], taken[1]):
        outbound.give_back(given.hold)
    later = [reserve(throttle, quota.policies, quota.identity) for _ in range(6)]
    assert later == pytest.approx([0.25, 1.0, 2.0, 2.25, 2.5, 2.75])
    turns = [decision.retry_after for n, decision in enumerate(taken) if n not in (1, 4)] + later
    turns.sort()
    for n, first in enumerate(turns):
        assert sum(first <= turn < first + 1 - 1e-9 for turn in turns[n:]) <= 4, turns


def test_a_wait_cancelled_while_its_turn_is_reserved_gives_it_back(storage: Storage, clock: Clock) -> None:
    # Cancelled while the script call runs (a slow network): the turn the
    # call reserved after the cancellation is given back once it answers.
    given_back = threading.Event()

    class Slow(Throttle):
        def hit(self, checks: Sequence[Check], cost: int = 1, returnable: bool = False) -> Decision:
            time.sleep(0.3)
            return super().hit(checks, cost, returnable)

        def call(self, function: Any, keys: Sequence[str], *args: Any, **kwargs: Any) -> Any:
            result = super().call(function, keys, *args, **kwargs)
            if int(args[2][1]) < 0:  # a refund
                given_back.set()
            return result

    throttle = Slow(storage)
    quota = SharedQuota(throttle, "1/s", scope="slow")

    async def run() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(quota.acquire_async(), 0.1)

    asyncio.run(run())
    assert given_back.wait(5)
    assert reserve(Throttle(storage), quota.policies, quota.identity) == 0


@pytest.mark.parametrize("storage_url", ["memory"], indirect=True)
def test_a_turn_that_cannot_be_given_back_is_lost_with_a_warning(
    throttle: Throttle, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    quota = SharedQuota(throttle, "1/s", scope="lost")
    taken = outbound._take(throttle, quota.policies, quota.identity)

    class Broken(Throttle):
        def call(self, function: Any, keys: Sequence[str], *args: Any, **kwargs: Any) -> Any:
            raise outbound.StorageUnavailable("down")

    assert taken.hold is not None
    outbound.give_back(dataclasses.replace(taken.hold, throttle=Broken(throttle.storage)))
    assert "could not give back a turn of an outbound quota (down): it is lost" in caplog.text


# A Redis restart without persistence forgets the quota (issue 32, item
# 12): the bound is documented, and persistence keeps the rate.


def _turns_across_a_restart(server: RedisServer) -> list[int]:
    """The turns, on the host's clock (Redis's), that 20 threads got on
    5/s for 3 s, with ``server`` killed and started again at 1.5 s."""
    storage = Storage.from_url(server.url)
    throttle = Throttle(storage)
    quota = SharedQuota(throttle, "5/s", scope="restarted")
    turns: list[int] = []
    stop = time.monotonic() + 3

    def caller() -> None:
        while time.monotonic() < stop:
            try:
                taken = outbound._take(throttle, quota.policies, quota.identity)
            except outbound.StorageUnavailable:
                time.sleep(0.01)
                continue
            assert taken.hold is not None
            turns.append(taken.hold.now + taken.hold.wait)
            time.sleep(taken.retry_after)

    threads = [threading.Thread(target=caller) for _ in range(20)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    server.stop()
    server.start()
    for thread in threads:
        thread.join()
    storage.close()
    return sorted(turns)


def _most_in_a_second(turns: list[int]) -> int:
    return max(sum(first <= turn < first + 1_000_000 for turn in turns[n:]) for n, first in enumerate(turns))


@pytest.mark.real_clock
@pytest.mark.redis
def test_a_restart_without_persistence_at_most_doubles_a_window() -> None:
    # The turns waiting when Redis lost the quota keep them; the calls after
    # it start afresh: each side holds a second to 5, so never more than 10.
    with testing.redis_server() as server:
        turns = _turns_across_a_restart(server)
    assert _most_in_a_second(turns) <= 2 * 5


@pytest.mark.real_clock
@pytest.mark.redis
def test_a_restart_with_every_write_persisted_keeps_the_rate() -> None:
    with testing.redis_server(["--appendonly", "yes", "--appendfsync", "always"]) as server:
        turns = _turns_across_a_restart(server)
    assert _most_in_a_second(turns) <= 5


# Bad input fails at once, before anything is reserved or given back.


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), "5", True, 2**40])
def test_a_bad_timeout_fails_when_the_quota_is_made_and_when_a_call_gives_it(throttle: Throttle, timeout: Any) -> None:
    with pytest.raises(ValueError, match=r"timeout .* must be a number of seconds from 0 to 4294967"):
        SharedQuota(throttle, "1/s", scope="bad", timeout=timeout)
    quota = SharedQuota(throttle, "1/s", scope="bad")
    with pytest.raises(ValueError, match="must be a number of seconds"):
        quota.acquire(timeout=timeout)
    assert reserve(throttle, quota.policies, quota.identity) == 0  # nothing was taken


@pytest.mark.parametrize("cost", [0, -1, -5, 1.5, "1", True])
def test_a_cost_that_is_not_one_or_more_fails_and_gives_nothing_back(
    throttle: Throttle, clock: Clock, cost: Any
) -> None:
    # A negative cost was sent as a refund: it gave back turns never taken.
    quota = SharedQuota(throttle, "1/s", scope="costs")
    assert [reserve(throttle, quota.policies, quota.identity) for _ in range(2)] == [0, 1]
    with pytest.raises(ValueError, match=r"cost .* must be a whole number of 1 or more"):
        quota.acquire(cost=cost)
    with pytest.raises(ValueError, match=r"cost .* must be a whole number of 1 or more"):
        asyncio.run(quota.acquire_async(cost=cost))
    assert reserve(throttle, quota.policies, quota.identity) == 2


def test_no_policies_is_refused(throttle: Throttle) -> None:
    quota = SharedQuota(throttle, "1/s", scope="none")
    with pytest.raises(ValueError, match="no policy"):
        reserve(throttle, [], quota.identity)


def test_callers_that_give_their_deadline_as_timeout_reserve_nothing_past_it(throttle: Throttle, clock: Clock) -> None:
    # What docs/shaping.rst advises for callers with deadlines: the turns
    # past 0.95 s are refused at once rather than reserved and given back,
    # so no caller ever queues behind a turn that will be abandoned.
    quota = SharedQuota(throttle, "10/s", scope="deadlines-as-timeouts")

    async def call() -> bool:
        try:
            await quota.acquire_async(timeout=0.95)
        except QuotaTimeout:
            return False
        return True

    async def run() -> list[bool]:
        return list(await asyncio.gather(*(call() for _ in range(20))))

    assert sorted(asyncio.run(run())) == [False] * 10 + [True] * 10
    assert reserve(throttle, quota.policies, quota.identity) == pytest.approx(1.0)


@pytest.mark.real_clock
def test_turns_given_up_in_the_middle_of_the_line_go_to_the_next_callers(storage: Storage) -> None:
    # 10 callers at a time on 20/s, each giving up after 0.3 s, for 1.5 s:
    # the line is 0.5 s long, so the turns past 0.3 s are reserved and given
    # back from the middle of it. The next caller (the one that gave up,
    # trying again) takes the freed turn, 0.3 s or less away, rather than
    # one at the end of the line, past its deadline too: nearly every turn
    # of the 1.8 s is used, and the turns are still 50 ms apart, never
    # more than 20 in a second.
    turn: contextvars.ContextVar[list[int]] = contextvars.ContextVar("turn")

    class Turns(Throttle):
        def hit(self, checks: Sequence[Check], cost: int = 1, returnable: bool = False) -> Decision:
            decision = super().hit(checks, cost, returnable)
            if decision.admitted and decision.hold is not None:
                turn.get().append(decision.hold.now + decision.hold.wait)
            return decision

    quota = SharedQuota(Turns(storage), "20/s", scope="middle-of-the-line")
    turns: list[int] = []

    async def caller(stop: float) -> None:
        while time.monotonic() < stop:
            mine: list[int] = []
            turn.set(mine)
            try:
                await asyncio.wait_for(quota.acquire_async(), 0.3)
            except asyncio.TimeoutError:
                continue
            turns.extend(mine)

    async def run() -> None:
        stop = time.monotonic() + 1.5
        await asyncio.gather(*(caller(stop) for _ in range(10)))

    asyncio.run(run())
    turns.sort()
    assert len(turns) >= 28, turns  # of about 36 (33 or 34 here; 22 when freed turns went unused)
    assert all(b - a >= 50_000 for a, b in itertools.pairwise(turns)), turns
    for n, first in enumerate(turns):
        assert sum(turn < first + 1_000_000 for turn in turns[n:]) <= 20, turns


def test_a_free_turn_is_taken_once_within_the_timeout_and_never_once_gone_by(throttle: Throttle, clock: Clock) -> None:
    quota = SharedQuota(throttle, "4/s", scope="free-turns")

    def take(timeout: float | None = None) -> Decision:
        return outbound._take(throttle, quota.policies, quota.identity, timeout=timeout)

    taken = [take() for _ in range(5)]  # 0 to 1 s
    outbound.give_back(taken[3].hold)  # 0.75 s, with 1 s after it: free
    # Past a timeout of 0.5 s, and the end of the line too: refused, and
    # the free turn is still there for a call that waits for it.
    with pytest.raises(QuotaTimeout):
        take(timeout=0.5)
    again = take()
    assert again.retry_after == pytest.approx(0.75)
    # Taken, it is no longer free; given back again, it is free again.
    assert take().retry_after == pytest.approx(1.25)
    outbound.give_back(again.hold)
    assert take().retry_after == pytest.approx(0.75)
    # The last turn reserved goes back to the layers: the next call gets it.
    last = take()
    assert last.retry_after == pytest.approx(1.5)
    outbound.give_back(last.hold)
    assert take().retry_after == pytest.approx(1.5)
    # A turn freed and left until it has gone by is never taken: the next
    # call goes to the end of the line.
    outbound.give_back(taken[2].hold)  # 0.5 s
    clock.advance(0.6)
    assert take().retry_after == pytest.approx(1.75 - 0.6)


def test_a_turn_given_back_after_a_reset_is_not_kept_free(throttle: Throttle, clock: Clock) -> None:
    # The quota is reset while turns wait: one of them given back then has
    # no entry left to keep, and were it marked free, a call would take it
    # beside the four turns reserved since, five in a second.
    quota = SharedQuota(throttle, "4/s", scope="reset-while-waiting")
    taken = [outbound._take(throttle, quota.policies, quota.identity) for _ in range(4)]
    throttle.reset(quota.identity, ["reset-while-waiting"])
    clock.advance(0.1)
    turns = [0.1 + reserve(throttle, quota.policies, quota.identity) for _ in range(4)]
    assert turns == pytest.approx([0.1, 0.35, 0.6, 0.85])
    outbound.give_back(taken[2].hold)  # 0.5 s
    turns.append(0.1 + reserve(throttle, quota.policies, quota.identity))
    assert turns[-1] == pytest.approx(1.1)
