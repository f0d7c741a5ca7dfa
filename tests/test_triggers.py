"""Plain words that store a persistent memory at append time, and questions that do not."""

from __future__ import annotations

import pytest

from hermes_redis import SessionMemory
from hermes_redis.core import config
from hermes_redis.core.errors import ValidationError
from hermes_redis.memory.triggers import trigger_fact

STORES = [
    ("记住：我们这个项目用 PostgreSQL，不用 MySQL", "我们这个项目用 PostgreSQL，不用 MySQL"),
    ("请记住我们用 tabs 缩进", "我们用 tabs 缩进"),
    ("帮我记一下：发布在周五", "发布在周五"),
    ("以后都用中文回答", "以后都用中文回答"),
    ("Remember that we deploy on Fridays.", "we deploy on Fridays"),
    ("note: the API key lives in vault", "the API key lives in vault"),
    ("From now on, answer in English", "From now on, answer in English"),
    ("OK. Please remember that Bob owns auth.", "Bob owns auth"),
]
QUESTIONS = ["你还记得我们用什么数据库吗", "记得吗", "你记住了吗？", "do you remember the db?",
             "Do you still remember what we chose", "remember when we used MySQL?",
             "I can't remember that", "remember the milk", "what did I say to note that?",
             "we should note that later?", "hello", "the notes are in remember.txt"]


@pytest.mark.parametrize("text, fact", STORES)
def test_plain_words_name_the_fact(text, fact):
    assert trigger_fact(text) == fact


@pytest.mark.parametrize("text", QUESTIONS)
def test_questions_and_other_text_store_nothing(text):
    assert trigger_fact(text) is None


@pytest.mark.parametrize("text", ["记住：", "remember that", "Remember:  ", "请记住。"])
def test_a_trigger_with_nothing_after_it_is_refused(text):
    with pytest.raises(ValidationError, match="asks to remember nothing"):
        trigger_fact(text)


def test_append_records_the_memory_and_cites_it(mem):
    sid = mem.create_session(user_id="ann")
    m = mem.append(sid, "user", "记住：我们这个项目用 PostgreSQL，不用 MySQL")
    (memory,) = mem.memories("ann")
    assert memory.content == "我们这个项目用 PostgreSQL，不用 MySQL"
    assert memory.session_id == sid
    assert m.memory_refs == (memory.memory_id,)  # the agent can answer 已记录
    assert mem.messages(sid)[-1].memory_refs == (memory.memory_id,)
    other = mem.create_session(user_id="ann")
    assert "PostgreSQL" in "".join(mem.context(other).memories)  # a new session knows it
    assert mem.memories("bob") == []  # never another user's
    mem.append(sid, "user", "你还记得我们用什么数据库吗")
    mem.append(sid, "assistant", "Remember that I am only the assistant.")  # not the user
    assert len(mem.memories("ann")) == 1


def test_an_empty_trigger_refuses_the_message_and_writes_nothing(mem):
    sid = mem.create_session(user_id="ann")
    with pytest.raises(ValidationError, match="asks to remember nothing"):
        mem.append_many(sid, [{"role": "user", "content": "hi"},
                              {"role": "user", "content": "记住："}])
    assert mem.messages(sid) == [] and mem.memories("ann") == []


def test_a_refused_append_keeps_no_memory(mem):
    from hermes_redis.core.errors import StateError

    sid = mem.create_session(user_id="ann")
    mem.archive(sid)
    with pytest.raises(StateError):
        mem.append(sid, "user", "remember that the build uses uv")
    assert mem.memories("ann") == []


def test_triggers_can_be_turned_off(config_factory, backend):
    from hermes_redis import SessionMemory

    mem = SessionMemory(config_factory(backend).with_overrides(
        memory={"persistent": {"triggers": False}}))
    sid = mem.create_session(user_id="ann")
    mem.append(sid, "user", "记住：用 tabs")
    assert mem.memories("ann") == []
    mem.close()


def test_memories_by_query_and_in_a_small_context(mem):
    mem.create_session(user_id="ann")
    for text in ["prefers tabs over spaces", "项目用 PostgreSQL，不用 MySQL",
                 "deploys on Fridays", *[f"likes colour number {i}" for i in range(40)]]:
        mem.remember("ann", text)
    assert [m.content for m in mem.memories("ann", query="which database, PostgreSQL?")] == [
        "项目用 PostgreSQL，不用 MySQL"]
    assert mem.memories("ann", query="zebra") == []
    sid = mem.create_session(user_id="ann")
    mem.append(sid, "user", "hello")
    small = mem.context(sid, budget=200, query="what database do we use? PostgreSQL")
    assert "项目用 PostgreSQL，不用 MySQL" in small.memories  # relevant first, though old
    assert len(small.memories) < 43 and small.tokens <= 200
    newest = mem.context(sid, budget=200, query="")
    assert "项目用 PostgreSQL，不用 MySQL" not in newest.memories  # no query: the newest
    assert "likes colour number 39" in newest.memories


def test_memory_cli_add_list_search_forget(tmp_path, config_factory):
    import json

    from click.testing import CliRunner

    from hermes_redis.cli.main import cli
    from tests.helpers import write_config

    path = write_config(config_factory("redis"), tmp_path / "c.yml")

    def run(*args):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(cli, ["--config", str(path), "memory", *args])

    nobody = run("add", "likes tea", "--user", "ann")  # no session, no key: a typo, most likely
    assert nobody.exit_code == 3 and "no user ann" in nobody.output
    assert nobody.output.count("\n") == 1
    with SessionMemory(config.load(path)) as mem:
        mem.create_session(user_id="ann")
        assert mem.memories("ann") == []  # the refused add wrote nothing

    added = run("add", "项目用 PostgreSQL，不用 MySQL", "--user", "ann")
    assert added.exit_code == 0 and added.output.startswith("Remembered for ann: ")
    memory_id = added.output.split()[-1]
    assert run("add", "prefers tabs", "--user", "ann").exit_code == 0
    listed = json.loads(run("list", "--user", "ann", "--json").output)
    assert [m["content"] for m in listed] == ["项目用 PostgreSQL，不用 MySQL", "prefers tabs"]
    found = run("search", "postgresql", "--user", "ann")
    assert "PostgreSQL" in found.output and "tabs" not in found.output
    assert "No memories for user bob." in run("list", "--user", "bob").output
    assert run("forget", memory_id, "--user", "bob").exit_code == 3  # not bob's: not found (3)
    assert run("forget", memory_id, "--user", "ann").exit_code == 0
    assert [m["content"] for m in json.loads(run("list", "--user", "ann", "--json").output)] == [
        "prefers tabs"]
    bad = run("add", " ", "--user", "ann")
    assert bad.exit_code == 2 and bad.output.count("\n") == 1
    assert run("list").exit_code == 2  # whose?
