"""What follows a refusal besides its 429 (hooks, warnings, ``error_message``, the refusal log),
and a request that came near a limit (the near-limit log).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

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

#: How many identities' layers near their limit a process remembers, to signal each once per window.
NEAR_LIMIT_MEMORY = 10_000


@dataclass(eq=False)
class RefusalReporter:
    """Reports one app's refusals and near-limit crossings; ``notices`` (the app's state) log and
    clock them, and a log or ``metrics`` that is None is off."""

    app: Flask
    notices: Notices
    throttle: Throttle
    refusals: RefusalLog | None
    near_limits: RefusalLog | None
    metrics: Metrics | None
    #: When each (scope, identity tag, window) may be signalled again; the oldest forgotten first.
    _near: dict[tuple[str, str, int], float] = field(default_factory=dict)
    _near_lock: threading.Lock = field(default_factory=threading.Lock)

    def error_message(self, req: Request, limit: PlannedLimit, description: str) -> str:
        """The 429's description from ``limit``'s ``error_message``; a bad answer keeps ``description``."""
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
        """Log a refusal of ``batch``, real or shadow, and tell the hooks (``on_breach``: the app's);
        ``over``: a layer whose whole quota the cost exceeds. Returns a hook's response, to send
        instead of a real refusal's 429."""
        if over is None:
            policy, layer, identity = decision.policy, decision.layer, decision.identity
            retry_after: int | None = max(1, math.ceil(decision.retry_after))
            penalty = " (penalty)" if decision.penalized else ""
            why = f"{penalty} of scope {policy.scope!r} for {decision.retry_after:.3f} seconds"
        else:
            policy, layer, identity, retry_after = over.policy, over.layer, over.identity, None
            why = f" of scope {policy.scope!r}: it costs {over.cost}, more than the whole quota, so it could never pass"
            # A bug in a cost function or a dynamic limit, which only the app can fix.
            over_limit = batch_limit(policy, batch)
            which = over_limit.describe() if over_limit is not None else f"scope {policy.scope!r}"
            outcome = "shadow mode lets it through" if shadow else "refused without Retry-After"
            self.notices._warn(
                f"a request to {endpoint} costs {over.cost}, more than the whole quota of {layer} of {which}: "
                f"it can never pass; {outcome}",
                "over quota",
            )
        # A refusal repeated from the block cache was logged when Redis made it.
        if shadow and not decision.cached:
            logger.warning(
                "shadow mode: %s on %s would be refused by %s%s", loggable(str(identity)), endpoint, layer, why
            )
        # The fallback's own warning says Redis is away: its refusals are not logged.
        if self.refusals is not None and not decision.cached and not decision.fallback:
            self._record(self.refusals, "refusal", endpoint, batch.checks, decision, shadow)
        limit = batch_limit(decision.policy, batch)
        hook = limit.spec.on_breach if limit is not None else None
        if hook is not None or on_breach is not None or request_refused.receivers:
            event = RefusalEvent(req, endpoint, policy.scope, identity, layer, retry_after, shadow, decision.penalized)
            response = notify(self.app, event, (hook, on_breach))
            return None if shadow else response
        return None

    def near_limit(self, endpoint: str, batch: Batch, decision: Decision) -> None:
        """Count and log (once the response is sent) that ``decision`` crossed ``RATELIMIT_NEAR_LIMIT``:
        once per identity, layer and window in this process; never the fallback's (see :ref:`near-limit`)."""
        if decision.fallback:
            return
        scope = decision.policy.scope
        # The identity's tag: the identity may be anything a client sent, and is not kept.
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
            record = partial(self._record, log, "near-limit", endpoint, batch.checks, decision, batch.shadow)

            @after_this_request
            def record_when_sent(response: Response) -> Response:
                response.call_on_close(record)
                return response

    def _record(
        self, log: RefusalLog, what: str, endpoint: str, checks: Sequence[Check], decision: Decision, shadow: bool
    ) -> None:
        """Write ``decision`` to ``log`` (``what`` names its entries): one ``XADD`` on the identity's
        node, through its breaker, so that a stalled Redis holds no refusal up."""
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
