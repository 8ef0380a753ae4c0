"""Property tests: random arrivals sent to the real scripts, on memory:// and a
real Redis, compared reply by reply with the models in ``models.py``, and
checked against each strategy's promise.

Time is pinned: every request carries its own "now", in microseconds, so the
scripts see exactly the arrival times Hypothesis draws.
"""

from __future__ import annotations

import itertools
import math

import pytest
from helpers import SECOND, T0, layer_lists, request_steps
from helpers import STEP_IDENTITIES as IDENTITIES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import BUCKETS, MODELS, Counter, decide, distinct

from flask_redis_throttle.core.engine.rates import Layer
from flask_redis_throttle.core.engine.scripts import STRATEGIES
from flask_redis_throttle.core.engine.throttle import Policy, Throttle
from flask_redis_throttle.core.storages.storage import Storage

steps = request_steps(max_size=40)
_scopes = itertools.count()


@pytest.mark.parametrize("strategy", [*STRATEGIES, "mixed"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layers=layer_lists, steps=steps, start=st.integers(0, 2 * SECOND), duplicate=st.booleans(), data=st.data())
def test_scripts_match_models_and_keep_promises(
    storage: Storage,
    strategy: str,
    layers: list[tuple[int, int]],
    steps: list[tuple[int, int, tuple[int, ...], bool]],
    start: int,
    duplicate: bool,
    data: st.DataObject,
) -> None:
    # One policy per layer, so that in "mixed" each layer can have its own
    # strategy; a fresh scope per example keeps examples apart. Policies of
    # one strategy share the scope, so their layers share one key; with
    # `duplicate`, the first policy is sent twice, as two limits with the
    # same layer would be, and its layer must be counted once.
    scope = f"p{next(_scopes)}"
    names = [data.draw(st.sampled_from(list(STRATEGIES))) if strategy == "mixed" else strategy for _ in layers]
    policies = [Policy((Layer(q, p),), scope, name) for (q, p), name in zip(layers, names, strict=True)]
    if duplicate:
        policies.append(policies[0])
    throttle = Throttle(storage)
    counters: dict[tuple[int, int], Counter] = {
        (who, i): MODELS[name](q, p * SECOND)
        for who in (0, 1)
        for i, ((q, p), name) in enumerate(zip(layers, names, strict=True))
    }
    now = T0 + start
    for gap, cost, who, refund in steps:
        now += gap
        keys, entries, involved = [], [], []
        for w in who:
            for i, policy in enumerate(policies):
                keys.append(throttle.key(policy, IDENTITIES[w]))
                entries.append(policy.entry)
                involved.append(counters[w, i % len(layers)])
        plan = b"".join(entries)
        verdicts = [c.check(now, cost) for c in involved]
        expected = decide(involved, now, cost)
        reply = throttle.sender.evaluate(frozenset(names), keys, [now, cost, plan])
        assert list(reply) == [*expected, now], (now - T0, cost, who)
        if refund and reply[0] == 1 and cost > 0:
            # A refund at the admitting call's time undoes it exactly.
            assert list(throttle.sender.evaluate(frozenset(names), keys, [now, -cost, plan])) == [1, 0, 0, 0, 0, now]
            for counter in distinct(involved):
                counter.hits.remove((now, cost))
            # An inspection shows the state is the model's, to the microsecond.
            inspection = throttle.sender.evaluate(frozenset(names), keys, [now, 0, plan])
            assert list(inspection) == [*decide(involved, now, 0), now]
        for counter, verdict in zip(involved, verdicts, strict=True):
            if not verdict.fits and cost <= counter.quota:
                check_refusal(counter, now, cost, verdict.retry)
    for counter in counters.values():
        check_promise(counter)
    client = storage.client
    for key in client.scan_iter(f"*:{scope}:*"):
        assert client.pttl(key) > 0, key


def window_sum(counter: Counter, start: int, end: int) -> int:
    """Admitted cost in (start, end]."""
    return sum(c for t, c in counter.hits if start < t <= end)


def check_refusal(counter: Counter, now: int, cost: int, retry: int) -> None:
    """Every refusal is justified, and its retry time is exact."""
    name = type(counter).__name__
    assert retry > 0
    assert counter.fits(now + retry, cost), "retry is early"
    assert not counter.fits(now + retry - 1, cost), "retry is late"
    width = counter.period // BUCKETS
    if name == "SlidingLog":  # exact: refused only if the window is truly full
        assert window_sum(counter, now - counter.period, now) + cost > counter.quota
    elif name == "SlidingWindow":  # early by at most one sub-bucket
        assert window_sum(counter, now - counter.period - width, now) + cost > counter.quota
    elif name == "Gcra":  # never a whole window: at most `cost` intervals
        assert retry <= math.ceil(cost * counter.period / counter.quota)


def check_promise(counter: Counter) -> None:
    """What each strategy promises about the requests it admitted."""
    name, quota, period = type(counter).__name__, counter.quota, counter.period
    times = [t for t, _ in counter.hits]
    if name == "FixedWindow":  # at most the quota per clock-aligned window
        for t in times:
            start = t - t % period
            assert window_sum(counter, start - 1, start + period - 1) <= quota
    elif name in ("SlidingWindow", "SlidingLog"):  # at most the quota in any window-long span
        for t in times:
            assert window_sum(counter, t - period, t) <= quota
    else:  # GCRA: a burst of the quota, then one per interval
        for i, a in enumerate(times):
            for b in times[i:]:
                assert window_sum(counter, a - 1, b) * period <= quota * period + (b - a) * quota


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("costs", [[1, 1, 1, 1], [2, 1, 2], [1, 2, 2]])
def test_a_refund_restores_every_inspection(storage: Storage, strategy: str, costs: list[int]) -> None:
    """Hit then refund, at one instant, in every state a counter passes
    through up to full: an inspection afterwards matches one before to the
    microsecond. 3/s makes GCRA's interval a third of a microsecond short of
    whole, so its remainder carries and the refund must borrow."""
    policy = Policy((Layer(3, 1), Layer(4, 2)), f"r{next(_scopes)}", strategy)
    throttle = Throttle(storage)
    keys = [throttle.key(policy, IDENTITIES[0])]
    now = T0 + SECOND // 3

    def call(cost: int) -> list[int]:
        return list(throttle.sender.evaluate(frozenset([strategy]), keys, [now, cost, policy.entry]))

    for cost in costs:
        before = call(0)
        if call(cost)[0] == 1:
            assert call(-cost) == [1, 0, 0, 0, 0, now]
        assert call(0) == before
        call(cost)
