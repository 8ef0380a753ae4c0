"""What happens to a refused request besides its 429: the refusal hooks (the
``on_breach`` functions and the ``request_refused`` signal), the warning for a
cost no layer can ever allow, and the refusal log's entry.

:class:`Refusing` is the part of each app's
:class:`~flask_redis_throttle.extension.RateLimitState` that does these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from flask import Flask, Request
from werkzeug.wrappers import Response as AnyResponse

from ._config import Settings
from ._decisions import _limit_of, _OverQuota
from ._notices import Notices, logger
from ._plan import Batch
from .core.keys import loggable
from .core.refusals import RefusalLog
from .core.throttle import Check, Decision, StorageUnavailable, Throttle, UnexpectedError
from .signals import RefusalEvent, notify, request_refused

__all__ = ["Refusing"]


class Refusing(Notices):
    """The refusal hooks and the refusal log of one app's rate limiting state.

    A subclass sets :attr:`app`, :attr:`settings`, :attr:`throttle` and
    :attr:`refusals`.
    """

    app: Flask
    settings: Settings
    throttle: Throttle | None
    refusals: RefusalLog | None

    def _report_refusal(
        self, req: Request, endpoint: str, batch: Batch, decision: Decision, shadow: bool, over: _OverQuota | None
    ) -> AnyResponse | None:
        """Log a refusal of ``batch``, real or shadow, and tell the refusal hooks.

        :returns: the response an ``on_breach`` hook returned, to send
            instead of the 429; None if none did, or for a shadow refusal.

        :param over: the layer whose whole quota the request's cost exceeds,
            if any (see :func:`_over_quota`).
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
        limit = _limit_of(decision.policy, batch)
        hook = limit.spec.on_breach if limit is not None else None
        if hook is not None or self.settings.on_breach is not None or request_refused.receivers:
            if over is None:
                policy, layer, identity = decision.policy, decision.layer, decision.identity
                retry_after: int | None = max(1, math.ceil(decision.retry_after))
            else:
                policy, layer, identity, retry_after = over.policy, over.layer, over.identity, None
            event = RefusalEvent(req, endpoint, policy.scope, identity, layer, retry_after, shadow, decision.penalized)
            response = notify(self.app, event, (hook, self.settings.on_breach))
            return None if shadow else response
        return None

    def _warn_over_quota(self, endpoint: str, over: _OverQuota, batch: Batch, shadow: bool) -> None:
        """Warn that a request costs more than a layer's whole quota: a bug
        in a cost function or a dynamic limit, which only the app can fix."""
        limit = _limit_of(over.policy, batch)
        which = limit.describe() if limit is not None else f"scope {over.policy.scope!r}"
        outcome = "shadow mode lets it through" if shadow else "refused without Retry-After"
        self._warn(
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
        refusals, throttle = self.refusals, self.throttle
        assert refusals is not None
        assert throttle is not None
        if decision.fallback:
            return
        identities = dict.fromkeys(str(identity) for _policy, ids in checks for identity in ids)
        refusing = decision.identity
        stream = refusals.shard(throttle.tag(refusing))
        try:
            throttle.call(
                lambda: refusals.record(
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
            self._internal_error(f"internal error in the refusal log ({error}); the refusal is not logged", error)
        except StorageUnavailable as error:
            # The refusal stands; only its log entry is lost.
            reason = error.__cause__ or error  # Redis's words, or why it was not called
            self._warn(f"refusal log unavailable ({reason}); the refusal is not logged", "refusal log")
