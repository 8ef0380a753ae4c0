"""Small, obviously correct Python models of the four strategies and the driver.

They keep every admitted request as (time, cost) and recompute everything from
that list, in exact integer or Fraction arithmetic, the slow and plain way.
The property tests compare the Lua scripts with these, reply by reply.
Times are integer microseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

#: Sub-buckets per window of the sliding-window strategy.
BUCKETS = 10


@dataclass
class Verdict:
    fits: bool
    remaining: int
    reset: int
    retry: int


@dataclass
class Counter:
    """One counter: one identity's layer. ``hits`` are the admitted requests."""

    quota: int
    period: int  # microseconds
    hits: list[tuple[int, int]] = field(default_factory=list)

    def check(self, now: int, cost: int) -> Verdict:
        raise NotImplementedError

    def fits(self, now: int, cost: int) -> bool:
        return self.check(now, cost).fits


class FixedWindow(Counter):
    def check(self, now: int, cost: int) -> Verdict:
        start = now - now % self.period
        used = sum(c for t, c in self.hits if start <= t < start + self.period)
        end = start + self.period - now
        if used + cost <= self.quota:
            # Back to the full quota at the window's end; now if nothing is counted.
            return Verdict(True, self.quota - used - cost, end if used + cost else 0, 0)
        return Verdict(False, max(self.quota - used, 0), end if used else 0, end)


class SlidingWindow(Counter):
    def bucket(self, t: int) -> int:
        return t // (self.period // BUCKETS)

    def gone(self, bucket: int, now: int) -> int:
        """Microseconds from now until ``bucket`` stops being counted."""
        return (bucket + BUCKETS + 1) * (self.period // BUCKETS) - now

    def counted(self, now: int) -> list[tuple[int, int]]:
        oldest = self.bucket(now) - BUCKETS
        return [(self.bucket(t), c) for t, c in self.hits if self.bucket(t) >= oldest]

    def check(self, now: int, cost: int) -> Verdict:
        counted = self.counted(now)
        used = sum(c for _, c in counted)
        newest = max((b for b, _ in counted), default=None)
        if used + cost <= self.quota:
            # Counted now, the current sub-bucket is the newest; else the newest counted.
            latest = max(newest, self.bucket(now)) if cost and newest is not None else newest
            if cost and newest is None:
                latest = self.bucket(now)
            reset = 0 if latest is None else self.gone(latest, now)
            return Verdict(True, self.quota - used - cost, reset, 0)
        # The first sub-bucket boundary at which it would fit, by trying each.
        retry = 0
        for bucket in sorted({b for b, _ in counted}):
            moment = now + self.gone(bucket, now)
            if self.fits(moment, cost):
                retry = moment - now
                break
        reset = 0 if newest is None else self.gone(newest, now)
        return Verdict(False, max(self.quota - used, 0), reset, retry)


class SlidingLog(Counter):
    def check(self, now: int, cost: int) -> Verdict:
        inside = sorted(t for t, c in self.hits for _ in range(c) if now - self.period < t)
        used = len(inside)
        newest = max((t for t, _ in self.hits), default=None)
        reset = 0 if newest is None else max(newest + self.period - now, 0)
        if used + cost <= self.quota:
            return Verdict(True, self.quota - used - cost, self.period if cost else reset, 0)
        retry = 0
        # The first moment an entry leaves at which it would fit, by trying each.
        for t in inside:
            if self.fits(t + self.period, cost):
                retry = t + self.period - now
                break
        return Verdict(False, max(self.quota - used, 0), reset, retry)


class Gcra(Counter):
    def tat(self, now: int) -> Fraction:
        """The theoretical arrival time, replayed from every admitted request."""
        tat = Fraction(0)
        interval = Fraction(self.period, self.quota)
        for t, c in self.hits:
            tat = max(tat, Fraction(t)) + c * interval
        return max(tat, Fraction(now))

    def check(self, now: int, cost: int) -> Verdict:
        interval = Fraction(self.period, self.quota)
        tat = self.tat(now)
        after = tat + cost * interval
        if after - now <= self.period:
            remaining = math.floor((self.period - (after - now)) / interval)
            return Verdict(True, remaining, math.ceil(after - now), 0)
        remaining = max(math.floor((self.period - (tat - now)) / interval), 0)
        return Verdict(False, remaining, math.ceil(tat - now), math.ceil(after - self.period - now))


MODELS: dict[str, type[Counter]] = {
    "fixed-window": FixedWindow,
    "sliding-window": SlidingWindow,
    "sliding-log": SlidingLog,
    "gcra": Gcra,
}


def decide(counters: list[Counter], now: int, cost: int) -> tuple[int, int, int, int, int]:
    """The driver: check every counter, record only if all fit, and reply as
    the script does: admitted, deciding counter (1-based), remaining, reset, retry."""
    verdicts = []
    for counter in counters:
        verdict = counter.check(now, cost)
        if cost > counter.quota:
            verdict = Verdict(False, verdict.remaining, verdict.reset, counter.period)
        verdicts.append(verdict)
    admitted = all(v.fits for v in verdicts)
    if admitted:
        # The least quota left; the later reset breaks ties; then the first.
        best = min(range(len(verdicts)), key=lambda i: (verdicts[i].remaining, -verdicts[i].reset, i))
        if cost > 0:
            for counter in distinct(counters):
                counter.hits.append((now, cost))
    else:
        # The first counter whose whole quota is less than the cost; else
        # the longest wait among the counters that do not fit, then the first.
        refused = [i for i, v in enumerate(verdicts) if not v.fits]

        def rank(i: int) -> tuple[bool, int, int]:
            over = cost > counters[i].quota
            return (not over, 0 if over else -verdicts[i].retry, i)

        best = min(refused, key=rank)
    v = verdicts[best]
    return (int(admitted), best + 1, v.remaining, v.reset, v.retry)


def distinct(counters: list[Counter]) -> list[Counter]:
    """``counters`` without repeats: a layer two limits share is one counter."""
    return list({id(counter): counter for counter in counters}.values())
