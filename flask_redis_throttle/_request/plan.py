"""Plans: the limits :mod:`~flask_redis_throttle._request.sources` finds for one endpoint that
apply to one HTTP method, each compiled once into a :class:`PlannedLimit`. It makes no Redis call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Request, Response

from ..core.bounded import remember
from ..core.checks import is_integer
from ..core.engine.keys import Identity, loggable
from ..core.engine.leases import LEASABLE
from ..core.engine.rates import parse_limits
from ..core.engine.throttle import Check, Policy
from ..errors import InvalidLimit
from .config import Settings
from .headers import REQUESTS, LayerNames
from .identity import IdentitySpec, Resolver, Warn, resolvers
from .sources import limits_of
from .spec import LimitSpec, given

#: How many policies a dynamic limit keeps, one per distinct string returned.
DYNAMIC_CACHE_SIZE = 256

#: A ``Check`` before its identities are known: a limit's policy, and its identities' resolvers.
UnresolvedCheck = tuple[Policy, tuple[Resolver, ...]]

#: A problem found with a request's limits: ``"cost"`` or ``"limit"``, and a message.
Problem = tuple[str, str]


@dataclass(frozen=True, eq=False)
class PlannedLimit:
    """One limit as it applies to one endpoint and method.

    :param spec: the limit and its options, as written.
    :param source: where it was written: ``"view"``, ``"blueprint <name>"``,
        ``"RATELIMIT_DEFAULT"`` or ``"RATELIMIT_APPLICATION"``.
    :param scope: the scope its counters are kept under; for a scope function, its name.
    :param strategy: its algorithm.
    :param identities: whom it counts: built-in names and key functions.
    :param resolvers: those identities, compiled.
    :param shadow: whether it only logs (its own ``shadow=`` or ``RATELIMIT_SHADOW``).
    :param policy: its policy; None when :meth:`resolve` finds it per request (a dynamic limit or scope).
    :param meta: whether it is a meta limit, on refusals: checked first, counted when another refuses.
    :param slots: the policy of its concurrency slots (``concurrent=``); None for no cap.
    """

    spec: LimitSpec
    source: str
    scope: str
    strategy: str
    identities: tuple[IdentitySpec, ...]
    resolvers: tuple[Resolver, ...] = field(repr=False)
    shadow: bool
    policy: Policy | None
    meta: bool = False
    slots: Policy | None = None
    _policies: dict[tuple[str, str], Policy] = field(default_factory=dict, repr=False)

    @property
    def leased(self) -> bool:
        """Whether it takes blocks of quota in advance: ``prefetch=True`` on a strategy that can (:doc:`/leases`)."""
        return self.spec.prefetch and self.strategy in LEASABLE

    @property
    def dynamic(self) -> bool:
        """Whether the limit string or the scope comes from a function, per request."""
        return self.policy is None

    def resolve(self, request: Request) -> Policy | None:
        """This request's policy: the fixed one, or that of the limit string and scope its functions return.

        :returns: None when the dynamic function returns None.
        :raises InvalidLimit: when it returns anything but None or a valid
            limit string, or the scope function anything but a non-empty string.
        """
        if self.policy is not None:
            return self.policy
        spec = self.spec
        value = spec.limit if isinstance(spec.limit, str) else spec.limit(request)
        if value is None:
            return None
        if not isinstance(value, str):
            raise InvalidLimit(f"a dynamic limit must return a limit string or None, not {value!r}", spec=value)
        scope = self.scope
        if callable(spec.scope):
            scope = spec.scope(request)
            if not isinstance(scope, str) or not scope:
                raise InvalidLimit(f"a scope function must return a non-empty string, not {scope!r}", spec=scope)
            if spec.per_method:
                scope = per_method_scope(scope, request.method)
        policy = self._policies.get((value, scope))
        if policy is None:
            # One scope for every string: a client whose limit changes keeps what it has used so far.
            layers = spec.layers if spec.layers is not None else parse_limits(value)
            policy = spec.policy(layers, scope, self.strategy)
            remember(self._policies, (value, scope), policy, DYNAMIC_CACHE_SIZE)
        return policy

    def owns(self, policy: Policy) -> bool:
        """Whether ``policy`` is this limit's: its fixed one, or one its dynamic function returned."""
        return (
            self.policy is policy or self.slots is policy or (self.policy is None and policy in self._policies.values())
        )

    def cost_for(self, request: Request, problems: list[Problem]) -> int:
        """What this request costs. A cost function that returns anything but
        an integer of 0 or more counts as costing 1, with a problem noted."""
        cost = self.spec.cost
        if not callable(cost):
            return cost
        value = cost(request)
        if is_integer(value) and value >= 0:
            return value
        name, returned = qualified_name(cost), loggable(repr(value))
        problems.append(("cost", f"the cost function {name} of {self.describe()} returned {returned}; it counts as 1"))
        return 1

    def describe(self) -> str:
        """The limit and where it comes from, for messages."""
        spec = self.spec.limit
        written = repr(spec) if isinstance(spec, str) else qualified_name(spec)
        return f"limit {written} ({self.source}, scope {self.scope!r})"


