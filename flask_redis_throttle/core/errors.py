"""The exceptions the core raises for bad input, free of HTTP: the 429 a refused request raises is Werkzeug's, in
:mod:`flask_redis_throttle.errors`."""

from __future__ import annotations

from .engine.keys import cut


class InputError(Exception):
    """The base class of the errors this extension raises for bad input."""


class InvalidLimit(InputError, ValueError):
    """A limit string or a :func:`~flask_redis_throttle.limit` option is malformed.

    :param message: what is wrong, quoting the bad text and saying what is valid.
    """

    def __init__(self, message: str, spec: object = None) -> None:
        super().__init__(message)
        #: The offending value, as it was given.
        self.spec = spec


class ConfigurationError(InputError, ValueError):
    """A ``RATELIMIT_*`` setting has a bad value. Raised by ``init_app``.

    :param expected: what would be valid.
    """

    def __init__(self, key: str, value: object, expected: str) -> None:
        # Cut, as a 100,000-character value would otherwise flood the log line.
        super().__init__(f"{key} = {cut(repr(value))} is invalid: expected {expected}")
        #: The config key, such as ``"RATELIMIT_STORAGE_URL"``.
        self.key = key
        #: The bad value.
        self.value = value
