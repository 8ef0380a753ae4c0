"""The dashboard (:doc:`/dashboard`): the ``flask ratelimit`` reports, from the same functions, in a browser.
It shows IP addresses and user ids, so every URL of it is a 404 unless ``authorize`` says yes."""

from __future__ import annotations

import base64
import hmac
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from flask import Blueprint, abort, current_app, flash, redirect, render_template, request, session, url_for
from markupsafe import Markup
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import RequestRedirect
from werkzeug.wrappers import Response

from ._ops.console import duration, utc
from ._ops.override_changes import DISABLED, FAILURES, known_scopes, latest_changes, lift, set_override, unavailable
from ._ops.reports import (
    CHANGES_HEADER,
    LIMITS_HEADER,
    OVERRIDES_HEADER,
    STATUS_HEADER,
    change_rows,
    find_endpoint,
    find_identity,
    limit_rows,
    override_rows,
    reset_counters,
    status_rows,
)
from ._request.identity import parse_identity
from ._request.state import RateLimitState
from .core.engine.keys import MAX_VALUE_LENGTH, Identity
from .decorators import state_of

__all__ = ["SESSION_KEY", "blueprint", "chart"]

#: The session key of the per-session token the reset form must send back.
SESSION_KEY = "_ratelimit_dashboard_csrf"

#: How many entries of each log the page lists, and identities it ranks.
RECENT, TOP = 20, 10


def blueprint(
    authorize: Callable[[], bool] | None = None,
    name: str = "ratelimit_dashboard",
    operator: Callable[[], str] | None = None,
) -> Blueprint:
    """The dashboard, as a blueprint to register at a URL prefix of the app's choice.

    :param authorize: called before every dashboard request; unless it returns True, the URL is an unknown one's 404.
    :param name: the blueprint's name, to register more than one.
    :param operator: names who changes an override, for the log; by default ``"dashboard"``.
    """
    bp = Blueprint(name, __name__, template_folder="templates")
    who = operator or (lambda: "dashboard")

    def hide(endpoint: str | None, values: object) -> None:
        # A URL value preprocessor, so it runs before the limiter's hook. The session is left unsaved, or its
        # cookie would tell this 404 from others.
        flags = {name: getattr(session, name, None) for name in ("accessed", "modified")}
        if authorize is not None and authorize():
            return
        for name, value in flags.items():
            if value is not None:
                setattr(session, name, value)
        request.url_rule, request.view_args, request.routing_exception = None, None, NotFound()

    @bp.app_url_value_preprocessor
    def hide_near_misses(endpoint: str | None, values: object) -> None:
        """A dashboard URL's 405 and trailing-slash 308 too: Flask runs no blueprint hook when no rule matched."""
        if _ours(name, request.routing_exception):
            hide(endpoint, values)

    bp.url_value_preprocessor(hide)
    bp.add_url_rule("/", "index", _index, methods=["GET"])
    for rule, endpoint, view in (
        ("/reset", "reset", _form("reset", _reset, change=False)),
        ("/overrides", "override", _form("override", lambda state: _override(state, who()))),
        ("/overrides/remove", "remove_override", _form("remove", lambda state: _remove_override(state, who()))),
    ):
        bp.add_url_rule(rule, endpoint, view, methods=["POST"])
    return bp