def qualified_name(function: object) -> str:
    """``module.qualname`` of a function, to name it in a warning; its
    ``repr`` if it has no such names (a callable object)."""
    qualname = getattr(function, "__qualname__", None)
    if not isinstance(qualname, str):
        return repr(function)
    module = getattr(function, "__module__", None)
    return f"{module}.{qualname}" if isinstance(module, str) else qualname


@dataclass(slots=True)
class Batch:
    """Limits of one request that are decided together, in one script call.

    :param cost: the cost they are counted with.
    :param shadow: whether a refusal is only logged.
    :param deferred: whether they are inspected before the view and counted after it, as ``deduct_when`` says.
    :param checks: the checks to send: one per limit, with its identities.
    :param limits: the limit of each check, in the same order.
    :param meta: whether they are meta limits: inspected first at cost 1, counted when another batch refuses.
    :param leased: whether its limits take blocks of quota in advance (``prefetch=``, see :doc:`/leases`).
    """

    cost: int
    shadow: bool
    deferred: bool
    checks: list[Check] = field(default_factory=list)
    limits: Sequence[PlannedLimit] = ()
    meta: bool = False
    leased: bool = False

    @property
    def penalized(self) -> bool:
        """Whether any of its limits has a penalty."""
        return any(limit.spec.penalty is not None for limit in self.limits)


