"""Typed configuration loaded from ``config.yml`` with environment overrides.

Unknown keys, wrong types and impossible values are errors naming the key and the file,
so a typo never silently falls back to a default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from hermes_redis.core.errors import ConfigError

Backend = Literal["memory", "redis"]
Strategy = Literal["rolling_window", "summary", "hybrid"]
EmbeddingProvider = Literal["none", "openai", "local"]


@dataclass(frozen=True)
class Compression:
    enabled: bool = True
    strategy: Strategy = "hybrid"
    keep_recent: int = 10
    summarize_older: bool = True
    summary_model: str = "default"
    threshold: float = 0.8
    summary_max_tokens: int = 2000
    summary_share: float = 0.25
    keep_first: int = 1
    recall: bool = True
    recall_share: float = 0.4


@dataclass(frozen=True)
class Session:
    backend: Backend = "redis"
    max_messages: int = 50
    ttl: int = 3600
    compression: Compression = field(default_factory=Compression)
    auto_title: bool = True
    save_tool_results: bool = True
    tool_result_max_tokens: int = 2000
    tool_result_summarize: bool = True  # false: cap an oversized result to its head and tail


@dataclass(frozen=True)
class Persistent:
    triggers: bool = True  # "记住：…" / "remember that …" in a user message stores a memory
    auto_extract: bool = True  # workers store the durable facts users state, after each flush
    max_extracted: int = 500  # per user: past it, the oldest extracted memories are dropped


@dataclass(frozen=True)
class Memory:
    session: Session = field(default_factory=Session)
    persistent: Persistent = field(default_factory=Persistent)


@dataclass(frozen=True)
class Redis:
    url: str | None = None
    cluster: bool = False  # a Redis Cluster (also detected: INFO cluster says cluster_enabled:1)
    queue_url: str | None = None  # RQ's own Redis; required with a cluster (RQ cannot use one)
    key_prefix: str = "hermes"
    queue: str = "hermes"
    socket_timeout: float = 5.0
    retries: int = 3
    allow_eviction: bool = False
    memory_warn: float = 0.8
    memory_limit: float = 0.95


@dataclass(frozen=True)
class Archive:
    data_dir: str = "~/.hermes/data"
    path: str | None = None
    url: str | None = None  # postgresql://…: the archive on PostgreSQL instead of SQLite at path
    pool_size: int = 5  # PostgreSQL connections each process may hold


@dataclass(frozen=True)
class Model:
    name: str = "default"
    context_window: int = 200_000
    reply_reserve: int = 8_192
    encoding: str = "cl100k_base"


@dataclass(frozen=True)
class Limits:
    max_content_bytes: int = 1_048_576
    max_title_chars: int = 80


@dataclass(frozen=True)
class Summarizer:
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = 20.0


@dataclass(frozen=True)
class Embeddings:
    """issue 31: recall by meaning beside BM25. ``none`` (the default): BM25 only, no new
    dependency. ``openai``: any OpenAI-compatible ``/v1/embeddings`` endpoint (``base_url``,
    ``model``, the key read from the variable ``api_key_env`` names). ``local``: the model
    shipped in the ``hermes-redis[semantic]`` extra, in-process."""

    provider: EmbeddingProvider = "none"
    model: str = ""  # openai: the endpoint's model name; local: "" = the shipped model
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 10.0
    batch_size: int = 64
    cooldown: float = 60.0  # seconds without calls after a failure (the worker fills in later)
    weight: float = 1.0  # what the nearest-by-meaning ranks count in the fusion, BM25's being 1
    cache_mb: int = 512  # session vectors a process holds for search (float32: 1.5 KB a message at 384)


@dataclass(frozen=True)
class Server:
    """``hermes-redis serve``: where the HTTP API listens and how large a request may be."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 0  # issue 33: 0 = one per core (1 on the in-process backend)
    max_body_bytes: int = 16_777_216
    # issue 35: Host names besides the loopback ones, and browser origins allowed to write
    # (and sent CORS headers), comma-separated; the wait for Redis or the archive; timeouts
    allowed_hosts: str = ""
    allowed_origins: str = ""
    backend_timeout: float = 5.0
    keep_alive_timeout: float = 5.0
    header_timeout: float = 10.0


