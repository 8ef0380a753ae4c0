"""One refusal as the refusal log keeps it (:class:`Refusal`), and one
identity's refusals in a time range (:class:`Attribution`); the log itself
is :mod:`flask_redis_throttle.core.refusals`.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["Attribution", "Refusal"]


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
    :param penalized: True if the identity served a penalty.
    :param cut: True if ``identity`` was longer than
        :data:`~flask_redis_throttle.core.keys.MAX_VALUE_LENGTH`, so that the log kept only its first
        characters and an ellipsis: it then names no identity exactly.
        Otherwise ``identity`` is exact, whatever it holds (newlines,
        lone surrogates).
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
    cut: bool = False

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
    :param cut: True if ``identity`` is what the log kept of a longer one
        (see :attr:`Refusal.cut`).
    """

    identity: str
    refusals: int
    others: tuple[tuple[str, int], ...]
    cut: bool = False
