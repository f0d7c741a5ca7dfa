from pathlib import Path

import pytest

from hermes_redis.core import config
from hermes_redis.core.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yml"
    path.write_text(text)
    return path


def test_repo_config_is_the_documented_default(monkeypatch):
    monkeypatch.delenv("HERMES_DATA_DIR", raising=False)
    cfg = config.load(ROOT / "config.yml")
    assert cfg.session.backend == "redis"
    assert cfg.session.max_messages == 50
    assert cfg.session.compression.strategy == "hybrid"
    assert cfg.session.compression.keep_recent == 10
    assert cfg.session.tool_result_max_tokens == 2000
    assert cfg.redis.url is None
    assert cfg.archive_path == Path("~/.hermes/data/memory.db").expanduser()


def test_hermes_session_block_alone_is_accepted(tmp_path):
    cfg = config.load(write(tmp_path, "memory:\n  session:\n    backend: memory\n    ttl: 0\n"))
    assert cfg.session.backend == "memory" and cfg.session.ttl == 0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("memory:\n  session:\n    max_mesages: 3\n", "memory.session.max_mesages"),
        ("memory:\n  session:\n    ttl: soon\n", "memory.session.ttl must be int"),
        ("memory:\n  session:\n    ttl: -1\n", "memory.session.ttl"),
        ("memory:\n  session:\n    backend: mongo\n", "memory.session.backend"),
        ("memory:\n  session:\n    compression:\n      strategy: zip\n", "strategy"),
        ("- a\n- b\n", "must be a mapping"),
        ("redis: [1]\n", "redis must be a mapping"),
        ("model:\n  context_window: 10\n", "model.context_window"),
        ("redis:\n  key_prefix: 'a:{b}'\n", "redis.key_prefix"),
        ("memory:\n  session:\n    auto_title: 1\n", "auto_title must be bool"),
        ("a: [\n", "invalid YAML"),
        ("surprise: 1\n", "unknown key 'surprise'"),
    ],
)
def test_bad_config_names_key_and_file(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        config.load(path)
    assert needle in str(err.value)
    assert str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        config.load(tmp_path / "nope.yml")


def test_environment_overrides_the_file(tmp_path, monkeypatch):
    path = write(tmp_path, "redis:\n  url: redis://file:1/0\n")
    monkeypatch.setenv("HERMES_REDIS_URL", "redis://env:2/0")
    monkeypatch.setenv("HERMES_BACKEND", "memory")
    cfg = config.load(path)
    assert cfg.redis.url == "redis://env:2/0"
    assert cfg.session.backend == "memory"


def test_hermes_config_env_picks_the_file(tmp_path, monkeypatch):
    path = write(tmp_path, "memory:\n  session:\n    max_messages: 7\n")
    monkeypatch.setenv("HERMES_CONFIG", str(path))
    assert config.load().session.max_messages == 7


def test_bad_env_value_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_BACKEND", "mongo")
    with pytest.raises(ConfigError, match="backend"):
        config.load(write(tmp_path, ""))


def test_archive_url_from_the_file_or_the_environment(tmp_path, monkeypatch):
    path = write(tmp_path, "archive:\n  url: postgresql://u@db:5432/hermes\n  pool_size: 3\n")
    cfg = config.load(path)
    assert (cfg.archive.url, cfg.archive.pool_size) == ("postgresql://u@db:5432/hermes", 3)
    monkeypatch.setenv("HERMES_ARCHIVE_URL", "postgres://other/x")
    assert config.load(path).archive.url == "postgres://other/x"
    monkeypatch.setenv("HERMES_ARCHIVE_URL", "mysql://nope/x")
    with pytest.raises(ConfigError, match=r"HERMES_ARCHIVE_URL.*archive.url must be a PostgreSQL URL"):
        config.load(path)


def test_an_unclosed_quote_is_reported_where_it_opens(tmp_path):
    """Issue 45: PyYAML gives up at the end of the file; the error names line 33, where the
    quote opens, with PyYAML's own words and the line's text."""
    lines = [f"# line {n}" for n in range(1, 33)] + ['redis:  {url: "redis://x'] + [
        f"# line {n}" for n in range(34, 59)]
    path = write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as err:
        config.load(path)
    message = str(err.value)
    assert f"{path}: invalid YAML at line 33, column " in message, message
    assert "while scanning a quoted scalar, found unexpected end of stream at line 59" in message
    assert "near 'redis:  {url: \"redis://x'" in message
    assert message.endswith("; fix the syntax") and "\n" not in message


def test_a_parser_error_is_reported_at_the_wrong_token(tmp_path):
    path = write(tmp_path, "redis:\n  url: x\n key_prefix: y\n")
    with pytest.raises(ConfigError) as err:
        config.load(path)
    assert "invalid YAML at line 3, column 2 near 'key_prefix: y' (while parsing a block " \
           "mapping, expected <block end>" in str(err.value)
