"""Flask-Limiter's limit strings in our grammar (:doc:`/flask-limiter`)."""

from __future__ import annotations

import re

from ...core.engine.rates import MAX_LIMIT_LENGTH

SEPARATORS = re.compile(r"[,;|]")
#: One layer: its quota, its multiple (maybe none) and its unit, as the ``limits`` library reads it.
LAYER = re.compile(r"\s*([0-9]+)\s*(?:/|per)\s*([0-9]*)\s*([a-z]+)\s*", re.IGNORECASE)
#: Each unit, and its plural, in seconds: a month is 30 days there, a year 360.
UNITS = {"second": 1, "minute": 60, "hour": 3_600, "day": 86_400, "month": 30 * 86_400, "year": 360 * 86_400}
UNITS.update({f"{name}s": seconds for name, seconds in list(UNITS.items())})
#: The units a window is written in here, longest first.
WRITTEN = (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1))


def translate(text: str) -> str:
    """``"5 per minute | 1/second"`` as ``"5 per 1 minute;1 per 1 second"``; empty or too long, as is.

    :raises ValueError: if the ``limits`` library would not parse ``text``, with its message.
    """
    if not isinstance(text, str) or len(text) > MAX_LIMIT_LENGTH or not text:
        return text
    quotas: dict[int, int] = {}
    for layer in SEPARATORS.split(text):
        found = LAYER.fullmatch(layer)
        unit = found and UNITS.get(found[3].lower())
        if found is None or unit is None:
            raise ValueError(f"couldn't parse rate limit string '{text}'")
        window = (int(found[2] or 0) or 1) * unit  # a multiple of 0 is 1 there
        quota = int(found[1])
        quotas[window] = min(quota, quotas.get(window, quota))
    return ";".join(f"{quota} per {written(window)}" for window, quota in quotas.items())


def written(window: int) -> str:
    """A window of whole seconds in its longest whole unit: ``"2 minute"``."""
    name, seconds = next((name, seconds) for name, seconds in WRITTEN if window % seconds == 0)
    return f"{window // seconds} {name}"
