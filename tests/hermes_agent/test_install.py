"""`hermes-redis hermes install|uninstall` on a Hermes home that has a config of its own, and
hermes-redis in Hermes Agent's own venv (issue 41): `pip check` clean, Hermes' mcp 1.26 client
still calls a tool, and the server without the mcp extra serves everything but /mcp."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from hermes_redis.integrations.hermes_agent.settings import load_settings
from tests.hermes_agent.harness import PYTHON, ROOT, need_hermes
from tests.http_server import serve_config
from tests.redis_server import RedisServer, free_port

EXISTING = """\
# my Hermes config: keep this comment
model:
  default: my-model   # the one I pay for
memory:
  provider: honcho
plugins:
  enabled:
    - some-plugin
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermes_redis", "hermes", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_install_merges_keeps_comments_is_idempotent_and_uninstall_restores(
        tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(EXISTING)
    first = cli("install", "--home", str(tmp_path), "--url", "http://m.internal:8080",
                "--key", "hr_secret")
    assert first.returncode == 0, first.stderr
    assert "set memory.provider: hermes-redis (was 'honcho')" in first.stdout
    assert "hr_secret" not in first.stdout  # the key is never printed
    text = (tmp_path / "config.yaml").read_text()
    assert text.startswith("# my Hermes config: keep this comment\n")
    assert "default: my-model   # the one I pay for" in text
    data = yaml.safe_load(text)
    assert data["memory"]["provider"] == "hermes-redis"
    assert data["context"]["engine"] == "hermes-redis"
    assert data["plugins"]["enabled"] == ["some-plugin", "hermes-redis-context"]
    assert load_settings(tmp_path).url == "http://m.internal:8080"
    assert load_settings(tmp_path).key == "hr_secret"
    init = (tmp_path / "plugins" / "hermes-redis" / "__init__.py").read_text()
    assert "MemoryProvider" in init  # what Hermes' loader looks for
    assert "MemoryProvider" not in (tmp_path / "plugins" / "hermes-redis-context" /
                                    "__init__.py").read_text()  # else taken for a provider
    again = cli("install", "--home", str(tmp_path), "--url", "http://m.internal:8080",
                "--key", "hr_secret")
    assert again.stdout.startswith("nothing to change")
    assert (tmp_path / "config.yaml").read_text() == text
    gone = cli("uninstall", "--home", str(tmp_path))
    assert gone.returncode == 0, gone.stderr
    assert (tmp_path / "config.yaml").read_text() == EXISTING
    assert not (tmp_path / "plugins" / "hermes-redis").exists()
    assert cli("uninstall", "--home", str(tmp_path)).stdout.startswith("nothing to undo")


@pytest.mark.parametrize(("args", "message"), [
    (("--url", "http://a", "--redis", "redis://b"), "not both"),
    (("--key", "k"), "--key goes with --url"),
])
def test_install_refuses_bad_arguments_in_one_line(tmp_path: Path, args: tuple[str, ...],
                                                   message: str) -> None:
    done = cli("install", "--home", str(tmp_path), *args)
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "plugins").exists()


def test_install_refuses_a_config_that_is_not_yaml_and_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("model: [unclosed\n")
    done = cli("install", "--home", str(tmp_path), "--redis", "redis://127.0.0.1:6390/0")
    assert done.returncode == 2 and "not valid YAML" in done.stderr
    assert (tmp_path / "config.yaml").read_text() == "model: [unclosed\n"


def test_a_bad_block_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("hermes_redis:\n  urll: http://x\n")
    with pytest.raises(Exception, match=r"unknown key hermes_redis.urll; the keys are url"):
        load_settings(tmp_path)


MCP_CLIENT = textwrap.dedent("""
    import asyncio, sys
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    import mcp, importlib.metadata as md
    SERVER = "from mcp.server.fastmcp import FastMCP\\n" \\
             "app = FastMCP('t')\\n" \\
             "@app.tool()\\n" \\
             "def add(a: int, b: int) -> int:\\n    return a + b\\n" \\
             "app.run()\\n"
    async def main():
        params = StdioServerParameters(command=sys.executable, args=["-c", SERVER])
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            result = await s.call_tool("add", {"a": 2, "b": 3})
            print(md.version("mcp"), result.isError, result.content[0].text)
    asyncio.run(main())
""")


def test_in_hermes_venv_pip_check_is_clean_and_its_mcp_client_still_works() -> None:
    need_hermes()
    check = subprocess.run([str(PYTHON), "-m", "pip", "check"], capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0, check.stdout
    found = subprocess.run([str(PYTHON), "-c", "import hermes_redis, sys; print('ok')"],
                           capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == "ok", found.stderr
    done = subprocess.run([str(PYTHON), "-c", MCP_CLIENT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1.26.0", "False", "5"]


@pytest.mark.stack("default", reason="Hermes' venv has no PostgreSQL driver; the server's "
                   "routes run on both stacks elsewhere")
def test_the_server_without_the_mcp_extra_serves_all_but_mcp(tmp_path: Path,
                                                              redis_server: RedisServer) -> None:
    need_hermes()  # Hermes' venv: hermes-redis without the mcp extra (it has mcp 1.26)
    config = serve_config(tmp_path, redis_server.url)
    port = free_port()
    proc = subprocess.Popen([str(PYTHON), "-m", "hermes_redis", "--config", str(config), "serve",
                             "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(proc.stderr.read() if proc.stderr else "") from None
                time.sleep(0.1)
        made = urllib.request.urlopen(urllib.request.Request(
            f"{base}/v1/sessions", data=b"{}", method="POST",
            headers={"Content-Type": "application/json"}), timeout=10)
        assert made.status == 201
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(
                f"{base}/mcp", data=b"{}", method="POST",
                headers={"Content-Type": "application/json"}), timeout=10)
        assert err.value.code == 501
        assert "hermes-redis[mcp]" in json.loads(err.value.read())["error"]["message"]
        stdio = subprocess.run([str(PYTHON), "-m", "hermes_redis", "--config", str(config),
                                "mcp"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                               env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        assert stdio.returncode == 2 and "needs the mcp extra" in stdio.stderr
        assert len(stdio.stderr.strip().splitlines()) == 1
    finally:
        proc.terminate()
        proc.wait(15)
