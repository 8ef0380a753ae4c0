"""A limit ready to be sent (:class:`Policy`), and one limit of a request
with the identities it applies to (:data:`Check`).

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .codec import entry
from .deprecated import warn_renamed
from .keys import Identity, escape_scope
from .penalties import Penalty, penalty_suffix
from .rates import Layer
from .scripts import STRATEGIES, STRATEGY_NAMES, is_strategy

__all__ = ["Check", "Policy"]


@dataclass(frozen=True)
class Policy:
    """A limit ready to be sent: its layers, scope and strategy, and the parts
    of its keys and script arguments that never change between requests.

    :param layers: the layers; a request passes only if each has room.
    :param scope: the name counters are kept under; requests in the same scope
        share counters. By default the Flask layer uses the endpoint.
    :param strategy: the algorithm, a key of
        :data:`~flask_redis_throttle.core.scripts.STRATEGIES`.
    :param penalty: refuses an identity that keeps hitting this limit for longer (see
        :mod:`flask_redis_throttle.core.penalties`); None for no penalty.
    """

    layers: tuple[Layer, ...]
    scope: str
    strategy: str = "fixed-window"
    penalty: Penalty | None = None
    #: ``}:<scope>:<strategy>``: a key is the prefix, ``{``, an identity's
    #: tag and this. One key holds every layer of the identity under the
    #: scope and strategy (see ``lua/packed.lua``).
    suffix: str = field(init=False, repr=False)
    #: The policy's entry in a script's plan, the same for every identity
    #: (see :func:`~flask_redis_throttle.core.codec.entry`).
    entry: bytes = field(init=False, repr=False)
    #: ``}:<scope>:pn``, the suffix of the penalty keys; empty without a penalty.
    penalty_suffix: str = field(init=False, repr=False)
    #: The script's strategies when this policy is a request's only one.
    strategies: frozenset[str] = field(init=False, repr=False)
    #: The hash of what it is made of, worked out once: a dynamic limit's
    #: policies are looked up by value on every request.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not is_strategy(self.strategy):
            raise ValueError(f"unknown strategy {self.strategy!r}; expected one of {STRATEGY_NAMES}")
        code = STRATEGIES[self.strategy].code
        penalty = self.penalty
        durations = None if penalty is None else (penalty.first, penalty.factor, penalty.longest)
        object.__setattr__(self, "suffix", f"}}:{escape_scope(self.scope)}:{code}")
        object.__setattr__(self, "entry", entry(code, self.layers, durations))
        object.__setattr__(self, "penalty_suffix", "" if penalty is None else penalty_suffix(self.scope))
        object.__setattr__(self, "strategies", frozenset([self.strategy]))
        object.__setattr__(self, "_hash", hash((self.layers, self.scope, self.strategy, self.penalty)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def rates(self) -> tuple[Layer, ...]:  # old name
        """Deprecated: :attr:`layers`."""
        warn_renamed("Policy.rates", "Policy.layers")  # old name
        return self.layers


#: One limit to check for a request: a policy and the identities it applies to.
Check = tuple[Policy, Sequence[Identity]]
