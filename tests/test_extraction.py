"""Issue 11: durable facts extracted after a flush, deduplicated, superseded by topic, and
forgotten with the messages that stated them."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_redis import SessionMemory
from hermes_redis.context.summarizers import SUMMARIZERS, provider
from hermes_redis.core import config
from hermes_redis.core.models import Message
from hermes_redis.memory.extraction import (
    EXTRACTORS,
    ChatExtractor,
    RuleExtractor,
    extract,
    is_durable,
    near_duplicate,
    topic_of,
)
from hermes_redis.store.archive import SCHEMA_VERSION, Archive
from hermes_redis.store.open import open_archive
from tests.helpers import chat_model, serve


@pytest.mark.parametrize("sentence", [
    "I prefer a functional style.", "We decided to deploy on Fridays.", "Let's go with FastAPI.",
    "My name is Ann.", "我叫张三", "我们这个项目用 PostgreSQL，不用 MySQL", "We're on Python 3.11.",
    "The config lives in /etc/hermes/config.yml.", "Always use type hints.", "我喜欢简短的回答",
])
def test_statements_worth_keeping(sentence):
    assert is_durable(sentence)


@pytest.mark.parametrize("sentence", [
    "Do you remember what database we use?", "你还记得我们用什么数据库吗", "What do you prefer?",
    "If we use MongoDB, what happens?", "My friend likes React.", "Thanks, that was helpful!",
    "It was a sunny day.", "Maybe we should try Rust.",
])
def test_questions_hypotheticals_and_other_people_store_nothing(sentence):
    assert not is_durable(sentence)


@pytest.mark.parametrize("sentence", [
    "I just signed up for a pottery class at the community center.",
    "I've been running every morning since spring.", "I'm training for a half marathon.",
    "We're renovating the kitchen this summer.", "I have two cats and a very old parrot.",
    "I work as a nurse at the children's hospital.", "I grew up in a small fishing town.",
    "I'm planning to move to Lisbon next year.", "I want to learn to sail before I turn forty.",
    "I'm a huge fan of jazz piano.", "I'm allergic to peanuts.", "I'm a teacher.",
    "I used to play the cello in an orchestra.", "Chess is my favorite hobby.",
    "Last Saturday I ran my first 10k.", "I adopted a rescue dog two weeks ago.",
    "I've always loved old maps.", "I'm really into birdwatching these days.",
    "I got promoted to team lead.", "I'm vegetarian.", "I finally finished the quilt for my niece.",
])
def test_first_person_statements_of_a_life_are_kept(sentence):
    """Activities, family, pets, jobs, places, plans and likes, in wordings of everyday chat."""
    assert is_durable(sentence)


@pytest.mark.parametrize("sentence", [
    "Are you still training for the marathon?", "If I adopt a dog, will it get along with my cat?",
    "Maybe I'll start a garden next year.", "My friend is learning Japanese.",
    "He started a band last year.", "They moved to Denver two years ago.",
    "I'm feeling great today!", "I'm thinking about you.", "I'm rooting for you!",
    "I'm so happy for you.", "I'm sorry to hear that.", "I want to say thanks.",
    "I'm going to check it out!", "I'm a bit tired.", "I have a question about your trip.",
    "I won't give up!", "I'm glad you had fun.", "I'm doing well, thanks.", "I'm having a blast.",
    "What have you been up to lately?", "I'm writing the upstream block now.",
    "We're debugging the login flow right now!", "I'm reading your message at the moment.",
])
def test_moods_replies_and_other_peoples_doings_store_nothing(sentence):
    """The first person of the moment ("I'm feeling great", "I'm rooting for you") is no fact."""
    assert not is_durable(sentence)


def test_everyday_words_name_a_technology_only_when_capitalized():
    assert topic_of("I started the guitar to express myself.") is None
    assert topic_of("I love poetry and long walks.") is None
    assert topic_of("We use Express for the API.") == "web framework"
    assert topic_of("We moved from pip to Poetry.") == "package manager"


def test_topics_name_the_choice_not_the_rejected_option():
    assert topic_of("We use MySQL for everything.") == "database"
    assert topic_of("No MySQL any more, PostgreSQL.") == "database"
    assert topic_of("我叫张三") == topic_of("My name is Ann.") == "name"
    assert topic_of("Our API port is 8080.") == "api port"
    assert topic_of("We also use Rust for the CLI.") is None  # additive: replaces nothing
    assert near_duplicate("I prefer a functional style.", "I really prefer a functional style")
    assert not near_duplicate("Our API port is 8080.", "Our API port is 9090.")


def test_cjk_statements_are_compared_by_their_ideographs():
    assert near_duplicate("我们用 PostgreSQL 数据库", "我们用 PostgreSQL 数据库。")
    assert not near_duplicate("我们决定用 PostgreSQL", "我们决定用 MySQL 数据库")
    # kana are particles and endings: the same ones must not make two choices one fact
    assert not near_duplicate("私はPythonが好きです", "私はRustが好きです")


def test_extractors_are_registered_by_the_summarizers_provider_names():
    endpoint = config.Summarizer(base_url="http://127.0.0.1:1/v1", api_key="k-1", timeout=3.0)
    assert set(EXTRACTORS) == set(SUMMARIZERS)
    assert isinstance(EXTRACTORS[provider("default", endpoint.base_url)]("default", endpoint),
                      RuleExtractor)
    chat = EXTRACTORS[provider("tiny", endpoint.base_url)]("tiny", endpoint)
    assert isinstance(chat, ChatExtractor) and chat.name == "chat:tiny"
    assert (chat.base_url, chat.api_key, chat.timeout) == ("http://127.0.0.1:1/v1", "k-1", 3.0)
    with pytest.raises(ValueError, match="base_url"):
        EXTRACTORS["chat"]("tiny", config.Summarizer())


def test_extract_keeps_users_sentences_once():
    msgs = [Message("s", 1, "user", "Hi! I prefer tabs. I prefer tabs.", 9),
            Message("s", 2, "assistant", "I prefer spaces.", 4),
            Message("s", 3, "user", "What do you prefer?", 5)]
    assert [(f.content, f.seq) for f in extract(msgs)] == [("I prefer tabs.", 1)]


def _say(mem, sid, *texts):
    for text in texts:
        mem.append(sid, "user", text)
        mem.append(sid, "assistant", "Noted.")
    mem.flush(sid)


def test_a_flush_stores_the_users_facts_with_their_source(mem):
    sid = mem.create_session(user_id="ann")
    _say(mem, sid, "Hello there. I prefer a functional style in Python.", "How are you?")
    [memory] = mem.memories("ann")
    assert memory.kind == "extracted" and memory.current
    assert memory.content == "I prefer a functional style in Python."
    assert (memory.session_id, memory.seq) == (sid, 1)
    assert mem.cold.messages(sid)[0].memory_refs == (memory.memory_id,)  # cites it
    fresh = mem.create_session(user_id="ann")
    mem.append(fresh, "user", "hi")
    assert memory.content in mem.context(fresh).memories  # a new session knows it
    assert mem.memories("bob") == []  # never another user's
    mem.flush(sid)
    assert len(mem.memories("ann")) == 1  # flushing again extracts nothing twice


def test_a_newer_fact_on_the_topic_supersedes_the_older(mem):
    sid = mem.create_session(user_id="ann")
    _say(mem, sid, "We use MySQL for the main database.")
    _say(mem, sid, "Change of plan: no MySQL, we use PostgreSQL now.")
    [current] = mem.memories("ann")
    assert "PostgreSQL" in current.content
    history = mem.memories("ann", superseded=True)
    [old] = [m for m in history if not m.current]
    assert "MySQL" in old.content and old.superseded_by == current.memory_id
    sid2 = mem.create_session(user_id="ann")
    mem.append(sid2, "user", "hi")
    assert mem.context(sid2).memories == (current.content,)  # history is never sent


def test_explicit_memories_supersede_by_topic_and_merge_duplicates(mem):
    mem.create_session(user_id="ann")
    first = mem.remember("ann", "项目用 MySQL")
    second = mem.remember("ann", "项目用 PostgreSQL，不用 MySQL")
    assert mem.remember("ann", "项目用 PostgreSQL，不用 MySQL。") == second  # same fact
    assert [m.memory_id for m in mem.memories("ann")] == [second]
    mem.forget_memory(second)
    assert [m.memory_id for m in mem.memories("ann")] == [first]  # current again


def test_a_fact_said_twice_goes_only_when_both_messages_go(mem):
    a = mem.create_session(user_id="ann")
    b = mem.create_session(user_id="ann")
    _say(mem, a, "I prefer dark mode in every editor.")
    _say(mem, b, "I really prefer dark mode in every editor.")
    [memory] = mem.memories("ann")
    mem.forget_last(a, 1)
    assert [m.memory_id for m in mem.memories("ann")] == [memory.memory_id]
    mem.forget_keyword(b, "dark mode")
    assert mem.memories("ann") == []
    c = mem.create_session(user_id="ann")
    mem.append(c, "user", "hi")
    assert mem.context(c).memories == ()  # the cached list went too


def test_deleting_a_session_forgets_what_only_it_stated(mem):
    sid = mem.create_session(user_id="ann")
    explicit = mem.remember("ann", "deploys on Fridays", session_id=sid)
    _say(mem, sid, "My name is Ann Lee.", "记住：我们这个项目用 PostgreSQL，不用 MySQL")
    kinds = sorted(m.kind for m in mem.memories("ann"))
    assert kinds == ["explicit", "extracted", "trigger"]
    mem.delete(sid)
    assert [m.memory_id for m in mem.memories("ann")] == [explicit]  # explicit ones stay


def test_a_forgotten_message_cannot_be_extracted_afterwards(config_factory):
    archive = open_archive(config_factory("memory"))  # this stack's archive
    row = {"session_id": "s", "user_id": "u", "title": "", "created_at": 1.0, "updated_at": 1.0,
           "status": "active"}
    archive.write(row, [Message("s", 1, "user", "I prefer tabs.", 3)])
    assert archive.remember("u", "I prefer tabs.", 3, "s", seq=2, kind="extracted") is None
    assert archive.memories("u") == []
    archive.close()


def test_extraction_can_be_off_and_is_capped_per_user(config_factory):
    off = SessionMemory(config_factory("memory").with_overrides(
        memory={"persistent": {"auto_extract": False}}))
    sid = off.create_session(user_id="ann")
    _say(off, sid, "I prefer a functional style.")
    assert off.memories("ann") == []
    capped = SessionMemory(config_factory("memory").with_overrides(
        memory={"persistent": {"max_extracted": 2}}))
    sid = capped.create_session(user_id="ann")
    _say(capped, sid, "I prefer tea.", "I like long walks on beaches.", "I love painting birds.")
    assert [m.content for m in capped.memories("ann")] == ["I like long walks on beaches.",
                                                           "I love painting birds."]


@pytest.mark.stack("default", reason="a SQLite file's schema upgrade (PRAGMA user_version); "
                  "it runs no stack")
def test_an_older_archive_is_upgraded_in_place(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE memories (memory_id TEXT PRIMARY KEY, user_id TEXT NOT NULL,
          session_id TEXT, content TEXT NOT NULL, token_count INTEGER,
          created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
        INSERT INTO memories VALUES ('mem_1', 'u', NULL, 'likes tea', 2, '2026-01-01 00:00:00');
        PRAGMA user_version = 3;
    """)
    db.close()
    archive = Archive(path)
    [old] = archive.memories("u")
    assert (old.content, old.kind, old.current) == ("likes tea", "explicit", True)
    archive.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


