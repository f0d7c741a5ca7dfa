"""hermes-redis inside the real Hermes Agent 0.19.0 (issue 41), offline: its own plugin
loader, MemoryManager and CLI, a recording model server (tests/model_server.py) and a real
`hermes-redis serve`. Installed exactly as a user installs it: `hermes-redis hermes install`
into a Hermes home that holds a config of its own."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_redis.client import HermesClient
from hermes_redis.integrations.hermes_agent.turns import CONTEXT_MARK
from tests.hermes_agent.harness import PYTHON, ROOT, HermesHome, need_hermes
from tests.http_server import ServeProcess, serve_config
from tests.model_server import ModelServer
from tests.redis_server import RedisServer

pytestmark = pytest.mark.stack("default", reason="the real Hermes runs once; the provider and "
                               "engine run on both stacks in tests/integrations")
HERE = {"PYTHONPATH": str(ROOT)}  # Hermes imports this checkout's hermes_redis


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    need_hermes()
    with ModelServer() as server:
        yield server


@pytest.fixture
def served(tmp_path: Path, redis_server: RedisServer) -> Iterator[ServeProcess]:
    (tmp_path / "server").mkdir()
    proc = ServeProcess(serve_config(tmp_path / "server", redis_server.url)).start()
    yield proc
    proc.stop()


def install(home: HermesHome, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "hermes_redis", "hermes", "install", "--home",
                           str(home.path), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def home_for(tmp_path: Path, name: str, model: ModelServer, served: ServeProcess) -> HermesHome:
    home = HermesHome(tmp_path / name, model.url)
    config = home.config_file.read_text()
    home.config_file.write_text(f"# {name}'s own Hermes config\n{config}")
    install(home, "--url", served.url)
    return home


def requests_since(model: ModelServer, start: int) -> list[dict[str, Any]]:
    return model.chat_bodies()[start:]


def last_user(body: dict[str, Any]) -> str:
    return next(str(m.get("content")) for m in reversed(body["messages"]) if m["role"] == "user")


def test_hermes_loads_the_provider_and_the_engine(tmp_path: Path, model: ModelServer,
                                                  served: ServeProcess) -> None:
    home = home_for(tmp_path, "loader", model, served)
    assert home.config_file.read_text().startswith("# loader's own Hermes config\n")
    code = textwrap.dedent("""
        import json
        from agent.memory_manager import MemoryManager
        from agent.memory_provider import MemoryProvider
        from agent.context_engine import ContextEngine
        from plugins.memory import load_memory_provider
        from hermes_cli.plugins import discover_plugins, get_plugin_context_engine
        p = load_memory_provider("hermes-redis")
        mm = MemoryManager()
        mm.add_provider(p)
        discover_plugins()
        e = get_plugin_context_engine()
        print(json.dumps({"provider": p.name, "available": p.is_available(),
                          "is_provider": isinstance(p, MemoryProvider),
                          "in_manager": [q.name for q in mm.providers],
                          "tools": sorted(t["name"] for t in mm.get_all_tool_schemas()),
                          "engine": e.name, "is_engine": isinstance(e, ContextEngine)}))
    """)
    done = home.python(code, **HERE)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["provider"] == "hermes-redis" and got["available"] and got["is_provider"]
    assert "hermes-redis" in got["in_manager"]
    assert {"hermes_redis_search", "hermes_redis_recall", "hermes_redis_remember"} <= \
        set(got["tools"])
    assert got["engine"] == "hermes-redis" and got["is_engine"]


def test_resumed_turns_prefetch_and_a_compression_through_the_real_cli(
        tmp_path: Path, model: ModelServer, served: ServeProcess) -> None:
    home = home_for(tmp_path, "cli", model, served)
    client = HermesClient(served.url)
    first = home.chat("remember this: my favourite colour is teal", **HERE)
    assert first.returncode == 0 and first.session_id, first.stderr[-2000:]
    one = home.chat("question one about the garden shed", **HERE)
    two = home.chat("question two about the garden shed", resume=one.session_id, **HERE)
    start = len(model.chat_bodies())
    three = home.chat("what is my favourite colour?", resume=one.session_id, **HERE)
    assert {one.session_id, two.session_id, three.session_id} == {one.session_id}
    stored = client.messages(str(one.session_id))
    assert [(m.seq, m.role) for m in stored] == [
        (i, "user" if i % 2 else "assistant") for i in range(1, 7)]
    assert stored[0].content == "question one about the garden shed"
    assert "teal" in last_user(requests_since(model, start)[-1])  # prefetched, other session
    # a reply past the threshold (half of Hermes' 64,000-token floor), then a resumed turn:
    # Hermes compresses through the engine before it sends the request
    model.force("long-40000")
    try:
        big = home.chat("tell me everything about sheds", resume=one.session_id, **HERE)
    finally:
        model.force(None)
    assert big.returncode == 0
    client.compact(str(one.session_id))  # what the worker does beside Hermes
    start = len(model.chat_bodies())
    after = home.chat("and what about the roof?", resume=one.session_id, **HERE)
    assert after.returncode == 0, after.stderr[-2000:]
    sent = requests_since(model, start)[0]["messages"]
    context = [m for m in sent if str(m.get("content", "")).startswith(CONTEXT_MARK)]
    assert len(context) == 1 and "garden shed" in context[0]["content"]  # the summary
    assert last_user({"messages": sent}).startswith("and what about the roof?")
    words = sum(len(str(m.get("content", "")).split()) for m in sent)
    assert words < 40_000  # the long reply was cut to the budget
    stored = client.messages(str(one.session_id))
    assert stored[-2].content == "and what about the roof?"  # the same conversation goes on
    assert [m.seq for m in stored] == list(range(1, len(stored) + 1))


def test_two_machines_share_one_memory(tmp_path: Path, model: ModelServer,
                                       served: ServeProcess) -> None:
    laptop = home_for(tmp_path, "laptop", model, served)
    desktop = home_for(tmp_path, "desktop", model, served)
    told = laptop.chat("my cat is named Miso-the-brave", **HERE)
    assert told.returncode == 0
    start = len(model.chat_bodies())
    asked = desktop.chat("what is my cat named?", **HERE)
    assert asked.returncode == 0
    assert "Miso-the-brave" in last_user(requests_since(model, start)[-1])


GATEWAY = textwrap.dedent("""
    import sys
    from plugins.memory import load_memory_provider
    key, hermes_id, tag = sys.argv[1], sys.argv[2], sys.argv[3]
    p = load_memory_provider("hermes-redis")
    p.initialize(hermes_id, hermes_home=sys.argv[4], platform="telegram", user_id="tg-7",
                 gateway_session_key=key)
    history = []
    for i in range(25):
        history += [{"role": "user", "content": f"{tag} asks {i}"},
                    {"role": "assistant", "content": f"{tag} answers {i}"}]
        p.sync_turn(history[-2]["content"], history[-1]["content"], messages=list(history))
    p.shutdown()
    print(p.sid)
