"""Parsing limit strings such as ``"10/s;120/m;240/h"`` into :class:`Layer` layers.
This module makes no Redis call and needs no Flask app."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..checks import is_integer_in
from ..errors import InvalidLimit

#: The largest quota one layer may have. Anything above is surely a typo.
MAX_QUOTA = 1_000_000_000
#: The longest window one layer may have, in seconds (366 days).
MAX_WINDOW = 366 * 86_400
#: The longest limit string, in characters: limits can come from data, so a longer one is not read.
MAX_LIMIT_LENGTH = 1000
MAX_LAYERS = 32

_DURATIONS = {"s sec second seconds": 1, "m min minute minutes": 60, "h hour hours": 3_600, "d day days": 86_400}
_UNITS = {name: seconds for names, seconds in _DURATIONS.items() for name in names.split()}

# Linear: no two quantifiers in a row match the same character, so a failed match tries no run
# two ways. ASCII only (re.A): exotic Unicode digits are no numbers.
_LAYER = re.compile(r"([0-9]+)(?:\s*/|\s+per\s)\s*(?:([0-9]+)\s*)?([a-z]+)", re.A | re.I)
_DURATION = re.compile(r"([0-9]+)\s*([a-z]+)", re.A | re.I)

_GRAMMAR = (
    "expected layers such as '10/s', '10 per second', '5/2m' or '5 per 2 minutes', "
    "separated by ';' or ','; units are s, sec, second(s), m, min, minute(s), "
    "h, hour(s), d, day(s)"
)


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer of a limit: at most ``quota`` requests every ``window`` seconds.

    :param quota: from 1 to :data:`~flask_redis_throttle.core.engine.rates.MAX_QUOTA`.
    :param window: in whole seconds, from 1 to :data:`~flask_redis_throttle.core.engine.rates.MAX_WINDOW`.
    :raises InvalidLimit: when either is not a whole number in its range.
    """

    quota: int
    window: int

    def __post_init__(self) -> None:
        # The scripts take each as a 4-byte integer, and a quota of 0 would divide by 0.
        if not (is_integer_in(self.quota, 1, MAX_QUOTA) and is_integer_in(self.window, 1, MAX_WINDOW)):
            raise InvalidLimit(
                f"invalid layer {self.quota!r}/{self.window!r}: the quota must be a whole number from 1 to "
                f"{MAX_QUOTA}, the window a whole number of seconds from 1 to {MAX_WINDOW}",
                spec=self,
            )

    @property
    def name(self) -> str:
        """The window's short name, such as ``"1s"`` or ``"2m"``, in the headers and the keys."""
        for unit, seconds in (("d", 86_400), ("h", 3_600), ("m", 60)):
            if self.window % seconds == 0:
                return f"{self.window // seconds}{unit}"
        return f"{self.window}s"

    def __str__(self) -> str:
        words = {"d": "day", "h": "hour", "m": "minute", "s": "second"}
        name = self.name
        count, unit = int(name[:-1]), words[name[-1]]
        return f"{self.quota} per {count} {unit}{'' if count == 1 else 's'}"


def parse_limits(spec: str) -> tuple[Layer, ...]:
    """Parse a limit string into its layers.

    >>> parse_limits("10/s;120/m")
    (Layer(quota=10, window=1), Layer(quota=120, window=60))

    Its work is linear in the string's length: a limit from data cannot make it slow.

    :param spec: one or more layers separated by ``;`` or ``,``.
    :returns: the layers, in the order written.
    :raises InvalidLimit: if ``spec`` is not a string, is longer than :data:`MAX_LIMIT_LENGTH`, has
        more than :data:`MAX_LAYERS` layers, an empty or malformed layer, a zero or absurdly large
        number, or two layers with the same window.
    """
    if not isinstance(spec, str):
        raise InvalidLimit(f"a limit must be a string, not {spec!r}; {_GRAMMAR}", spec=spec)
    check_length(spec, "limit")
    if not spec.strip():
        raise InvalidLimit(f"limit {spec!r} has no layers; {_GRAMMAR}", spec=spec)
    layers = spec.replace(",", ";").split(";")
    if len(layers) > MAX_LAYERS:
        raise InvalidLimit(
            f"limit {_start(spec)} has {len(layers)} layers; a limit has at most {MAX_LAYERS}", spec=spec
        )
    parsed = tuple(_parse_layer(layer, spec) for layer in layers)
    windows = [layer.window for layer in parsed]
    for index, layer in enumerate(parsed):
        if layer.window in windows[:index]:
            raise InvalidLimit(
                f"limit {spec!r} has more than one layer with a {layer.name} window; "
                "give each layer its own window (only the smallest quota would matter)",
                spec=spec,
            )
    return parsed


def check_length(spec: str, what: str) -> None:
    """Reject ``spec`` longer than :data:`MAX_LIMIT_LENGTH`, quoting only its start."""
    if len(spec) > MAX_LIMIT_LENGTH:
        raise InvalidLimit(
            f"{what} {_start(spec)} is {len(spec)} characters long; a {what} has at most {MAX_LIMIT_LENGTH}",
            spec=spec,
        )


def _start(spec: str) -> str:
    return repr(spec) if len(spec) <= 40 else f"{spec[:40]!r}..."


def read_number(digits: str, most: int) -> int:
    """``int(digits)``, or ``most + 1`` if larger, never converting a long number (Python may refuse)."""
    significant = digits.lstrip("0")
    if len(significant) > len(str(most)):
        return most + 1
    return int(significant or "0")


def _parse_layer(layer: str, spec: str) -> Layer:
    text = layer.strip()
    if not text:
        raise InvalidLimit(f"limit {spec!r} has an empty layer; {_GRAMMAR}", spec=spec)
    scanned = _LAYER.fullmatch(text)
    unit = _UNITS.get(scanned[3].lower()) if scanned else None
    if scanned is None or unit is None:
        raise InvalidLimit(f"invalid layer {text!r} in limit {spec!r}; {_GRAMMAR}", spec=spec)
    quota = read_number(scanned[1], MAX_QUOTA)
    window = read_number(scanned[2] or "1", MAX_WINDOW) * unit
    if not (1 <= quota <= MAX_QUOTA and 1 <= window <= MAX_WINDOW):
        raise InvalidLimit(
            f"invalid layer {text!r} in limit {spec!r}: the quota must be from 1 to {MAX_QUOTA}, "
            f"and the window from 1 second to {MAX_WINDOW // 86_400} days",
            spec=spec,
        )
    return Layer(quota, window)


def parse_duration(text: str) -> int:
    """Parse a duration such as ``"90s"``, ``"1m"`` or ``"2 hours"`` into whole seconds.

    :raises InvalidLimit: if ``text`` is not a number and one of the units of a limit's layers, is
        not from 1 second to 366 days (:data:`MAX_WINDOW`), or is longer than :data:`MAX_LIMIT_LENGTH`.
    """
    if isinstance(text, str):
        check_length(text, "duration")
        scanned = _DURATION.fullmatch(text.strip())
        unit = _UNITS.get(scanned[2].lower()) if scanned else None
        if scanned and unit:
            seconds = read_number(scanned[1], MAX_WINDOW) * unit
            if not 1 <= seconds <= MAX_WINDOW:
                raise InvalidLimit(
                    f"invalid duration {text!r}: it must be from 1 second to {MAX_WINDOW // 86_400} days", spec=text
                )
            return seconds
    raise InvalidLimit(
        f"invalid duration {text!r}: expected a number and a unit, such as '90s', '1m' or '2 hours'", spec=text
    )
