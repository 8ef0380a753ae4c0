"""Penalties: an identity that keeps hitting a limit is refused for an escalating time,
``penalty="1m;x2;max=1h"``, decided in the limits' script call (``lua/penalty.lua``) with one
more key. This module makes no Redis call and needs no Flask app."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..checks import is_integer_in
from ..errors import InvalidLimit
from .keys import counter_key, escape_scope
from .rates import MAX_WINDOW, check_length, parse_duration, read_number

#: The largest factor between two penalties in a row.
MAX_FACTOR = 1000


_GRAMMAR = (
    "expected a first penalty such as '1m', then optionally ';x2' (each further penalty twice as long) "
    "and ';max=1h' (the longest penalty), as in '1m;x2;max=1h'"
)


@dataclass(frozen=True)
class Penalty:
    """How long a repeat offender is refused.

    :param first: the first penalty's duration, in seconds.
    :param factor: each further penalty is this many times the one before; 1 keeps them at ``first``.
    :param longest: the longest penalty, in seconds; a level of offence is remembered this long
        after its penalty ends.
    :param spec: the penalty as written.
    :raises InvalidLimit: for a duration out of 1 to ``MAX_WINDOW`` seconds, a longest shorter
        than the first, or a factor out of 1 to :data:`MAX_FACTOR`.
    """

    first: int
    factor: int = 1
    longest: int = 0
    spec: str = ""

    def __post_init__(self) -> None:
        if not self.longest:
            object.__setattr__(self, "longest", self.first)
        # The scripts take each as a 4-byte integer.
        if not (
            is_integer_in(self.first, 1, MAX_WINDOW)
            and is_integer_in(self.factor, 1, MAX_FACTOR)
            and is_integer_in(self.longest, self.first, MAX_WINDOW)
        ):
            raise InvalidLimit(
                f"invalid penalty {self.first!r}, x{self.factor!r}, max {self.longest!r}: the penalties must be "
                f"whole numbers of seconds from 1 to {MAX_WINDOW}, the longest at least the first, and the factor "
                f"from 1 to {MAX_FACTOR}",
                spec=self,
            )

    def duration(self, level: int) -> int:
        """The penalty of the ``level``-th offence in a row (1 for the first), in seconds."""
        duration = self.first
        for _ in range(level - 1):
            if duration >= self.longest or self.factor == 1:
                break
            duration *= self.factor
        return min(duration, self.longest)


def parse_penalty(spec: str) -> Penalty:
    """Parse a penalty such as ``"1m"``, ``"30s;x3"`` or ``"1m;x2;max=1h"``: without ``max``,
    penalties escalate up to a day (or the first, if longer); without a factor, each is the first.

    :raises InvalidLimit: quoting ``spec``, if it is malformed or too long, repeats a part, has a
        factor out of 1 to :data:`MAX_FACTOR`, a ``max`` without a factor above 1, or a longest
        penalty shorter than the first or longer than 366 days.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidLimit(f"penalty {spec!r} is invalid: {_GRAMMAR}", spec=spec)
    check_length(spec, "penalty")
    first_text, *options = (part.strip() for part in spec.split(";"))
    first = _duration(first_text, spec)
    parts: dict[str, int] = {}
    for option in options:
        name, value = _option(option, spec)
        if name in parts:
            raise InvalidLimit(f"penalty {spec!r} gives {name} twice; {_GRAMMAR}", spec=spec)
        parts[name] = value
    factor = parts.get("the factor", 1)
    longest = parts.get("max", 0)
    if longest and factor == 1:
        raise InvalidLimit(
            f"penalty {spec!r}: max has no effect without a factor above 1 (every penalty is the first); {_GRAMMAR}",
            spec=spec,
        )
    if not longest:
        longest = max(first, 86_400) if factor > 1 else first
    if longest < first:
        raise InvalidLimit(f"penalty {spec!r}: the longest penalty is shorter than the first", spec=spec)
    return Penalty(first, factor, longest, spec)


def _option(option: str, spec: str) -> tuple[str, int]:
    """``("the factor", 2)`` for ``x2``, ``("max", 3600)`` for ``max=1h``."""
    digits = option[1:].strip()
    if option[:1] in ("x", "X") and digits.isascii() and digits.isdigit():
        factor = read_number(digits, MAX_FACTOR)
        if not 1 <= factor <= MAX_FACTOR:
            raise InvalidLimit(f"penalty {spec!r}: the factor must be from 1 to {MAX_FACTOR}", spec=spec)
        return "the factor", factor
    name, equals, value = option.partition("=")
    if name.strip().lower() == "max" and equals:
        return "max", _duration(value.strip(), spec)
    raise InvalidLimit(f"penalty {spec!r} has an unknown part {option!r}; {_GRAMMAR}", spec=spec)


def _duration(text: str, spec: str) -> int:
    try:
        return parse_duration(text)
    except InvalidLimit as error:
        raise InvalidLimit(f"penalty {spec!r} has an {error}; {_GRAMMAR}", spec=spec) from None


@lru_cache(maxsize=1024)
def penalty_suffix(scope: str) -> str:
    """What follows an identity's tag in its penalty key under ``scope``."""
    return f"}}:{escape_scope(scope)}:pn"


def penalty_key(prefix: str, kind: str, value: str, scope: str, secret: bytes = b"") -> str:
    """The Redis key of the penalty of ``kind``/``value`` under ``scope``, such as
    ``rl:{ip:Yq3...}:login:pn``, in the identity's hash tag like its counters; ``prefix`` is
    ``RATELIMIT_KEY_PREFIX`` and ``secret`` ``RATELIMIT_KEY_SECRET``."""
    return counter_key(prefix + "{", kind, value, secret, penalty_suffix(scope))