def _index() -> tuple[str, int]:
    """The page; with ``?identity=`` or ``?exact=``, that identity's counters as ``flask ratelimit status`` shows."""
    state: RateLimitState = state_of()
    page: dict[str, Any] = {
        "limits_header": LIMITS_HEADER,
        "limits": limit_rows(state),
        "status_header": STATUS_HEADER,
        "endpoints": sorted(current_app.view_functions),
        "csrf_token": _csrf_token(),
        "enabled": state.throttle is not None,
        "logged": state.refusals is not None,
        "near_logged": state.near_limits is not None,
        "identity": request.args.get("identity", "").strip(),
        # "view", not "endpoint": url_for() takes that name itself.
        "endpoint": request.args.get("view", "").strip(),
        "max_length": MAX_VALUE_LENGTH,
        "utc": utc,
        "duration": duration,
        "shown": _shown,
        "lookup": lambda identity: url_for(".index", **_naming(identity, state), _anchor="lookup"),
    }
    status = 200
    try:
        if state.overrides is not None:
            table = state.overrides.table()
            page["overrides_header"], page["changes_header"] = OVERRIDES_HEADER, CHANGES_HEADER
            page["overrides"] = list(zip(override_rows(table.overrides), table.overrides, strict=True))
            page["changes"] = change_rows(latest_changes(state, RECENT))
            page["scopes"] = sorted(known_scopes(state))
        refusals, now = state.refusals, time.time()
        if refusals is not None:
            page["recent"], page["top"] = refusals.recent(RECENT), refusals.attributed(TOP, since=now - 3600)
            page["chart"] = chart(refusals.per_minute(now))
        if state.near_limits is not None:
            page["near"] = state.near_limits.recent(RECENT)
        who = _requested(request.args, state)
        if who is not None:
            if state.throttle is None:
                raise ValueError(DISABLED)
            endpoint = find_endpoint(page["endpoint"] or None)
            page["who"], page["naming"] = _shown(str(who)), _naming(str(who), state)
            page["status"] = status_rows(state, state.throttle, who, endpoint)
            page["identity"] = page["identity"] or page["who"]
    except ValueError as error:
        page["problem"], status = str(error), 400
    except FAILURES as error:
        page["problem"], status = unavailable(error), 503
    return render_template("ratelimit_dashboard/index.html", **page), status


#: What a form's action flashes, and the URL arguments of the page it goes back to.
Done = tuple[str, dict[str, Any]]


def _form(form: str, act: Callable[[RateLimitState], Done], change: bool = True) -> Callable[[], Response]:
    """A form's view: ``act``, then back to the page. A 400 unless the form sent back this session's token (another
    site can make a browser post here, but cannot read it); a storage failure says whether a ``change`` may be made."""

    def view() -> Response:
        sent = request.form.get("csrf_token", "")
        token = session.get(SESSION_KEY) if current_app.secret_key else None
        if not isinstance(token, str) or not hmac.compare_digest(sent.encode(), token.encode()):
            abort(400, f"the {form} form's token is missing or stale: reload the dashboard and try again")
        state: RateLimitState = state_of()
        if state.throttle is None:
            abort(400, DISABLED)
        try:
            message, place = act(state)
        except ValueError as error:
            abort(400, str(error))
        except FAILURES as error:
            abort(503, unavailable(error, change))
        flash(message, "ratelimit")
        return redirect(url_for(".index", **place))

    return view


def _override(state: RateLimitState, by: str) -> Done:
    form = {name: value.strip() for name, value in request.form.items()}
    action = request.form.get("action", "")
    limit = form.get("limit", "") if action == "limit" else None
    scope, until, span = (form.get(name) or None for name in ("scope", "until", "for"))
    made = set_override(state, action, form.get("identity", ""), limit, scope, until, span, by=by)
    return f"{_shown(made.describe())} until {utc(made.until)} UTC.", {"_anchor": "overrides"}


def _remove_override(state: RateLimitState, by: str) -> Done:
    """Remove one override: its target and scope, from its row's button."""
    gone = lift(state, request.form.get("target", ""), request.form.get("scope", "") or None, False, by)
    message = f"Removed: {_shown(gone[0].describe())}." if gone else "No such override: nothing removed."
    return message, {"_anchor": "overrides"}


def _reset(state: RateLimitState) -> Done:
    """Delete an identity's counters, then show its lookup again."""
    assert state.throttle is not None
    who = _requested(request.form, state)
    if who is None:
        raise ValueError("no identity to reset: write ip:<address>, user:<id> or <key function>:<value>")
    endpoint = find_endpoint(request.form.get("view", "").strip() or None)
    done = reset_counters(state, state.throttle, who, endpoint)
    message = "Nothing to reset: no limit of this endpoint counts it." if done is None else _shown(done[1])
    return message, {**_naming(str(who), state), "view": endpoint, "_anchor": "lookup"}


