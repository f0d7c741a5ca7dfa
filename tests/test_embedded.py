"""The embedded default: no Redis URL configured → a private redis-server under the data dir."""

import subprocess
import sys

import pytest

from hermes_redis import Config, SessionMemory
from hermes_redis.core.errors import BackendUnavailableError
from hermes_redis.store import embedded

pytestmark = pytest.mark.stack("default", reason="the embedded redis-server and SQLite file a "
                               "config without redis.url/archive.url gets; no test stack")


@pytest.fixture
def data_dir(tmp_path):
    path = tmp_path / "data"
    yield path
    embedded.stop(path)


def test_embedded_redis_starts_and_is_shared(data_dir):
    cfg = Config().with_overrides(archive={"data_dir": str(data_dir)})
    mem = SessionMemory(cfg)
    sid = mem.create_session(user_id="u")
    mem.append(sid, "user", "hi")
    assert mem.hot.name == "redis" and mem.hot.url.startswith("unix://")
    assert (data_dir / "redis.aof").exists() or (data_dir / "appendonlydir").exists()
    code = (
        "from hermes_redis import Config, SessionMemory;"
        f"m = SessionMemory(Config().with_overrides(archive={{'data_dir': {str(data_dir)!r}}}));"
        f"print(m.info({sid!r}).message_count)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"  # a second process reaches the same private Redis
    mem.close()


def test_embedded_data_survives_a_restart(data_dir):
    cfg = Config().with_overrides(archive={"data_dir": str(data_dir)})
    mem = SessionMemory(cfg)
    sid = mem.create_session()
    mem.append(sid, "user", "persist me")
    mem.close()
    assert embedded.stop(data_dir)
    mem = SessionMemory(cfg)
    assert [m.content for m in mem.hot.messages(sid)] == ["persist me"]
    mem.close()


def test_configured_url_wins_and_unreachable_is_clear(tmp_path):
    cfg = Config().with_overrides(redis={"url": "redis://127.0.0.1:1/0", "socket_timeout": 1},
                                  archive={"data_dir": str(tmp_path)})
    with pytest.raises(BackendUnavailableError, match=r"cannot reach Redis at redis://127.0.0.1:1/0"):
        SessionMemory(cfg)
    assert not (tmp_path / "redis.sock").exists()


def test_password_never_shown(tmp_path):
    cfg = Config().with_overrides(redis={"url": "redis://app:s3cret@127.0.0.1:1/0",
                                         "socket_timeout": 1})
    with pytest.raises(BackendUnavailableError) as err:
        SessionMemory(cfg)
    assert "s3cret" not in str(err.value) and "app:***@127.0.0.1:1" in str(err.value)
