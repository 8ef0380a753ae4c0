"""The outbound limiter: calls wait for their turn under a quota shared by
every process that uses the same Redis, on Redis's own clock."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import time
from collections.abc import Iterator, Sequence

import pytest

from flask_redis_throttle.core.outbound import QuotaTimeout, SharedQuota, acquire, reserve
from flask_redis_throttle.core.storage import Storage
from flask_redis_throttle.core.throttle import Check, Decision, Throttle
from flask_redis_throttle.testing import RedisServer, redis_server

pytestmark = [pytest.mark.redis, pytest.mark.real_clock]

#: How late a woken call may start, on a busy machine: turns are exact on
#: Redis's clock, and the sleeps add the scheduler's delay.
JITTER = 0.05


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture
def throttle(server: RedisServer) -> Iterator[Throttle]:
    storage = Storage.from_url(server.url)
    storage.client.flushall()
    yield Throttle(storage)
    storage.close()


def test_calls_are_spread_at_the_quotas_rate(throttle: Throttle) -> None:
    quota = SharedQuota(throttle, "20/s", scope="api.example.com")
    started = time.monotonic()
    waits = [quota.acquire() for _ in range(6)]
    elapsed = time.monotonic() - started
    assert waits[0] == 0
    # One call every 50 ms: each waits for the turn after the last one.
    assert elapsed == pytest.approx(0.25, abs=JITTER)
    assert all(0 < wait <= 0.05 + JITTER for wait in waits[1:])


def test_a_turn_past_the_timeout_raises_at_once_and_takes_nothing(throttle: Throttle) -> None:
    quota = SharedQuota(throttle, "2/s", scope="slow", timeout=0.2)
    assert quota.acquire() == 0
    started = time.monotonic()
    with pytest.raises(QuotaTimeout, match=r"no turn under the quota 'slow' within 0.2 s") as raised:
        quota.acquire()
    assert time.monotonic() - started < JITTER
    assert raised.value.retry_after == pytest.approx(0.5, abs=JITTER)
    # Nothing was taken: a longer timeout gets the turn at 0.5 s.
    assert quota.acquire(timeout=1) == pytest.approx(0.5, abs=JITTER)


def test_a_zero_timeout_takes_only_a_free_turn(throttle: Throttle) -> None:
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


def test_the_context_managers_and_decorators_wait(throttle: Throttle) -> None:
    quota = SharedQuota(throttle, "10/s", scope="wrapped")
    calls: list[float] = []

    @quota
    def call() -> None:
        calls.append(time.monotonic())

    @quota
    async def call_async() -> None:
        calls.append(time.monotonic())

    async def run() -> None:
        async with quota:
            calls.append(time.monotonic())
        await call_async()

    with quota:
        calls.append(time.monotonic())
    call()
    asyncio.run(run())
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert all(gap >= 0.1 - 0.005 for gap in gaps), gaps


def test_waiting_does_not_block_the_event_loop(throttle: Throttle) -> None:
    # Waits of 0.25 and 0.5 s: a loop blocked by either would stop ticking
    # for that long.
    quota = SharedQuota(throttle, "4/s", scope="loop")
    ticks: list[float] = []

    async def ticker() -> None:
        for _ in range(30):
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    async def run() -> list[float]:
        waits = asyncio.gather(*(quota.acquire_async() for _ in range(3)))
        _, got = await asyncio.gather(ticker(), waits)
        return list(got)

    waits = asyncio.run(run())
    assert sorted(waits) == pytest.approx([0.0, 0.25, 0.5], abs=JITTER)
    assert max(b - a for a, b in itertools.pairwise(ticks)) < 0.02 + 2 * JITTER


def _worker(url: str, calls: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    storage = Storage.from_url(url)
    quota = SharedQuota(Throttle(storage), "20/s", scope="shared")
    for _ in range(calls):
        quota.acquire()
        out.put(time.time())
    storage.close()


def test_processes_share_the_quota(server: RedisServer, throttle: Throttle) -> None:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [context.Process(target=_worker, args=(server.url, 10, out)) for _ in range(3)]
    for worker in workers:
        worker.start()
    runs = sorted(out.get(timeout=30) for _ in range(30))
    for worker in workers:
        worker.join(10)
    # 30 calls at 20 a second: 1.5 s, never more than 20 in a second.
    assert runs[-1] - runs[0] == pytest.approx(29 / 20, abs=JITTER)
    assert all(later - first >= 1 - JITTER for first, later in zip(runs, runs[20:], strict=False))


def test_the_functions_take_a_policy_and_identity(throttle: Throttle) -> None:
    quota = SharedQuota(throttle, "5/s", scope="plain")
    assert reserve(throttle, quota.policy, quota.identity) == 0
    assert acquire(throttle, quota.policy, quota.identity) == pytest.approx(0.2, abs=JITTER)


def test_a_wait_is_one_script_call_and_no_polling(server: RedisServer, throttle: Throttle) -> None:
    calls: list[int] = []

    class Counting(Throttle):
        def hit(self, checks: Sequence[Check], cost: int = 1) -> Decision:
            calls.append(cost)
            return super().hit(checks, cost)

    quota = SharedQuota(Counting(throttle.storage), "4/s", scope="counted")
    waits = [quota.acquire() for _ in range(3)]
    assert waits[2] == pytest.approx(0.25, abs=JITTER)
    assert calls == [1, 1, 1]