@dataclass(frozen=True)
class ContextManagement:
    """The seed's ``advanced.context_management`` keys: the same settings as
    ``memory.session.tool_result_*``, under the seed's path (either path works)."""

    tool_result_max_tokens: int | None = None
    tool_result_summarize: bool | None = None


@dataclass(frozen=True)
class Advanced:
    context_management: ContextManagement = field(default_factory=ContextManagement)


@dataclass(frozen=True)
class Config:
    memory: Memory = field(default_factory=Memory)
    redis: Redis = field(default_factory=Redis)
    archive: Archive = field(default_factory=Archive)
    model: Model = field(default_factory=Model)
    limits: Limits = field(default_factory=Limits)
    summarizer: Summarizer = field(default_factory=Summarizer)
    embeddings: Embeddings = field(default_factory=Embeddings)
    server: Server = field(default_factory=Server)
    advanced: Advanced = field(default_factory=Advanced)
    source: str = field(default="<defaults>", compare=False)

    @property
    def session(self) -> Session:
        return self.memory.session

    @property
    def data_dir(self) -> Path:
        return Path(self.archive.data_dir).expanduser()

    @property
    def archive_path(self) -> Path:
        if self.archive.path:
            return Path(self.archive.path).expanduser()
        return self.data_dir / "memory.db"

    def origin(self, key: str, var: str) -> str:
        """Where setting ``key`` (``redis.url``) came from, as a hint names it: ``$VAR`` when
        that variable set it, ``key in <file>`` when the file did, else ``key / VAR`` (neither:
        what to set)."""
        file, _, overrides = self.source.partition(" (with ")
        if f"${var}" in overrides:
            return f"${var}"
        value: Any = self
        for part in key.split("."):
            value = getattr(value, part, None)
        if value is not None and file and file != "<defaults>":
            return f"{key} in {file}"
        return f"{key} / {var}"

    @property
    def context_budget(self) -> int:
        return self.model.context_window - self.model.reply_reserve

    def with_overrides(self, **sections: dict[str, Any]) -> Config:
        """A copy with some keys replaced, validated like the file (handy in tests)."""
        data = _as_dict(self)
        _deep_merge(data, sections)
        return _build(Config, data, "", self.source)


ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "HERMES_REDIS_URL": ("redis", "url"),
    "HERMES_REDIS_CLUSTER": ("redis", "cluster"),
    "HERMES_REDIS_QUEUE_URL": ("redis", "queue_url"),
    "HERMES_KEY_PREFIX": ("redis", "key_prefix"),
    "HERMES_QUEUE": ("redis", "queue"),
    "HERMES_DATA_DIR": ("archive", "data_dir"),
    "HERMES_ARCHIVE_PATH": ("archive", "path"),
    "HERMES_ARCHIVE_URL": ("archive", "url"),
    "HERMES_BACKEND": ("memory", "session", "backend"),
    "HERMES_SUMMARIZER_API_KEY": ("summarizer", "api_key"),
    "HERMES_EMBEDDINGS_PROVIDER": ("embeddings", "provider"),
    "HERMES_EMBEDDINGS_URL": ("embeddings", "base_url"),
    "HERMES_EMBEDDINGS_MODEL": ("embeddings", "model"),
    "HERMES_SERVER_HOST": ("server", "host"),
    "HERMES_SERVER_PORT": ("server", "port"),
    "HERMES_SERVER_WORKERS": ("server", "workers"),
}


def load(path: str | os.PathLike[str] | None = None) -> Config:
    """Load ``path`` (or ``$HERMES_CONFIG``, or ``./config.yml`` if present, else defaults)."""
    chosen = path or os.environ.get("HERMES_CONFIG")
    if chosen is None and Path("config.yml").is_file():
        chosen = "config.yml"
    data: dict[str, Any] = {}
    source = "<defaults>"
    if chosen is not None:
        source = str(chosen)
        data = _read_yaml(Path(chosen))
    used = []
    for var, keys in ENV_OVERRIDES.items():
        value = os.environ.get(var)
        if value is not None:
            _set_path(data, keys, value or None, f"${var}")
            used.append(f"${var}")
    if used:  # an error then names the variables too, not only the file
        source = f"{source} (with {', '.join(used)})"
    _seed_aliases(data, source)
    return _build(Config, data, "", source)