@dataclass(frozen=True, eq=False)
class Plan:
    """The limits of one endpoint and method, ready for every request.

    :param endpoint: the endpoint.
    :param method: the HTTP method, upper case.
    :param limits: the limits that apply, in the order :doc:`/limits` gives.
    :param labels: the layers' header names; None when a limit is dynamic.
    :param simple: True when no limit is dynamic, shadow, deferred or meta, has an ``exempt_when``, a cost
        function or slots, and all have one cost and ``prefetch``: then :attr:`unresolved` and :attr:`cost`
        are all a request needs.
    """

    endpoint: str
    method: str
    limits: tuple[PlannedLimit, ...]
    labels: LayerNames | None
    simple: bool
    #: Each limit's policy and identity resolvers, for simple plans.
    unresolved: tuple[UnresolvedCheck, ...] = field(repr=False)
    #: The cost every limit has, for simple plans.
    cost: int = 1
    #: :attr:`Draft.quota_units <flask_redis_throttle._request.headers.Draft.quota_units>` of the draft.
    quota_units: bool = True
    #: Whether every limit takes blocks of quota in advance, for simple plans.
    leased: bool = False
    _labels: dict[tuple[Policy, ...], LayerNames] = field(default_factory=dict, repr=False)

    def prepare(self, request: Request) -> tuple[Sequence[Batch], LayerNames, Sequence[Problem]]:
        """Work out a request's script calls: the limits but those exempted (``exempt_when``), whose
        dynamic function returns None or a bad string, or none of whose identities applies, grouped by
        cost, shadow, deferred and ``prefetch`` (one group for a simple plan), in this order: deferred
        inspections (they write nothing), enforced limits, then shadow ones (so that a request an
        enforced limit refuses is not counted by a shadow one).

        :returns: the batches, the header labels for the layers in play, and
            the problems met (bad costs, bad dynamic limits).
        """
        labels = self.labels
        if self.simple and labels is not None:
            checks: list[Check] = []
            for fixed, found in self.unresolved:
                identities = _identities(found, request)
                if identities:
                    checks.append((fixed, identities))
            if not checks:
                return (), labels, ()
            limits = self.limits
            if len(checks) < len(limits):
                limits = tuple(limit for limit in limits if any(limit.policy is fixed for fixed, _ in checks))
            return (Batch(self.cost, False, False, checks, limits, False, self.leased),), labels, ()
        problems: list[Problem] = []
        groups: dict[tuple[bool, bool, int, bool, bool], tuple[list[Check], list[PlannedLimit]]] = {}
        policies: list[Policy] = []
        for limit in self.limits:
            exempt_when = limit.spec.exempt_when
            slots = limit.slots
            exempted = exempt_when is not None and exempt_when(request)
            try:
                policy = limit.policy if exempted else limit.resolve(request)
            except InvalidLimit as error:
                problems.append(("limit", f"the dynamic {limit.describe()} is unusable: {loggable(str(error))}"))
                continue
            if policy is not None or exempted:  # an exempted limit's layers are named in the headers too
                policies += [each for each in (policy, slots) if each is not None]
            if exempted or policy is None:
                continue
            identities = _identities(limit.resolvers, request)
            if not identities:
                continue
            cost = limit.cost_for(request, problems)
            deferred = limit.meta or limit.spec.deduct_when is not None
            group = (limit.shadow, deferred, cost, limit.meta, limit.leased)
            grouped, kept = groups.setdefault(group, ([], []))
            grouped.append((policy, identities))
            kept.append(limit)
            if slots is not None:  # its slots, in the same call: the limit again, for its check
                grouped.append((slots, identities))
                kept.append(limit)
        batches = [
            Batch(cost, shadow, deferred, *lists, meta, leased)
            for (shadow, deferred, cost, meta, leased), lists in groups.items()
        ]
        batches.sort(key=lambda batch: (batch.shadow, not batch.meta, not batch.deferred))
        return batches, labels or self._labels_of(tuple(policies)), problems

    def _labels_of(self, policies: tuple[Policy, ...]) -> LayerNames:
        """The header names of ``policies`` in their limits' units, kept (an equal policy finds them)."""
        labels = self._labels.get(policies)
        if labels is None:
            units = [
                next((limit.spec.unit for limit in self.limits if limit.owns(policy)), REQUESTS)
                for policy in (policies if self.quota_units else ())
            ]
            labels = remember(self._labels, policies, LayerNames.of(policies, units), DYNAMIC_CACHE_SIZE)
        return labels


def matching(batches: list[Batch], response: Response) -> Iterator[Batch]:
    """The part of each deferred batch whose ``deduct_when`` is true for ``response``."""
    for batch in batches:
        checks: list[Check] = []
        limits: list[PlannedLimit] = []
        for check, limit in zip(batch.checks, batch.limits, strict=True):
            if limit.spec.deduct_when(response):  # type: ignore[misc]
                checks.append(check)
                limits.append(limit)
        if checks:
            yield Batch(batch.cost, batch.shadow, False, checks, limits, leased=batch.leased)


def _identities(found: tuple[Resolver, ...], request: Request) -> list[Identity]:
    return [identity for resolve in found if (identity := resolve(request)) is not None]


def compile_plan(app: Flask, endpoint: str, method: str, settings: Settings, warn: Warn | None = None) -> Plan | None:
    """The plan of ``endpoint`` for requests of ``method``, or None if no limit applies.

    :param warn: told of a logged-in user without an id (see ``identity.resolvers``).
    """
    found = limits_of(app, endpoint, settings, method)
    return plan_of(found, endpoint, method, settings, hasattr(app, "login_manager"), warn)


