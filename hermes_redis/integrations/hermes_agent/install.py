"""``hermes-redis hermes install`` / ``uninstall``: the two plugin directories in
``$HERMES_HOME/plugins/`` and the keys in ``$HERMES_HOME/config.yaml`` that select them,
merged into the existing file with every other key and comment kept (ruamel.yaml's round
trip). Running it again changes nothing; ``uninstall`` puts back what ``install`` found
(recorded under ``hermes_redis.previous``)."""

from __future__ import annotations

import io
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from hermes_redis.core.errors import ConfigError, ValidationError
from hermes_redis.integrations.hermes_agent.settings import KEYS

PROVIDER_DIR = "hermes-redis"  # the memory provider: Hermes selects it by this name
ENGINE_DIR = "hermes-redis-context"  # the context engine: a general plugin
ENGINE_NAME = "hermes-redis"  # context.engine: what the engine's ``name`` says
MARK = "Written by `hermes-redis hermes install`"



def _shim(what: str, module: str, cls: str) -> str:
    """A plugin's ``__init__.py``: it imports the class from the installed hermes-redis."""
    return f'''"""hermes-redis as Hermes Agent's {what}. {MARK};
`hermes-redis hermes uninstall` removes it."""
try:
    from hermes_redis.integrations.hermes_agent.{module} import (  # noqa: F401
        {cls},
        register,
    )
except ImportError as err:
    raise ImportError("the hermes-redis {what} needs hermes-redis in Hermes' own "
                      "Python: <hermes venv>/bin/python -m pip install hermes-redis") from err
'''


# the word MemoryProvider is what Hermes' loader looks for in a provider's __init__.py; the
# engine's must not hold it (Hermes would take it for a provider)
PROVIDER_INIT = _shim("memory provider (MemoryProvider)", "provider", "HermesRedisMemoryProvider")
PROVIDER_YAML = f"""# {MARK}
name: {PROVIDER_DIR}
description: Sessions, memories and recall in hermes-redis, shared by every Hermes process
"""
ENGINE_INIT = _shim("context engine", "engine", "HermesRedisContextEngine")
ENGINE_YAML = f"""# {MARK}
name: {ENGINE_DIR}
kind: standalone
description: Compression by hermes-redis's budgeted context (no LLM call on the agent's thread)
"""
FILES = {PROVIDER_DIR: {"__init__.py": PROVIDER_INIT, "plugin.yaml": PROVIDER_YAML},
         ENGINE_DIR: {"__init__.py": ENGINE_INIT, "plugin.yaml": ENGINE_YAML}}
SELECTS = (("memory", "provider", PROVIDER_DIR), ("context", "engine", ENGINE_NAME))


@dataclass(frozen=True)
class Target:
    """Where hermes-redis is for this Hermes home: a server (``url`` + ``key``) or Redis."""

    url: str | None = None
    key: str | None = None
    redis: str | None = None
    user_id: str | None = None

    def block(self) -> dict[str, str]:
        return {k: v for k, v in (("url", self.url), ("key", self.key), ("redis", self.redis),
                                  ("user_id", self.user_id)) if v}


def home_of(home: str | os.PathLike[str] | None) -> Path:
    return Path(home or os.environ.get("HERMES_HOME") or Path.home() / ".hermes").expanduser()


def _yaml() -> YAML:
    y = YAML()  # round trip: comments, order and quoting as they were
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 4096
    return y


def _load(path: Path) -> CommentedMap:
    if not path.is_file():
        return CommentedMap()
    try:
        data = _yaml().load(path.read_text(encoding="utf-8"))
    except Exception as err:  # ruamel's errors have no one base class worth naming
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(err).split())[:200]}); "
                          "fix it and run this again") from None
    if data is None:
        return CommentedMap()
    if not isinstance(data, CommentedMap):
        raise ConfigError(f"{path}: the top level is not a mapping; fix it and run this again")
    return data


