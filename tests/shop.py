"""The app whose ``flask ratelimit`` output ``docs/cli.rst`` shows.

``tests/test_cli_samples.py`` runs the page's commands on it and compares
their output with the page; the page includes :func:`create_app` from here.
It lives in a module named ``shop`` so that its key function is named
``shop.api_key``, as on the page.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, Request, request
from flask_login import LoginManager, UserMixin

from flask_redis_throttle import RateLimit, limit


class User(UserMixin):
    def __init__(self, user_id: str) -> None:
        self.id = user_id


def api_key(request: Request) -> str | None:
    return request.headers.get("X-Api-Key")


def create_app(storage_url: str = "memory://") -> Flask:
    app = Flask("shop")
    app.config["RATELIMIT_STORAGE_URL"] = storage_url
    app.config["RATELIMIT_DEFAULT"] = "100/h"
    login_manager = LoginManager(app)  # "user" counts logged-in users

    @login_manager.request_loader
    def load_user(req: Request) -> User | None:  # here, simply the X-User header
        name = request.headers.get("X-User")
        return User(name) if name else None

    @app.get("/api/items")
    @limit("10/s;120/m")
    @limit("1000/d", scope="api", identities=[api_key], strategy="gcra", concurrent=5)
    def items() -> Any:
        return {"items": []}

    @app.route("/login", methods=["GET", "POST"])
    @limit("5/m", identities=["ip"], strategy="sliding-window")
    def login() -> Any:
        return "a form"

    @app.get("/")
    def home() -> Any:
        return "home"

    RateLimit(app)
    return app
