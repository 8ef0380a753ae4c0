"""The refusal log: who hit the limits, kept in a capped Redis stream.

Seeds 002 and 003 keep metadata about the clients behind a limit. We keep it
apart from the counters: one stream per app, ``<prefix>refusals``, trimmed to
``RATELIMIT_REFUSAL_LOG_SIZE`` entries, so its memory is bounded however many
clients are refused. Each entry's ID is Redis's own clock in milliseconds.

Admitted requests never touch it. A refusal costs one ``XADD`` after the
script has refused: writing it from inside the script would mean sending the
request's raw identities with every request, which admitted requests would
pay for, and a key outside the identity's cluster slot.

This module imports Redis but not Flask::

    log = RefusalLog(redis.Redis(), "rl:refusals")
    for refusal in log.recent(10):
        print(refusal.time, refusal.identity, refusal.endpoint)
    print(log.top(5, since=time.time() - 3600))

Each entry names the identity whose counter refused the request apart from
the others present on it (:attr:`Refusal.others`): only the first is counted
as refused, so a user over its limit does not make its IP look refused.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .keys import MAX_VALUE_LENGTH, cut

__all__ = ["MAX_VALUE_LENGTH", "Attribution", "Refusal", "RefusalLog"]

#: A time as seconds since the epoch, or an aware or naive (local) datetime.
Moment = float | datetime


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refused request.

    :param id: the stream entry's ID.
    :param time: when, in seconds since the epoch, by Redis's clock.
    :param endpoint: the Flask endpoint, or ``""`` outside Flask.
    :param scope: the scope of the limit that refused it.
    :param layer: that layer, such as ``"10/1s"``.
    :param strategy: that limit's strategy.
    :param identity: the identity whose counter refused the request, such as
        ``"ip:192.0.2.1"``: the one that was over the limit.
    :param identities: every identity counted on the request (the IP and the
        user, say), ``identity`` among them; :attr:`others` are the rest.
    :param retry_after: seconds until the request would have passed.
    :param shadow: True if the limit was in shadow mode, so the request was
        let through after all.
    :param penalized: True if the identity was blocked by a penalty.
    """

    id: str
    time: float
    endpoint: str
    scope: str
    layer: str
    strategy: str
    identity: str
    identities: tuple[str, ...]
    retry_after: float
    shadow: bool = False
    penalized: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Every field by name, with ``identities`` as a list: ready for JSON,
        as in an admin view's response. (A slotted class has no ``__dict__``.)

        >>> Refusal("1-0", 0.001, "login", "login", "5/1m", "fixed-window", "ip:192.0.2.1",
        ...         ("ip:192.0.2.1",), 42.0).as_dict()["identities"]
        ['ip:192.0.2.1']
        """
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        fields["identities"] = list(self.identities)
        return fields

    @property
    def others(self) -> tuple[str, ...]:
        """The identities present on the request whose counters did not
        refuse it: innocent bystanders, such as the IP of a user over its limit.

        >>> Refusal("1-0", 0.001, "e", "e", "1/1m", "gcra", "user:42", ("ip:192.0.2.1", "user:42"), 1.0).others
        ('ip:192.0.2.1',)
        """
        return tuple(identity for identity in self.identities if identity != self.identity)


@dataclass(frozen=True, slots=True)
class Attribution:
    """One identity's refusals in a time range, and who else was present on them.

    :param identity: the identity whose counter refused the requests.
    :param refusals: how many of them it refused.
    :param others: the other identities present on those requests, each with
        how many of them it was on, most frequent first: not refused by them.
    """

    identity: str
    refusals: int
    others: tuple[tuple[str, int], ...]


class RefusalLog:
    """A bounded log of refusals in a Redis stream.

    :param client: the Redis client (the embedded one for ``memory://``).
    :param key: the stream's key.
    :param size: how many refusals to keep; older ones are trimmed as new
        ones arrive.
    """

    def __init__(self, client: Any, key: str, size: int = 1000) -> None:
        if size < 1:
            raise ValueError(f"a refusal log keeps at least one entry, not {size}")
        self.client = client
        self.key = key
        self.size = size

    def record(
        self,
        *,
        endpoint: str,
        scope: str,
        layer: str,
        strategy: str,
        identity: str,
        identities: Iterable[str],
        retry_after: float,
        shadow: bool = False,
        penalized: bool = False,
    ) -> None:
        """Append one refusal, trimming the log to its size: one ``XADD``.

        :param shadow: whether the refusing limit was in shadow mode.
        :param penalized: whether the identity was blocked by a penalty.

        :raises redis.RedisError: if Redis cannot take it.
        """
        fields = {
            "endpoint": endpoint,
            "scope": cut(scope),
            "layer": layer,
            "strategy": strategy,
            "identity": cut(identity),
            # JSON's escapes carry any value, lone surrogates included.
            "identities": json.dumps([cut(i) for i in identities]),
            "retry_after": f"{retry_after:.6f}",
        }
        if shadow:
            fields["shadow"] = "1"
        if penalized:
            fields["penalized"] = "1"
        # Identities and scopes may hold anything; backslashreplace keeps
        # what UTF-8 cannot encode (lone surrogates) readable.
        encoded = {name: value.encode("utf-8", "backslashreplace") for name, value in fields.items()}
        self.client.xadd(self.key, encoded, maxlen=self.size, approximate=False)

    def recent(self, count: int = 20, since: Moment | None = None) -> list[Refusal]:
        """The latest refusals, newest first.

        :param count: at most this many.
        :param since: only those at or after this time.
        """
        entries: list[tuple[Any, dict[Any, Any]]] = self.client.xrevrange(
            self.key, "+", _bound(since, "-"), count=count
        )
        return [_decode(entry_id, fields) for entry_id, fields in entries]

    def between(self, since: Moment | None = None, until: Moment | None = None) -> list[Refusal]:
        """Every refusal kept in a time range, oldest first.

        :param since: from this time (by default, the oldest entry kept).
        :param until: up to this time (by default, now).
        """
        entries: list[tuple[Any, dict[Any, Any]]] = self.client.xrange(self.key, _bound(since, "-"), _bound(until, "+"))
        return [_decode(entry_id, fields) for entry_id, fields in entries]

    def top(self, count: int = 10, since: Moment | None = None, until: Moment | None = None) -> list[tuple[str, int]]:
        """The most refused identities in a time range, most refused first.

        Only the identity whose counter refused a request counts: a user
        over its limit is refused, the IP it came from is not (it is among
        :attr:`Refusal.others`). Ties keep the order they were first seen in.

        :param count: at most this many identities.
        :param since: from this time (by default, the oldest entry kept).
        :param until: up to this time (by default, now).
        """
        return [(found.identity, found.refusals) for found in self.attributed(count, since, until)]

    def attributed(
        self, count: int = 10, since: Moment | None = None, until: Moment | None = None
    ) -> list[Attribution]:
        """:meth:`top`, with the other identities present on each one's refusals.

        A dashboard shows these apart, so an operator sees that a user
        hammering from one IP was refused, not the IP, and can still find it.
        """
        tally: Counter[str] = Counter()
        others: dict[str, Counter[str]] = {}
        for refusal in self.between(since, until):
            tally[refusal.identity] += 1
            others.setdefault(refusal.identity, Counter()).update(refusal.others)
        return [
            Attribution(identity, refusals, tuple(others[identity].most_common()))
            for identity, refusals in tally.most_common(count)
        ]

    def per_minute(self, until: float, minutes: int = 60) -> list[int]:
        """How many refusals there were in each of the ``minutes`` minutes
        before ``until``, oldest first: the last item counts those in the
        minute up to ``until``.

        The minutes end at ``until``, not on the clock's minutes, so a
        refusal just logged always falls in the last one.
        """
        start = until - 60 * minutes
        counts = [0] * minutes
        for refusal in self.between(start, until):
            # A stream ID is whole milliseconds; one at the very start counts in the first minute.
            counts[min(max(int((refusal.time - start) // 60), 0), minutes - 1)] += 1
        return counts

    def clear(self) -> None:
        """Delete the whole log."""
        self.client.delete(self.key)


def _bound(moment: Moment | None, open_end: str) -> str:
    """A stream ID bound for a time: its millisecond, or the open end."""
    if moment is None:
        return open_end
    seconds = moment.timestamp() if isinstance(moment, datetime) else float(moment)
    return str(max(int(seconds * 1000), 0))


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _decode(entry_id: Any, raw: dict[Any, Any]) -> Refusal:
    fields = {_text(k): _text(v) for k, v in raw.items()}
    entry = _text(entry_id)
    return Refusal(
        id=entry,
        time=int(entry.split("-")[0]) / 1000,
        endpoint=fields.get("endpoint", ""),
        scope=fields.get("scope", ""),
        layer=fields.get("layer", ""),
        strategy=fields.get("strategy", ""),
        identity=fields.get("identity", ""),
        identities=tuple(json.loads(fields.get("identities", "[]"))),
        retry_after=float(fields.get("retry_after", "0")),
        shadow=fields.get("shadow") == "1",
        penalized=fields.get("penalized") == "1",
    )