def _seed_aliases(data: dict[str, Any], source: str) -> None:
    """``advanced.context_management.tool_result_*`` (the seed's path) sets
    ``memory.session.tool_result_*``; both set to different values is an error."""
    seed = data.get("advanced")
    cm = seed.get("context_management") if isinstance(seed, dict) else None
    if not isinstance(cm, dict):
        return  # absent, or not a mapping: _build names the error
    memory = data.setdefault("memory", {})
    session = memory.setdefault("session", {}) if isinstance(memory, dict) else None
    if not isinstance(session, dict):
        return
    for key in ("tool_result_max_tokens", "tool_result_summarize"):
        if cm.get(key) is None:
            continue
        if key in session and session[key] != cm[key]:
            raise ConfigError(f"{source}: advanced.context_management.{key} ({cm[key]!r}) and "
                              f"memory.session.{key} ({session[key]!r}) differ: keep one")
        session[key] = cm[key]


def _yaml_where(err: yaml.YAMLError, text: str) -> str:
    """Where the problem starts and PyYAML's own words, on one line: an unclosed quote is
    reported where the quote opens (the scanner's context mark), not at the end of the file
    where the scanner gave up; a parser's error where it found the wrong token."""
    context, problem = getattr(err, "context", None), getattr(err, "problem", None)
    start, found = getattr(err, "context_mark", None), getattr(err, "problem_mark", None)
    mark = start if isinstance(err, yaml.scanner.ScannerError) and start else found or start
    if mark is None:
        return ""
    lines = text.splitlines()
    line = lines[mark.line].strip() if mark.line < len(lines) else ""
    words = ", ".join(w for w in (context, problem) if w)
    if found is not None and mark is not found and found.line != mark.line:
        words += f" at line {found.line + 1}"
    near = f" near {line[:60]!r}" if line else ""
    return f" at line {mark.line + 1}, column {mark.column + 1}{near} ({words})"


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found; pass --config or set HERMES_CONFIG") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read config file {path}: {err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML{_yaml_where(err, text)}; fix the syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, not {_kind(data)}")
    return data


def _set_path(data: dict[str, Any], keys: tuple[str, ...], value: Any, origin: str) -> None:
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{origin}: cannot override {'.'.join(keys)}: {key} is not a mapping")
        node = child
    node[keys[-1]] = value


def _build(cls: type, data: Any, prefix: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {prefix.rstrip('.') or 'top level'} must be a mapping")
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls) if f.name != "source"}
    for key in data:
        if key not in known:
            name = f"{prefix}{key}"
            raise ConfigError(f"{source}: unknown key '{name}'; allowed here: {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name == "source" or f.name not in data:
            continue
        key = f"{prefix}{f.name}"
        hint = hints[f.name]
        if is_dataclass(hint):
            section = {} if data[f.name] is None else data[f.name]  # [] is not a mapping
            values[f.name] = _build(hint, section, f"{key}.", source)  # type: ignore[arg-type]
        else:
            values[f.name] = _coerce(hint, data[f.name], key, source)
    obj = cls(**values)
    if cls is Config:
        obj = replace(obj, source=source)
        _check(obj)
    return obj


def _coerce(hint: Any, value: Any, key: str, source: str) -> Any:
    options = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    allows_none = type(None) in options
    if value is None:
        if allows_none:
            return None
        raise ConfigError(f"{source}: {key} must not be empty")
    base = next(o for o in options if o is not type(None))
    if get_origin(base) is Literal:
        allowed = get_args(base)
        if value not in allowed:
            raise ConfigError(f"{source}: {key} is {value!r}; use one of {', '.join(allowed)}")
        return value
    if isinstance(value, str) and base is not str:
        value = _parse_scalar(value, base, key, source)
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, base) or (base is int and isinstance(value, bool)):
        raise ConfigError(f"{source}: {key} must be {base.__name__}, got {_kind(value)} {value!r}")
    return value


