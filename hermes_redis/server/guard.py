"""What a web page in the user's browser cannot do to a server on loopback (issue 35).

A keyless server on 127.0.0.1 trusts whoever reaches it; a browser reaches it for any site,
two ways. DNS rebinding: a name the attacker controls resolves to 127.0.0.1, and the page
reads the server as its own origin; the request then names the attacker's host in ``Host``.
Cross-site "simple" requests: a form or a ``fetch(..., {mode: "no-cors"})`` sends a POST
(form or text/plain body, or none) with no preflight; it names its page in ``Origin``.

So: ``Host`` must name a loopback address or ``localhost`` (or a configured name) on every
route; a write (any method but GET, HEAD, OPTIONS) naming a foreign ``Origin``, or carrying a
form or plain-text body, is refused. No CORS header is sent unless origins are configured.
"""

import ipaddress
import re
from collections.abc import Iterable

from hermes_redis.server.errors import ApiError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# the content types a browser sends cross-site without asking first (CORS "simple" requests)
SIMPLE_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data",
                          "text/plain"})


def names(text: str) -> tuple[str, ...]:
    """A comma-separated config value as lower-case names (``server.allowed_hosts``...)."""
    return tuple(part.strip().lower().rstrip("/") for part in text.split(",") if part.strip())


# issue 44: a Host (or an Origin's host) is read as a URL authority would be, whole: a name
# or IPv4 address, or a bracketed IPv6 address, then an optional :port, and nothing else
# (no userinfo, path, spaces, or text after the "]": `[::1]evil.example` once passed as ::1)
_BRACKETED = re.compile(r"\[([0-9a-f:.]+)\](?::([0-9]{1,5}))?")
_NAMED = re.compile(r"([a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?)(?::([0-9]{1,5}))?")


def host_name(host: str) -> str | None:
    """The name in a Host header value (no port, no brackets, lower case, no final dot), or
    None when the value is not exactly a host with an optional port."""
    host = host.strip().lower()
    bracketed = _BRACKETED.fullmatch(host)
    if bracketed is not None:
        name, port = bracketed.groups()
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
    else:
        named = _NAMED.fullmatch(host)
        if named is None:
            return None
        name, port = named.groups()
        name = name[:-1] if name.endswith(".") else name
    if port is not None and int(port) > 65535:
        return None
    return name


def loopback_name(name: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Guard:
    """The Host, Origin and Content-Type checks of every HTTP request.

    ``check_host``: on a loopback bind, Host must be a loopback name or one of
    ``allowed_hosts`` (``*`` allows any); on another bind keys are required, so Host is
    checked only when ``allowed_hosts`` lists names. ``allowed_origins`` (scheme://host[:port],
    or ``*``) may write besides loopback pages."""

    def __init__(self, loopback: bool, allowed_hosts: Iterable[str] = (),
                 allowed_origins: Iterable[str] = ()) -> None:
        self.hosts = frozenset(allowed_hosts)
        self.origins = frozenset(allowed_origins)
        self.check_host = "*" not in self.hosts and (loopback or bool(self.hosts))

    def refusal(self, method: str, headers: Iterable[tuple[bytes, bytes]],
                console: bool = False) -> ApiError | None:
        """Why this request is refused, or None. A request with no Host (HTTP/1.0 tools) is not
        a browser's and passes. ``console``: a /ui/ form, which may be form-encoded because the
        console checks its own CSRF token (server/ui/access.py); Host and Origin still hold."""
        host = origin = ctype = None
        for key, value in headers:
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
            elif key == b"content-type":
                ctype = value.decode("latin-1")
        if self.check_host and host is not None:
            name = host_name(host)
            if name is None:
                return ApiError(421, "misdirected", f"the Host header {host[:100]!r} is not a "
                                "host name or address with an optional :port: send "
                                "Host: 127.0.0.1:PORT or localhost:PORT")
            if not loopback_name(name) and name not in self.hosts:
                return ApiError(421, "misdirected", f"this server does not answer to the host "
                                f"name {name[:100]!r} (a web page may have pointed it here): use "
                                "127.0.0.1 or localhost, or list the name in "
                                "server.allowed_hosts")
        if method in SAFE_METHODS:
            return None
        if origin is not None and not self.origin_allowed(origin):
            return ApiError(403, "forbidden", f"writes from a web page ({origin[:100]}) are "
                            "refused: a page must not change the memory of the user's agents; "
                            "list its origin in server.allowed_origins to allow it")
        if (not console and ctype is not None
                and ctype.partition(";")[0].strip().lower() in SIMPLE_TYPES):
            return ApiError(415, "unsupported_media_type", f"Content-Type {ctype[:60]} is "
                            "refused on writes (any web page can send it): send "
                            "application/json")
        return None

    def origin_allowed(self, origin: str) -> bool:
        """A page on loopback (http or https, any port), or a configured origin."""
        origin = origin.strip().lower().rstrip("/")
        if origin in self.origins or "*" in self.origins:
            return True
        scheme, sep, authority = origin.partition("://")
        if not sep or scheme not in ("http", "https"):
            return False
        name = host_name(authority)  # the whole rest: no path, no userinfo (issue 44)
        return name is not None and loopback_name(name)