def _dump(path: Path, data: CommentedMap) -> None:
    out = io.StringIO()
    _yaml().dump(data, out)
    tmp = path.with_suffix(".yaml.hermes-redis.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(out.getvalue(), encoding="utf-8")
    os.replace(tmp, path)


def _section(data: CommentedMap, name: str) -> CommentedMap:
    value = data.get(name)
    if value is None:
        value = data[name] = CommentedMap()
    if not isinstance(value, CommentedMap):
        raise ConfigError(f"config.yaml: {name} is not a mapping; fix it and run this again")
    return value


def install(home: str | os.PathLike[str] | None, target: Target) -> list[str]:
    """Write the plugins and merge the selecting keys; what changed, one line each ([] when
    everything was in place already)."""
    if target.url and target.redis:
        raise ValidationError("give --url (a hermes-redis server) or --redis, not both")
    if target.key and not target.url:
        raise ValidationError("--key goes with --url (the server's API key)")
    root = home_of(home)
    changes = []
    for directory, files in FILES.items():
        for name, text in files.items():
            path = root / "plugins" / directory / name
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                changes.append(f"wrote {path}")
    path = root / "config.yaml"
    data = _load(path)
    ours = _section(data, "hermes_redis")
    previous = ours.get("previous")
    if previous is None:  # what install found, for uninstall (recorded once)
        previous = CommentedMap()
        for section, key, _value in SELECTS:
            found = data.get(section, {}).get(key) if isinstance(data.get(section), dict) \
                else None
            previous[f"{section}.{key}"] = found
        enabled = data.get("plugins", {}).get("enabled") if isinstance(data.get("plugins"),
                                                                        dict) else None
        previous["plugins.enabled"] = ENGINE_DIR in (enabled or [])
    for section, key, value in SELECTS:
        part = _section(data, section)
        if part.get(key) != value:
            changes.append(f"set {section}.{key}: {value} (was {part.get(key)!r})")
            part[key] = value
    plugins = _section(data, "plugins")
    enabled = plugins.get("enabled")
    if not isinstance(enabled, list):
        enabled = plugins["enabled"] = CommentedSeq()
    if ENGINE_DIR not in enabled:
        enabled.append(ENGINE_DIR)
        changes.append(f"added {ENGINE_DIR} to plugins.enabled")
    wanted = target.block()
    if wanted:
        for key in ("url", "key", "redis"):
            if key in ours and key not in wanted:
                del ours[key]
                changes.append(f"removed hermes_redis.{key}")
        for key, value in wanted.items():
            if ours.get(key) != value:
                shown = "…" if key == "key" else value
                changes.append(f"set hermes_redis.{key}: {shown}")
                ours[key] = value
    if "previous" not in ours:
        ours["previous"] = previous
        changes.append("recorded the keys it replaced under hermes_redis.previous")
    unknown = sorted(set(ours) - set(KEYS) - {"previous"})
    if unknown:
        raise ConfigError(f"{path}: unknown key hermes_redis.{unknown[0]}; the keys are "
                          f"{', '.join(KEYS)}")
    if any(not c.startswith("wrote") for c in changes):
        _dump(path, data)
    return changes


def uninstall(home: str | os.PathLike[str] | None) -> list[str]:
    """Remove the plugins and put the selecting keys back as install found them."""
    root = home_of(home)
    changes = []
    for directory in FILES:
        path = root / "plugins" / directory
        if path.is_dir():
            if MARK not in (path / "__init__.py").read_text(encoding="utf-8", errors="replace") \
                    if (path / "__init__.py").is_file() else True:
                raise ConfigError(f"{path} was not written by hermes-redis; remove it yourself")
            shutil.rmtree(path)
            changes.append(f"removed {path}")
    path = root / "config.yaml"
    if not path.is_file():
        return changes
    data = _load(path)
    ours = data.get("hermes_redis")
    previous: Any = ours.get("previous", {}) if isinstance(ours, dict) else {}
    for section, key, value in SELECTS:
        part = data.get(section)
        if isinstance(part, dict) and part.get(key) == value:
            before = previous.get(f"{section}.{key}") if isinstance(previous, dict) else None
            if before is None:
                del part[key]
                if not part:
                    del data[section]
            else:
                part[key] = before
            changes.append(f"restored {section}.{key} ({before!r})")
    plugins = data.get("plugins")
    enabled = plugins.get("enabled") if isinstance(plugins, dict) else None
    if isinstance(enabled, list) and ENGINE_DIR in enabled and not (
            isinstance(previous, dict) and previous.get("plugins.enabled")):
        enabled.remove(ENGINE_DIR)
        changes.append(f"removed {ENGINE_DIR} from plugins.enabled")
    if isinstance(ours, dict):
        del data["hermes_redis"]
        changes.append("removed the hermes_redis block")
    if changes:
        _dump(path, data)
    return changes
