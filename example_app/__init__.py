"""A small app showing flask-redis-throttle: layered limits, per-user counting, a guarded log-in,
and the operators' dashboard with its overrides.

Run it from the repository root with ``flask --app example_app run`` (Flask finds
``create_app``) or ``python -m example_app``, then open http://127.0.0.1:5000/.
"""

from __future__ import annotations

import hmac
import os
from typing import Any

from flask import Flask, Response, redirect, render_template_string, request, url_for
from flask_login import LoginManager, UserMixin, current_user, login_user, logout_user

from flask_redis_throttle import RateLimit, RateLimitExceeded, dashboard, limit
from flask_redis_throttle.core.storages.local import find_server_binary

# Created once, bound to each app in create_app: tests build many apps, each with its own counters.
login_manager = LoginManager()
ratelimit = RateLimit()


class User(UserMixin):
    def __init__(self, name: str, password: str) -> None:
        self.id = name
        self.password = password


# A demo, so the passwords are on the index page. A real app keeps password hashes in a database.
USERS = {name: User(name, password) for name, password in [("alice", "wonderland"), ("bob", "builder")]}
ITEMS = ["apple", "banana", "cherry", "damson", "elderberry"]


@login_manager.user_loader
def load_user(user_id: str) -> User | None:
    return USERS.get(user_id)


INDEX_PAGE = """<!doctype html>
<title>flask-redis-throttle demo</title>
<h1>flask-redis-throttle demo</h1>
{% if current_user.is_authenticated %}<form method="post" action="{{ url_for('logout') }}">Logged in as
<b>{{ current_user.id }}</b>: your calls count against your account too. <button>Log out</button></form>
<p>Open the <a href="{{ url_for('ratelimit_dashboard.index') }}">rate limit dashboard</a>: the limits, who
hit them, and the overrides: raise a client's quota, let it through, or block it, for a while.
{% else %}<p><a href="{{ url_for('login_form') }}">Log in</a> as alice / wonderland or bob / builder.{% endif %}
<h2>Things to try</h2>
<pre>
# 10/s;120/m;240/h: see the RateLimit-Policy and RateLimit headers
curl -i {{ base }}api/items

# 2/s;20/m: the third call in a second gets 429 with Retry-After, as problem details for JSON clients
for i in 1 2 3; do curl -si -H 'Accept: application/json' '{{ base }}api/search?q=an'; echo; done

# /api/items and /api/items/&lt;n&gt; share one "items" scope, so one set of counters
curl -i {{ base }}api/items/1

# /api/whoami counts a logged-in user by account (from any IP), anyone else by IP
curl -s -c jar -d username=alice -d password=wonderland {{ base }}login
curl -i -b jar {{ base }}api/whoami

# The log-in form takes 5 attempts a minute per IP, and alice's log-in above used one,
# so this prints 401 401 401 401 429 429 (run this last, within a minute of it)
for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code} ' -d username=bob -d password=x {{ base }}login; done
</pre>
"""

LOGIN_PAGE = """<!doctype html>
<title>Log in</title>
<h1>Log in</h1>
{% if error %}<p style="color: #b00">{{ error }}</p>{% endif %}
<form method="post" action="{{ url_for('login') }}"><label>User <input name="username" autofocus></label>
<label>Password <input name="password" type="password"></label> <button>Log in</button></form>
<p>Demo users: alice / wonderland, bob / builder. <a href="{{ url_for('index') }}">Back</a></p>
"""


def default_storage_url() -> str:
    """No Redis needed either way: ``local://`` when a server binary is installed (the
    ``local`` extra), so every worker on this host shares one server that the first
    request starts in the instance folder; else the embedded ``memory://`` store, whose
    counts are kept per process."""
    return "local://" if find_server_binary() is not None else "memory://"


def create_app(config: dict[str, Any] | None = None) -> Flask:
    app = Flask(__name__)
    app.config["SECRET_KEY"] = os.environ.get("SECRET_KEY", "dev-only-do-not-deploy")
    app.config["RATELIMIT_STORAGE_URL"] = os.environ.get("RATELIMIT_STORAGE_URL") or default_storage_url()
    app.config.update(config or {})  # before init_app, which reads the RATELIMIT_* settings once
    login_manager.init_app(app)
    ratelimit.init_app(app)

    @app.get("/")
    def index() -> str:
        return render_template_string(INDEX_PAGE, base=request.url_root)

    @app.get("/login")
    def login_form() -> str:
        return render_template_string(LOGIN_PAGE)

    # Only the POST is limited, so looking at the form costs no attempt. IP only: counting by
    # user would let an attacker lock alice out of her own account by guessing wrong.
    @app.post("/login")
    @limit("5/m", identities=["ip"])
    def login() -> Any:
        user = USERS.get(request.form.get("username", ""))
        if user is None or not hmac.compare_digest(user.password, request.form.get("password", "")):
            return render_template_string(LOGIN_PAGE, error="Wrong user name or password."), 401
        login_user(user)
        return redirect(url_for("index"))

    @app.post("/logout")  # POST, so that a link on another site cannot log you out
    def logout() -> Any:
        logout_user()
        return redirect(url_for("index"))

    # Layers: bursts of 10 a second, but no more than 120 a minute and 240 an hour. Both item
    # views give the same scope, so browsing the list and single items draws on one quota.
    @app.get("/api/items")
    @limit("10/s;120/m;240/h", scope="items")
    def items() -> Any:
        return {"items": ITEMS}

    @app.get("/api/items/<int:number>")
    @limit("10/s;120/m;240/h", scope="items")
    def item(number: int) -> Any:
        if not 0 <= number < len(ITEMS):
            return {"error": "no such item"}, 404
        return {"item": ITEMS[number]}

    # Searching is dearer, so it gets a tighter limit.
    @app.get("/api/search")
    @limit("2/s;20/m")
    def search() -> Any:
        query = request.args.get("q", "")
        return {"query": query, "items": [name for name in ITEMS if query in name]}

    # A logged-in user is counted by account only (whichever IP they come from); anyone else by IP.
    @app.get("/api/whoami")
    @limit("5/m", identities=["user-or-ip"])
    def whoami() -> Any:
        if current_user.is_authenticated:
            return {"counted_as": f"user:{current_user.id}"}
        return {"counted_as": f"ip:{request.remote_addr}"}

    # The operators' dashboard, for anyone logged in here (a real app would check a role); to anyone
    # else it is a 404, like a URL that does not exist. Its log of overrides names who made each.
    app.register_blueprint(
        dashboard.blueprint(authorize=lambda: current_user.is_authenticated, operator=lambda: current_user.id),
        url_prefix="/admin/ratelimit",
    )

    @app.errorhandler(RateLimitExceeded)
    def too_many_requests(error: RateLimitExceeded) -> Response | tuple[str, int]:
        # A person at the log-in form gets the form back, saying how long to wait. The extension
        # still adds Retry-After and the RateLimit headers to this response.
        if request.endpoint == "login":
            message = f"Too many attempts ({error.layer}). Try again in {error.retry_after} seconds."
            return render_template_string(LOGIN_PAGE, error=message), 429
        # The API keeps the extension's own answer: problem+json if the client accepts JSON, else text.
        return error.get_response(request.environ)

    return app
