"""Who is asking: the identities a Flask request is known by, built-in
(``"ip"``, ``"user"``, ``"user-or-ip"``) or a key function's. See
docs/identity.rst, and docs/deployment.rst for a proxy's addresses.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any

from flask import Request

from ..core.engine.keys import CACHED_VALUE_LENGTH, Identity, loggable

try:
    from flask_login import current_user
except ImportError:  # Flask-Login is optional; without it there are no users
    current_user = None

logger = logging.getLogger("flask_redis_throttle")

#: A custom key function: given the request, a string, or None when it does not apply.
KeyFunction = Callable[[Request], str | None]
#: How identities are named in settings: a built-in name or a key function.
IdentitySpec = str | KeyFunction
#: A compiled identity: given the request, an :class:`Identity` or None.
Resolver = Callable[[Request], Identity | None]
#: Logs a warning: given the message and its kind (logged at most once per interval).
Warn = Callable[[str, str], None]

#: The longest text that can be an IP address (``ffff:...:ffff:255.255.255.255``): longer is not parsed.
MAX_ADDRESS_LENGTH = 45

IDENTITY_NAMES = ("ip", "user", "user-or-ip")


def check_identities(value: Any) -> tuple[IdentitySpec, ...] | None:
    """``value`` as a tuple if a non-empty list or tuple of built-in names and key functions, else None."""
    if isinstance(value, (list, tuple)) and value and all(callable(item) or item in IDENTITY_NAMES for item in value):
        return tuple(value)
    return None


def resolvers(
    specs: Sequence[IdentitySpec], ipv6_prefix: int, logins: bool, warn: Warn | None = None
) -> tuple[Resolver, ...]:
    """Compile identities, once per view. Without Flask-Login's ``LoginManager`` (``logins``) the user
    identity never applies; ``warn`` (by default, a log line) is told of a logged-in user without an id."""
    ip = _ip_resolver(ipv6_prefix)
    user: Resolver = partial(_user, warn=warn or _log) if logins and current_user is not None else lambda r: None
    built_in: dict[str, Resolver] = {"ip": ip, "user": user, "user-or-ip": lambda r: user(r) or ip(r)}
    return tuple(built_in[spec] if isinstance(spec, str) else _custom_resolver(spec, spec_name(spec)) for spec in specs)


def spec_name(spec: IdentitySpec) -> str:
    """The built-in name, or ``key:<module>.<qualified name>``, also the kind of a key function's
    identities: the same in every process, so that all app servers count them under the same keys."""
    if isinstance(spec, str):
        return spec
    module = getattr(spec, "__module__", None) or ""
    name = getattr(spec, "__qualname__", None) or type(spec).__qualname__
    return f"key:{module}.{name}" if module else f"key:{name}"


def spec_kinds(spec: IdentitySpec) -> tuple[str, ...]:
    """The kinds of identity a spec can name: ``"user-or-ip"`` names users and IPs."""
    return ("user", "ip") if spec == "user-or-ip" else (spec_name(spec),)


def parse_identity(text: str, ipv6_prefix: int, key_kinds: Sequence[str] = ()) -> Identity:
    """Read an identity written as ``<kind>:<value>``, as the refusal log and ``str(identity)``
    write it (see :ref:`identities-as-written`).

    :param ipv6_prefix: the prefix length IPv6 clients are grouped by.
    :param key_kinds: the kinds of the app's key functions, each of which may also be named by
        the end of its name when no other ends the same way.
    :raises ValueError: saying what is wrong, if ``text`` names no identity.
    """
    kind, colon, value = text.partition(":")
    if not colon:
        raise ValueError(f"{text!r} has no kind; write ip:<address>, user:<id> or <key function>:<value>")
    if kind == "ip":
        return Identity("ip", _parse_address(value, ipv6_prefix))
    if kind == "user":
        return Identity("user", value)
    if kind == "key":
        name, colon, value = value.partition(":")
        if not colon or not name:
            raise ValueError(f"{text!r} is not key:<module>.<function>:<value>")
        return Identity(f"key:{name}", value)
    found = [k for k in key_kinds if k == f"key:{kind}" or k.endswith(f".{kind}")]
    if len(found) == 1:
        return Identity(found[0], value)
    known = ", ".join(sorted(key_kinds)) or "none"
    if found:
        raise ValueError(f"{kind!r} could be any of the key functions {', '.join(sorted(found))}; write one in full")
    raise ValueError(f"unknown identity kind {kind!r}: expected ip, user, or a key function (this app's: {known})")


def _parse_address(value: str, ipv6_prefix: int) -> str:
    """What requests from the address or network ``value`` count under."""
    if not value:
        return value
    try:
        network = ipaddress.ip_network(_host(value) or value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None
    address = str(network.network_address)
    if network.version == 4:
        if network.prefixlen != 32:
            raise ValueError(f"IPv4 clients are counted by address, not by network; {value!r} is a network")
        return address
    if network.prefixlen < ipv6_prefix:
        raise ValueError(
            f"{value!r} is wider than the /{ipv6_prefix} networks IPv6 clients are counted by (RATELIMIT_IPV6_PREFIX)"
        )
    return address_group(address, ipv6_prefix)


#: How many identities are kept made: a busy minute's clients, bounded against a flood of new ones.
IDENTITY_CACHE_SIZE = 4096

_known = lru_cache(maxsize=IDENTITY_CACHE_SIZE)(Identity)


def _identity(kind: str, value: str) -> Identity:
    """Kept unless its value is too long to keep (as its tag is not: see ``core.engine.keys``)."""
    return _known(kind, value) if len(value) <= CACHED_VALUE_LENGTH else Identity(kind, value)


def _ip_resolver(ipv6_prefix: int) -> Resolver:
    """A closure: a ``partial`` with a keyword builds a dict on every call."""

    def ip(request: Request) -> Identity:
        address = request.remote_addr or ""
        if ":" in address:  # IPv6, or a port: a plain IPv4 address is counted as it is
            address = _client_address(address, ipv6_prefix)
        # _identity inlined: every request of every app resolves its IP.
        return _known("ip", address) if len(address) <= CACHED_VALUE_LENGTH else Identity("ip", address)

    return ip


def _client_address(text: str, prefix: int) -> str:
    """What a client at ``text`` counts under: its IPv4 address or IPv6 network; text that is no
    address, under itself (unparsed if too long to be one, and never cached)."""
    host = _host(text)
    if host is None or len(host) > MAX_ADDRESS_LENGTH:
        return text
    try:
        return address_group(host, prefix)
    except ValueError:
        return text


def _host(text: str) -> str | None:
    """The address in ``text`` without the port, brackets and zone proxies
    may add (``[2001:db8::1%eth0]:443``); None if they are malformed."""
    if text.startswith("["):
        host, bracket, port = text[1:].partition("]")
        if not bracket or (port and not (port[0] == ":" and _is_port(port[1:]))):
            return None
    elif text.count(":") == 1:
        # One colon: an IPv4 address and a port. IPv6 has at least two.
        host, _colon, port = text.partition(":")
        return host if _is_port(port) else None
    else:
        host = text
    return host.partition("%")[0] if ":" in host else host  # only IPv6 has zones


def _is_port(text: str) -> bool:
    return 0 < len(text) <= 5 and text.isascii() and text.isdigit()


@lru_cache(maxsize=4096)
def address_group(host: str, prefix: int) -> str:
    """The IPv4 address ``host`` is or maps to, or its IPv6 network.

    :raises ValueError: if ``host`` is not an address (cached: only addresses, of a bounded length).
    """
    parsed = ipaddress.ip_address(host)
    if parsed.version == 4:
        return str(parsed)
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(ipaddress.IPv6Network((parsed, prefix), strict=False))


def _user(request: Request, warn: Warn) -> Identity | None:
    """The logged-in user; None when anonymous, or when ``get_id()`` raises
    or returns None (rather than a 500, or everyone under the user "None")."""
    asked = "current_user.is_authenticated"
    try:
        # Resolved once: each use of the proxy runs Flask-Login's lookup again (microseconds).
        user = current_user._get_current_object()
        if not user.is_authenticated:
            return None
        asked = "current_user.get_id()"
        user_id = user.get_id()
        if user_id is not None:
            return _identity("user", str(user_id))
        problem = "returned None for a logged-in user"
    except Exception as error:  # the app's user loader or class, whatever it raises
        problem = f"raised {loggable(repr(error))}"
    warn(f"{asked} {problem}; the request is counted as anonymous", "identity")
    return None


def _log(message: str, kind: str) -> None:
    logger.warning("%s", message)


def _custom_resolver(function: KeyFunction, kind: str) -> Resolver:
    def custom(request: Request) -> Identity | None:
        value = function(request)
        return None if value is None else _identity(kind, str(value))

    return custom
