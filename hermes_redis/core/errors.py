"""One exception family. Every message is a single line a user can act on."""


class HermesError(Exception):
    """Base of every expected error; the CLI prints ``str(err)`` and exits with ``exit_code``."""

    exit_code = 1


class ConfigError(HermesError):
    """The config file or an environment override is wrong."""

    exit_code = 2


class ValidationError(HermesError):
    """Bad input to the API: nothing was written."""

    exit_code = 2


class NotFoundError(HermesError):
    """No session (or memory) with that id."""

    exit_code = 3


class AmbiguousIdError(HermesError):
    """A session id prefix matches more than one session."""

    exit_code = 3


class StateError(HermesError):
    """The session exists but its status forbids the operation (deleted, archived)."""

    exit_code = 4


class ConflictError(StateError):
    """A retried message_id names a stored message with another body, or one forgotten in
    its session: nothing was written (HTTP 409). ``seq``: the stored message's, 0 if none."""

    def __init__(self, message: str, seq: int = 0) -> None:
        super().__init__(message)
        self.seq = seq


class BackendUnavailableError(HermesError):
    """Redis or the archive cannot be reached; nothing was acknowledged."""

    exit_code = 5


class AuthError(HermesError):
    """The server refused the API key (missing, wrong, revoked) or what it may do (403)."""

    exit_code = 6


class BadReplyError(BackendUnavailableError):
    """What answered at the server's URL is not the hermes-redis API (no JSON reply: a proxy's
    error page, another service on that port); nothing is known to be acknowledged."""


class ListenError(HermesError):
    """``serve`` cannot listen on its host and port (in use, or not allowed)."""

    exit_code = 7


# The one error table of the HTTP API: (code, status, class). The server answers a library
# error with the first row of its class (``wire_error``); the client raises the class of a
# reply's code (``error_class``). Codes that share a class are the HTTP layer's own refusals.
WIRE_ERRORS: tuple[tuple[str, int, type[HermesError]], ...] = (
    ("invalid", 422, ValidationError),
    ("malformed_json", 400, ValidationError),
    ("too_large", 413, ValidationError),
    ("not_found", 404, NotFoundError),
    ("ambiguous_id", 409, AmbiguousIdError),
    ("conflict", 409, StateError),
    ("unavailable", 503, BackendUnavailableError),
    ("misconfigured", 503, ConfigError),
    ("unauthorized", 401, AuthError),
    ("forbidden", 403, AuthError),
    # issue 35's guard: refused for where the request came from, or for how it was sent
    ("misdirected", 421, AuthError),
    ("unsupported_media_type", 415, ValidationError),
)
CODES: dict[str, type[HermesError]] = {code: cls for code, _, cls in WIRE_ERRORS}
_BY_CLASS: dict[type, tuple[int, str]] = {}
for _code, _status, _cls in WIRE_ERRORS:
    _BY_CLASS.setdefault(_cls, (_status, _code))


def wire_error(err: HermesError) -> tuple[int, str]:
    """The HTTP status and code of ``err``: its nearest class in the table (503
    "unavailable" for a class the table does not name)."""
    for cls in type(err).__mro__:
        if cls in _BY_CLASS:
            return _BY_CLASS[cls]
    return 503, "unavailable"


def error_class(code: object) -> type[HermesError]:
    """The class a reply's error ``code`` stands for (HermesError for an unknown code)."""
    return CODES.get(str(code), HermesError)
