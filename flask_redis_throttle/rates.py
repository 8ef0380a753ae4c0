"""Parsing limit strings such as ``"10/s;120/m;240/h"`` into :class:`Rate` layers.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidLimit

__all__ = ["MAX_AMOUNT", "MAX_PERIOD", "Rate", "parse_duration", "parse_limits"]

#: The largest quota one layer may have. Anything above is surely a typo.
MAX_AMOUNT = 1_000_000_000
#: The longest window one layer may have, in seconds (366 days).
MAX_PERIOD = 366 * 86_400

_UNITS: dict[str, int] = {}
for _names, _seconds in (
    (("s", "sec", "second", "seconds"), 1),
    (("m", "min", "minute", "minutes"), 60),
    (("h", "hour", "hours"), 3_600),
    (("d", "day", "days"), 86_400),
):
    _UNITS.update(dict.fromkeys(_names, _seconds))

# N/unit, N per unit, N/Kunit, N per K units. Digits are ASCII only, so that
# exotic Unicode digits cannot sneak past as numbers.
_LAYER = re.compile(
    r"(?P<amount>[0-9]+)\s*(?:/|\s+per\s+)\s*(?P<multiple>[0-9]+)?\s*(?P<unit>[a-z]+)",
    re.ASCII | re.IGNORECASE,
)
_SEPARATORS = re.compile(r"[;,]")
_DURATION = re.compile(r"(?P<amount>[0-9]+)\s*(?P<unit>[a-z]+)", re.ASCII | re.IGNORECASE)

_GRAMMAR = (
    "expected layers such as '10/s', '10 per second', '5/2m' or '5 per 2 minutes', "
    "separated by ';' or ','; units are s, sec, second(s), m, min, minute(s), "
    "h, hour(s), d, day(s)"
)


@dataclass(frozen=True, slots=True)
class Rate:
    """One layer of a limit: at most ``amount`` requests every ``period`` seconds.

    :param amount: the quota, from 1 to :data:`~flask_redis_throttle.rates.MAX_AMOUNT`.
    :param period: the window length in whole seconds, from 1 to
        :data:`~flask_redis_throttle.rates.MAX_PERIOD`.
    """

    amount: int
    period: int

    @property
    def name(self) -> str:
        """A short name for the window, such as ``"1s"`` or ``"2m"``.

        It names the layer in the ``RateLimit`` headers and in Redis keys.
        """
        for unit, seconds in (("d", 86_400), ("h", 3_600), ("m", 60)):
            if self.period % seconds == 0:
                return f"{self.period // seconds}{unit}"
        return f"{self.period}s"

    def __str__(self) -> str:
        words = {"d": "day", "h": "hour", "m": "minute", "s": "second"}
        name = self.name
        count, unit = int(name[:-1]), words[name[-1]]
        return f"{self.amount} per {count} {unit}{'' if count == 1 else 's'}"


def parse_limits(spec: str) -> tuple[Rate, ...]:
    """Parse a limit string into its layers.

    >>> parse_limits("10/s;120/m")
    (Rate(amount=10, period=1), Rate(amount=120, period=60))

    :param spec: one or more layers separated by ``;`` or ``,``.
    :returns: the layers, in the order written.
    :raises InvalidLimit: if ``spec`` is not a string, has an empty or malformed
        layer, a zero or absurdly large number, or two layers with the same window.
    """
    if not isinstance(spec, str):
        raise InvalidLimit(f"a limit must be a string, not {spec!r}; {_GRAMMAR}", spec=spec)
    if not spec.strip():
        raise InvalidLimit(f"limit {spec!r} has no layers; {_GRAMMAR}", spec=spec)
    rates = tuple(_parse_layer(layer, spec) for layer in _SEPARATORS.split(spec))
    periods = [rate.period for rate in rates]
    for rate in rates:
        if periods.count(rate.period) > 1:
            raise InvalidLimit(
                f"limit {spec!r} has more than one layer with a {rate.name} window; "
                "give each layer its own window (only the smallest quota would matter)",
                spec=spec,
            )
    return rates


def _parse_layer(layer: str, spec: str) -> Rate:
    text = layer.strip()
    if not text:
        raise InvalidLimit(f"limit {spec!r} has an empty layer; {_GRAMMAR}", spec=spec)
    match = _LAYER.fullmatch(text)
    unit = match and _UNITS.get(match["unit"].lower())
    if match is None or unit is None:
        raise InvalidLimit(f"invalid layer {text!r} in limit {spec!r}; {_GRAMMAR}", spec=spec)
    amount = int(match["amount"])
    multiple = int(match["multiple"] or 1)
    if not 1 <= amount <= MAX_AMOUNT:
        raise InvalidLimit(
            f"invalid layer {text!r} in limit {spec!r}: the quota must be from 1 to {MAX_AMOUNT}",
            spec=spec,
        )
    if not 1 <= multiple * unit <= MAX_PERIOD:
        raise InvalidLimit(
            f"invalid layer {text!r} in limit {spec!r}: "
            f"the window must be from 1 second to {MAX_PERIOD // 86_400} days",
            spec=spec,
        )
    return Rate(amount, multiple * unit)


def parse_duration(text: str) -> int:
    """Parse a duration such as ``"90s"``, ``"1m"`` or ``"2 hours"`` into whole seconds.

    >>> parse_duration("2 hours")
    7200

    :raises InvalidLimit: if ``text`` is not a positive number and one of the
        units of a limit's layers.
    """
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    unit = match and _UNITS.get(match["unit"].lower())
    if match is None or unit is None or int(match["amount"]) < 1:
        raise InvalidLimit(
            f"invalid duration {text!r}: expected a number and a unit, such as '90s', '1m' or '2 hours'", spec=text
        )
    return int(match["amount"]) * unit
