"""What follows a refusal besides its 429, and what follows a request that
came near a limit: the refusal hooks (the ``on_breach`` functions and the
``request_refused`` signal), the warning for a cost no layer can ever allow,
the shadow mode's warnings, the ``error_message`` of the 429, and the entries
of the refusal and near-limit logs.

:class:`RefusalReporter` is the part of each app's
:class:`~flask_redis_throttle._request.state.RateLimitState` that does it; the state
decides, and raises the 429.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence

from flask import Flask, Request, Response, after_this_request
from werkzeug.wrappers import Response as AnyResponse

from .._ops.metrics import Metrics
from .._ops.notices import Notices, logger
from ..core.engine.keys import loggable
from ..core.engine.throttle import Check, Decision, StorageUnavailable, Throttle, UnexpectedError
from ..core.stores.refusals import RefusalLog
from ..signals import RefusalEvent, notify, request_refused
from .decisions import OverQuota, batch_limit
from .plan import Batch, PlannedLimit, qualified_name

#: How many identities' layers that came near their limit a process
#: remembers, so as to signal each once per window: bounded, as the block
#: cache is, however many identities there are.
NEAR_LIMIT_MEMORY = 10_000


class RefusalReporter:
    """Reports the refusals and near-limit crossings of one app.

    :param app: the app, whose refusal hooks are told.
    :param notices: where warnings and internal errors are logged, and the
        clock that spaces near-limit signals (the app's state).
    :param throttle: the app's core decider.
    :param refusals: the refusal log; None when disabled.
    :param near_limits: the near-limit log; None when disabled.
    :param metrics: where to count near-limit crossings; None for no metrics.
    """

    def __init__(
        self,
        app: Flask,
        notices: Notices,
        throttle: Throttle,
        refusals: RefusalLog | None,
        near_limits: RefusalLog | None,
        metrics: Metrics | None,
    ) -> None:
        self.app = app
        self.notices = notices
        self.throttle = throttle
        self.refusals = refusals
        self.near_limits = near_limits
        self.metrics = metrics
        #: When each identity's layer that came near its limit may do so
        #: again, by scope, identity tag and window, on the notices' clock: at
        #: most :data:`NEAR_LIMIT_MEMORY` of them, the oldest forgotten first.
        self._near: dict[tuple[str, str, int], float] = {}
        self._near_lock = threading.Lock()

    def error_message(self, req: Request, limit: PlannedLimit, description: str) -> str:
        """The 429's description from ``limit``'s ``error_message``; its
        own ``description`` when a function returns anything but a non-empty
        string, with a warning."""
        message = limit.spec.error_message
        if callable(message):
            message = message(req)
            if not isinstance(message, str) or not message:
                returned = loggable(repr(message))
                function = qualified_name(limit.spec.error_message)
                self.notices._warn(
                    f"the error_message function {function} of {limit.describe()} returned {returned}; "
                    "the 429 keeps its own description",
                    "error message",
                )
                return description
        return message or description

    def report(
        self,
        req: Request,
        endpoint: str,
        batch: Batch,
        decision: Decision,
        shadow: bool,
        over: OverQuota | None,
        on_breach: Callable[[RefusalEvent], object] | None,
    ) -> AnyResponse | None:
        """Log a refusal of ``batch``, real or shadow, and tell the refusal hooks.

        :returns: the response an ``on_breach`` hook returned, to send
            instead of the 429; None if none did, or for a shadow refusal.

        :param over: the layer whose whole quota the request's cost exceeds,
            if any (see :func:`~flask_redis_throttle._request.decisions.over_quota`).
        :param on_breach: the app's ``RATELIMIT_ON_BREACH`` hook, if any.
        """
        if over is not None:
            self._warn_over_quota(endpoint, over, batch, shadow)
        if not decision.cached:
            # A refusal repeated from the block cache was logged when Redis made it.
            if shadow and over is not None:
                logger.warning(
                    "shadow mode: %s on %s would be refused by %s of scope %r: it costs %d, "
                    "more than the whole quota, so it could never pass",
                    loggable(str(over.identity)),
                    endpoint,
                    over.layer,
                    over.policy.scope,
                    over.cost,
                )
            elif shadow:
                logger.warning(
                    "shadow mode: %s on %s would be refused by %s%s of scope %r for %.3f seconds",
                    loggable(str(decision.identity)),
                    endpoint,
                    decision.layer,
                    " (penalty)" if decision.penalized else "",
                    decision.policy.scope,
                    decision.retry_after,
                )
            if self.refusals is not None:
                self._log_refusal(endpoint, batch.checks, decision, shadow)
        limit = batch_limit(decision.policy, batch)
        hook = limit.spec.on_breach if limit is not None else None
        if hook is not None or on_breach is not None or request_refused.receivers:
            if over is None:
                policy, layer, identity = decision.policy, decision.layer, decision.identity
                retry_after: int | None = max(1, math.ceil(decision.retry_after))
            else:
                policy, layer, identity, retry_after = over.policy, over.layer, over.identity, None
            event = RefusalEvent(req, endpoint, policy.scope, identity, layer, retry_after, shadow, decision.penalized)
            response = notify(self.app, event, (hook, on_breach))
            return None if shadow else response
        return None

    def _warn_over_quota(self, endpoint: str, over: OverQuota, batch: Batch, shadow: bool) -> None:
        """Warn that a request costs more than a layer's whole quota: a bug
        in a cost function or a dynamic limit, which only the app can fix."""
        limit = batch_limit(over.policy, batch)
        which = limit.describe() if limit is not None else f"scope {over.policy.scope!r}"
        outcome = "shadow mode lets it through" if shadow else "refused without Retry-After"
        self.notices._warn(
            f"a request to {endpoint} costs {over.cost}, more than the whole quota of {over.layer} of {which}: "
            f"it can never pass; {outcome}",
            "over quota",
        )

    def _log_refusal(self, endpoint: str, checks: Sequence[Check], decision: Decision, shadow: bool) -> None:
        """Add the refusal to the log: one ``XADD``, through the circuit
        breaker like every call to Redis, so that a stalled Redis does not
        make each refusal wait for it. A refusal the fallback decided is not
        logged (the fallback's own warning says Redis is unavailable): Redis
        has just failed that request, or the breaker keeps it out.

        On a cluster it goes to a stream on the node of the refusing
        identity's counters (see :meth:`RefusalLog.shard`), through that
        node's breaker."""
        assert self.refusals is not None
        if not decision.fallback:
            self._record(self.refusals, "refusal", endpoint, checks, decision, shadow)

    def near_limit(self, endpoint: str, batch: Batch, decision: Decision) -> None:
        """Signal that the admitted ``decision`` took its identity's layer
        past ``RATELIMIT_NEAR_LIMIT``: count it, and write it to the
        near-limit log once the response is sent, so that the request does
        not wait for the ``XADD``. At most once per identity, layer and
        window in this process: until the layer is back to its full quota,
        its identity is not signalled again (a gradual strategy's count can
        cross the line back and forth). A decision of the fallback is not
        signalled: it counts in this process only, while Redis is away."""
        if decision.fallback:
            return
        scope = decision.policy.scope
        # The identity's tag, a short digest: the identity itself may be
        # anything a client sent, and is not kept (see Refusal.cut).
        key = (scope, self.throttle.tag(decision.identity), decision.layer.window)
        now = self.notices.clock()
        known = self._near
        with self._near_lock:  # a threaded server's requests share it
            if known.get(key, now) > now:
                return
            known.pop(key, None)  # so that the oldest is first
            known[key] = now + decision.reset
            if len(known) > NEAR_LIMIT_MEMORY:
                del known[next(iter(known))]
        if self.metrics is not None:
            self.metrics.near_limit(endpoint, scope)
        log = self.near_limits
        if log is not None:

            def record() -> None:
                self._record(log, "near-limit", endpoint, batch.checks, decision, batch.shadow)

            @after_this_request
            def record_when_sent(response: Response) -> Response:
                response.call_on_close(record)
                return response

    def _record(
        self, log: RefusalLog, what: str, endpoint: str, checks: Sequence[Check], decision: Decision, shadow: bool
    ) -> None:
        """Write ``decision`` to ``log``, the refusal log or the near-limit
        one (``what`` names its entries): one ``XADD``, through the breaker
        of the node of its stream (see :meth:`_log_refusal`)."""
        throttle = self.throttle
        identities = dict.fromkeys(str(identity) for _policy, ids in checks for identity in ids)
        stream = log.shard(throttle.tag(decision.identity))
        try:
            throttle.call(
                lambda: log.record(
                    endpoint=endpoint,
                    scope=decision.policy.scope,
                    layer=f"{decision.layer.quota}/{decision.layer.name}",
                    strategy=decision.policy.strategy,
                    identity=str(decision.identity),
                    identities=identities,
                    retry_after=decision.retry_after,
                    shadow=shadow,
                    penalized=decision.penalized,
                    stream=stream,
                ),
                (stream,),
            )
        except UnexpectedError as error:
            self.notices._internal_error(f"internal error in the {what} log ({error}); the {what} is not logged", error)
        except StorageUnavailable as error:
            # The decision stands; only its log entry is lost.
            reason = error.__cause__ or error  # Redis's words, or why it was not called
            self.notices._warn(f"{what} log unavailable ({reason}); the {what} is not logged", f"{what} log")
