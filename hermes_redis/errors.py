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


class BackendUnavailableError(HermesError):
    """Redis or the archive cannot be reached; nothing was acknowledged."""

    exit_code = 5
