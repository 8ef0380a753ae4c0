"""Refusal hooks: the :data:`request_refused` signal, and ``on_breach`` functions (:ref:`refusal-hooks`). A hook
that raises is logged and skipped; the 429 still goes out."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from blinker import Namespace
from flask import Flask, Request
from werkzeug.wrappers import Response

from .core.engine.keys import Identity
from .core.engine.rates import Layer

__all__ = ["RefusalEvent", "notify", "request_refused"]

logger = logging.getLogger("flask_redis_throttle")

_signals = Namespace()

#: Sent with the app as sender each time a limit refuses a request, with the fields of :class:`RefusalEvent` as
#: keyword arguments; receivers should accept ``**extra`` for fields added later.
request_refused = _signals.signal("request-refused")


@dataclass(frozen=True)
class RefusalEvent:
    """A refusal, as the refusal hooks see it.

    :param request: the refused request.
    :param endpoint: its endpoint.
    :param scope: the scope of the limit that refused it.
    :param identity: whose counter was full.
    :param layer: the layer that refused it.
    :param retry_after: whole seconds, as in ``Retry-After``; None if it costs more than ``layer``'s whole quota.
    :param shadow: whether the limit is in shadow mode, so the request went through.
    :param penalized: whether the identity serves a penalty of the limit.
    """

    request: Request
    endpoint: str
    scope: str
    identity: Identity
    layer: Layer
    retry_after: int | None
    shadow: bool = False
    penalized: bool = False


def notify(
    app: Flask, event: RefusalEvent, hooks: Iterable[Callable[[RefusalEvent], object] | None]
) -> Response | None:
    """Call each hook with ``event``, then send :data:`request_refused`; one that raises is logged, the next called.

    :returns: the first response a hook returned, to send instead of the 429.
    """
    response = None
    for hook in hooks:
        if hook is None:
            continue
        try:
            returned = hook(event)
        except Exception:
            logger.exception("on_breach hook %r failed; the refusal stands", hook)
            continue
        if response is None and isinstance(returned, Response):
            response = returned
    if not request_refused.receivers:
        return response
    fields = {field.name: getattr(event, field.name) for field in dataclasses.fields(event)}
    for receiver in request_refused.receivers_for(app):
        try:
            receiver(app, **fields)
        except TypeError:
            logger.exception(
                "request_refused receiver %r failed; the refusal stands. Receivers get every field of RefusalEvent "
                "as a keyword argument (%s): if it does not take them all, add **extra",
                receiver,
                ", ".join(fields),
            )
        except Exception:
            logger.exception("request_refused receiver %r failed; the refusal stands", receiver)
    return response