def _naming(text: str, state: RateLimitState) -> dict[str, Any]:
    """The link arguments that name ``text`` exactly: ``identity=`` when it reads back as itself, else ``exact=``
    its UTF-8 in URL-safe base64 (a form mangles newlines, a URL lone surrogates, ``identity=`` is stripped)."""
    if text.isprintable() and text == text.strip():
        try:
            if not text.startswith("ip:") or str(parse_identity(text, state.settings.ipv6_prefix)) == text:
                return {"identity": text}
        except ValueError:
            pass
    return {"exact": base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")}


def _requested(values: Mapping[str, str], state: RateLimitState) -> Identity | None:
    """The identity a query or form names (see :func:`_naming`), or None; a ValueError says why it names none."""
    exact = values.get("exact")
    if exact is None:
        text = values.get("identity", "").strip()
        return find_identity(text, state) if text else None
    try:
        text = base64.urlsafe_b64decode(exact + "=" * (-len(exact) % 4)).decode("utf-8", "surrogatepass")
    except ValueError:  # bad base64 or bad UTF-8
        raise ValueError("the link's exact= argument names no identity: follow a link of the dashboard") from None
    kind, _colon, value = text.partition(":")
    return Identity("ip", value) if kind == "ip" else find_identity(text, state)


def _shown(text: str) -> str:
    """``text`` with what is not printable escaped, as :func:`~.keys.loggable` does, but not cut."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _ours(name: str, error: BaseException | None) -> bool:
    """Whether ``error`` is a 405 of a URL of blueprint ``name``, or a redirect to one."""
    if isinstance(error, MethodNotAllowed) and error.valid_methods:
        path, method = None, next(iter(error.valid_methods))
    elif isinstance(error, RequestRedirect):
        path, method = unquote(urlsplit(error.new_url).path).removeprefix(request.script_root), None
    else:
        return False
    adapter = current_app.create_url_adapter(request)
    try:
        # A redirect's target takes the request's method: Werkzeug redirects only then.
        endpoint, _values = adapter.match(path, method) if adapter else ("", {})
    except HTTPException:
        return False
    return isinstance(endpoint, str) and endpoint.startswith(f"{name}.")


def _csrf_token() -> str | None:
    """This session's form token, made on first use; None without a ``SECRET_KEY``."""
    if not current_app.secret_key:
        return None
    token = session.get(SESSION_KEY)
    if not isinstance(token, str):
        token = session[SESSION_KEY] = secrets.token_urlsafe(32)
    return token


def chart(counts: Sequence[int], width: int = 720, height: int = 160) -> Markup:
    """Refusals per minute as an inline SVG bar chart, oldest minute first: drawn here, so the page needs no script
    and works offline.

    >>> svg = chart([0] * 58 + [3, 1])
    >>> svg.count("<rect class=\\"bar\\""), "3 refusals, 1 minute ago" in svg
    (2, True)
    """
    top = max([*counts, 1])
    left, bottom, plot_height = 40, 20, height - 30
    step = (width - left - 10) / max(len(counts), 1)
    bars = []
    for i, count in enumerate(counts):
        if not count:
            continue
        bar = count / top * plot_height
        ago = len(counts) - 1 - i
        when = "in the last minute" if ago == 0 else f"{ago} minute{'' if ago == 1 else 's'} ago"
        title = f"{count} refusal{'' if count == 1 else 's'}, {when}"
        bars.append(
            f'<rect class="bar" x="{left + i * step + 1:.1f}" y="{height - bottom - bar:.1f}" '
            f'width="{max(step - 2, 1):.1f}" height="{bar:.1f}"><title>{title}</title></rect>'
        )
    base = height - bottom
    minutes = len(counts)
    label = f"Refusals per minute over the last {minutes} minutes: {sum(counts)} in all, at most {top} in a minute"
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" aria-label="{label}">'
        f'<line x1="{left}" y1="{base}" x2="{width - 10}" y2="{base}" stroke="#888"/>'
        f'<line x1="{left}" y1="10" x2="{left}" y2="{base}" stroke="#888"/>'
        f'<text x="{left - 4}" y="14" text-anchor="end">{top}</text>'
        f'<text x="{left - 4}" y="{base}" text-anchor="end">0</text>'
        f'<text x="{left}" y="{height - 4}">{minutes} min ago</text>'
        f'<text x="{width - 10}" y="{height - 4}" text-anchor="end">now</text>'
        f"{''.join(bars)}</svg>"
    )
