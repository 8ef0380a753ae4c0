"""Nothing has been released, so the old names of renamed things are gone
rather than kept with a DeprecationWarning."""

from __future__ import annotations

import importlib

import pytest

import flask_redis_throttle
from flask_redis_throttle.core.engine.penalties import parse_penalty
from flask_redis_throttle.core.engine.rates import Layer
from flask_redis_throttle.core.engine.throttle import Policy
from flask_redis_throttle.decorators import make_spec

#: The old names dropped before any release, where each used to be answered.
DROPPED_NAMES = [
    ("flask_redis_throttle", "Breach"),
    ("flask_redis_throttle", "Rate"),
    ("flask_redis_throttle", "RateLimitError"),
    ("flask_redis_throttle", "rate_limited"),
    ("flask_redis_throttle.signals", "Breach"),
    ("flask_redis_throttle.signals", "rate_limited"),
    ("flask_redis_throttle.errors", "RateLimitError"),
    ("flask_redis_throttle.core.engine.rates", "Rate"),
    ("flask_redis_throttle.core.engine.rates", "MAX_AMOUNT"),
    ("flask_redis_throttle.core.engine.rates", "MAX_PERIOD"),
    ("flask_redis_throttle.decorators", "BreachHook"),
]


@pytest.mark.parametrize(("module", "old"), DROPPED_NAMES)
def test_an_unreleased_old_name_is_gone(module: str, old: str) -> None:
    with pytest.raises(AttributeError, match=rf"module '{module}' has no attribute '{old}'"):
        getattr(importlib.import_module(module), old)


@pytest.mark.parametrize(
    ("thing", "old"),
    [
        (Layer(10, 60), "amount"),
        (Layer(10, 60), "period"),
        (Policy((Layer(10, 60),), "api"), "rates"),
        (make_spec("10/m"), "rates"),
        (make_spec("10/m"), "spec"),
        (parse_penalty("1m;x2"), "block"),
    ],
)
def test_an_unreleased_old_attribute_is_gone(thing: object, old: str) -> None:
    assert not hasattr(thing, old)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'flask_redis_throttle' has no attribute 'Nope'"):
        flask_redis_throttle.Nope  # noqa: B018