def _parse_scalar(text: str, base: type, key: str, source: str) -> Any:
    """Environment overrides arrive as strings; parse them as YAML scalars."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(f"{source}: {key} must be {base.__name__}, got {text!r}") from None


def _check(cfg: Config) -> None:
    """Values that parse but cannot work."""
    s, src = cfg.session, cfg.source
    rules: list[tuple[bool, str]] = [
        (s.max_messages >= 1, "memory.session.max_messages must be at least 1"),
        (cfg.memory.persistent.max_extracted >= 0,
         "memory.persistent.max_extracted must be 0 or a positive number of memories per user"),
        (s.ttl >= 0, "memory.session.ttl must be 0 (never expire) or a positive number of seconds"),
        (s.compression.keep_recent >= 1, "memory.session.compression.keep_recent must be at least 1"),
        (0 < s.compression.threshold <= 1, "memory.session.compression.threshold must be in (0, 1]"),
        (0 < s.compression.summary_share < 1,
         "memory.session.compression.summary_share must be in (0, 1)"),
        (0 <= s.compression.recall_share < 1,
         "memory.session.compression.recall_share must be in [0, 1)"),
        (s.compression.summary_share + s.compression.recall_share < 1,
         "memory.session.compression.summary_share + recall_share must be below 1 "
         "(the newest turns need the rest)"),
        (s.compression.keep_first >= 0, "memory.session.compression.keep_first must be 0 or more"),
        (s.compression.summary_max_tokens >= 50,
         "memory.session.compression.summary_max_tokens must be at least 50"),
        (s.tool_result_max_tokens >= 16, "memory.session.tool_result_max_tokens must be at least 16"),
        (cfg.model.context_window >= 256, "model.context_window must be at least 256"),
        (0 <= cfg.model.reply_reserve < cfg.model.context_window,
         "model.reply_reserve must be between 0 and model.context_window"),
        (cfg.limits.max_content_bytes >= 1, "limits.max_content_bytes must be at least 1"),
        (cfg.redis.socket_timeout > 0, "redis.socket_timeout must be positive"),
        (cfg.redis.retries >= 0, "redis.retries must be 0 or more"),
        (0 < cfg.redis.memory_warn <= cfg.redis.memory_limit <= 1,
         "redis.memory_warn and redis.memory_limit must satisfy 0 < memory_warn <= memory_limit "
         "<= 1 (shares of maxmemory: warn past the first, refuse appends past the second)"),
        (cfg.summarizer.timeout > 0, "summarizer.timeout must be positive"),
        (cfg.embeddings.timeout > 0, "embeddings.timeout must be positive"),  # issue 31
        (1 <= cfg.embeddings.batch_size <= 2048, "embeddings.batch_size must be 1-2048"),
        (cfg.embeddings.cooldown >= 0, "embeddings.cooldown must be 0 or more seconds"),
        (0 <= cfg.embeddings.weight <= 10, "embeddings.weight must be 0-10 (BM25's ranks count 1)"),
        (cfg.embeddings.cache_mb >= 1, "embeddings.cache_mb must be at least 1"),
        (cfg.embeddings.provider != "openai" or bool(cfg.embeddings.base_url and cfg.embeddings.model),
         "embeddings.provider openai needs embeddings.base_url (e.g. http://localhost:11434/v1)"
         " and embeddings.model"),
        (1 <= cfg.server.port <= 65535, "server.port must be 1-65535"),
        (cfg.server.workers >= 0, "server.workers must be 0 (one per core) or more"),  # issue 33
        (cfg.server.backend_timeout > 0, "server.backend_timeout must be positive"),  # issue 35
        (cfg.server.keep_alive_timeout > 0, "server.keep_alive_timeout must be positive"),
        (cfg.server.header_timeout > 0, "server.header_timeout must be positive"),
        (cfg.server.max_body_bytes >= cfg.limits.max_content_bytes,
         "server.max_body_bytes must be at least limits.max_content_bytes"),
        (cfg.archive.url is None or cfg.archive.url.startswith(("postgresql://", "postgres://")),
         "archive.url must be a PostgreSQL URL (postgresql://user:password@host:port/db), "
         "or null for the SQLite archive at archive.path"),
        (cfg.archive.pool_size >= 1, "archive.pool_size must be at least 1"),
        (_valid_prefix(cfg.redis.key_prefix), "redis.key_prefix must be 1-32 characters of [A-Za-z0-9_.-]"),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(f"{src}: {message}")


def _valid_prefix(prefix: str) -> bool:
    import re

    return re.fullmatch(r"[A-Za-z0-9_.\-]{1,32}", prefix) is not None


def _kind(value: Any) -> str:
    return {list: "a list", dict: "a mapping", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _as_dict(obj: Any) -> Any:
    if is_dataclass(obj):
        return {f.name: _as_dict(getattr(obj, f.name)) for f in fields(obj) if f.name != "source"}
    return obj


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = value
