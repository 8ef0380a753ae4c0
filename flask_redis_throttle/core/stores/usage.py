"""How much of a limit an identity has used, read by cost-0 script calls that
count nothing: one round trip per layer, since a reply names one counter."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.keys import Identity
from ..engine.rates import Layer
from ..engine.throttle import Policy, Throttle


@dataclass(frozen=True, slots=True)
class LayerUsage:
    """One layer of a limit as one identity has used it: ``reset`` is the seconds until its full quota is back,
    0 when nothing of it is used."""

    policy: Policy
    layer: Layer
    remaining: int
    reset: float

    @property
    def used(self) -> int:
        """The quota in use."""
        return self.layer.quota - self.remaining


def usage(throttle: Throttle, policy: Policy, identity: Identity) -> list[LayerUsage]:
    """Each layer of ``policy``, in order, as ``identity`` has used it, by calls that count nothing and skip the
    block cache.

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