""")


def test_two_gateway_processes_write_one_session(tmp_path: Path, model: ModelServer,
                                                 served: ServeProcess) -> None:
    homes = [home_for(tmp_path, f"gateway{i}", model, served) for i in (1, 2)]
    key = "agent:main:telegram:dm:7"
    procs = [subprocess.Popen([str(PYTHON), "-c", GATEWAY, key, f"20261207_12000{i}_abcdef",
                               f"p{i}", str(h.path)], env=h.env(**HERE), cwd=h.path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, h in enumerate(homes)]
    sids = set()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        sids.add(out.strip().splitlines()[-1])
    assert len(sids) == 1
    stored = HermesClient(served.url).messages(sids.pop())
    assert [m.seq for m in stored] == list(range(1, 101))  # contiguous: 2 x 25 turns
    for tag in ("p0", "p1"):  # each process's turns in its own order, each once
        mine = [m.content for m in stored if m.content.startswith(tag)]
        assert mine == [f"{tag} {verb} {i}" for i in range(25) for verb in ("asks", "answers")]


def test_the_server_stops_mid_session_and_the_turns_arrive_once(
        tmp_path: Path, model: ModelServer, redis_server: RedisServer) -> None:
    (tmp_path / "server").mkdir()
    config = serve_config(tmp_path / "server", redis_server.url)
    served = ServeProcess(config).start()
    home = home_for(tmp_path, "outage", model, served)
    try:
        one = home.chat("the boiler code is 4471", **HERE)
        served.stop()
        two = home.chat("the boiler is in the attic", resume=one.session_id, **HERE)
        assert two.returncode == 0 and "ok #" in two.stdout  # Hermes answers all the same
        served = ServeProcess(config, port=served.port).start()
        three = home.chat("who services the boiler?", resume=one.session_id, **HERE)
        assert three.returncode == 0
        stored = HermesClient(served.url).messages(str(one.session_id))
        assert [m.content for m in stored if m.role == "user"] == [
            "the boiler code is 4471", "the boiler is in the attic", "who services the boiler?"]
        assert [m.seq for m in stored] == list(range(1, 7))
    finally:
        served.stop()


def test_import_a_state_db_the_real_hermes_wrote(tmp_path: Path, model: ModelServer,
                                                 served: ServeProcess) -> None:
    home = HermesHome(tmp_path / "plain", model.url,  # Hermes alone: its own store
                      extra={"compression": {"protect_first_n": 1, "protect_last_n": 2}})
    one = home.chat("the shed is painted green")
    home.chat("the gate is painted blue", resume=one.session_id)
    home.chat("the roof is painted red", resume=one.session_id)
    model.force("long-90000")
    try:
        home.chat("describe every plank", resume=one.session_id)
    finally:
        model.force(None)
    home.chat("and the fence?", resume=one.session_id)  # Hermes compresses first
    home.chat("a new conversation about bees")  # what /new starts
    db = sqlite3.connect(home.state_db)
    sessions = [r[0] for r in db.execute("SELECT id FROM sessions ORDER BY started_at")]
    expected = {sid: [(role, content or "") for role, content in db.execute(
        "SELECT role, content FROM messages WHERE session_id=? AND role IN "
        "('user','assistant','tool') ORDER BY id", (sid,))] for sid in sessions}
    compacted = db.execute("SELECT count(*) FROM messages WHERE compacted=1 OR active=0"
                           ).fetchone()[0]
    db.close()
    assert len(sessions) == 2 and compacted > 0  # a resumed one compressed in place, a new one
    args = [sys.executable, "-m", "hermes_redis", "--server", served.url, "import",
            "hermes-state", str(home.state_db)]
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    total = sum(len(v) for v in expected.values())
    assert done.stdout.startswith(f"imported {len(sessions)} sessions and {total} messages")
    assert "sessions" in done.stderr  # the progress line
    client = HermesClient(served.url)
    for sid, rows in expected.items():
        got = client.messages(sid)
        assert [(m.role, m.item["content"]) for m in got] == rows
    again = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.stdout.startswith(f"imported 0 sessions and 0 messages; {len(sessions)} "
                                   "already there")