def plan_of(
    found: Sequence[tuple[LimitSpec, str]],
    endpoint: str,
    method: str,
    settings: Settings,
    logins: bool,
    warn: Warn | None,
) -> Plan | None:
    """The plan of the limits ``found`` (with where each was written), or
    None if none applies; ``logins``: whether the app has Flask-Login."""

    def planned(
        spec: LimitSpec, source: str, scope: str, strategy: str, shadow: bool, policy: Policy | None, **more: Any
    ) -> PlannedLimit:
        identities = spec.identities or settings.identities
        compiled = resolvers(identities, settings.ipv6_prefix, logins, warn)
        return PlannedLimit(spec, source, scope, strategy, identities, compiled, shadow, policy, **more)

    taken: list[tuple[str, str, frozenset[int] | None]] = []
    limits = []
    for position, (spec, source) in enumerate(found, 1):
        strategy = spec.strategy or settings.strategy
        periods = None if spec.layers is None else frozenset(layer.window for layer in spec.layers)
        if callable(spec.scope):
            scope = f"{qualified_name(spec.scope)}()"  # its name: each request's scope is its own
        else:
            scope = spec.scope or _default_scope(endpoint, position, strategy, periods, taken)
        # Scopes are given over all the limits, whatever their methods: a limit keeps its counters for every one.
        taken.append((scope, strategy, periods))
        if not spec.applies_to(method):
            continue
        if spec.per_method and not callable(spec.scope):
            scope = per_method_scope(scope, method)
        slots = None
        if spec.concurrent is not None:
            slots = Policy.concurrency(spec.concurrent, spec.lease or settings.concurrency_lease, scope)
        policy = None if spec.layers is None or callable(spec.scope) else spec.policy(spec.layers, scope, strategy)
        limits.append(planned(spec, source, scope, strategy, spec.shadow or settings.shadow, policy, slots=slots))
    if not limits:
        return None
    metas = [(_meta_spec(limit), f"meta of {limit.source}") for limit in limits if limit.spec.meta]
    for spec, source in [*metas, *((spec, "RATELIMIT_META") for spec in settings.meta)]:
        scope = spec.scope if isinstance(spec.scope, str) else "@meta"
        policy = None if spec.layers is None else Policy(spec.layers, scope, settings.strategy)
        limits.append(planned(spec, source, scope, settings.strategy, False, policy, meta=True))
    costs = {limit.spec.cost for limit in limits}
    cost = next(iter(costs))
    # Limits that lease quota and limits that do not take a call each.
    simple = len(costs) == 1 and isinstance(cost, int) and len({limit.leased for limit in limits}) == 1
    simple = simple and not any(
        limit.policy is None
        or limit.shadow
        or given(limit.spec.exempt_when)
        or given(limit.spec.deduct_when)
        or limit.meta
        or limit.slots
        for limit in limits
    )
    policies = [limit.policy for limit in limits if limit.policy is not None]
    quota_units = settings.draft.quota_units
    unresolved = tuple(zip(policies, [limit.resolvers for limit in limits], strict=True)) if simple else ()
    # The header names: each limit's layers, then its slots (whose unit LayerNames knows), with their units.
    named = [
        (policy, limit.spec.unit) for limit in limits for policy in (limit.policy, limit.slots) if policy is not None
    ]
    units = [unit for _, unit in named] if quota_units else []
    return Plan(
        endpoint=endpoint,
        method=method,
        limits=tuple(limits),
        labels=LayerNames.of([policy for policy, _ in named], units) if len(policies) == len(limits) else None,
        simple=simple,
        unresolved=unresolved,
        cost=cost if simple else 1,  # type: ignore[arg-type]
        quota_units=quota_units,
        leased=simple and limits[0].leased,
    )


def _meta_spec(limit: PlannedLimit) -> LimitSpec:
    """``limit``'s ``meta=`` as a limit of its own, under its scope and ``+meta``."""
    spec = limit.spec
    layers = spec.meta or ()
    written = "; ".join(str(layer) for layer in layers)
    return LimitSpec(
        written,
        layers,
        scope=f"{limit.scope}+meta",
        identities=limit.identities,
        on_breach=spec.on_breach,
        error_message=spec.error_message,
    )


def per_method_scope(scope: str, method: str) -> str:
    """The scope a ``per_method`` limit counts requests of ``method`` under:
    ``items@POST``. ``HEAD`` counts with ``GET``, since Flask answers it by
    running the ``GET`` view: otherwise it would double the quota."""
    return f"{scope}@{'GET' if method == 'HEAD' else method}"


def _default_scope(
    endpoint: str,
    position: int,
    strategy: str,
    periods: frozenset[int] | None,
    taken: list[tuple[str, str, frozenset[int] | None]],
) -> str:
    """The endpoint, or ``endpoint+position`` if an earlier limit counts under it with the same strategy
    and a window in common (any, if either is dynamic): two limits share a counter only by a ``scope=``."""
    for scope, other_strategy, other_periods in taken:
        if (
            scope == endpoint
            and other_strategy == strategy
            and (periods is None or other_periods is None or periods & other_periods)
        ):
            return f"{endpoint}+{position}"
    return endpoint
