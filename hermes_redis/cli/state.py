"""What every command shares: the ``SessionAPI`` it operates (made on first use, so ``--help``
works without Redis) and the few options and outputs that repeat across commands."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from hermes_redis.core import config as config_mod
from hermes_redis.core.api import SessionAPI
from hermes_redis.core.config import Config
from hermes_redis.core.errors import AuthError, ConfigError, HermesError
from hermes_redis.core.tokens import Tokenizer, get_tokenizer

if TYPE_CHECKING:  # issue 43: --help and the parsing import neither the store nor httpx
    from hermes_redis.session_memory import SessionMemory

STATUS_CHOICES = ("active", "archived", "deleted", "all")
TITLE_CELLS = 32
SNIPPET_CELLS = 60


class State:
    """The config path from ``--config`` (or a remote ``--server``); config and SessionMemory
    (or the HermesClient) are made on first use."""

    def __init__(self, config_path: str | None, server_url: str | None = None,
                 api_key: str | None = None) -> None:
        self.config_path = config_path
        self.server_url, self.api_key = server_url, api_key
        self._config: Config | None = None
        self._mem: SessionAPI | None = None

    def config(self) -> Config:
        if self._config is None:
            self._config = config_mod.load(self.config_path)
        return self._config

    def mem(self) -> SessionAPI:
        """What a command operates: in-process, or a `hermes-redis serve` through --server."""
        if self._mem is None:
            if self.server_url:
                from hermes_redis.client import HermesClient
                self._mem = HermesClient(self.server_url, self.api_key)
            else:
                from hermes_redis.session_memory import SessionMemory
                self._mem = SessionMemory(self.config())
        return self._mem

    def local(self, what: str) -> SessionMemory:
        """The in-process SessionMemory: ``what`` runs on the server's host, not via --server."""
        self.refuse_remote(f"{what} runs")
        from hermes_redis.session_memory import SessionMemory

        mem = self.mem()
        assert isinstance(mem, SessionMemory)
        return mem

    def refuse_remote(self, what_runs: str) -> None:
        """A ConfigError when ``--server`` is given: ``what_runs`` ("doctor runs") on the
        server's host only."""
        if self.server_url:
            raise ConfigError(f"{what_runs} on the server's host, not through --server; "
                              "drop --server (and $HERMES_SERVER_URL)")

    def tokenizer(self) -> Tokenizer:
        """The library's tokenizer in-process; through --server the default encoding's (the
        server does not say which it uses: the verbatim parts' counts are its own either way)."""
        from hermes_redis.session_memory import SessionMemory

        mem = self.mem()
        if isinstance(mem, SessionMemory):
            return mem.tokenizer
        return get_tokenizer(Config().model.encoding)

    def sid(self, prefix: str) -> str:
        """A full session id from what the user typed (a unique prefix is enough)."""
        return self.mem().resolve(prefix)

    def explain(self, err: HermesError) -> HermesError:
        """``err`` as this command line should show it: a server that wants a key, asked
        without one, names the option and the variable that give it (not an HTTP header)."""
        if isinstance(err, AuthError) and self.server_url and not self.api_key:
            return AuthError(f"{self.server_url} needs an API key: pass --api-key KEY or set "
                             "HERMES_API_KEY (`hermes-redis key create --user U` on the "
                             "server's host makes one)")
        return err

    def close(self) -> None:
        if self._mem is not None:
            self._mem.close()
            self._mem = None


pass_state = click.make_pass_decorator(State)


def one_line(text: str) -> str:
    return " ".join(text.split())


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def json_option(fn: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(fn)


def user_option(fn: Any) -> Any:
    return click.option("--user", "user_id", metavar="U", help="Only this user's sessions.")(fn)