_Model = chat_model('[{"seq": 1, "fact": "Prefers functional style"}, '
                    '{"seq": 99, "fact": "made up"}]')


@pytest.fixture
def model_url():
    with serve(_Model) as url:
        yield url


def test_a_configured_endpoint_extracts_and_only_facts_of_given_messages_count(config_factory,
                                                                              model_url):
    cfg = config_factory("memory", compression={"summary_model": "tiny"}).with_overrides(
        summarizer={"base_url": model_url})
    with SessionMemory(cfg) as mem:
        sid = mem.create_session(user_id="ann")
        _say(mem, sid, "functional code reads best to me")
        assert [(m.content, m.seq) for m in mem.memories("ann")] == [("Prefers functional style", 1)]
        assert "[1] functional code reads best to me" in _Model.seen[-1]["messages"][-1]["content"]


def test_a_failing_endpoint_falls_back_to_the_rules(config_factory):
    cfg = config_factory("memory", compression={"summary_model": "tiny"}).with_overrides(
        summarizer={"base_url": "http://127.0.0.1:1/v1", "timeout": 1})
    with SessionMemory(cfg) as mem:
        sid = mem.create_session(user_id="ann")
        _say(mem, sid, "I prefer a functional style.")
        assert [m.content for m in mem.memories("ann")] == ["I prefer a functional style."]
