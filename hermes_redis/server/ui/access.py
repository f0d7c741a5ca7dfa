"""Who is using the console, and whether a write may go through.

The console asks ``Auth`` exactly as the API does: with no key in the archive (and loopback)
it is open; else the API key given at ``/ui/login`` is kept in an HttpOnly, SameSite=Strict
cookie (never in a URL: the login form POSTs it) and checked on every request, so a revoked
key stops working within ``Auth.ttl``. Writes need the double-submit CSRF token (a random
cookie echoed by a hidden form field) and, when the browser sends one, an Origin of this
server.
"""

import hmac
import secrets
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import Response

from hermes_redis.server.auth import Auth, Principal
from hermes_redis.server.errors import ApiError

KEY_COOKIE = "hermes_ui_key"
CSRF_COOKIE = "hermes_ui_csrf"
MAX_FORM = 64 * 1024


class FormRefused(ApiError):
    """A console form that did not pass the checks: answered as an HTML page, not JSON."""


def principal(request: Request) -> Principal | None:
    """The console's caller, or None when it must log in (no key, or a wrong or revoked one)."""
    auth: Auth = request.app.state.auth
    key = request.cookies.get(KEY_COOKIE)
    try:
        return auth.principal(f"Bearer {key}" if key else None)
    except ApiError:
        if not key:
            return None
    try:  # a stale cookie on a server that is open again (every key revoked)
        return auth.principal(None)
    except ApiError:
        return None


def csrf_token(request: Request) -> str:
    """This browser's CSRF token: the cookie's, or a new one that ``set_cookies`` sends."""
    token = request.cookies.get(CSRF_COOKIE) or getattr(request.state, "new_csrf", None)
    if not token:
        token = request.state.new_csrf = secrets.token_urlsafe(24)
    return token


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def set_cookies(request: Request, response: Response) -> Response:
    """Send the CSRF cookie a page's forms were rendered with, if it is new."""
    new = getattr(request.state, "new_csrf", None)
    if new:
        response.set_cookie(CSRF_COOKIE, new, path="/ui", httponly=True, samesite="strict",
                            secure=_secure(request))
    return response


def log_in(request: Request, response: Response, key: str) -> None:
    response.set_cookie(KEY_COOKIE, key, path="/ui", httponly=True, samesite="strict",
                        secure=_secure(request))


def log_out(response: Response) -> None:
    response.delete_cookie(KEY_COOKIE, path="/ui")


async def form(request: Request) -> dict[str, str]:
    """The POSTed form, after the CSRF checks (FormRefused 403 when they fail: nothing done)."""
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.headers.get('host', '')}":
        raise FormRefused(403, "forbidden", "this form was sent from another site; "
                                         "use the console's own page")
    body = await request.body()
    if len(body) > MAX_FORM:
        raise FormRefused(413, "too_large", "the form is too large")
    fields = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    cookie = request.cookies.get(CSRF_COOKIE, "")
    sent = fields.pop("csrf", "")
    if not cookie or not hmac.compare_digest(cookie.encode(), sent.encode()):
        raise FormRefused(403, "forbidden", "the form's CSRF token is missing or stale; "
                                         "reload the page and try again")
    return fields
