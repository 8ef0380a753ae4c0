"""How much of a limit an identity has used, read without counting anything.

The script decides a request at cost 0 the way it decides any other, then
writes nothing (see ``lua/main.lua``), so it reports a counter exactly as
the next request would find it, whatever the strategy. Its reply names one
counter only, so each layer is asked about on its own: one round trip per
layer.

This module needs no Flask app, and calls Redis only through a
:class:`~flask_redis_throttle.core.engine.throttle.Throttle`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.keys import Identity
from ..engine.rates import Layer
from ..engine.throttle import Policy, Throttle

__all__ = ["LayerUsage", "usage"]


@dataclass(frozen=True, slots=True)
class LayerUsage:
    """One layer of a limit, as one identity has used it.

    :param policy: the limit.
    :param layer: the layer.
    :param remaining: the quota left.
    :param reset: seconds until the counter is back to its full quota; 0 when
        nothing of it is used.
    """

    policy: Policy
    layer: Layer
    remaining: int
    reset: float

    @property
    def used(self) -> int:
        """The quota in use: the layer's quota less what remains."""
        return self.layer.quota - self.remaining


def usage(throttle: Throttle, policy: Policy, identity: Identity) -> list[LayerUsage]:
    """Each layer of ``policy`` as ``identity`` has used it, in order.

    The counters are read with cost-0 script calls, one per layer, which
    neither count a request nor touch the block cache.

    :raises StorageUnavailable: if Redis could not answer.
    """
    layers = []
    for layer in policy.layers:
        # A one-layer policy with the same scope and strategy has the same key.
        one = Policy((layer,), policy.scope, policy.strategy)
        decision = throttle.hit([(one, [identity])], cost=0)
        reset = decision.reset if decision.remaining < layer.quota else 0.0
        layers.append(LayerUsage(policy, layer, decision.remaining, reset))
    return layers
