"""What a storage sends: a script call and a script. The engine writes what goes in them
(:mod:`flask_redis_throttle.core.engine.codec`, :mod:`flask_redis_throttle.core.engine.scripts`).

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: One argument of a script call.
Arg = int | str | bytes
#: The arguments of one script call: now, cost and the plan.
Args = Sequence[Arg]
#: One script call: its keys and its arguments.
Call = tuple[Sequence[str], Sequence[Arg]]


@dataclass(frozen=True, slots=True)
class Script:
    """A script's text, and the SHA1 that ``EVALSHA`` names it by."""

    text: str
    sha: str
